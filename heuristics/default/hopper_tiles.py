"""A hopper tile: how the default scores it (the bytes its SMs load, a split's partials) and
whether the scheduler's rules take it with nvFuser's minimum of stages."""

from __future__ import annotations

from typing import Final, NamedTuple

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape, TilingStrategy

from .asker import Asker
from .grid import ceil_div, whole_waves

__all__ = [
    "HOPPER_MIN_STAGES", "HOPPER_ROWS", "HOPPER_SPLITK_MAX", "HOPPER_SPLITK_MIN_DEPTH",
    "PARTIAL_BYTES", "SPLIT_RIVAL", "SPLIT_RIVAL_ROW_BYTES", "SPLIT_TILE_INTENSITY", "TILES",
    "HopperTiles", "hopper_candidate", "hopper_tile_score", "scored_tile",
]  # fmt: skip

HOPPER_ROWS: Final = 64  # rows of the warp tiles searched: one m64nNk16 wgmma row block
HOPPER_MIN_STAGES: Final = 3  # nvFuser: a tile must fit this many stages (or its K stages)
# Split-K on hopper: only where K is this many times the larger of M and N (a deep K keeps the
# split's float32 partials small beside the operands) and the tiles fill under a quarter of
# the SMs. On the H200 splitting cost 1.2-1.5x on M = 32-256 weight-streaming problems, paid
# 2.5-6x on four deep-K ones and cost 1.3x at 1536x1000x7168 (48 tiles split 2), BENCHMARKS.md
# runs 86-87; powers of two up to 32 (32 of 4 tiles beat 16 by 10% at 128x128x32768)
HOPPER_SPLITK_MIN_DEPTH: Final = 4
HOPPER_SPLITK_MAX: Final = 32
# ... and only where its units beat unsplit 64x128 tiles: fewer outputs each, more than 8 KiB of
# each operand row each (4096 of 16-bit K, 8192 of FP8), or more units. Split 128x256 tiles of
# at most 4096 of K a unit, as many units as 64x128 tiles, lost to them on six of the seven
# 16-bit shapes timed and tied on the seventh (2048x512x8192 35.9 -> 27.6 us, 768x1024x8192
# 32.0 -> 27.5; 1024x1024x16384 56.7-59.7 against 54.0-61.1; an H100, runs 342 and 344). At
# 8192 of K a unit the split won (3072x256x32768 103.4 against 111.2), and 128x192 split 4
# (fewer outputs a unit) won 4096x192x16384 by 1.8x. FP8 at 8192 of K a unit (8 KiB) lost as
# 16-bit at 4096: e4m3 2048x512x32768 128x256 split 4 64.1-65.8, unsplit 64x128x256 57.1-57.8
SPLIT_RIVAL: Final = TileShape(HOPPER_ROWS, 128, 128)  # the unsplit tiles a split must beat
SPLIT_RIVAL_ROW_BYTES: Final = 8192  # bytes of K a unit at or under which a split matching loses
# A split's float32 partial per element: 4 bytes written by the gemm and read by the reduce,
# weighed 4x the operand bytes, which stream from L2 under the wgmmas while neither crossing of
# a partial overlaps the tensor cores. Weighed 1x (8) the score chose 128x128 tiles in 32 splits
# at 256x256x16384 and 64x128 in 32 at 64x512x28672, where cuBLAS splits 64x64 tiles 6-8 ways
# (ncu, run 143); at 4x, 64x128 in 16 and 64x64 in 16: 12.7 -> 11.1 and 14.5 -> 11.4 us bf16,
# 12.8 -> 11.8 and 14.5 -> 11.3 fp16 (BENCHMARKS.md runs 144 and 146)
PARTIAL_BYTES: Final = 32
# A split unit's operand panels count at least its tile's outputs over SPLIT_TILE_INTENSITY a
# K element: past that many MACs per element loaded (the H100's wgmma rate over about 64 bytes
# of L2 a clock an SM, 16-bit or FP8 alike) its panels stream under the tensor cores and the
# unit takes the wgmmas' time whatever its bytes. Where a split fills one wave, 128x256 tiles
# then score as 128x128 tiles split half as often, and the halved partials decide:
# 512x512x65536 split 16 on 128x256 tiles 63.4-67.4 us, split 8 on 128x128 59.4 (cuBLAS's
# decomposition; cuBLAS 57.7-59.7; an H100, run 340). Unsplit tiles keep the bytes alone.
SPLIT_TILE_INTENSITY: Final = 64
TILES: Final = frozenset({"cta_tile", "warp_tile", "instruction_tile"})


class HopperTiles(NamedTuple):
    """One candidate of the Hopper tile search and how it scored."""

    cta: TileShape
    warp: TileShape
    instruction: TileShape
    score: int
    k_stages_per_sm: int
    splitk: int = 1
    deep: bool = False  # the ring: the deepest of STREAMING_STAGES, not up to HOPPER_MAX_STAGES


def hopper_tile_score(
    problem: MatmulProblem, device: Device, cta: TileShape, splitk: int = 1
) -> tuple[int, int]:
    """(bytes moved, K stages per SM) of a CTA tile split *splitk* ways; lower bytes win. The
    bytes are the operand panels the SMs load with wave quantization (split, at least the
    tile's wgmma time: ``SPLIT_TILE_INTENSITY``) plus, split, the float32 partials written and
    read back."""
    waves = whole_waves(problem, device, cta, splitk)
    k_tiles = ceil_div(ceil_div(problem.k, cta.k), splitk)
    edge = cta.m + cta.n  # the panel elements a K element of the tile loads
    if splitk > 1:
        edge = max(edge, cta.m * cta.n // SPLIT_TILE_INTENSITY)
    panels = waves * device.sm_count * k_tiles * edge * cta.k
    partials = problem.batch * problem.m * problem.n * splitk * PARTIAL_BYTES if splitk > 1 else 0
    return panels * problem.operand_dtype.itemsize + partials, k_tiles * waves


def hopper_candidate(ask: Asker, cta: TileShape, warp: TileShape, stages: int) -> MatmulParams:
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


def scored_tile(ask: Asker, cta: TileShape, warp: TileShape, splitk: int = 1) -> HopperTiles | None:
    """*cta* in consumers of *warp* tiles, split *splitk* ways (unsplit where the rules refuse
    the split), scored; None where the rules refuse the tiles with nvFuser's minimum of
    stages (``HOPPER_MIN_STAGES``, or the K stages per SM)."""
    problem, device = ask.problem, ask.device
    score, k_stages = hopper_tile_score(problem, device, cta, splitk)
    stages = max(ask.fewest_stages(), min(HOPPER_MIN_STAGES, k_stages))
    params = hopper_candidate(ask, cta, warp, stages)
    if not ask.allows(params, TILES | {"stages"}):
        return None
    if splitk > 1 and not ask.allows(
        params.with_overrides(splitk_factor=splitk), ("splitk_factor",)
    ):
        splitk = 1
        score, k_stages = hopper_tile_score(problem, device, cta)
    inst = ask.instruction(HOPPER_ROWS, warp.n)
    return HopperTiles(cta, warp, inst, score, k_stages, splitk)
