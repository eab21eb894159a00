"""How a hopper kernel cuts its work: wgmma and TMA units, consumer warpgroups and their
registers, block-scale sums, clusters. Facts of the hardware and of the generator, one place."""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd
from typing import Final, NamedTuple

from mmaplug.ir.dtypes import DType
from mmaplug.ir.ops import SCALE_BLOCK, several_scale_blocks

WARPGROUP: Final = 128
WGMMA_M: Final = 64  # rows of one wgmma (m64nNk16, m64nNk32 for FP8)
WGMMA_K_BYTES: Final = 32  # K bytes of one wgmma: 16 16-bit or 32 FP8 elements
MAX_WGMMA_N: Final = 256
MAX_TMA_BOX: Final = 256  # elements per TMA box dimension
MAX_CONSUMERS: Final = 2  # consumer warpgroups beside the producer (register budget)
# float32 accumulator registers per consumer thread: 160, two m64n160 wgmmas of a 128x160 warp
# tile, fit the consumers' 224-240 registers beside addressing. nvdisasm of the linked cubins
# (docs/decisions.md, "The two large rows under 0.93, ..."): no STL/LDL at 128x152 or 128x160,
# bare or with bias + GELU staged, alone, in pairs, 1x2 or 2x2 clusters, ping-pong, swapped or
# horizontal; FP8 per row with bias + GELU 2 STL; stream-K spills as it does at 128; 128x192
# with bias + GELU spills, so 192 stays out. cuBLAS runs such tiles where they make whole waves
MAX_ACCUMULATORS: Final = 160
MIN_STAGES: Final = 2  # the producer fills one stage while the consumers read another
SWIZZLE_BYTES: Final = 128  # one swizzle atom row: the contiguous extent of one TMA box
# 16-bit elements in a swizzle row: the MN extent of a box of an MN-major operand (only 16-bit
# operands are MN-major: FP8 wgmma reads K-major operands only); K boxes hold k_box(dtype)
BOX_INNER: Final = SWIZZLE_BYTES // 2
# a block-scaled K tile is one scale block, or two summed into two sets of partial sums (the
# first promoted while the second's wgmmas run)
BLOCK_CTA_KS: Final = (SCALE_BLOCK, 2 * SCALE_BLOCK)
# float32 sums a block-scaled consumer thread may hold (``block_sums``: accumulators and
# partial sums): 192 fit the 240 registers of consumers beside a lone producer, and the 232 of
# clusters along one axis (nvdisasm: no STL/LDL in 64x128 tiles of 256-deep stages, 64x160,
# 64x192 and 64x256 chunks in pairs or fours along M or N, since the warp-uniform warpgroup
# index; the pairs ran correct on the GPU, BENCHMARKS.md runs 275-278). Over 128, a 2x2 cluster's
# consumers spill (3-7 STL), and a cluster of splits leaves its consumers 224: there they run
# alone
BLOCK_SUMS: Final = 192
BLOCK_CLUSTER_SUMS: Final = 128
BLOCK_PAIR_CLUSTER: Final = (
    f"block scales with more than {BLOCK_CLUSTER_SUMS} sums a thread (accumulators and partial "
    "sums), which the consumers of a 2x2 cluster or of a cluster of splits spill: cluster_dims "
    "along one axis (2 or 4 CTAs along M or N) or (1, 1)"
)
# columns of each of the two sets of partial sums of a block-scaled warp tile wider than a
# scale block (64x256): one set's wgmmas run while the other's sums are promoted
BLOCK_CHUNK: Final = 64
# a block-scaled tile that straddles two blocks of B's scales is a multiple of these columns, so
# that its origin lies a multiple of 32 into a block: at most four promotions to generate
STRADDLE_UNIT: Final = 32
# the most CTAs of a cluster that sums its split-K partials in distributed shared memory: the
# portable cluster size (16 needs the non-portable attribute and fits fewer clusters per GPC)
MAX_REDUCE_CLUSTER: Final = 8
# CTAs of a cluster along M that share one B tile, or along N that share one A tile, each
# multicasting its part of the shared tile (1: no cluster)
MULTICAST_CLUSTERS: Final = (1, 2, 4)
# the cluster shapes (CTAs along M, along N) generated: none, 2 or 4 along one axis, or 2x2,
# whose CTAs share B's tile with the other CTA of their column and A's with that of their row
CLUSTER_SHAPES: Final = (
    *((m, 1) for m in MULTICAST_CLUSTERS),
    *((1, n) for n in MULTICAST_CLUSTERS[1:]),
    (2, 2),
)
# setmaxnreg (producer, consumers) for 1 producer + 2 consumer warpgroups, launched at 168
# registers a thread (64K / 384, rounded down to 8). setmaxnreg.inc takes registers only from
# the pool the CTA's own setmaxnreg.dec released, so each split frees exactly what it takes:
# (168 - 24) * 128 = (240 - 168) * 256 and (168 - 40) * 128 = (232 - 168) * 256. (Taking more
# than was freed waits forever: run 33 hung with 32 for the producer against 240.) ptxas
# allocates each role's code within its count: the consumers' widest epilogues (bias + GELU
# beside a residual) spill at 232, so 240 unless the producer needs more: a CTA pair's
# producer (multicast boxes, remote releases) spilled 164 bytes at 24 and fits 40; a cluster of
# splits' producer spilled 104-148 bytes at 24 and 8-32 at 40, and fits 56:
# (168 - 56) * 128 = (224 - 168) * 256.
REGISTER_SPLITS: Final = {"none": (24, 240), "pairs": (40, 232), "splits": (56, 224)}


def through_workspace(splitk: int, in_cluster: bool, streamk: bool = False) -> bool:
    """Whether *splitk* splits meet in the float32 workspace and the reduce kernel sums them:
    not in their cluster (*in_cluster*), nor in the kernel (*streamk*: the pieces of a tail
    tile)."""
    return splitk > 1 and not in_cluster and not streamk


def cluster_kind(pairs: bool, splits: bool) -> str:
    """The ``REGISTER_SPLITS`` key of a kernel in CTA *pairs*, in clusters of its *splits*, or
    neither."""
    return "splits" if splits else "pairs" if pairs else "none"


def wgmma_k(dtype: DType) -> int:
    """K of one wgmma for *dtype* operands: 16 (16-bit) or 32 (FP8), 32 bytes either way."""
    return WGMMA_K_BYTES // dtype.itemsize


def k_box(dtype: DType) -> int:
    """K elements of one TMA box of a K-major operand: one 128-byte swizzle row (64 16-bit or
    128 FP8 elements); cta_tile k is a whole number of them."""
    return SWIZZLE_BYTES // dtype.itemsize


def promoted_by_chunks(warp_n: int) -> bool:
    """Whether a block-scaled warp tile *warp_n* wide is several whole blocks of B's scales,
    so that its sums are promoted ``BLOCK_CHUNK`` columns at a time."""
    return several_scale_blocks(warp_n)


def straddles(warp_n: int) -> bool:
    """Whether a block-scaled tile of *warp_n* columns, one a CTA, may straddle two blocks of
    B's scales: a multiple of ``STRADDLE_UNIT`` neither dividing a block nor whole blocks,
    whose columns, from an origin that is a multiple of *warp_n*, meet at most two blocks
    (DeepGEMM's 128x160 tiles). Its sums are promoted in one pass, the columns before the
    block's end with the first block's scale (``wgmma_promote_split``)."""
    if SCALE_BLOCK % warp_n == 0 or warp_n % SCALE_BLOCK == 0 or warp_n % STRADDLE_UNIT:
        return False
    return SCALE_BLOCK - gcd(warp_n, SCALE_BLOCK) + warp_n <= 2 * SCALE_BLOCK


def straddle_cuts(warp_n: int) -> tuple[int, ...]:
    """The columns a straddling tile (``straddles``) may hold before its first block of B's
    scales ends, where that is fewer than its own: one promotion each."""
    step = gcd(warp_n, SCALE_BLOCK)
    return tuple(c for c in range(SCALE_BLOCK, 0, -step) if c < warp_n)


# the widths that straddle (named by the rules' messages)
STRADDLING_WIDTHS: Final = tuple(
    n for n in range(STRADDLE_UNIT, MAX_WGMMA_N + 1, STRADDLE_UNIT) if straddles(n)
)


def promoted_columns(warp_n: int) -> int:
    """Columns of a block-scaled consumer's partial sums: its whole tile, or two sets of
    ``BLOCK_CHUNK`` columns (promoted in turn) where it is promoted by chunks."""
    return 2 * BLOCK_CHUNK if promoted_by_chunks(warp_n) else warp_n


def block_sums(warp_tile: tuple[int, int, int], cta_k: int) -> int:
    """float32 sums a block-scaled consumer thread holds: its accumulators and, for each scale
    block of a stage's K, partial sums of ``promoted_columns``."""
    wm, wn, _ = warp_tile
    return wm * (wn + cta_k // SCALE_BLOCK * promoted_columns(wn)) // WARPGROUP


def block_cluster_spills(sums: int, cluster_m: int, cluster_n: int, split_cluster: bool) -> bool:
    """Whether a block-scaled consumer holding *sums* float32 sums spills in its cluster
    (``BLOCK_PAIR_CLUSTER``): over ``BLOCK_CLUSTER_SUMS`` in a 2x2 cluster or one of splits."""
    two_axes = cluster_m > 1 and cluster_n > 1
    return sums > BLOCK_CLUSTER_SUMS and (two_axes or split_cluster)


def block_columns(n_out: int, warp_n: int) -> bool:
    """The columns of every set of a block-scaled tile's partial sums lie within one 128-column
    block of B's scales, or in two, promoted in one pass: the tile's n divides 128 (one block
    of B's scales a tile), or the tile is one warp tile wide of whole blocks (promoted by
    chunks, each chunk's block its own) or straddling two (``straddles``)."""
    whole = n_out == warp_n and (warp_n % SCALE_BLOCK == 0 or straddles(warp_n))
    return n_out > 0 and (SCALE_BLOCK % n_out == 0 or whole)


def block_tile(cta_k: int, n_out: int, warp_n: int) -> bool:
    """A block-scaled kernel's CTA tile: one or two scale blocks of K per stage (one where it
    straddles blocks of B's scales), its columns as ``block_columns`` allows."""
    if straddles(warp_n) and n_out == warp_n and cta_k != SCALE_BLOCK:
        return False
    return cta_k in BLOCK_CTA_KS and block_columns(n_out, warp_n)


def consumer_count(
    cta_tile: tuple[int, int, int], warp_tile: tuple[int, int, int], pingpong: bool
) -> int:
    """Consumer warpgroups: the CTA tile's grid of warp tiles, or two taking turns (ping-pong)."""
    if pingpong:
        return 2
    return (cta_tile[0] // warp_tile[0]) * (cta_tile[1] // warp_tile[1])


def kernel_threads(consumers: int) -> int:
    """Threads per CTA: one producer warpgroup and *consumers* consumer warpgroups."""
    return WARPGROUP * (1 + consumers)


def horizontal_unit(b_k_inner: bool) -> int:
    """What each product's share of a horizontal cta_tile n must be a multiple of: whole
    8-row swizzle groups of a K-major B, 64-column swizzle rows of an N-major one."""
    return 8 if b_k_inner else BOX_INNER


class SharedTile(NamedTuple):
    """A tile a multicast cluster shares, and what its rows must be a multiple of."""

    operand: str  # "A" or "B"
    dim: str  # the cta_tile extent of its rows: "m" (A's) or "n" (B's)
    rows: int
    ctas: int  # the CTAs sharing it
    unit: int


def shared_tiles(
    cluster: Sequence[int], cta: Sequence[int], a_k_inner: bool, b_k_inner: bool
) -> list[SharedTile]:
    """The tiles a cluster of (m, n) CTAs shares: B's (cta_tile n rows) among the CTAs along
    M, A's (m rows) among those along N; both in a 2x2 cluster. Each of the c CTAs sharing a
    tile multicasts a 1/c part: whole 8-row groups of a K-major operand (16 rows for a pair) or
    64-element swizzle rows of an MN-major one (128 for a pair)."""
    shared = (("B", "n", cta[1], b_k_inner, cluster[0]), ("A", "m", cta[0], a_k_inner, cluster[1]))
    return [
        SharedTile(operand, dim, rows, ctas, (8 if k_inner else BOX_INNER) * ctas)
        for operand, dim, rows, k_inner, ctas in shared
        if ctas > 1
    ]
