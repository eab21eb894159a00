"""Weight-streaming problems on hopper (a few activation rows against a wide weight, whose bytes
are the problem's time): the operand swap, the narrow weight tiles and their K splits."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape, TilingStrategy
from mmaplug.planning.scheduler import violations

from .asker import Asker
from .grid import SPLITK_MAX_FILL, ceil_div, split_to_one_wave
from .hopper_tiles import HOPPER_ROWS, HOPPER_SPLITK_MAX, HopperTiles, scored_tile

__all__ = [
    "STREAMING_WARP_N", "narrow_streaming_tiles", "streaming_split", "streams_weight",
    "swapped_params", "swaps_operands", "wide_weight",
]  # fmt: skip

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
# ... and a batch of products of at most SWAP_ANY_WAVES_M rows over 16-bit weight rows of at
# most SWAP_BATCH_ROW_BYTES, on more tiles than SWAP_BATCH_WAVES waves of the SMs (which the
# decode kernel hands over): 128 weight rows a tile on two consumers, the persistent ring
# streaming across the batch's tiles where each decode CTA sets up for one K chunk (H100
# runs 338-339, graph replays, us, decode -> this: 32 x 1x4096x128 9.60-9.76 -> 7.68-7.87,
# 32 x 8x4096x128 11.27-11.49 -> 7.68-7.74, 32 x 4x4096x128 10.91 -> 7.62, 16 x 1x4096x128
# 5.50 -> 5.34, 64 x 1x2048x128 9.89 -> 7.62, fp16 32 x 1x4096x128 9.86 -> 7.68; 32 x
# 16x4096x128, hopper's unswapped 64x256 tiles before, 10.31 -> 8.67; cuBLAS 5.0-7.5. 64-row
# tiles of 128 of K took 11.6, of 64 of K 8.3-8.4; at 512-byte rows this tied the decode
# kernel, 24.61 against 24.80)
SWAP_BATCH_ROW_BYTES: Final = 256
SWAP_BATCH_WAVES: Final = 2  # more tiles than this many waves (run 340: on 2 decode led,
# 8 x 1x4096x128 3.7 against 4.1 us, 5 x 1x4096x128 3.2 against 4.1; on 4, 16 x 8x4096x128
# 6.2 -> 5.2)
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


def streams_weight(problem: MatmulProblem) -> bool:
    """One row block of activations against one wide weight (``wide_weight``): the weight's
    bytes, read once whatever the tile, are the problem's time."""
    return problem.m <= HOPPER_ROWS and wide_weight(problem)


def wide_weight(problem: MatmulProblem) -> bool:
    """One batch, its weight at least ``STREAMING_MIN_N_PER_M`` times as wide as its rows."""
    return problem.batch == 1 and problem.n >= STREAMING_MIN_N_PER_M * problem.m


def streaming_split(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """``split_to_one_wave`` of *cta*'s tiles of a weight-streaming problem, up to
    HOPPER_SPLITK_MAX, each split streaming STREAMING_SPLIT_MIN_BYTES of every weight row at
    least (*problem* as the kernel computes it: transposed for the swap, K alike)."""
    most = max(1, problem.k * problem.operand_dtype.itemsize // STREAMING_SPLIT_MIN_BYTES)
    return split_to_one_wave(problem, device, cta, min(most, HOPPER_SPLITK_MAX))


def narrow_streaming_tiles(ask: Asker) -> HopperTiles | None:
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
        if (legal := scored_tile(ask, cta, cta)) is not None:
            return legal._replace(deep=True)
    return None


def swaps_operands(problem: MatmulProblem, device: Device, *, unswapped_splits: bool) -> bool:
    """One matmul of at most ``SWAP_MAX_M`` activation rows for its operand type (at most
    ``SWAP_OVER_SPLIT_M`` where the unswapped tiles would split a K of at most
    ``STREAMING_UNSPLIT_MAX_K``: *unswapped_splits*): a
    weight-streaming one (``streams_weight``) whose 64-row weight tiles fill a quarter of the
    SMs or more (no split) and one wave at most, or any of one batch and at most
    ``SWAP_ANY_WAVES_M`` rows (the decode kernel's, which hopper plans where decode hands
    them over or is blocked); or one of 65 to ``SWAP_WIDE_M`` rows against a weight 16 times
    as wide, under the same fill; or a batch of short weight rows (``short_batched_rows``):
    the default computes its transposed product."""
    tiles = ceil_div(problem.n, HOPPER_ROWS)
    fills = device.sm_count < tiles * SPLITK_MAX_FILL and tiles <= device.sm_count
    decode_rows = problem.batch == 1 and problem.m <= SWAP_ANY_WAVES_M
    size = problem.operand_dtype.itemsize
    most = SWAP_MAX_M.get(size, 0)
    if unswapped_splits and problem.k <= STREAMING_UNSPLIT_MAX_K:
        most = max(most, SWAP_OVER_SPLIT_M.get(size, 0))
    few = problem.m <= most
    plain = problem.horizontal == 1 and not problem.block_scaled
    wide_rows = HOPPER_ROWS < problem.m <= SWAP_WIDE_M.get(size, 0) and wide_weight(problem)
    streams = decode_rows or (streams_weight(problem) and fills)
    return plain and (
        (few and streams) or (wide_rows and fills) or short_batched_rows(problem, device)
    )


def short_batched_rows(problem: MatmulProblem, device: Device) -> bool:
    """A batch of 16-bit products of at most ``SWAP_ANY_WAVES_M`` rows over weight rows of at
    most ``SWAP_BATCH_ROW_BYTES``, whose tiles of two consumers (128 weight rows) are more
    than ``SWAP_BATCH_WAVES`` waves of the SMs: swapped on those tiles."""
    size = problem.operand_dtype.itemsize
    short = problem.k * size <= SWAP_BATCH_ROW_BYTES
    tiles = problem.batch * ceil_div(problem.n, 2 * HOPPER_ROWS)
    many = tiles > SWAP_BATCH_WAVES * device.sm_count
    return problem.batch > 1 and size == 2 and problem.m <= SWAP_ANY_WAVES_M and short and many


def swapped_params(ask: Asker) -> MatmulParams | None:
    """The transposed product's parameters (see ``SWAP_MAX_M``; two consumers for
    ``short_batched_rows``): the deepest ring of ``STREAMING_STAGES`` that fits, the epilogue
    staged through shared memory where that ring is at most one stage shallower than the one
    beside the epilogue from registers; None where the scheduler allows none of them. Staged,
    the output's rows go out 8 bytes a store, not 2 (H100 runs 333-334, in turn with cuBLAS:
    bf16 96x6144x4096 23.7 -> 22.2 us, fp16 with bias + GELU 36.4 -> 23.0, bf16 32x4096x4096
    10.4 -> 9.8, e4m3 32x6144x4096 9.4 -> 8.3, 112x8192x8192 on 4 stages against 5 51.5 ->
    51.0; at 48x4096x14336 6 staged stages against 8 ran 43.4 against 43.0, 7 staged 42.8: 7
    stays the plugin harness's sentinel)."""
    problem = ask.problem
    cols = 8 * ceil_div(problem.m, 8)  # the activation rows, the wgmma's N
    depth = STREAMING_STAGE_K_BYTES // problem.operand_dtype.itemsize
    warp = TileShape(HOPPER_ROWS, cols, depth)
    cta = (
        TileShape(2 * HOPPER_ROWS, cols, depth) if short_batched_rows(problem, ask.device) else warp
    )
    split = streaming_split(problem.transposed(), ask.device, cta)
    params = ask.params(
        cta_tile=cta,
        warp_tile=warp,
        instruction_tile=ask.instruction(HOPPER_ROWS, cols),
        stages=ask.fewest_stages(),
        splitk_factor=split,
        tiling_strategy=TilingStrategy.persistent,
        swap_ab=True,
    )

    def deepest(staged: bool) -> MatmulParams | None:
        for stages in STREAMING_STAGES:
            deeper = params.with_overrides(stages=stages, use_smem_epilogue=staged)
            if not violations(ask.scheduler, deeper, problem, ask.device):
                return deeper
        return None

    staged, plain = deepest(True), deepest(False)
    if staged is not None and (plain is None or staged.stages >= plain.stages - 1):
        return staged
    return plain
