"""FP8 in the epilogue (issue 24): FP8 epilogue inputs (an FP8 residual) through analysis,
planning and the generated source. (The kernels: sim, ptx and gpu tiers.)"""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.epilogue import EpilogueInput, EpilogueOutput, EpilogueProgram, Instr
from mmaplug.codegen.emitter import fp8_imports
from mmaplug.ir.dtypes import DType
from mmaplug.ir.evaluate import round_to
from mmaplug.planning.plan import explain

FP8 = [mp.float8_e4m3fn, mp.float8_e5m2]


def residual(m: int, n: int, k: int, *, operands=mp.float8_e4m3fn, res=mp.float8_e4m3fn,
             out=mp.bfloat16) -> mp.FusionDefinition:  # fmt: skip
    """``cast(matmul(a, b) (scaled per tensor for FP8 operands) + residual, out)``, the
    residual ``[m, n]`` of dtype *res*."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])
        if operands.is_float8:
            sa = fd.define_tensor([], dtype=mp.float32)
            sb = fd.define_tensor([], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        r = fd.define_tensor([m, n], dtype=res)
        fd.add_output(fd.ops.cast(fd.ops.add(y, r), out))
    return fd


def inputs(fd: mp.FusionDefinition, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]


# -- FP8 epilogue inputs --------------------------------------------------------------------------


@pytest.mark.parametrize("res", FP8, ids=str)
def test_an_fp8_residual_is_an_epilogue_input_of_its_dtype(res: DType) -> None:
    """Analysis takes the FP8 residual as it is (bytes, widened in the kernel) and the problem
    says what the epilogue reads, for the schedulers to decide on."""
    fd = residual(64, 64, 64, res=res)
    analysis = mp.analyze(fd.fusion)
    assert [i.dtype for i in analysis.epilogue.inputs] == [DType.float32, DType.float32, res]
    assert analysis.problem.epilogue_input_dtypes == (DType.float32, DType.float32, res)
    assert analysis.problem.output_dtype is DType.bfloat16
    assert analysis.epilogue_inputs[-1].dtype is res


def test_evaluate_widens_an_fp8_residual_exactly() -> None:
    """mp.evaluate adds the FP8 values themselves (every FP8 value is a float32) to the
    product (rounded to bfloat16, the matmul's type)."""
    fd = residual(16, 24, 32, operands=mp.bfloat16, res=mp.float8_e5m2, out=mp.float32)
    a, b, r = inputs(fd, seed=1)
    (got,) = mp.evaluate(fd, [a, b, r])
    product = round_to(a.astype(np.float64) @ b.astype(np.float64), DType.bfloat16)
    ref = product + r.astype(np.float64)
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=1e-6)


def test_ampere_and_decode_decline_fp8_epilogue_inputs_naming_them() -> None:
    """16-bit operands of 8 rows, which ampere and decode take, with an FP8 residual: both
    decline it, naming the FP8 input; hopper takes it on an H200; nothing on an A100."""
    fd = residual(8, 4096, 4096, operands=mp.float16, res=mp.float8_e5m2)
    problem = mp.matmul_problem(fd.fusion)
    spec = mp.plan_problem(problem, "h200")
    assert spec.scheduler == "hopper"
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert "reads FP8 inputs (float8_e5m2)" in rejected["ampere"]
    assert "no FP8 epilogue inputs (float8_e5m2)" in rejected["decode"]
    with pytest.raises(mp.NoSchedulerError, match=r"FP8 inputs \(float8_e5m2\)"):
        mp.plan_problem(problem, "a100")
    assert "epilogue reads float8_e5m2" in explain(spec)


def test_a_16_bit_residual_plans_as_before() -> None:
    """Without FP8 inputs decode still takes 8 rows (the new problem field only declines FP8)."""
    fd = residual(8, 4096, 4096, operands=mp.float16, res=mp.float16, out=mp.float16)
    assert mp.plan_problem(mp.matmul_problem(fd.fusion), "h200").scheduler == "decode"


def test_fp8_imports_widen_only_for_inputs() -> None:
    """An FP8 input imports its widening alone; an FP8 output also the narrowing, the pair form
    and the 4-byte store; a program without FP8 imports nothing."""
    acc = Instr(op="acc")
    read = Instr(op="input", arg=0)
    add = Instr(op="add", srcs=(0, 1))
    inp = EpilogueInput(name="r", dtype=DType.float8_e5m2, axes=("m", "n"))
    prog = EpilogueProgram(
        inputs=(inp,), instrs=(acc, read, add),
        outputs=(EpilogueOutput(name="y", src=2, dtype=DType.bfloat16),),
    )  # fmt: skip
    assert fp8_imports(prog) == "from mmaplug.cuda.intrinsics import e5m2_to_f32"
    both = EpilogueProgram(
        inputs=(inp,), instrs=(acc, read, add),
        outputs=(EpilogueOutput(name="y", src=2, dtype=DType.float8_e4m3fn),),
    )  # fmt: skip
    assert fp8_imports(both) == (
        "from mmaplug.cuda.intrinsics import f32_to_e4m3, e4m3_to_f32, f32x2_to_e4m3x2, "
        "e5m2_to_f32, st_global_b32"
    )
    plain = EpilogueProgram(outputs=(EpilogueOutput(name="y", src=0, dtype=DType.float16),))
    assert fp8_imports(plain) == ""


@pytest.mark.parametrize("smem", [False, True], ids=["registers", "smem"])
def test_the_hopper_kernel_loads_an_fp8_residual_as_bytes(smem: bool) -> None:
    """The generated source widens the residual's bytes with the FP8 intrinsic, and the kernel
    takes the residual as a uint8 array."""
    from mmaplug.plugins.hopper.kernel import kernel_signatures

    compiled = mp.compile(residual(256, 256, 256).fusion, "h200",
                          overrides={"use_smem_epilogue": smem})  # fmt: skip
    source = compiled.source
    assert "e4m3_to_f32(in2[" in source
    config = compiled._artifact.config
    args = kernel_signatures(config)["hopper_gemm"].args
    assert str(args[1 + 2]) == "array(uint8, 1d, C)"  # maps, in0, in1, in2 (the residual)
