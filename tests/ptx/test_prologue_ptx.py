"""PTX tier: ampere kernels with operand prologues compile for sm_80 (issue 10 item 2)."""

from __future__ import annotations

import re

import pytest

import mmaplug as mp
from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.plugins.ampere.kernel import (
    AmpereKernelConfig,
    compile_ptx,
    generate_source,
    kernel_signatures,
)

pytestmark = pytest.mark.ptx

MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def _analysis(a_dtype: mp.DType, mma: mp.DType, a_k_inner: bool, b_k_inner: bool):  # noqa: ANN202
    """linear(prologue(A), prologue(B)): A sin * s (or a bare cast), B cos + s."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([256, 128], a_dtype, stride_order=[1, 0] if a_k_inner else [0, 1])
        b = fd.define_tensor([192, 128], mma, stride_order=[1, 0] if b_k_inner else [0, 1])
        s = fd.define_scalar()
        if a_dtype is mma:
            pa = fd.ops.cast(fd.ops.mul(fd.ops.sin(a), s), mma)
            pb = b
        else:
            pa = fd.ops.cast(a, mma)
            pb = fd.ops.cast(fd.ops.add(fd.ops.cos(b), s), mma)
        fd.add_output(fd.ops.cast(fd.ops.linear(pa, pb), mma))
    return analyze(fd.fusion)


@pytest.fixture(scope="module")
def plain_and_sin() -> tuple[str, str]:
    """PTX of the default kernel, and of the same kernel with sin(A) * s on A."""
    an = _analysis(mp.float16, mp.float16, True, True)
    plain = AmpereKernelConfig(epilogue=an.epilogue)
    return compile_ptx(plain), compile_ptx(
        AmpereKernelConfig(epilogue=an.epilogue, prologue_a=an.prologue_a)
    )


def test_prologue_kernel_keeps_the_mma_loop_and_adds_two_barriers(plain_and_sin) -> None:  # noqa: ANN001
    """Same mma count as the plain kernel; one barrier after the first stage's rewrite and one
    after each later stage's (static count +2); the scalar is a float32 parameter."""
    plain, sin = plain_and_sin
    assert sin.count(MMA_F16) == plain.count(MMA_F16) == 64
    assert sin.count("bar.sync") == plain.count("bar.sync") + 2
    assert "cp.async.cg.shared.global" in sin  # the loads stay asynchronous
    assert len(re.findall(r"\.param \.f32", sin)) == len(re.findall(r"\.param \.f32", plain))


def test_splitk_main_kernel_takes_the_prologue_scalar_and_rounds_to_bf16() -> None:
    """M- and N-inner bf16 with split-K 2: A float16 cast to bfloat16 (cvt.rn.bf16.f32 in the
    main kernel), B cos + s; the main kernel takes the scalar table, the reduce kernel too."""
    an = _analysis(mp.float16, mp.bfloat16, False, False)
    assert (an.prologue_a.op_names, an.prologue_b.op_names) == (("cast",), ("cos", "add"))
    cfg = AmpereKernelConfig(
        operand_dtype=mp.bfloat16,
        a_k_inner=False,
        b_k_inner=False,
        cta_tile=(64, 64, 32),
        warp_tile=(32, 32, 32),
        splitk=2,
        epilogue=an.epilogue,
        prologue_a=an.prologue_a,
        prologue_b=an.prologue_b,
    )
    main = compile_ptx(cfg)
    assert MMA_BF16 in main and MMA_F16 not in main
    assert "cvt.rn.bf16.f32" in main
    assert len(re.findall(r"\.param \.f32", main)) == 1
    sig = kernel_signatures(cfg)["ampere_gemm"]
    assert str(sig.args[3]) == "float32"  # a, b, ws, then the scalar table


def test_no_prologue_source_has_no_rewrite() -> None:
    """A kernel without prologues is generated as before (no stage rewrite, no K limit)."""
    src = generate_source(AmpereKernelConfig(), sim=False)
    assert "klim" not in src and "pkk" not in src and "_pa" not in src
