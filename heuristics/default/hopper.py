"""The default hopper parameters: nvFuser's tile search scored by bytes moved, our rules for
weight-streaming problems (the operand swap, narrow tiles, splits), CTA pairs, the grouped tile
order, and horizontal fusions."""

from __future__ import annotations

from typing import Final, NamedTuple

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape, TilingStrategy
from mmaplug.planning.scheduler import violations

from .asker import Asker, scheduler_object
from .grid import SPLITK_MAX_FILL, SWIZZLE, ceil_div, cta_order_for, split_to_one_wave, tile_grid

__all__ = ["hopper_horizontal_params", "hopper_params", "hopper_swizzle", "hopper_tiles"]

HOPPER_MAX_STAGES: Final = 6  # more stages only hide latency already hidden; keeps stages=7 free
# block-scaled FP8 (one 128x128x128 stage per promotion): 4 stages ran 3-10% faster than 6 on
# 4096^3, 8192^3 and 4096x28672x4096 (BENCHMARKS.md, run 80)
BLOCK_SCALED_MAX_STAGES: Final = 4
# nvFuser's Hopper tile search: cta_k, (m, n) consumer warp groups and the wgmma N of m64 warp
# tiles, each from the most preferred; the rules drop what is illegal. Our order of the warp
# grids for 16-bit operands (single, coopB, coopA; nvFuser's reversed): on a tie of bytes, one
# consumer warp group with the wider wgmma wins: 64x128 ran 1.3x and 1.8x faster than 128x64
# (two 64x64 warp tiles) at 96x6144x4096 and 192x4096x14336, BENCHMARKS.md runs 92-93. FP8
# keeps nvFuser's order: its single 64x192 warp tile lost 5-7% at 1000x1040x528 (run 93) and
# spills beside fused FP8 epilogues
HOPPER_CTA_K: Final = (256, 192, 128, 64)
# ... and on a tie of bytes between K depths of a 16-bit tile of 64x192 outputs or more, 64 of
# K a stage (128 bytes, one swizzle row) and the deepest ring that fits win, where nvFuser's
# order (fewer K stages once past 10) took 128 in 3 stages: the same bytes in flight in twice
# the stages. On the H200 against the old default (BENCHMARKS.md runs 133 and 135,
# bf16 / fp16, best of two): 128x128, 6 stages: 512x4096x4096 29.7 / 30.3 -> 26.9 / 27.3 us,
# 1536x1000x7168 44.0 / 45.8 -> 39.9 / 39.2, 256x8192x8192 67.0 / 65.7 -> 59.9 / 60.1; 64x192,
# 6 stages: 160x8192x8192 54.6 / 57.2 -> 48.2 / 47.6, 192x6144x4096 27.3 -> 23.5, 256x5120x4096
# 25.3 -> 21.5 / 21.8. One consumer's 64x128 tile at 64 of K in 8 stages gained at
# 192x4096x14336 (54.6 -> 49.7) but lost at 256x4096x4096 (15.4 -> 19.3 bf16, in 6 stages
# too), and 64x64x256 ran 1-2% faster than at 64 or 128 of K (run 131): smaller tiles keep
# nvFuser's order. A deep-K split tile takes 64 of K too, in the ring it would have had (6 stages):
# 64x64 split 16 at 64x512x28672, 12.1 -> 11.5 us bf16, 11.8 -> 11.3 fp16 (run 146)
HOPPER_TIE_K_BYTES: Final = 128
HOPPER_TIE_MIN_TILE: Final = 64 * 192
HOPPER_WARP_GRIDS: Final = ((1, 1), (1, 2), (2, 1))
NVFUSER_WARP_GRIDS: Final = HOPPER_WARP_GRIDS[::-1]
# (block scales search the same widths, which their rules narrow to whole or divided scale
# blocks: with the warpgroup index made warp-uniform, the 64x256 tiles promoted by 64-column
# chunks ran 4-8% faster than the 128x128x256 tile on all five large shapes, 8192^3 1,096-1,106
# against 1,148-1,151 us; before it, 0.97-1.03x; BENCHMARKS.md runs 122-123, 125)
HOPPER_INSTR_N: Final = (256, 192, 128, 64)
# A weight-streaming problem (one weight, one row block, N >= 16 M: issue 25's decode-like
# shapes) reads the same weight bytes whatever the tile, so the per-SM byte score cannot rank its
# tiles. On the H200 one consumer warp group with a 64x128 wgmma was the fastest tile or within
# 5% of it at M = 32-64 (64x64 tiles ran 1.15x slower at 32x8192x28672, a split 64x256 one
# 1.25x slower at 64x8192x8192), and K split while the tiles fill under a quarter of the SMs
# paid where each split streamed 7 KiB of every weight row (48x4096x14336 bf16 split 4: 37.0
# us, the 64x64 tile unsplit 46.1) and lost where it streamed 1-2 KiB (64x4096x4096 bf16 split
# 4: 13.3 against 12.2 us, e4m3: 12.1 against 7.9; the second launch and the partials outweigh
# a 5-10 us stream), BENCHMARKS.md runs 92-93; hence a split streams 6 KiB of a row at least.
# Where the 64x128 units (tiles x split) fill under a quarter of the SMs (a narrow weight, a
# short K: 64x4096x4096, 32 tiles), the byte search's smaller tiles put more SMs to work
# (64x64x256 there: 12.2 us, e4m3 7.9)
STREAMING_MIN_N_PER_M: Final = 16
STREAMING_WARP_N: Final = 128
STREAMING_SPLIT_MIN_BYTES: Final = 6144
# The operand swap (C^T = W X^T, docs/decisions.md "The operand swap"): a 16-bit weight-streaming
# problem of at most 56 activation rows whose 64-row weight tiles fill between a quarter of the
# SMs and one wave runs as the transposed product, 64 weight rows a CTA against the activation
# rows as the wgmma's N (M rounded up to 8s), 128 of K a stage, the deepest ring that fits. On
# the H200 against the unswapped default in one run (BENCHMARKS.md run 99): 32x6144x4096 20.2 ->
# 14.1 us, 32x4096x4096 15.4 -> 10.8, 40x4096x4096 14.2 -> 11.9, 24x8192x8192 41.2 -> 36.2,
# 32x8192x28672 127.8 -> 111.2, 48x4096x14336 36.8 -> 34.9, 56x6144x4096 20.0 -> 18.1, with
# bias + GELU 32x6144x4096 22.4 -> 17.7; it lost at M = 64 (64x4096x4096 12.2 -> 13.1: the
# wgmma N of 64 is the unswapped tile's own) and where the tiles were few enough to split
# (32x2048x8192 12.6 -> 13.4, 32x1024x16384 12.6 -> 13.4: the unswapped tiles split 8-16 ways
# spread further), and over 3.4 waves (64x28672x4096 60.3 -> 65.6, run 98). A 128-row or
# 64-deep tile was slower on every row (run 98). FP8 (e4m3, per-row scales, run 103), 256 of
# K a stage (the same 256 bytes a row): 24x6144x4096 12.6 -> 9.2 us, 32x6144x4096 13.1 ->
# 10.3, 24 and 32 x 8192x8192 and x 4096x14336 1-7% faster; at 48 rows even to 4% slower,
# hence 32 rows at most. Rows of at most 16 (the decode kernel's, where it hands them to
# hopper or is blocked) swap whatever their wave count (9-16 x 57344x8192, 6.8 waves: 223.8 ->
# 213.6 us against decode, run 105; unswapped, 64-row tiles ran 0.47-0.63x cuBLAS there, run
# 72), split as a weight-streaming problem's where the tiles are few. 7 stages stay the plugin
# harness's sentinel.
SWAP_MAX_M: Final = {2: 56, 1: 32}  # by the operands' bytes
# ... and 16-bit rows up to 64 where the unswapped tiles would split a K of at most 16384:
# the swapped tile (a wgmma N of 64, the unswapped tile's own) then needs no split, reduce or
# workspace (run 110, both dtypes: 64x4096x8192 26.1-26.8 -> 23.7-24.1 us against a split of
# 2, 60-64 x 4096x14336 38.2-39.2 -> 37.0-37.1 against 4; at K = 28672 the 64 unsplit CTAs
# lost, 66.5-68.1 -> 67.7-71.0; unsplit, the swap lost at 64x4096x4096 and 64x8192x8192, 11.0
# -> 12.7 and 38.0 -> 39.3, run 109). A K-major weight runs the narrow tiles there instead
# (STREAMING_NARROW_N: 64x4096x8192 and 64x4096x14336 faster than swapped, run 114), so this
# is an N-major weight's, whose tiles cannot be 32 rows wide
SWAP_OVER_SPLIT_M: Final = {2: 64}
# ... and 16-bit rows of 65-112 activations against a wide weight (N >= 16 M) under the same
# fill (a quarter of the SMs to one wave of 64-row weight tiles): unswapped, their second
# 64-row block is partly padding and each weight tile is read twice; swapped, one wgmma of N =
# the rows covers them. On the H200 against the old default in one run (BENCHMARKS.md run
# 132, bf16 / fp16, best of two): 72x4096x4096 24.5 / 23.7 -> 12.0 / 12.0 us, 96x4096x14336
# 59.4 / 62.7 -> 41.6 / 41.2, 80x8192x8192 47.5 / 48.0 -> 40.6 / 40.7, 112x4096x4096 16.0 /
# 17.4 -> 15.9 / 15.7, 96x6144x4096 19.3 / 19.8 -> 18.6 / 19.9. At 120 rows (4 stages) it lost
# (120x8192x8192 39.4 / 40.2 -> 43.0 / 46.5), at 128 (a wgmma N of 128, the two unswapped
# tiles' own) too (128x6144x4096 19.9 -> 22.4, run 130), and over 3.4 waves (96x28672x4096
# 67.3 -> 80.0, run 131); N up to 256 at 192-512 rows lost everywhere (run 130)
SWAP_WIDE_M: Final = {2: 112}
STREAMING_UNSPLIT_MAX_K: Final = 16384
SWAP_ANY_WAVES_M: Final = 16
STREAMING_STAGE_K_BYTES: Final = 256  # K bytes of a weight row per stage: the swap, narrow tiles
STREAMING_STAGES: Final = (8, 6, 5, 4, 3, 2)  # their rings, deepest first (7: the sentinel)
# 16-bit weight streaming unswapped (57-64 rows, or any where the swap is not planned) where
# the 64x128 tiles fill under STREAMING_WIDE_FILL of the SMs and K is at most
# STREAMING_UNSPLIT_MAX_K: the narrowest weight tile of these whose tiles fill half the SMs or
# more within one wave, unsplit, 256 bytes of K a stage, the deepest ring. On the H200 a CTA
# of 64x128 tiles streamed about 55 GB/s of weight (BENCHMARKS.md runs 113-114), so under 40% of
# the SMs they stay below the ~3.6 TB/s our kernels reach; against the old default in one run
# (bf16 / fp16, best of two): 64x4096x4096 11.6 / 11.4 -> 11.1 / 11.1 us (64x32: 128 CTAs),
# 64x6144x4096 19.0 -> 15.6 / 15.5 (64x64: 96 CTAs), 64x5120x8192 32.8 / 32.6 -> 26.9 / 25.8
# (64x64: 80 CTAs against 40), 64x4096x14336 37.1 / 37.4 -> 34.0 / 34.2 (against the
# swap); it lost where the 64x128 tiles filled 48% (64x8192x8192 37.6 / 37.9 -> 38.5 / 39.3)
# and past K = 16384 (64x4096x28672 64.4 -> 66.2 bf16, against a split of 4). Run 115 repeated
# the gains at N = 5120, 6144 and K = 14336; at N = 4096, K <= 8192 the two runs came out even
STREAMING_NARROW_N: Final = (32, 64)
STREAMING_WIDE_FILL: Final = 0.4
STREAMING_NARROW_MIN_FILL: Final = 2  # the tiles x this reach the SMs
HOPPER_ROWS: Final = 64  # rows of the warp tiles searched: one m64nNk16 wgmma row block
HOPPER_MIN_STAGES: Final = 3  # nvFuser: a tile must fit this many stages (or its K stages)
HOPPER_FALLBACK: Final = TileShape(64, 64, 64)  # nvFuser's fallback (K: the least legal)
HORIZONTAL_MAX_N: Final = 128  # widest output tile of a horizontal fusion's products
STAGE_TIE_TARGET: Final = 10  # nvFuser's tie-break threshold on K stages per SM
# CTA pairs sharing a multicast B tile paid on the H200 at 15.5 waves of 128x256 tiles (8192^2
# x 4096 and 8192^3: +2 to +7%) and lost at 3.9 to 6.8 waves (4096^3, the llama FFN: -2 to
# -10%), BENCHMARKS.md run 35; no shape in between was measured.
HOPPER_CLUSTER_MIN_WAVES: Final = 12
# ... and where a work unit's main loop runs 8 K tiles or more: at 1-4 the pair's shared load
# saves little and its handshakes cost (paired against alone, us: 16 x 2048^2 x 128 53.9-56.2 /
# 52.5-54.3, 8192^2 x 64 42.1-42.4 / 41.2-41.6, 8192 x 4096 x 256 42.0-42.4 / 40.3-42.0), from 8
# on it pays (8192^2 x 512 126.1-126.7 / 128.3-128.5, x 1024 226-227 / 229-235); BENCHMARKS.md
# runs 175-176
HOPPER_CLUSTER_MIN_K_TILES: Final = 8
# The persistent CTAs hold sm_count consecutive work units at a time, and ``cta_order_for`` walks
# the axis with fewer tiles whole before it steps the other (column_major: every M unit of one N
# column), so a wave reads all of that operand. Where it outgrows half of L2 it comes from HBM
# again for every column: groups of ``SWIZZLE`` columns (``grid_swizzle_factor``) keep a wave on
# a few columns of both operands. On the H200 (BENCHMARKS.md run 117), groups of 8 against
# none: 8192^3 e4m3 block-scaled 1,385 -> 1,283 us, per tensor 918 -> 899, bf16 1,702 -> 1,673,
# 4096^3 bf16 221 -> 217; even at 4096x28672x4096 and 16384x4096x4096 bf16 (1,499 -> 1,506,
# 860 -> 863); where the walked operand fits they lost up to 2% (2048x14336x5120 e4m3 255 ->
# 261, 4096x28672x4096 e4m3 828 -> 845)
HOPPER_SWIZZLE_L2_SHARE: Final = 2
# Split-K on hopper: only where K is this many times the larger of M and N (a deep K keeps the
# split's float32 partials small beside the operands) and the tiles fill under a quarter of
# the SMs. On the H200 splitting cost 1.2-1.5x on M = 32-256 weight-streaming problems, paid
# 2.5-6x on four deep-K ones and cost 1.3x at 1536x1000x7168 (48 tiles split 2), BENCHMARKS.md
# runs 86-87; powers of two up to 32 (32 of 4 tiles beat 16 by 10% at 128x128x32768)
HOPPER_SPLITK_MIN_DEPTH: Final = 4
HOPPER_SPLITK_MAX: Final = 32
# A split's float32 partial per element: 4 bytes written by the gemm and read by the reduce,
# weighed 4x the operand bytes, which stream from L2 under the wgmmas while neither crossing of
# a partial overlaps the tensor cores. Weighed 1x (8) the score chose 128x128 tiles in 32 splits
# at 256x256x16384 and 64x128 in 32 at 64x512x28672, where cuBLAS splits 64x64 tiles 6-8 ways
# (ncu, run 143); at 4x, 64x128 in 16 and 64x64 in 16: 12.7 -> 11.1 and 14.5 -> 11.4 us bf16,
# 12.8 -> 11.8 and 14.5 -> 11.3 fp16 (BENCHMARKS.md runs 144 and 146)
PARTIAL_BYTES: Final = 32
CTA_PAIR: Final = (2, 1)  # two CTAs along M sharing B
TILES: Final = frozenset({"cta_tile", "warp_tile", "instruction_tile"})


def least_k_cta(ask: Asker, m: int, n: int) -> TileShape:
    """The CTA tile *m* x *n* with the least K the scheduler's space allows (64 for a
    16-bit wgmma kernel, 128 for FP8); K 64 when none is."""
    space = ask.spaces["cta_tile"]
    return next(
        (TileShape(m, n, k) for k in sorted(HOPPER_CTA_K) if space.allows(TileShape(m, n, k))),
        TileShape(m, n, 64),
    )


class HopperTiles(NamedTuple):
    """One candidate of the Hopper tile search and how it scored."""

    cta: TileShape
    warp: TileShape
    instruction: TileShape
    score: int
    k_stages_per_sm: int
    splitk: int = 1
    deep: bool = False  # the ring: the deepest of STREAMING_STAGES, not up to HOPPER_MAX_STAGES


def streams_weight(problem: MatmulProblem) -> bool:
    """One row block of activations against one wide weight (``_wide_weight``): the weight's
    bytes, read once whatever the tile, are the problem's time."""
    return problem.m <= HOPPER_ROWS and _wide_weight(problem)


def _wide_weight(problem: MatmulProblem) -> bool:
    """One batch, its weight at least ``STREAMING_MIN_N_PER_M`` times as wide as its rows."""
    return problem.batch == 1 and problem.n >= STREAMING_MIN_N_PER_M * problem.m


def deep_k(problem: MatmulProblem) -> bool:
    """K at least HOPPER_SPLITK_MIN_DEPTH times the larger of M and N."""
    return problem.k >= HOPPER_SPLITK_MIN_DEPTH * max(problem.m, problem.n)


def hopper_splitk(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """Split K of a deep-K problem (``deep_k``) as ``split_to_one_wave`` does, up to
    HOPPER_SPLITK_MAX, or of a weight-streaming one keeping STREAMING_SPLIT_MIN_BYTES of every
    weight row a split; 1 otherwise.
    Our addition: nvFuser's Hopper heuristic never splits K."""
    if deep_k(problem):
        return split_to_one_wave(problem, device, cta, HOPPER_SPLITK_MAX)
    if streams_weight(problem):
        return streaming_split(problem, device, cta)
    return 1


def streaming_split(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """``split_to_one_wave`` of *cta*'s tiles of a weight-streaming problem, up to
    HOPPER_SPLITK_MAX, each split streaming STREAMING_SPLIT_MIN_BYTES of every weight row at
    least (*problem* as the kernel computes it: transposed for the swap, K alike)."""
    most = max(1, problem.k * problem.operand_dtype.itemsize // STREAMING_SPLIT_MIN_BYTES)
    return split_to_one_wave(problem, device, cta, min(most, HOPPER_SPLITK_MAX))


def hopper_tile_score(
    problem: MatmulProblem, device: Device, cta: TileShape, splitk: int = 1
) -> tuple[int, int]:
    """(bytes moved, K stages per SM) of a CTA tile split *splitk* ways; lower bytes win. The
    bytes are the operand panels the SMs load with wave quantization plus, split, the float32
    partials written and read back."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    waves = ceil_div(problem.batch * m_tiles * n_tiles * splitk, device.sm_count)
    k_tiles = ceil_div(ceil_div(problem.k, cta.k), splitk)
    panels = waves * device.sm_count * k_tiles * (cta.m + cta.n) * cta.k
    partials = problem.batch * problem.m * problem.n * splitk * PARTIAL_BYTES if splitk > 1 else 0
    return panels * problem.operand_dtype.itemsize + partials, k_tiles * waves


def _hopper_better(
    candidate: HopperTiles, best: HopperTiles | None, itemsize: int, deep: bool
) -> bool:
    """``_nvfuser_better``, but on a tie between K depths of one tile the 16-bit one of
    ``HOPPER_TIE_K_BYTES`` of K a stage (``_shallow``; *deep*: a ``deep_k`` problem's) first."""
    if best is not None and candidate.score == best.score:
        depths = (candidate.cta.m, candidate.cta.n) == (best.cta.m, best.cta.n)
        shallow = _shallow(candidate, itemsize, deep)
        if depths and shallow != _shallow(best, itemsize, deep):
            return shallow
    return _nvfuser_better(candidate, best)


def _nvfuser_better(candidate: HopperTiles, best: HopperTiles | None) -> bool:
    """nvFuser's order: lower score; on a tie more K stages per SM, or fewer once past 10."""
    if best is None or candidate.score != best.score:
        return best is None or candidate.score < best.score
    if best.k_stages_per_sm < STAGE_TIE_TARGET:
        return candidate.k_stages_per_sm > best.k_stages_per_sm
    return STAGE_TIE_TARGET <= candidate.k_stages_per_sm < best.k_stages_per_sm


def _shallow(tiles: HopperTiles, itemsize: int, deep: bool) -> bool:
    """A 16-bit CTA tile of ``HOPPER_TIE_MIN_TILE`` outputs or more, or split for a deep K
    (*deep*), taking ``HOPPER_TIE_K_BYTES`` of K a stage."""
    large = tiles.cta.m * tiles.cta.n >= HOPPER_TIE_MIN_TILE or (deep and tiles.splitk > 1)
    return itemsize == 2 and large and tiles.cta.k * itemsize == HOPPER_TIE_K_BYTES


def _hopper_candidate(ask: Asker, cta: TileShape, warp: TileShape, stages: int) -> MatmulParams:
    """Persistent, the epilogue staged through smem (1.1-1.5x faster than storing from
    registers on the H200 at 4096^3 and the llama FFN shape, BENCHMARKS.md run 17)."""
    return ask.params(
        cta_tile=cta,
        warp_tile=warp,
        instruction_tile=ask.instruction(HOPPER_ROWS, warp.n),
        stages=stages,
        use_smem_epilogue=True,
        tiling_strategy=TilingStrategy.persistent,
    )


def hopper_tiles(problem: MatmulProblem, device: Device) -> HopperTiles:
    """nvFuser's exhaustive tile search over the tiles the hopper scheduler's rules allow with
    nvFuser's minimum of stages (3, or the K stages per SM, but what the kernel needs at
    least) in shared memory beside the staged epilogue."""
    return _hopper_tiles(Asker(scheduler_object("hopper"), problem, device))


def _hopper_tiles(ask: Asker) -> HopperTiles:
    problem, device = ask.problem, ask.device
    if streams_weight(problem) and (narrow := _narrow_streaming_tiles(ask)) is not None:
        return narrow
    if streams_weight(problem) and problem.n > STREAMING_WARP_N // 2:
        best = _search_tiles(ask, ((1, 1),), (STREAMING_WARP_N,))
        if best is not None:
            m_tiles, n_tiles = tile_grid(problem, best.cta)
            if m_tiles * n_tiles * best.splitk * SPLITK_MAX_FILL >= device.sm_count:
                return best
    wide = problem.operand_dtype.itemsize >= 2
    best = _search_tiles(ask, HOPPER_WARP_GRIDS if wide else NVFUSER_WARP_GRIDS, HOPPER_INSTR_N)
    if best is None:
        tile = least_k_cta(ask, HOPPER_FALLBACK.m, HOPPER_FALLBACK.n)
        return HopperTiles(tile, tile, ask.instruction(HOPPER_ROWS, tile.n), 0, 0)
    return best


def _narrow_streaming_tiles(ask: Asker) -> HopperTiles | None:
    """A 16-bit weight-streaming problem's narrowest tile of ``STREAMING_NARROW_N`` weight
    rows whose tiles fill half the SMs or more within one wave, unsplit, 256 bytes of K a stage
    and a deep ring, where its 64x128 tiles fill under ``STREAMING_WIDE_FILL`` of the SMs and K
    is at most ``STREAMING_UNSPLIT_MAX_K``; None elsewhere, or where the rules allow none."""
    problem, device = ask.problem, ask.device
    size = problem.operand_dtype.itemsize
    if size != 2 or problem.k > STREAMING_UNSPLIT_MAX_K:
        return None
    if ceil_div(problem.n, STREAMING_WARP_N) >= STREAMING_WIDE_FILL * device.sm_count:
        return None
    for n in STREAMING_NARROW_N:
        tiles = ceil_div(problem.n, n)
        if tiles > device.sm_count or tiles * STREAMING_NARROW_MIN_FILL < device.sm_count:
            continue
        cta = TileShape(HOPPER_ROWS, n, STREAMING_STAGE_K_BYTES // size)
        if (legal := _scored_tile(ask, cta, cta)) is not None:
            return legal._replace(deep=True)
    return None


def _scored_tile(
    ask: Asker, cta: TileShape, warp: TileShape, splitk: int = 1
) -> HopperTiles | None:
    """*cta* in consumers of *warp* tiles, split *splitk* ways (unsplit where the rules refuse
    the split), scored; None where the rules refuse the tiles with nvFuser's minimum of
    stages (``HOPPER_MIN_STAGES``, or the K stages per SM)."""
    problem, device = ask.problem, ask.device
    score, k_stages = hopper_tile_score(problem, device, cta, splitk)
    stages = max(ask.fewest_stages(), min(HOPPER_MIN_STAGES, k_stages))
    params = _hopper_candidate(ask, cta, warp, stages)
    if not ask.allows(params, TILES | {"stages"}):
        return None
    if splitk > 1 and not ask.allows(
        params.with_overrides(splitk_factor=splitk), ("splitk_factor",)
    ):
        splitk = 1
        score, k_stages = hopper_tile_score(problem, device, cta)
    inst = ask.instruction(HOPPER_ROWS, warp.n)
    return HopperTiles(cta, warp, inst, score, k_stages, splitk)


def _search_tiles(
    ask: Asker, grids: tuple[tuple[int, int], ...], widths: tuple[int, ...]
) -> HopperTiles | None:
    """The best-scored legal tile of *grids* consumer warp groups of m64 warp tiles *widths*
    wide, each with its split."""
    best: HopperTiles | None = None
    size, deep = ask.problem.operand_dtype.itemsize, deep_k(ask.problem)
    tied = False  # the best won a tie of depths that nvFuser's order gives the deeper K
    for cta_k in HOPPER_CTA_K:
        for rm, rn in grids:
            for instr_n in widths:
                cta = TileShape(HOPPER_ROWS * rm, instr_n * rn, cta_k)
                warp = TileShape(HOPPER_ROWS, instr_n, cta_k)
                splitk = hopper_splitk(ask.problem, ask.device, cta)
                candidate = _scored_tile(ask, cta, warp, splitk)
                if candidate is not None and _hopper_better(candidate, best, size, deep):
                    tied = best is not None and not _nvfuser_better(candidate, best)
                    best = candidate
    # the deepest ring: the bytes in flight of the deeper K's (not for split units: 8 stages
    # ran 2-17% slower than 6 on three of four deep-K rows in run 146 and 4-5% faster in runs
    # 144 and 147, BENCHMARKS.md; unsettled, they keep 6)
    if best is not None and tied and best.splitk == 1:
        return best._replace(deep=True)
    return best


def hopper_cluster(problem: MatmulProblem, device: Device, params: MatmulParams) -> tuple[int, int]:
    """CTA pairs along M (``(2, 1)``) when the grid runs at least HOPPER_CLUSTER_MIN_WAVES
    waves of tiles, each unit's main loop HOPPER_CLUSTER_MIN_K_TILES K tiles or more, and the
    scheduler's rules allow the pair; one CTA per cluster otherwise."""
    return _hopper_cluster(Asker(scheduler_object("hopper"), problem, device), params)


def _hopper_cluster(ask: Asker, params: MatmulParams) -> tuple[int, int]:
    problem, device = ask.problem, ask.device
    m_tiles, n_tiles = tile_grid(problem, params.cta_tile)
    waves = problem.batch * m_tiles * n_tiles / device.sm_count
    k_tiles = ceil_div(ceil_div(problem.k, params.splitk_factor), params.cta_tile.k)
    if m_tiles >= 2 and waves >= HOPPER_CLUSTER_MIN_WAVES and k_tiles >= HOPPER_CLUSTER_MIN_K_TILES:
        if ask.allows(params.with_overrides(cluster_dims=CTA_PAIR), ("cluster_dims",)):
            return CTA_PAIR
    return (1, 1)


def hopper_swizzle(problem: MatmulProblem, device: Device, params: MatmulParams) -> int:
    """``SWIZZLE`` where the operand the tile order walks whole (A for column_major) is over
    1 / ``HOPPER_SWIZZLE_L2_SHARE`` of L2 and the other axis has two groups of work units or
    more, else 1 (and 1 where L2's size is unknown)."""
    m_tiles, n_tiles = tile_grid(problem, params.cta_tile)
    cluster_m, cluster_n = params.cluster_dims
    column = params.cta_order is CtaOrder.column_major
    walked = (problem.m if column else problem.n) * problem.k * problem.operand_dtype.itemsize
    stepped = ceil_div(n_tiles, cluster_n) if column else ceil_div(m_tiles, cluster_m)
    spills = 0 < device.l2_bytes < walked * HOPPER_SWIZZLE_L2_SHARE
    return SWIZZLE if spills and stepped >= 2 * SWIZZLE else 1


def swaps_operands(problem: MatmulProblem, device: Device, *, unswapped_splits: bool) -> bool:
    """One matmul of at most ``SWAP_MAX_M`` activation rows for its operand type (at most
    ``SWAP_OVER_SPLIT_M`` where the unswapped tiles would split a K of at most
    ``STREAMING_UNSPLIT_MAX_K``: *unswapped_splits*): a
    weight-streaming one (``streams_weight``) whose 64-row weight tiles fill a quarter of the
    SMs or more (no split) and one wave at most, or any of one batch and at most
    ``SWAP_ANY_WAVES_M`` rows (the decode kernel's, which hopper plans where decode hands
    them over or is blocked); or one of 65 to ``SWAP_WIDE_M`` rows against a weight 16 times
    as wide, under the same fill: the default computes its transposed product."""
    tiles = ceil_div(problem.n, HOPPER_ROWS)
    fills = device.sm_count < tiles * SPLITK_MAX_FILL and tiles <= device.sm_count
    decode_rows = problem.batch == 1 and problem.m <= SWAP_ANY_WAVES_M
    size = problem.operand_dtype.itemsize
    most = SWAP_MAX_M.get(size, 0)
    if unswapped_splits and problem.k <= STREAMING_UNSPLIT_MAX_K:
        most = max(most, SWAP_OVER_SPLIT_M.get(size, 0))
    few = problem.m <= most
    plain = problem.horizontal == 1 and not problem.block_scaled
    wide_rows = HOPPER_ROWS < problem.m <= SWAP_WIDE_M.get(size, 0) and _wide_weight(problem)
    streams = decode_rows or (streams_weight(problem) and fills)
    return plain and ((few and streams) or (wide_rows and fills))


def _swapped_params(ask: Asker) -> MatmulParams | None:
    """The transposed product's parameters (see ``SWAP_MAX_M``), or None where the scheduler
    allows none of them."""
    problem = ask.problem
    cols = 8 * ceil_div(problem.m, 8)  # the activation rows, the wgmma's N
    cta = TileShape(HOPPER_ROWS, cols, STREAMING_STAGE_K_BYTES // problem.operand_dtype.itemsize)
    split = streaming_split(problem.transposed(), ask.device, cta)
    params = ask.params(
        cta_tile=cta,
        warp_tile=cta,
        instruction_tile=ask.instruction(HOPPER_ROWS, cols),
        stages=ask.fewest_stages(),
        splitk_factor=split,
        tiling_strategy=TilingStrategy.persistent,
        swap_ab=True,
    )
    for stages in STREAMING_STAGES:
        deeper = params.with_overrides(stages=stages)
        if not violations(ask.scheduler, deeper, problem, ask.device):
            return deeper
    return None


def hopper_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default Hopper parameters: the transposed product of a weight-streaming problem
    (``swaps_operands``), or its narrow tiles (``STREAMING_NARROW_N``); otherwise persistent,
    warp-specialized, TMA-loaded, K split where a deep K meets few tiles (``hopper_splitk``),
    CTA pairs on large grids (``hopper_cluster``), the tile order grouped where a wave would
    spill L2 (``hopper_swizzle``), the epilogue staged through shared memory, stages filling
    it up to 6 (4 block-scaled; the deepest ring up to 8 for the narrow tiles and the 64-deep
    ties) and the K loops a CTA runs."""
    if problem.horizontal > 1:
        return hopper_horizontal_params(problem, device)
    ask = Asker(scheduler_object("hopper"), problem, device)
    tiles = _hopper_tiles(ask)
    swaps = swaps_operands(problem, device, unswapped_splits=tiles.splitk > 1)
    if swaps and (swapped := _swapped_params(ask)) is not None:
        return swapped
    m_tiles, n_tiles = tile_grid(problem, tiles.cta)
    params = _hopper_candidate(ask, tiles.cta, tiles.warp, ask.fewest_stages())
    params = params.with_overrides(
        cta_order=cta_order_for(m_tiles, n_tiles), splitk_factor=tiles.splitk
    )
    params = params.with_overrides(cluster_dims=_hopper_cluster(ask, params))
    params = params.with_overrides(grid_swizzle_factor=hopper_swizzle(problem, device, params))
    units_per_cta = ceil_div(problem.batch * m_tiles * n_tiles * tiles.splitk, device.sm_count)
    k_loops = ceil_div(ceil_div(problem.k, tiles.cta.k), tiles.splitk) * units_per_cta
    cap = BLOCK_SCALED_MAX_STAGES if problem.block_scaled else HOPPER_MAX_STAGES
    rings = [s for s in STREAMING_STAGES if s <= k_loops] if tiles.deep else []
    stages = ask.deepest(params, rings)
    if stages is None:
        stages = ask.most_stages(params, min(cap, k_loops))
    return params.with_overrides(stages=stages)


def hopper_horizontal_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """A horizontal fusion of h matmuls: one wgmma of N = h x the output tile's n per 64 rows,
    the widest output tile up to 128 columns that the rules allow, preferring one whose
    products' chunks the staged epilogue takes (the register epilogue is ~3x slower per tile:
    run 37), no split-K or cluster (docs/decisions.md, "Horizontal fusion"). Ping-pong
    consumers on 64-row tiles where every CTA gets two or more (their epilogues overlap the
    other's main loop: 1.02-1.04x faster than cooperative on the bf16/fp16 llama FFN, run 38);
    else two consumers along M (one when M fits 64 rows), persistent."""
    ask = Asker(scheduler_object("hopper"), problem, device)
    h = problem.horizontal

    def shaped(n_out: int) -> MatmulParams:
        n_tiles = ceil_div(problem.n, n_out)
        pingpong = problem.batch * ceil_div(problem.m, HOPPER_ROWS) * n_tiles >= 2 * device.sm_count
        rows = HOPPER_ROWS if pingpong or problem.m <= HOPPER_ROWS else 2 * HOPPER_ROWS
        cta = least_k_cta(ask, rows, h * n_out)
        strategy = TilingStrategy.persistent_pingpong if pingpong else TilingStrategy.persistent
        return ask.params(
            cta_tile=cta,
            warp_tile=TileShape(HOPPER_ROWS, cta.n, cta.k),
            instruction_tile=ask.instruction(HOPPER_ROWS, cta.n),
            stages=ask.fewest_stages(),
            cta_order=cta_order_for(ceil_div(problem.m, cta.m), n_tiles),
            use_smem_epilogue=True,
            tiling_strategy=strategy,
        )

    widest: MatmulParams | None = None
    for n_out in range(HORIZONTAL_MAX_N, 0, -1):
        params = shaped(n_out)
        broken = {v.field for v in violations(ask.scheduler, params, problem, device)}
        if broken & TILES:
            continue
        if "use_smem_epilogue" not in broken:
            break
        widest = widest or params.with_overrides(use_smem_epilogue=False)
    else:  # no width's chunks fit a staged row: the widest, from registers
        params = widest or params
    cta = params.cta_tile
    tiles = problem.batch * ceil_div(problem.m, cta.m) * ceil_div(problem.n, cta.n // h)
    k_loops = ceil_div(problem.k, cta.k) * ceil_div(tiles, device.sm_count)
    return params.with_overrides(stages=ask.most_stages(params, min(HOPPER_MAX_STAGES, k_loops)))
