"""Operand prologues (issue 10 item 2): analysis, planning (hopper declines) and the kernel ABI."""

from __future__ import annotations

import struct
from typing import Any

import attrs
import pytest

import mmaplug as mp
from mmaplug.analysis.epilogue import Instr
from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.cuda.launching import ARRAY_SLOTS
from mmaplug.ir.dtypes import DType
from mmaplug.planning.choices import Rejection
from mmaplug.planning.plan import plan_problem
from mmaplug.plugins.ampere import bound
from mmaplug.plugins.ampere.config import AmpereKernelConfig, kernel_params
from mmaplug.runtime.kernels import kernel_key

H, T, S = mp.float16, mp.bfloat16, mp.float32
M, N, K = 64, 48, 32


@pytest.fixture(scope="module")
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


def _fusion(prologue_a: Any = None, prologue_b: Any = None, a_dtype: DType = H,
            b_dtype: DType = H, epilogue_scalar: bool = False) -> mp.FusionDefinition:  # fmt: skip
    """matmul(prologue_a(fd, A), prologue_b(fd, B)), optionally times a scalar."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([M, K], a_dtype), fd.define_tensor([K, N], b_dtype)
        a = prologue_a(fd, a) if prologue_a else a
        b = prologue_b(fd, b) if prologue_b else b
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.mul(y, fd.define_scalar()) if epilogue_scalar else y)
    return fd


def _sin(fd: Any, x: Any) -> Any:
    return fd.ops.cast(fd.ops.sin(x), H)


def _scaled(value: float) -> Any:
    return lambda fd, x: fd.ops.cast(fd.ops.mul(fd.ops.cos(x), value), H)


def test_sin_on_a_is_a_prologue_ending_in_the_mma_dtype() -> None:
    """cast(sin(A)): the last cast is the rounding to the mma dtype, not an instruction."""
    analysis = analyze(_fusion(_sin))
    pro = analysis.prologue_a
    assert pro is not None and analysis.prologue_b is None
    assert [i.op for i in pro.program.instrs] == ["acc", "sin"]
    assert (pro.source, pro.dtype, pro.program.outputs[0].src) == (H, H, 1)
    assert (analysis.problem.a_prologue_ops, analysis.problem.b_prologue_ops) == (("sin",), ())


def test_prologue_scalars_share_the_epilogue_scalar_table() -> None:
    """A scalar read by the epilogue and a scalar read by B's prologue: one table, each once."""
    fd = _fusion(
        prologue_b=lambda fd, x: fd.ops.cast(fd.ops.add(x, fd.define_scalar()), H),
        epilogue_scalar=True,
    )
    analysis = analyze(fd)
    scalars = analysis.epilogue.scalars
    assert len(scalars) == 2
    used = [i for i in analysis.prologue_b.program.instrs if i.op == "scalar"]
    assert used == [Instr(op="scalar", arg=scalars.index(fd.fusion.inputs[2].name))]


def test_a_bare_cast_between_16_bit_types_is_a_prologue() -> None:
    """A float16 input cast to bfloat16 for a bfloat16 B: the mma runs in bfloat16."""
    analysis = analyze(_fusion(lambda fd, x: fd.ops.cast(x, T), b_dtype=T))
    assert analysis.problem.operand_dtype is T
    assert analysis.prologue_a.op_names == ("cast",)
    assert (analysis.prologue_a.source, analysis.prologue_a.dtype) == (H, T)


def test_float16_to_bfloat16_casts_round_in_the_epilogue() -> None:
    """cast(cast(acc, f16), bf16) rounds twice (it was taken as a widening cast: none)."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([M, K], H), fd.define_tensor([K, N], H)
        y = fd.ops.cast(fd.ops.cast(fd.ops.matmul(a, b), H), T)
        fd.add_output(fd.ops.cast(y, S))
    casts = [i.arg for i in analyze(fd).epilogue.instrs if i.op == "cast"]
    assert casts == [H, T]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: _fusion(_sin, a_dtype=S),
         r"computed from input T0, which is float32; kernels load operands as float16"),
        (lambda: _fusion(lambda fd, x: fd.ops.cast(fd.ops.sum(fd.ops.broadcast_in_dim(
            x, [2, M, K], [1, 2]), [0]), H)),
         r"is computed by sum \(T\d+\); an operand prologue takes element-wise ops"),
    ],
    ids=["float32_input", "reduction"],
)  # fmt: skip
def test_prologues_no_kernel_computes_are_refused_with_the_reason(build: Any, match: str) -> None:
    with pytest.raises(mp.UnsupportedFusionError, match=match):
        analyze(build())


def test_a_prologue_in_a_fusion_of_two_matmuls_is_refused() -> None:
    """The llama FFN shape with sin on x: one prologue per operand of one MmaOp only."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([M, K], H)
        w1, w3 = fd.define_tensor([N, K], H), fd.define_tensor([N, K], H)
        xs = fd.ops.cast(fd.ops.sin(x), H)
        fd.add_output(fd.ops.mul(fd.ops.linear(xs, w1), fd.ops.linear(xs, w3)))
    with pytest.raises(mp.UnsupportedFusionError, match=r"in a fusion of 2 matmuls; operand pro"):
        analyze(fd)


def test_kernel_key_tells_prologue_constants_apart(pm: mp.PluginManager) -> None:
    """cos(A) * 0.5 and cos(A) * 0.25 plan alike but are two kernels."""
    first, second = analyze(_fusion(_scaled(0.5))), analyze(_fusion(_scaled(0.25)))
    assert first.problem == second.problem
    spec = plan_problem(first.problem, mp.get_device("a100"), pm=pm)
    assert kernel_key(spec, first) != kernel_key(spec, second)


@pytest.mark.parametrize(
    "prologue", [_sin, lambda fd, x: fd.ops.cast(x, T)], ids=["sin", "bare_cast"]
)
def test_hopper_declines_prologues_and_ampere_takes_them_on_the_h200(
    pm: mp.PluginManager, prologue: Any
) -> None:
    """TMA lands operands where wgmma reads them: the h200 plan is ampere's, and says why."""
    fd = _fusion(prologue, b_dtype=T if prologue is not _sin else H)
    compiled = mp.compile(fd, "h200", pm=pm)
    assert compiled.spec.scheduler == "ampere"
    rejected = {
        c.name: c.reason for c in compiled.provenance.candidates if isinstance(c, Rejection)
    }
    assert rejected.keys() == {"decode", "hopper"}  # decode: more than 16 rows
    assert "an operand prologue" in rejected["hopper"]
    assert compiled.kernel_name.endswith("_pa")
    ops = "sin" if prologue is _sin else "cast"
    assert f"A prologue ops {ops}\ndevice:" in compiled.explain()


def test_splitk_main_kernel_takes_the_scalars_a_prologue_reads() -> None:
    """Without a prologue scalar the split-K main kernel's parameters are unchanged."""
    analysis = analyze(_fusion(_scaled(0.5), epilogue_scalar=True))
    cfg = AmpereKernelConfig(splitk=2, epilogue=analysis.epilogue, prologue_a=analysis.prologue_a)
    assert kernel_params(cfg)[:4] == ["a", "b", "ws", "M"]
    fd = _fusion(lambda fd, x: fd.ops.cast(fd.ops.mul(x, fd.define_scalar()), H))
    analysis = analyze(fd)
    cfg = attrs.evolve(cfg, epilogue=analysis.epilogue, prologue_a=analysis.prologue_a)
    assert kernel_params(cfg)[:5] == ["a", "b", "ws", "s0", "M"]


def test_bound_splitk_launch_writes_prologue_scalars_to_both_kernels(monkeypatch: Any) -> None:
    """The bound launcher puts each scalar in the reduce kernel's block and the main's."""
    fd = _fusion(
        lambda fd, x: fd.ops.cast(fd.ops.mul(x, fd.define_scalar()), H), epilogue_scalar=True
    )
    analysis = analyze(fd)
    cfg = AmpereKernelConfig(
        splitk=2,
        cta_tile=(64, 64, 32),
        warp_tile=(32, 32, 32),
        epilogue=analysis.epilogue,
        prologue_a=analysis.prologue_a,
    )
    blocks: list[Any] = []

    class Launch:
        def __init__(self, kern: Any, grid: Any, block: Any, smem: int, params: Any) -> None:
            blocks.append(params)

        def run(self, stream: int) -> None:
            pass

    monkeypatch.setattr(bound, "loaded", lambda *args: 0)
    monkeypatch.setattr(bound, "DriverLaunch", Launch)
    launcher = bound.BoundGemmPrologueScalars(
        cfg, [M * K, K * N, M * N], (0, K), (0, K), [], [(0, N)], 2, m=M, n=N, k=K, batch=1
    )
    launcher([0x1000, 0x2000, 0x3000, 0x4000], [1.5, -2.0], 0)
    main, red = blocks

    def floats(params: Any, first: int) -> list[float]:
        words = [params.slots[first + i] & 0xFFFFFFFF for i in range(2)]
        return [struct.unpack("<f", struct.pack("<I", w))[0] for w in words]

    assert floats(main, 3 * ARRAY_SLOTS) == [1.5, -2.0]
    assert floats(red, 2 * ARRAY_SLOTS) == [1.5, -2.0]  # ws and the output precede them
