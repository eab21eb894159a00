"""PTX tier: the ampere kernel's accumulators and fragments are local arrays indexed by loops
NVVM unrolls; nothing of them reaches local memory, and the mma order is the unrolled one's."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mmaplug.ir.dtypes import DType
from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, compile_ptx, generate_source

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: ampere_harness
from ampere_harness import epilogue_program  # noqa: E402

pytestmark = pytest.mark.ptx

C = AmpereKernelConfig
#: layouts, BK 48 (an odd count of k16 steps), 8 warps, split-K 3, bf16 with an epilogue input,
#: a 48x80 warp tile (odd m16 count, 10 n8 tiles): ptxas keeps all of them spill-free
CONFIGS = {
    "kk": C(),
    "kn_s4": C(b_k_inner=False, stages=4),
    "mn": C(a_k_inner=False, b_k_inner=False),
    "mk_bk48": C(a_k_inner=False, cta_tile=(64, 64, 48), warp_tile=(32, 32, 48), vec_b=4),
    "w8": C(cta_tile=(128, 256, 32), warp_tile=(64, 64, 32)),
    "sk3_mn": C(splitk=3, a_k_inner=False, b_k_inner=False, cta_tile=(64, 64, 32),
                warp_tile=(32, 32, 32)),
    "bf16_gelu": C(operand_dtype=DType.bfloat16,
                   epilogue=epilogue_program("bias_gelu", DType.bfloat16)),
    "w48x80": C(cta_tile=(96, 160, 32), warp_tile=(48, 80, 32), grid_swizzle=4),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fragments_and_accumulators_stay_in_registers(
    name: str, ptxas_log: Callable[[str, str], str]
) -> None:
    """Every loop over the warp tile is unrolled (the mma and ldmatrix of whole k-tiles: NVVM
    may unroll the k loop too), no local memory in the PTX, and ptxas makes no stack frame and
    no spills."""
    cfg = CONFIGS[name]
    ptx = compile_ptx(cfg)
    wm, wn, bk = cfg.warp_tile
    mma, ldmatrix = ptx.count("mma.sync.aligned.m16n8k16"), ptx.count("ldmatrix.sync")
    assert mma > 0 and mma % ((wm // 16) * (wn // 8) * (bk // 16)) == 0
    # per k16 step one ldmatrix per m16 tile and per n16 pair, and the first step's before
    assert (
        ldmatrix > 0
        and (ldmatrix - wm // 16 - wn // 16) % ((wm // 16 + wn // 16) * (bk // 16)) == 0
    )
    assert not re.search(r"\.local\b", ptx), "a local array was left in local memory"
    for arch in ("sm_80", "sm_90a"):
        log = ptxas_log(ptx, arch)
        assert re.search(
            r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", log
        ), f"{arch}: {log}"


@pytest.mark.parametrize("warp_tile", [(64, 128, 32), (128, 64, 32)], ids=["64x128", "128x64"])
def test_largest_warp_tiles_are_unrolled_too(warp_tile: tuple[int, int, int]) -> None:
    """256 accumulators (the tuner's largest warp tiles): loops over all of them at once stay
    rolled in NVVM and the array goes to local memory; the generated loops are unrolled (ptxas
    spills registers for these tiles, as it did for the fully unrolled source)."""
    wm, wn, _ = warp_tile
    ptx = compile_ptx(AmpereKernelConfig(cta_tile=(2 * wm, 2 * wn, 32), warp_tile=warp_tile))
    assert ptx.count("mma.sync.aligned.m16n8k16") % ((wm // 16) * (wn // 8) * 2) == 0
    assert not re.search(r"\.local\b", ptx), "a local array was left in local memory"


def _mma_loop(cfg: AmpereKernelConfig) -> str:
    """The source of the first k16 step's mma loop of *cfg*'s kernel, dedented."""
    src = generate_source(cfg, sim=False)
    call = src.index("mma_m16n8k16", src.index("for kt in range"))
    start = src.rindex("\n", 0, src.rindex("for mi in range", 0, call)) + 1
    return textwrap.dedent(src[start : src.index("\n", call) + 1])


@pytest.mark.parametrize(
    "warp_tile", [(64, 64, 32), (48, 80, 32), (16, 16, 32)], ids=["64x64", "48x80", "16x16"]
)
def test_mma_order_and_operands_are_the_unrolled_kernels(warp_tile: tuple[int, int, int]) -> None:
    """The loop issues the mma of the unrolled kernel in its order: m16 tiles in turn, the n8
    tiles forwards for even ones and backwards for odd ones, each accumulating into its own
    four floats from its A fragment and B pair, so every accumulator sums the same products in
    the same order."""
    wm, wn, _ = warp_tile
    mis, nis = wm // 16, wn // 8
    cfg = AmpereKernelConfig(cta_tile=(wm * 2, wn * 2, 32), warp_tile=warp_tile)
    calls: list[tuple[Any, ...]] = []

    def mma(*operands: Any) -> tuple[Any, ...]:
        calls.append(operands)
        return tuple(("d", len(calls) - 1, q) for q in range(4))

    acc = [("c", i) for i in range(mis * nis * 4)]
    fa = [("a", i) for i in range(2 * mis * 4)]
    fb = [("b", i) for i in range(2 * nis * 2)]
    namespace = {"acc": acc, "fa": fa, "fb": fb, "mma_m16n8k16_f16": mma}
    exec(_mma_loop(cfg), namespace)
    order = [(mi, ni) for mi in range(mis) for ni in (range(nis) if mi % 2 == 0 else
                                                       reversed(range(nis)))]  # fmt: skip
    assert len(calls) == len(order)
    for k, (mi, ni) in enumerate(order):
        c = (mi * nis + ni) * 4
        a_regs = tuple(("a", 4 * mi + q) for q in range(4))
        b_regs = (("b", 2 * ni), ("b", 2 * ni + 1))
        assert calls[k] == (*a_regs, *b_regs, *(("c", c + q) for q in range(4)))
        assert acc[c : c + 4] == [("d", k, q) for q in range(4)]


@pytest.mark.parametrize("layout", ["kk", "mk", "kn", "mn"])
@pytest.mark.parametrize("extent", [516, 514], ids=["rows_of_4", "rows_of_2"])
def test_default_plans_of_narrow_rows_spill_nothing(
    layout: str, extent: int, ptxas_log: Callable[[str, str], str]
) -> None:
    """Operands whose rows are no 8-element multiples are copied in narrower vectors, more of
    them a thread: the default heuristic keeps each thread's copies a stage within
    AMPERE_COPIES (smaller warp tiles; at rows of 2 the smallest in 4 warps, 16), where 64x64
    warp tiles spilled 2-757 words."""
    import mmaplug as mp
    from mmaplug.analysis.matmul_analysis import analyze
    from mmaplug.heuristics.default.ampere import AMPERE_COPIES
    from mmaplug.planning.plan import plan_problem
    from mmaplug.plugins.ampere.artifact import kernel_config
    from mmaplug.plugins.ampere.scheduler import SCHEDULER

    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([extent, extent], mp.float16,
                             stride_order=[1, 0] if layout[0] == "k" else [0, 1])  # fmt: skip
        b = fd.define_tensor([extent, extent], mp.float16,
                             stride_order=[0, 1] if layout[1] == "k" else [1, 0])  # fmt: skip
        fd.add_output(fd.ops.matmul(a, b))
    analysis = analyze(fd.fusion)
    spec = plan_problem(analysis.problem, "a100")
    copies = SCHEDULER.resources(spec.params, spec.problem).copies
    assert copies <= AMPERE_COPIES or spec.params.warp_tile.as_tuple() == (32, 32, 32)
    log = ptxas_log(compile_ptx(kernel_config(spec, analysis)), "sm_80")
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), f"{spec.params}: {log}"
