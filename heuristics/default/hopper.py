"""The default hopper parameters: nvFuser's tile search scored by bytes moved (``hopper_tiles``),
K splits for deep K, CTA pairs, the grouped tile order, the weight-streaming rules
(``streaming``) and horizontal fusions."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.ir.ops import SCALE_BLOCK, several_scale_blocks
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape, TilingStrategy
from mmaplug.planning.scheduler import violations

from .asker import Asker, scheduler_object
from .grid import (
    SPLITK_MAX_FILL,
    SWIZZLE,
    ceil_div,
    cta_order_for,
    split_to_one_wave,
    tile_grid,
    whole_waves,
    work_units,
)
from .hopper_tiles import (
    HOPPER_ROWS,
    HOPPER_SPLITK_MAX,
    HOPPER_SPLITK_MIN_DEPTH,
    SPLIT_RIVAL,
    SPLIT_RIVAL_ROW_BYTES,
    TILES,
    HopperTiles,
    hopper_candidate,
    scored_tile,
)
from .streaming import (
    STREAMING_STAGES,
    STREAMING_WARP_N,
    narrow_streaming_tiles,
    streaming_split,
    streams_weight,
    swapped_params,
    swaps_operands,
    wide_weight,
)

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
# spills beside fused FP8 epilogues. But on a tie of bytes between tiles of as many outputs,
# one FP8 consumer's warp tile up to FP8_ONE_CONSUMER_N wide wins over two consumers' 64x64
# where it makes no more work units and more than one column of tiles (``_one_consumer_wins``;
# block scales keep nvFuser's order, untimed). On an H100 (BENCHMARKS.md runs 344-345, e4m3,
# us) 64x128 ran 1-14% faster than 128x64 on 16 such rows and tied on one: 1024x1024x4096
# 9.6 / 10.4-10.5, 1536x512x8192 13.6 / 15.4, 1024x1024x16384 32.2-33.5 / 36.7-37.4,
# 512x512x8192 split 4 level; 1.6x where it pads less (192x4096x4096: 8.9 / 14.5). It lost
# where it pads more (1024x192x8192 split 4: 12.6 / 10.5; 4096x192x16384) and by 2-3% where
# it spans N in one column of tiles (8192x128x4096, 5120x128x32768: 73.5-74.3 / 71.2)
FP8_ONE_CONSUMER_N: Final = 128
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
# 64x64 split 16 at 64x512x28672, 12.1 -> 11.5 us bf16, 11.8 -> 11.3 fp16 (run 146). So
# does a 64x128 tile of a wide weight (``wide_weight``: N >= 16 M) past one row tile, whose 2-4
# row tiles each stream their weight columns from HBM: in 8 stages against 128 of K in 4, after
# the tensor maps became parameters (an H100, three rounds in turn, us; BENCHMARKS.md runs
# 312 and 315), bf16 256x4096x4096 14.7 / 16.2-16.7, 192x4096x14336 52.1-53.1 / 55.8-56.8,
# 192x4096x4096 15.3 / 16.8, fp16 224x4096x8192 31.8-32.2 / 34.2-34.9, bf16 256x4096x14336
# 53.8-55.0 / 57.7-61.7; level at 128-160 rows (128x6144x4096 22.2-22.3 / 22.6, 128x8192x8192
# 50.5-50.6 / 50.0-50.2, 160x4096x4096 17.2-17.3 / 17.1). Not at one row tile (64x10240x8192
# 64.8 / 61.2-61.3, the rest level) nor where the weight is not wide: 8-30% slower (1000x1000x4096
# 22.8-23.0 / 16.6, 1024x1024x2048 10.8-11.0 / 9.2-9.3) or level (512x2048x4096 13.8-14.1 /
# 14.2-14.4, 777x1111x4096 29.2-30.2 / 26.9-30.1)
HOPPER_TIE_K_BYTES: Final = 128
HOPPER_TIE_MIN_TILE: Final = 64 * 192
HOPPER_TIE_WIDE_MIN_TILE: Final = 64 * 128
HOPPER_WARP_GRIDS: Final = ((1, 1), (1, 2), (2, 1))
NVFUSER_WARP_GRIDS: Final = HOPPER_WARP_GRIDS[::-1]
# (block scales search the same widths, which their rules narrow to whole or divided scale
# blocks: with the warpgroup index made warp-uniform, the 64x256 tiles promoted by 64-column
# chunks ran 4-8% faster than the 128x128x256 tile on all five large shapes, 8192^3 1,096-1,106
# against 1,148-1,151 us; before it, 0.97-1.03x; BENCHMARKS.md runs 122-123, 125)
HOPPER_INSTR_N: Final = (256, 192, 128, 64)
# ... and, where that search's tiles span more than one wave, the widths between, 32 apart:
# with the bytes of whole waves scored, the width whose tiles fill the part-empty last wave. On
# an H100 (BENCHMARKS.md runs 264-265) bf16 384x28672x4096 on 128x224 tiles ran 143-157 us
# against 151-161 on 128x256, 512x10240x8192 on 128x160 129-149 against 147-159 on 128x192,
# fp16 4095x4097x4096 on 128x224 288-293 against 308-318. Not for one wave, where filling
# the idle SMs with narrower tiles won 11-18% on four grids and lost 10-24% on a fifth
# (fp16 and bf16 1536x1000x7168 on 128x96), at the 700 W cap (docs/decisions.md, "Tile
# widths 32 apart")
HOPPER_FILL_N: Final = (224, 160, 96)
# ... and, for 16-bit tiles past one wave, CTA tiles of 256 rows: two consumers of 128x160
# warp tiles (160 accumulators a thread, ``MAX_ACCUMULATORS``), kept where an SM computes fewer
# outputs over their whole waves than over the searched tile's. cuBLAS runs fp16 3000x5000x2048
# as 396 tiles of 256x152, three whole waves, where 128x256 make 480 (3.64; ncu, run 323). On an
# H100 (BENCHMARKS.md runs 325-328; us, three rounds in turn, 256x160 / the searched tile) all
# twelve rows the rule changes ran faster: fp16 3000x5000x2048 104-105 / 110-111, bf16 + bias +
# GELU 99-106 / 110-120, fp16 5000x2048x2048 64-71 / 74-77, bf16 6144x5000x4096 387-389 /
# 418-425, 3333x4444x5632 265-281 / 288-291, 8192x14336x4096 1,431-1,434 / 1,467-1,472; at the
# same outputs 4096x5000x4096 tied (252-259 / 260-265) and with more 8192x6144x4096 lost
# (625-645 / 613-623). Of widths 128-160 on eight rows (run 327), 160 was the fastest on six
# (144 led at 1536x3072x4096 by 5-10%, 128 at 8192x6144x4096 by 1-3%), and 152, cuBLAS's,
# trailed it by 4-66% on all eight, most at the shortest K: its staged epilogue goes 8
# columns at a time where 160's goes 32 (``epilogue_chunk``), so 160 alone is searched
HOPPER_TALL_N: Final = (160,)
HOPPER_FALLBACK: Final = TileShape(64, 64, 64)  # nvFuser's fallback (K: the least legal)
HORIZONTAL_MAX_N: Final = 128  # widest output tile of a horizontal fusion's products
# ... and of products whose rows fit one 64-row tile (a decode batch past the decode kernel's
# 16 rows): twice the CTAs stream the weights, each in the deepest ring. The llama FFN (two
# products of 14336x4096 or 28672x8192) at 24-64 rows ran 2-6% faster on 64 columns than on
# 128 in bf16 (H100, BENCHMARKS.md run 222; level at 64x28672x8192), 4-10% in e4m3 per tensor
# and per row (1-3% at 32x28672x8192; run 223); 32 columns lost at 24-32 rows
HORIZONTAL_STREAMING_N: Final = 64
STAGE_TIE_TARGET: Final = 10  # nvFuser's tie-break threshold on K stages per SM
# CTA pairs sharing a multicast B tile paid on the H200 at 15.5 waves of 128x256 tiles (8192^2
# x 4096 and 8192^3: +2 to +7%) and lost at 3.9 to 6.8 waves (4096^3, the llama FFN: -2 to
# -10%), BENCHMARKS.md run 35. FP8 at 3.9-9.7 waves (an H100, runs 229 and 231): +8-9% at
# 4096x6144x4096 only, level or -1 to -3% at the others, so FP8 keeps the same floor.
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
# 261, 4096x28672x4096 e4m3 828 -> 845). The wave's output streams through L2 beside that
# operand, so it counts too: at e4m3 per row 4096x6144x4096 (B 24 MiB, a wave's bf16 output
# 8.25 MiB) the order alone read the operands from HBM 4 times (166 MB, cuBLASLt 78), groups of
# 8 read 103 MB and ran 7-9% faster at the 700 W cap, the same cycles at base clocks (an H100,
# BENCHMARKS.md runs 238-241; run 149 on the H200: 4%). It counts only where a group's wave
# (SWIZZLE columns) walks fewer tiles than the plain order's (the whole walk): where the walk
# is a wave's length or shorter both waves cover the same tiles, and the groups only reorder
# them. Runs 242 and 244 (H100s, three rounds in turn, us): groups of 8 against none, e4m3
# 4096x6144x4096 (a walk of 24 tiles) per row 161-192 / 173-182, per tensor 163-179 /
# 168-185, block-scaled 208-215 / 217-236, fp16 3000x5000x2048 (20) 111-113 / 114-118; bf16
# 2048x14336x5120 + bias + GELU (16, a group's wave 16.5) 448-491 / 452-471, the one timed
# first in a round the slower either way; replayed in alternation for 3 s each (run 247)
# groups took 2.5% longer (docs/decisions.md, the tile order in groups)
HOPPER_SWIZZLE_L2_SHARE: Final = 2
CTA_PAIR: Final = (2, 1)  # two CTAs along M sharing B
# ... and on one wave of 64-row 16-bit tiles whose operands' row pitch is no multiple of
# HOPPER_PAIR_PITCH bytes: there every box row straddles lines and the loads set the pace, which
# pairs sharing B halve. An H100 after the tensor maps became parameters (BENCHMARKS.md runs 313
# and 316; us, three rounds in turn, pairs / alone / cuBLAS): rows 16 bytes apart (K = 1000, 3000)
# fp16 1000^3 9.0 / 10.8 / 8.4, 1024x1024x1000 9.1 / 11.3 / 8.9, 768x768x1000 7.3 / 7.8-7.9 / 7.3,
# bf16 512x2048x1000 8.7 / 10.6-10.8 / 8.4, fp16 1000x1000x3000 19.6-20.1 / 26.5-26.8 / 19.2; 32
# bytes apart level or lost (1000x1000x2000 13.2 / 13.3-13.9, 1024x1024x1008 8.2 / 7.3); rows of
# 128-byte multiples lost 12-26% (1000x1000x1024, 1000x1000x2048, 1024^3, 768^3, 512^3)
HOPPER_PAIR_PITCH: Final = 32
# Block-scaled FP8 past one wave: 64x256 consumer tiles promoted by 64-column chunks, alone (in
# pairs 2-8% slower, runs 275-276; our reading, not measured: their 16 m64n64 wgmmas a stage re-read
# A from shared memory, which a shared B tile does not relieve), or 128x192 tiles straddling two
# blocks of B's scales in pairs along M, where those fill the last wave by BLOCK_PAIR_FILL more of
# the SMs' unit slots. An H100, us, graph replays (BENCHMARKS.md runs 275-279): 8192^3 (last-wave
# fill 0.993 against 0.970) 1,039-1,070 (11 timings, 4 or 5 stages) against the chunks' 1,091-1,140
# (9); 4096x28672x4096 (0.983 / 0.970) 963-978 against 966-994, level; 4096x57344x8192 (0.993 /
# 0.987) 3,763-3,775 against 3,733-3,745, 0.8% slower; where the 192 tiles fill no better they tied
# or lost 1-9% (4096x6144x4096, 4096^3, 4096x4096x14336, 4096x10240x8192, 4096x8192x28672,
# 2048x14336x5120), and alone they lost 3-9% at 8192^3 (1,178-1,212), in fours along M or pairs
# along N 10-11% (1,169-1,176, run 279). The threshold sits between the one row that gained and the
# two that did not: three points, not a model
BLOCK_PAIR_FILL: Final = 0.02
BLOCK_PAIR_TILE: Final = (
    TileShape(128, 192, SCALE_BLOCK),
    TileShape(HOPPER_ROWS, 192, SCALE_BLOCK),
)


def least_k_cta(ask: Asker, m: int, n: int) -> TileShape:
    """The CTA tile *m* x *n* with the least K the scheduler's space allows (64 for a
    16-bit wgmma kernel, 128 for FP8); K 64 when none is."""
    space = ask.spaces["cta_tile"]
    return next(
        (TileShape(m, n, k) for k in sorted(HOPPER_CTA_K) if space.allows(TileShape(m, n, k))),
        TileShape(m, n, 64),
    )


def deep_k(problem: MatmulProblem) -> bool:
    """K at least HOPPER_SPLITK_MIN_DEPTH times the larger of M and N."""
    return problem.k >= HOPPER_SPLITK_MIN_DEPTH * max(problem.m, problem.n)


def hopper_splitk(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """Split K of a deep-K problem (``deep_k``) as ``split_to_one_wave`` does, up to
    HOPPER_SPLITK_MAX, where the split pays (``_split_pays``), or of a weight-streaming one
    keeping STREAMING_SPLIT_MIN_BYTES of every weight row a split; 1 otherwise.
    Our addition: nvFuser's Hopper heuristic never splits K."""
    if deep_k(problem):
        split = split_to_one_wave(problem, device, cta, HOPPER_SPLITK_MAX)
        return split if split == 1 or _split_pays(problem, cta, split) else 1
    if streams_weight(problem):
        return streaming_split(problem, device, cta)
    return 1


def _split_pays(problem: MatmulProblem, cta: TileShape, split: int) -> bool:
    """Whether *cta*'s tiles split *split* ways beat unsplit ``SPLIT_RIVAL`` tiles: their units
    compute fewer outputs each, run more than ``SPLIT_RIVAL_ROW_BYTES`` of each operand row
    each, or are more."""
    rival = SPLIT_RIVAL
    row_bytes = problem.k * problem.operand_dtype.itemsize
    if cta.m * cta.n // split < rival.m * rival.n or row_bytes // split > SPLIT_RIVAL_ROW_BYTES:
        return True
    return work_units(problem, cta, split) > work_units(problem, rival)


def _hopper_better(
    candidate: HopperTiles, best: HopperTiles | None, problem: MatmulProblem
) -> bool:
    """``_nvfuser_better``, but on a tie between K depths of one tile the 16-bit one of
    ``HOPPER_TIE_K_BYTES`` of K a stage (``_shallow``) first, and between one FP8 consumer
    and two the one where ``_one_consumer_wins``."""
    if best is not None and candidate.score == best.score:
        if _depth_tie(candidate, best, problem):
            return _shallow(candidate, problem)
        if _one_consumer_wins(candidate, best, problem):
            return True
        if _one_consumer_wins(best, candidate, problem):
            return False
    return _nvfuser_better(candidate, best)


def _depth_tie(candidate: HopperTiles, best: HopperTiles, problem: MatmulProblem) -> bool:
    """Tiles of the same outputs that ``_shallow`` tells apart (by their K depth)."""
    outputs = (candidate.cta.m, candidate.cta.n) == (best.cta.m, best.cta.n)
    return outputs and _shallow(candidate, problem) != _shallow(best, problem)


def _one_consumer_wins(one: HopperTiles, other: HopperTiles, problem: MatmulProblem) -> bool:
    """Whether *one*, ``_one_fp8_consumer`` where *other* is not, wins their tie of bytes: as
    many outputs a tile, no more work units (no more padding), more than one column of tiles."""
    if not _one_fp8_consumer(one, problem) or _one_fp8_consumer(other, problem):
        return False
    outputs = one.cta.m * one.cta.n == other.cta.m * other.cta.n
    units = work_units(problem, one.cta, one.splitk) <= work_units(problem, other.cta, other.splitk)
    return outputs and units and tile_grid(problem, one.cta)[1] > 1


def _one_fp8_consumer(tiles: HopperTiles, problem: MatmulProblem) -> bool:
    """An FP8 CTA tile that is one consumer's warp tile, at most ``FP8_ONE_CONSUMER_N`` wide,
    of sums scaled after the product (block scales' promotion was not timed on one)."""
    one = (tiles.cta.m, tiles.cta.n) == (tiles.warp.m, tiles.warp.n)
    fp8 = problem.operand_dtype.itemsize == 1 and not problem.block_scaled
    return fp8 and one and tiles.warp.n <= FP8_ONE_CONSUMER_N


def _nvfuser_better(candidate: HopperTiles, best: HopperTiles | None) -> bool:
    """nvFuser's order: lower score; on a tie more K stages per SM, or fewer once past 10."""
    if best is None or candidate.score != best.score:
        return best is None or candidate.score < best.score
    if best.k_stages_per_sm < STAGE_TIE_TARGET:
        return candidate.k_stages_per_sm > best.k_stages_per_sm
    return STAGE_TIE_TARGET <= candidate.k_stages_per_sm < best.k_stages_per_sm


def _shallow(tiles: HopperTiles, problem: MatmulProblem) -> bool:
    """A 16-bit CTA tile of ``HOPPER_TIE_MIN_TILE`` outputs or more (of a ``wide_weight``
    past one row tile: ``HOPPER_TIE_WIDE_MIN_TILE``), or split for a ``deep_k`` problem, taking
    ``HOPPER_TIE_K_BYTES`` of K a stage."""
    itemsize, outputs = problem.operand_dtype.itemsize, tiles.cta.m * tiles.cta.n
    wide = wide_weight(problem) and problem.m > HOPPER_ROWS
    least = HOPPER_TIE_WIDE_MIN_TILE if wide else HOPPER_TIE_MIN_TILE
    large = outputs >= least or (deep_k(problem) and tiles.splitk > 1)
    return itemsize == 2 and large and tiles.cta.k * itemsize == HOPPER_TIE_K_BYTES


def hopper_tiles(problem: MatmulProblem, device: Device) -> HopperTiles:
    """nvFuser's exhaustive tile search over the tiles the hopper scheduler's rules allow with
    nvFuser's minimum of stages (3, or the K stages per SM, but what the kernel needs at
    least) in shared memory beside the staged epilogue; past one wave the widths between
    (``HOPPER_FILL_N``) and, for 16-bit operands, tiles of 256 rows (``HOPPER_TALL_N``)."""
    return _hopper_tiles(Asker(scheduler_object("hopper"), problem, device))


def _hopper_tiles(ask: Asker) -> HopperTiles:
    problem, device = ask.problem, ask.device
    if streams_weight(problem) and (narrow := narrow_streaming_tiles(ask)) is not None:
        return narrow
    if streams_weight(problem) and problem.n > STREAMING_WARP_N // 2:
        best = _search_tiles(ask, ((1, 1),), (STREAMING_WARP_N,))
        if best is not None:
            if work_units(problem, best.cta, best.splitk) * SPLITK_MAX_FILL >= device.sm_count:
                return best
    wide = problem.operand_dtype.itemsize >= 2
    grids = HOPPER_WARP_GRIDS if wide else NVFUSER_WARP_GRIDS
    best = _search_tiles(ask, grids, HOPPER_INSTR_N)
    units = work_units(problem, best.cta, best.splitk) if best is not None else 0
    if units > device.sm_count:  # the last of several waves: fill it
        best = _search_tiles(ask, grids, HOPPER_INSTR_N + HOPPER_FILL_N) or best
        if wide and best is not None:
            best = _tall_tiles(ask, best)
    if best is None:
        tile = least_k_cta(ask, HOPPER_FALLBACK.m, HOPPER_FALLBACK.n)
        return HopperTiles(tile, tile, ask.instruction(HOPPER_ROWS, tile.n), 0, 0)
    return best


def _tall_tiles(ask: Asker, best: HopperTiles) -> HopperTiles:
    """*best*, or the best-scored tile of two consumers of ``HOPPER_TALL_N`` 128-row warp
    tiles where an SM computes fewer outputs over its whole waves (``_sm_outputs``)."""
    tall = _search_tiles(ask, ((2, 1),), HOPPER_TALL_N, rows=2 * HOPPER_ROWS)
    if tall is None or _sm_outputs(ask, tall) >= _sm_outputs(ask, best):
        return best
    return tall


def _sm_outputs(ask: Asker, tiles: HopperTiles) -> int:
    """Outputs an SM computes over the whole waves of *tiles*' work units."""
    waves = whole_waves(ask.problem, ask.device, tiles.cta, tiles.splitk)
    return waves * tiles.cta.m * tiles.cta.n


def _search_tiles(
    ask: Asker,
    grids: tuple[tuple[int, int], ...],
    widths: tuple[int, ...],
    rows: int = HOPPER_ROWS,
) -> HopperTiles | None:
    """The best-scored legal tile of *grids* consumer warp groups of warp tiles of *rows* rows
    and *widths* columns, each with its split."""
    best: HopperTiles | None = None
    tied = False  # the best won a tie of depths that nvFuser's order gives the deeper K
    for cta_k in HOPPER_CTA_K:
        for rm, rn in grids:
            for instr_n in widths:
                cta = TileShape(rows * rm, instr_n * rn, cta_k)
                warp = TileShape(rows, instr_n, cta_k)
                splitk = hopper_splitk(ask.problem, ask.device, cta)
                candidate = scored_tile(ask, cta, warp, splitk)
                if candidate is not None and _hopper_better(candidate, best, ask.problem):
                    tied = (
                        best is not None
                        and _depth_tie(candidate, best, ask.problem)
                        and not _nvfuser_better(candidate, best)
                    )
                    best = candidate
    # the deepest ring: the bytes in flight of the deeper K's (not for split units: 8 stages
    # ran 2-17% slower than 6 on three of four deep-K rows in run 146 and 4-5% faster in runs
    # 144 and 147, BENCHMARKS.md; unsettled, they keep 6)
    if best is not None and tied and best.splitk == 1:
        return best._replace(deep=True)
    return best


def hopper_cluster(problem: MatmulProblem, device: Device, params: MatmulParams) -> tuple[int, int]:
    """CTA pairs along M (``(2, 1)``) when the grid runs at least HOPPER_CLUSTER_MIN_WAVES
    waves of tiles or one wave of 64-row 16-bit tiles whose operands' row pitch is no
    multiple of HOPPER_PAIR_PITCH bytes, each unit's main loop HOPPER_CLUSTER_MIN_K_TILES K tiles or
    more, and the scheduler's rules allow the pair; one CTA per cluster otherwise, and for
    block-scaled chunks and stages of two scale blocks (``BLOCK_PAIR_TILE``)."""
    return _hopper_cluster(Asker(scheduler_object("hopper"), problem, device), params)


def _hopper_cluster(ask: Asker, params: MatmulParams) -> tuple[int, int]:
    problem, device = ask.problem, ask.device
    if problem.block_scaled and (
        several_scale_blocks(params.warp_tile.n) or params.cta_tile.k > SCALE_BLOCK
    ):
        return (1, 1)  # chunks (``BLOCK_PAIR_TILE``), and two blocks a stage: never timed paired
    m_tiles, n_tiles = tile_grid(problem, params.cta_tile)
    waves = problem.batch * m_tiles * n_tiles / device.sm_count
    k_tiles = ceil_div(ceil_div(problem.k, params.splitk_factor), params.cta_tile.k)
    grid = waves >= HOPPER_CLUSTER_MIN_WAVES or _odd_pitch_wave(problem, params, waves)
    if m_tiles >= 2 and k_tiles >= HOPPER_CLUSTER_MIN_K_TILES and grid:
        if ask.allows(params.with_overrides(cluster_dims=CTA_PAIR), ("cluster_dims",)):
            return CTA_PAIR
    return (1, 1)


def _odd_pitch_wave(problem: MatmulProblem, params: MatmulParams, waves: float) -> bool:
    """One wave of unsplit 64-row 16-bit tiles of one product whose A's or B's row pitch is no
    multiple of HOPPER_PAIR_PITCH bytes (batches were not timed)."""
    rows = (
        problem.k if problem.a_k_inner else problem.m,
        problem.k if problem.b_k_inner else problem.n,
    )
    size = problem.operand_dtype.itemsize
    odd = any(row * size % HOPPER_PAIR_PITCH for row in rows)
    one_wave = waves <= 1 and params.splitk_factor == 1 and problem.batch == 1
    return odd and one_wave and size == 2 and params.cta_tile.m == HOPPER_ROWS


def hopper_swizzle(problem: MatmulProblem, device: Device, params: MatmulParams) -> int:
    """``SWIZZLE`` where the other axis has two groups of work units or more and the operand
    the tile order walks whole (A for column_major) is over 1 / ``HOPPER_SWIZZLE_L2_SHARE`` of
    L2, alone or, where a group's wave walks fewer of its tiles than the plain order's, with
    the output a wave writes; else 1 (and 1 where L2's size is unknown)."""
    m_tiles, n_tiles = tile_grid(problem, params.cta_tile)
    cluster_m, cluster_n = params.cluster_dims
    column = params.cta_order is CtaOrder.column_major
    walked = (problem.m if column else problem.n) * problem.k * problem.operand_dtype.itemsize
    wave = min(device.sm_count, problem.batch * m_tiles * n_tiles)
    written = wave * params.cta_tile.m * params.cta_tile.n * problem.output_dtype.itemsize
    stepped = ceil_div(n_tiles, cluster_n) if column else ceil_div(m_tiles, cluster_m)
    walked_tiles, group_width = (m_tiles, cluster_n) if column else (n_tiles, cluster_m)
    narrows = walked_tiles * group_width * SWIZZLE > wave
    share = device.l2_bytes / HOPPER_SWIZZLE_L2_SHARE
    spills = 0 < share < walked or (narrows and 0 < share < walked + written)
    return SWIZZLE if spills and stepped >= 2 * SWIZZLE else 1


def hopper_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default Hopper parameters: the transposed product of a weight-streaming problem
    (``swaps_operands``), or its narrow tiles (``STREAMING_NARROW_N``), or block-scaled tiles
    in pairs where they fill the last wave better (``BLOCK_PAIR_TILE``); otherwise persistent,
    warp-specialized, TMA-loaded, K split where a deep K meets few tiles (``hopper_splitk``),
    CTA pairs on large grids (``hopper_cluster``), the tile order grouped where a wave would
    spill L2 (``hopper_swizzle``), the epilogue staged through shared memory, stages filling
    it up to 6 (4 block-scaled; the deepest ring up to 8 for the narrow tiles and the 64-deep
    ties) and the K loops a CTA runs."""
    if problem.horizontal > 1:
        return hopper_horizontal_params(problem, device)
    ask = Asker(scheduler_object("hopper"), problem, device)
    tiles = _block_pair_tiles(ask, _hopper_tiles(ask))
    swaps = swaps_operands(problem, device, unswapped_splits=tiles.splitk > 1)
    if swaps and (swapped := swapped_params(ask)) is not None:
        return swapped
    m_tiles, n_tiles = tile_grid(problem, tiles.cta)
    params = hopper_candidate(ask, tiles.cta, tiles.warp, ask.fewest_stages())
    params = params.with_overrides(
        cta_order=cta_order_for(m_tiles, n_tiles), splitk_factor=tiles.splitk
    )
    params = params.with_overrides(cluster_dims=_hopper_cluster(ask, params))
    params = params.with_overrides(grid_swizzle_factor=hopper_swizzle(problem, device, params))
    units_per_cta = whole_waves(problem, device, tiles.cta, tiles.splitk)
    k_loops = ceil_div(ceil_div(problem.k, tiles.cta.k), tiles.splitk) * units_per_cta
    cap = BLOCK_SCALED_MAX_STAGES if problem.block_scaled else HOPPER_MAX_STAGES
    return params.with_overrides(stages=_ring(ask, params, k_loops, deep=tiles.deep, cap=cap))


def _block_pair_tiles(ask: Asker, tiles: HopperTiles) -> HopperTiles:
    """*tiles*, or for block-scaled chunks past one wave ``BLOCK_PAIR_TILE`` where it fills the
    last wave by ``BLOCK_PAIR_FILL`` better and runs in CTA pairs (``_hopper_cluster``)."""
    problem, device = ask.problem, ask.device
    if not (problem.block_scaled and several_scale_blocks(tiles.warp.n) and tiles.splitk == 1):
        return tiles
    cta, warp = BLOCK_PAIR_TILE
    units, pair_units = work_units(problem, tiles.cta), work_units(problem, cta)
    gain = _wave_fill(pair_units, device) - _wave_fill(units, device)
    if units <= device.sm_count or gain < BLOCK_PAIR_FILL:
        return tiles
    pair = scored_tile(ask, cta, warp)
    if pair is None:
        return tiles
    params = hopper_candidate(ask, cta, warp, ask.fewest_stages())
    return pair if _hopper_cluster(ask, params) == CTA_PAIR else tiles


def _wave_fill(units: int, device: Device) -> float:
    """The share of the SMs' unit slots over the waves *units* take that holds a unit."""
    return units / (ceil_div(units, device.sm_count) * device.sm_count)


def hopper_horizontal_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """A horizontal fusion of h matmuls: one wgmma of N = h x the output tile's n per 64 rows,
    the widest output tile up to 128 columns that the rules allow, preferring one whose
    products' chunks the staged epilogue takes (the register epilogue is ~3x slower per tile:
    run 37), no split-K or cluster (docs/decisions.md, "Horizontal fusion"). Ping-pong
    consumers on 64-row tiles where every CTA gets two or more (their epilogues overlap the
    other's main loop: 1.02-1.04x faster than cooperative on the bf16/fp16 llama FFN, run 38);
    else two consumers along M (one when M fits 64 rows), persistent. Products whose rows fit
    one 64-row tile take at most ``HORIZONTAL_STREAMING_N`` columns each and the deepest ring
    of ``STREAMING_STAGES``."""
    ask = Asker(scheduler_object("hopper"), problem, device)
    h = problem.horizontal
    streams = problem.m <= HOPPER_ROWS

    def shaped(n_out: int) -> MatmulParams:
        n_tiles = ceil_div(problem.n, n_out)
        units = problem.batch * ceil_div(problem.m, HOPPER_ROWS) * n_tiles
        pingpong = units >= 2 * device.sm_count and not streams  # (streaming: as measured)
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
    for n_out in range(HORIZONTAL_STREAMING_N if streams else HORIZONTAL_MAX_N, 0, -1):
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
    ring = _ring(ask, params, k_loops, deep=streams, cap=HOPPER_MAX_STAGES)
    return params.with_overrides(stages=ring)


def _ring(ask: Asker, params: MatmulParams, k_loops: int, *, deep: bool, cap: int) -> int:
    """The stages of *params*: where *deep* (weight streaming), the deepest of
    ``STREAMING_STAGES`` that the *k_loops* K tiles a CTA runs fill; else, or where none fits,
    the most up to *cap* and *k_loops*."""
    rings = [s for s in STREAMING_STAGES if s <= k_loops] if deep else []
    stages = ask.deepest(params, rings)
    return ask.most_stages(params, min(cap, k_loops)) if stages is None else stages
