"""What the decode kernel takes and allows: its space of legal values, its rules and its one
resource model (``mmaplug.planning.scheduler``); each value and limit is written once, here.

A decode kernel reads five ``MatmulParams`` fields: ``cta_tile`` and ``warp_tile``, the same
(m: the activation rows it covers, 8 per m tile; n: the weight rows of a CTA, 16 a row tile,
every warp taking all of them; k: the 64 of K a warp loads per step; 128 of K for FP8 operands,
the same 128 bytes), ``instruction_tile`` (one
mma.sync m16n8k16 in the problem's terms: 8 activation rows, 16 weight rows, 16 of K; for FP8
one m16n8k32, 32 of K), ``splitk_factor`` (the warps of a CTA, each taking
every ``splitk_factor``-th chunk of K, their partials summed in shared memory: split-K inside
the kernel; of a horizontal fusion, the warps of each product) and ``stages`` (chunks loaded
before their mmas run). Every other field has one value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape, TilingStrategy
from mmaplug.planning.scheduler import Resources, Rule, Space, resident_ctas

from .config import COLS_PER_MMA, MMAS, ROW_TILES, ROWS, chunk_k

__all__ = [
    "BATCH_SHORT_ROW_BYTES", "BATCH_SWAP_ROWS", "BATCH_SWAP_WAVES", "FP8_CC",
    "FP8_KEEP_TILE_SHARE", "FP8_KEEP_WEIGHT_BYTES", "HANDOFF_KEEP_PLAN", "HANDOFF_M",
    "HANDOFF_ROW_BYTES", "HOPPER_SWAP_ROWS", "MAX_M", "MAX_PRODUCTS", "MIN_CC", "REGISTERS",
    "WARPS", "instruction", "m_tile", "min_cc", "one_wave", "resources", "rules", "space",
]  # fmt: skip

MIN_CC: Final = (8, 0)  # mma.sync m16n8k16
FP8_CC: Final = (8, 9)  # mma.sync m16n8k32 .e4m3 / .e5m2 (PTX ISA 8.4)
#: The most activation rows a decode kernel takes (beyond, the tensor-core kernels win).
MAX_M: Final = 16
#: Where the hopper scheduler takes the problem, a 16-bit one of more rows than HANDOFF_M
#: whose weight rows are HANDOFF_ROW_BYTES or longer streams faster through hopper's
#: transposed product (``swap_ab``): 16x8192x28672 140.7 -> 107.5 us, 16x8192x8192 44.3 ->
#: 36.0, 9x57344x8192 223.8 -> 213.6 (BENCHMARKS.md runs 101 and 105); on 8 KiB rows since
#: hopper's 64x16 tiles of 8 stages: 16x28672x4096 67.1 -> 61.5, 16x14336x4096 37.8 -> 33.5,
#: 16x8192x4096 22.1 -> 20.0, 16x4096x4096 9.8 -> 9.5, 16x6144x4096 15.5-16.0 -> 15.5 (run
#: 183). Up to 8 rows the decode kernel is as fast or faster everywhere; shorter weight rows
#: than 8 KiB were not timed handed over. FP8 products of more than HANDOFF_M rows go over
#: whatever their rows: hopper's 64x16 e4m3 tiles (8 stages of 256 of K) took 14-20% less time
#: than decode's best warps on all eight timed, 4-16 KiB rows (16x8192x4096 10.6 -> 9.0 us,
#: 16x4096x16384 25.0 -> 21.2, 16x10240x8192 34.9 -> 29.5, 16x57344x8192 141.7 -> 113.3; run
#: 193), but for weights of at most FP8_KEEP_WEIGHT_BYTES whose swapped tiles fill at most
#: 1 / FP8_KEEP_TILE_SHARE of the SMs: there hopper's few CTAs stream slower than decode's.
#: Run 200 kept half the SMs' worth (16x4096x4096 hopper 7.3-7.8 us, decode 7.0-7.5); since the
#: tensor maps became kernel parameters hopper's CTAs start ~2,500 cycles sooner and its 64
#: tiles lead (an H100, run 316, us, hopper / decode: 16x4096x4096 6.2-6.4 / 6.9-7.1, 12x4096x4096
#: 6.6 / 6.7-6.8, 9x4096x4096 6.3 / 6.7, 16x4096x2048 4.8 / 4.9-5.0), while on 32 tiles or fewer
#: decode still does (16x2048x8192 8.9-9.0 / 8.0-8.1, 12x2048x8192 8.6 / 7.7, 16x1040x1024 3.9-4.1
#: / 3.3-3.4) and past the weight bound hopper (16x4096x8192 8.8 / 11.2-11.3, 16x2048x16384 10.6 /
#: 12.9-13.0).
HANDOFF_M: Final = 8
FP8_KEEP_WEIGHT_BYTES: Final = 16 << 20
FP8_KEEP_TILE_SHARE: Final = 4
HANDOFF_ROW_BYTES: Final = 8192
#: A batch of products of more than HANDOFF_M rows goes to the hopper scheduler, where it takes
#: the problem: hopper's tiles ran 8x16x4096x4096 70.1 against 73.8-75.8 us (decode, 2-4 warps),
#: 4x16x4096x4096 38.1 against 41.1; with 1-8 rows the decode kernel led (16x1x4096x4096 129.2
#: against 138.1, 4x4x14336x4096 113.9 against 116.2, 8x1x8192x2048 67.0 against 68.7;
#: BENCHMARKS.md run 181), on weight rows under 2 KiB too since its CTAs of one warp (32 x
#: 1x4096x128 9.1 against 12.2, 32x8x4096x512 36.5 against 37.8-38.4; runs 190-192).
#: Except where hopper's swapped tiles (HOPPER_SWAP_ROWS weight rows each) are more than one
#: a SM while the decode plan of HANDOFF_KEEP_PLAN (warps, chunks in flight) runs its CTAs in
#: one wave: hopper's second wave is then at most half full (the one-wave CTAs of 2 warps of
#: two m tiles end at 12,672 weight rows, hopper's 1.5 waves of 64 rows), and decode led
#: 16x10240x8192 45.3 against 47.7-51.5 us, 12x10240x8192 43.7 against 51.5, 16x11008x4096
#: 26.5 against 28.3, 16x9216x4096 23.8 against 26.0; past it hopper led 16x14336x4096 (1.7
#: waves) 33.5 against 35.7-37.8, 16x20480x4096 44.0 against 48.1 (runs 183 and 185).
HOPPER_SWAP_ROWS: Final = 64
#: ... and so does a batch of at most HANDOFF_M rows over 16-bit weight rows of at most
#: BATCH_SHORT_ROW_BYTES whose hopper tiles (two consumers: BATCH_SWAP_ROWS weight rows) are
#: more than BATCH_SWAP_WAVES waves of the SMs: hopper's persistent transposed product streams
#: across the batch's tiles where each decode CTA sets up for one K chunk (H100 runs 338-340,
#: graph replays: 32 x 1x4096x128 9.60-9.76 -> 7.68-7.87 us, 32 x 8x4096x128 11.27-11.49 ->
#: 7.68-7.74, 16 x 8x4096x128 6.2 -> 5.2, four more rows 3-30% faster; at 512-byte rows a tie,
#: 24.80 against 24.61). On two waves or fewer decode led: 8 x 1x4096x128 (256 tiles) 3.7
#: against 4.1, 5 x 1x4096x128 3.2 against 4.1 (run 340).
BATCH_SHORT_ROW_BYTES: Final = 256
BATCH_SWAP_ROWS: Final = 128
BATCH_SWAP_WAVES: Final = 2
HANDOFF_KEEP_PLAN: Final = (2, 3)
#: The most products of a horizontal fusion a decode CTA takes (the llama FFN's 2, q/k/v's 3,
#: one more): each product's warps are the CTA's, and four products of one warp fit an SM at
#: every register count of ``REGISTERS``, so every problem taken has a legal plan.
MAX_PRODUCTS: Final = 4
WARPS: Final = (1, 2, 4, 8)
UNROLLS: Final = (1, 2, 3, 4)
#: Registers a thread of the kernel takes (ptxas for sm_90a; the most seen over 1 and 4 warps,
#: 4096x4096 and x10240x8192), by operand bytes, m tiles and row tiles, for 1-4 chunks in
#: flight: of one row tile three take fewest. Two row tiles: nvJitLink 13.5's ptxas, which
#: gives one row tile 8-12 more than these (144, 142, 128, 142 for 16-bit, one m tile).
#: (Chunks the rules refuse: 0, unknown.)
REGISTERS: Final = {
    (2, 1, 1): (132, 132, 120, 132), (2, 2, 1): (176, 174, 158, 176),
    (1, 1, 1): (160, 158, 132, 156), (1, 2, 1): (206, 204, 174, 204),
    (2, 1, 2): (168, 168, 212, 230), (2, 2, 2): (206, 212, 238, 228),
    (1, 1, 2): (184, 186, 224, 232), (1, 2, 2): (218, 216, 220, 222),
}  # fmt: skip


def instruction(problem: MatmulProblem) -> TileShape:
    """One mma in the problem's terms: 8 of M, 16 of N, its K (16, or 32 for FP8)."""
    _, k = MMAS.get(problem.operand_dtype, (None, 16))  # (another type is declined)
    return TileShape(COLS_PER_MMA, ROWS, k)


def min_cc(problem: MatmulProblem) -> tuple[int, int]:
    """The oldest GPU with *problem*'s mma (and FP8 conversions): sm_89 for FP8 operands,
    outputs or epilogue inputs, else sm_80."""
    fp8 = [problem.operand_dtype, problem.output_dtype, *problem.epilogue_input_dtypes]
    return FP8_CC if any(d.is_float8 for d in fp8) else MIN_CC


def m_tile(problem: MatmulProblem) -> int:
    """The activation rows a kernel for *problem* covers: M rounded up to a multiple of 8."""
    return COLS_PER_MMA * -(-problem.m // COLS_PER_MMA)


def _tile_space(field: str, problem: MatmulProblem) -> Space:
    m, k = m_tile(problem), chunk_k(problem.operand_dtype)
    tiles = tuple(TileShape(m, ROWS * r, k) for r in ROW_TILES)
    text = f"{' or '.join(map(str, tiles))} (M rounded up to 8s; 16 weight rows a row tile)"
    return Space(field, text, values=tiles, examples=tiles)


def space(problem: MatmulProblem, device: Device) -> tuple[Space, ...]:
    """The legal values of each field, one field at a time."""
    inst = instruction(problem)
    return (
        _tile_space("cta_tile", problem),
        _tile_space("warp_tile", problem),
        Space("instruction_tile", str(inst), values=(inst,)),
        Space("stages", "1 to 4 chunks in flight", values=UNROLLS, examples=UNROLLS),
        Space(
            "splitk_factor",
            f"{', '.join(map(str, WARPS))}: the warps of a CTA (of each product of a "
            "horizontal fusion), splitting K",
            values=WARPS,
            examples=WARPS,
        ),
        Space("prefetch_gap", "1", values=(1,)),
        Space("async_gmem_load_operands", "False (loads go to registers)", values=(False,)),
        Space("warp_specialized", "False", values=(False,)),
        Space("use_smem_epilogue", "True (the warps' partials meet there)", values=(True,)),
        Space("cluster_dims", "(1, 1)", values=((1, 1),)),
        Space("cta_order", "row_major", values=(CtaOrder.row_major,)),
        Space("grid_swizzle_factor", "1", values=(1,)),
        Space("tiling_strategy", "one_tile_per_cta", values=(TilingStrategy.one_tile_per_cta,)),
        Space("swap_ab", "False (its mmas take the weight's rows as rows)", values=(False,)),
        Space("splitk_in_cluster", "False (the warps of one CTA split K)", values=(False,)),
    )


def _allowed(field_space: Space) -> Callable[[MatmulParams, MatmulProblem, Device], str | None]:
    def check(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
        value = getattr(params, field_space.field)
        if field_space.allows(value):
            return None
        return f"the decode kernel takes {field_space.field} {field_space.text}, not {value}"

    return check


def _device(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    cc = min_cc(problem)
    if tuple(device.cc) >= cc:
        return None
    if cc == FP8_CC:
        return (
            f"the decode kernel needs FP8 mma.sync m16n8k32 (sm_89 or newer), not {device.target}"
        )
    return f"the decode kernel needs mma.sync m16n8k16 (sm_80 or newer), not {device.target}"


def _fits(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    """A CTA's warps (``splitk_factor`` per product) fit one SM: the kernel is compiled for one
    CTA an SM, so ptxas would otherwise cut a thread's registers below ``REGISTERS`` and
    spill."""
    cta = resources(params, problem)
    if resident_ctas(cta, device):
        return None
    h = problem.horizontal
    each = f" for each of {h} products" if h > 1 else ""
    return (
        f"splitk_factor={params.splitk_factor}{each} is {h * params.splitk_factor} warps a "
        f"CTA, which {device.name}'s SMs cannot hold at {cta.registers} registers a thread"
    )


def _whole_cta(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if params.warp_tile == params.cta_tile:
        return None
    return (
        f"every decode warp takes the CTA's whole tile: warp_tile must equal cta_tile "
        f"{params.cta_tile}, not {params.warp_tile}"
    )


def rules(problem: MatmulProblem, device: Device) -> tuple[Rule, ...]:
    """Every rule, in the order violations are reported."""
    cc = min_cc(problem)
    return (
        Rule("device", f"sm_{cc[0]}{cc[1]} or newer", _device),
        *(Rule(s.field, s.text, _allowed(s)) for s in space(problem, device)),
        Rule("warp_tile", "the CTA's tile: each warp takes all its rows", _whole_cta),
        Rule("splitk_factor", "warps a CTA (per product) that one SM holds", _fits),
    )


def resources(params: MatmulParams, problem: MatmulProblem) -> Resources:
    """One CTA: a warp per K split (per product of a horizontal fusion), each with a float32
    (weight rows x m) partial in shared memory, and the registers of ``REGISTERS``."""
    return _resources(problem, params.splitk_factor, params.stages, params.cta_tile.n // ROWS)


def _resources(problem: MatmulProblem, warps: int, stages: int, row_tiles: int) -> Resources:
    rows, warps = m_tile(problem), warps * problem.horizontal
    counts = REGISTERS.get((problem.operand_dtype.itemsize, rows // COLS_PER_MMA, row_tiles), ())
    registers = counts[stages - 1] if 1 <= stages <= len(counts) else 0
    return Resources(warps * ROWS * row_tiles * rows * 4, 32 * warps, registers)


def one_wave(problem: MatmulProblem, device: Device, warps: int, stages: int) -> bool:
    """Whether the SMs hold all CTAs (one per 16 weight rows and product of the batch) of a
    kernel of one row tile, *warps* and *stages* chunks in flight at once."""
    ctas = problem.batch * -(-problem.n // ROWS)
    return ctas <= device.sm_count * resident_ctas(_resources(problem, warps, stages, 1), device)
