"""What a generated Hopper kernel is specialised on: tiles, roles, shared-memory layout, ABI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.emitter import cast_epilogue, epilogue_params, tile3
from mmaplug.codegen.grid import grid_problems
from mmaplug.codegen.kernel_config import config_label
from mmaplug.ir.dtypes import DType
from mmaplug.ir.ops import SCALE_BLOCK

WARPGROUP: Final = 128
WGMMA_M: Final = 64  # rows of one wgmma (m64nNk16, m64nNk32 for FP8)
WGMMA_K_BYTES: Final = 32  # K bytes of one wgmma: 16 16-bit or 32 FP8 elements
MAX_WGMMA_N: Final = 256
MAX_TMA_BOX: Final = 256  # elements per TMA box dimension
MAX_CONSUMERS: Final = 2  # consumer warpgroups beside the producer (register budget)
MAX_ACCUMULATORS: Final = 128  # float32 accumulator registers per consumer thread
MIN_STAGES: Final = 2  # the producer fills one stage while the consumers read another
SWIZZLE_BYTES: Final = 128  # one swizzle atom row: the contiguous extent of one TMA box
# 16-bit elements in a swizzle row: the MN extent of a box of an MN-major operand (only 16-bit
# operands are MN-major: FP8 wgmma reads K-major operands only); K boxes hold k_box(dtype)
BOX_INNER: Final = SWIZZLE_BYTES // 2
# a block-scaled K tile is one scale block, or two summed into two sets of partial sums (the
# first promoted while the second's wgmmas run)
BLOCK_CTA_KS: Final = (SCALE_BLOCK, 2 * SCALE_BLOCK)
# float32 sums a block-scaled consumer thread may hold (``block_sums``: accumulators and
# partial sums): 192 fit the 240 registers of consumers beside a lone producer; the 232 of a
# cluster's consumers spilled them (ptxas: 20 bytes, 64x128 tiles of 256-deep stages), so
# clusters take 128
BLOCK_SUMS: Final = 192
BLOCK_CLUSTER_SUMS: Final = 128
BLOCK_PAIR_CLUSTER: Final = (
    f"block scales with more than {BLOCK_CLUSTER_SUMS} sums a thread (accumulators and partial "
    "sums), which a cluster's 232-register consumers spill: cluster_dims (1, 1)"
)
# columns of each of the two sets of partial sums of a block-scaled warp tile wider than a
# scale block (64x256): one set's wgmmas run while the other's sums are promoted
BLOCK_CHUNK: Final = 64
SMEM_ALIGN: Final = 1024  # a 128B-swizzle pattern repeats every 1024 bytes
MBARRIER_BYTES: Final = 8
VECTOR_ALIGN: Final = 16  # packed epilogue stores: 16-byte vectors
STAGED_ROWS: Final = 64  # rows a smem epilogue stages at a time: one wgmma fragment block
# N-only epilogue inputs the packed epilogue stages in shared memory, a float32 row of the
# consumer's columns each: a bias, and FP8's per-column scale of B beside it (run 137: the
# bias loaded from global memory every step cost the per-row FP8 4096^3 kernel ~5%)
COLUMN_ROWS: Final = 2
# the most CTAs of a cluster that sums its split-K partials in distributed shared memory: the
# portable cluster size (16 needs the non-portable attribute and fits fewer clusters per GPC)
MAX_REDUCE_CLUSTER: Final = 8
# CTAs of a cluster along M that share one B tile, or along N that share one A tile, each
# multicasting its part of the shared tile (1: no cluster)
MULTICAST_CLUSTERS: Final = (1, 2, 4)
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


# int64 parameters of the main kernel, in order
SHAPE_PARAMS: Final = ("M", "N", "K", "batch", "a_batched", "b_batched")
GRID_PARAMS: Final = ("k_split", "tiles_m", "tiles_n", "units")
# a block-scaled kernel's scales (float32 arrays) and their element strides: A's [M, K blocks]
# by row and block, B's [K blocks, N blocks] by K block and N block
SCALE_PARAMS: Final = ("sfa", "sfb")
SCALE_STRIDES: Final = ("sfa_m", "sfa_k", "sfb_k", "sfb_n")


@attrs.frozen(kw_only=True)
class HopperKernelConfig:
    """Everything the generated wgmma kernel is specialised on (hashable: the build-cache key).

    The CTA tile is split over a grid of consumer warpgroups, each computing a ``warp_tile``
    (``wm/64`` wgmma row blocks of ``m64 n{wn} k16``); one producer warpgroup issues the TMA
    loads.

    ``block_scaled``: each ``SCALE_BLOCK`` of K is summed into fresh partial sums, which are
    scaled by A's row scales and B's block scale and added to the float32 accumulators in
    registers (the promotion DeepGEMM does every 128 of K); a K tile is one block, or two whose
    first is promoted while the second's wgmmas run. The kernel takes ``sfa``/``sfb`` and their
    strides.

    ``cluster_m`` / ``cluster_n`` c > 1: clusters of c CTAs along M share one B tile, or along
    N one A tile; each loads a 1/c part of it and multicasts it into every CTA of the cluster,
    and a stage is refilled once all of their consumers released it (``multicast``).

    ``horizontal`` h > 1: h B operands (one tensor map each) share A; a stage holds their tiles
    stacked along N, so ``cta_tile`` n is the wgmma's N = h x the output tile's n (``n_out``),
    and accumulator column ``c`` of product ``j`` is column ``j * n_out + c``.

    ``swap_ab``: the kernel computes the transposed product (its A the problem's B, its M the
    problem's N; ``a_k_inner``, the tiles and the shape arguments are the kernel's). Its
    register epilogue binds the element's ``row`` to the kernel's column and ``col`` to its
    row, so the epilogue program, its strides and the split-K partials stay the problem's.

    ``splitk_cluster``: the ``splitk`` CTAs of one tile are one cluster (rank = split); each
    writes its float32 partial tile to its shared memory, and each sums a ``1/splitk`` slice of
    the tile over the cluster's partials (distributed shared memory) and applies the epilogue
    there: no workspace, no second kernel.

    ``streamk`` (stream-K): the tiles left for a last, partly filled wave of the persistent
    CTAs are cut along K into ``splitk`` pieces, which the CTAs take before the whole tiles. Each
    piece's consumers store their float32 accumulators to the workspace and count the piece
    done on the tile's counter; the consumers that count the last piece add every piece's
    partial sums, in piece order, and run the epilogue (``streamk_codegen``). No second kernel.
    """

    operand_dtype: DType = DType.float16
    a_k_inner: bool = True
    b_k_inner: bool = True
    cta_tile: tuple[int, int, int] = attrs.field(default=(128, 256, 64), converter=tile3)
    warp_tile: tuple[int, int, int] = attrs.field(default=(64, 256, 64), converter=tile3)
    stages: int = 4
    splitk: int = 1
    cta_order: str = "row_major"
    grid_swizzle: int = 1
    smem_epilogue: bool = False
    packed_stores: bool = False
    tma_stores: bool = False
    pingpong: bool = False
    cluster_m: int = 1
    cluster_n: int = 1
    horizontal: int = 1
    block_scaled: bool = False
    swap_ab: bool = False
    splitk_cluster: bool = False
    streamk: bool = False
    epilogue: EpilogueProgram = attrs.field(factory=cast_epilogue)

    def __attrs_post_init__(self) -> None:
        problems = config_problems(self)
        if problems:
            raise ValueError("invalid HopperKernelConfig: " + "; ".join(problems))

    @property
    def multicast(self) -> int:
        """CTAs sharing a multicast tile: a cluster along M (of B) or along N (of A), or 1."""
        return self.cluster_m * self.cluster_n

    def sharing(self, operand: str) -> int:
        """CTAs sharing the tile of *operand* (``"a"`` or ``"b"``): a cluster along N shares
        A's, one along M B's; 1 where the tile is this CTA's alone."""
        return self.cluster_n if operand == "a" else self.cluster_m

    @property
    def cluster(self) -> int:
        """CTAs of a cluster: those sharing a multicast tile, the splits of a tile, or 1."""
        return self.splitk if self.splitk_cluster else self.multicast

    @property
    def workspace_splitk(self) -> bool:
        """Split-K through the float32 workspace and the reduce kernel."""
        return through_workspace(self.splitk, self.splitk_cluster, self.streamk)

    @property
    def tma_storable(self) -> bool:
        """Whether the epilogue's chunks can leave by TMA stores at all (``tma_stores``): packed
        into shared memory, and no split-K workspace (whose partials the reduce kernel reads)."""
        return self.packed_stores and not self.workspace_splitk

    @property
    def n_out(self) -> int:
        """Output columns of a CTA tile: cta_tile n, or its share per product (horizontal)."""
        return self.cta_tile[1] // self.horizontal

    @property
    def consumer_grid(self) -> tuple[int, int]:
        """(consumer warpgroups along M, along N) sharing one tile (1, 1 with ping-pong)."""
        return self.cta_tile[0] // self.warp_tile[0], self.cta_tile[1] // self.warp_tile[1]

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: the tile's grid, or two taking alternate tiles (ping-pong)."""
        return consumer_count(self.cta_tile, self.warp_tile, self.pingpong)

    @property
    def registers(self) -> tuple[int, int]:
        """setmaxnreg of the producer and of the consumers (see ``REGISTER_SPLITS``)."""
        return REGISTER_SPLITS[cluster_kind(self.multicast > 1, self.splitk_cluster)]

    @property
    def threads(self) -> int:
        """Threads per CTA: the producer warpgroup and the consumers."""
        return kernel_threads(self.consumers)

    @property
    def epilogue_chunk(self) -> int:
        """Columns of a consumer's tile staged through shared memory at a time."""
        return epilogue_chunk(self.warp_tile[1])

    @property
    def horizontal_chunk(self) -> int:
        """Output columns of each product staged at a time by a horizontal fusion's smem
        epilogue (0: none fits; see :func:`horizontal_chunk`)."""
        return horizontal_chunk(self.warp_tile[1], self.horizontal)

    @property
    def epilogue_stride(self) -> int:
        """Row stride (floats) of a staged chunk: 16-byte rows, 4 floats of padding."""
        return self.epilogue_chunk + 4

    @property
    def packed_buffers(self) -> int:
        """Chunk buffers per consumer for ``packed_stores``, of padded rows or with
        ``tma_stores`` TMA boxes (0: the outputs do not fit)."""
        fits = tma_buffers if self.tma_stores else packed_buffers
        return fits(self.epilogue_outputs, self.warp_tile[1])

    @property
    def tma_outputs(self) -> tuple[int, ...]:
        """The outputs the kernel stores by TMA, each through a map after the operands' in its
        ``maps``: the stored ones with ``tma_stores`` (not an amax scalar), else none."""
        return tuple(j for j, _ in self.epilogue.stored) if self.tma_stores else ()

    @property
    def epilogue_outputs(self) -> tuple[DType, ...]:
        """Dtypes of the arrays the main kernel's epilogue writes (see :func:`epilogue_outputs`)."""
        return epilogue_outputs(self.epilogue, self.workspace_splitk)

    @property
    def staging_bytes(self) -> int:
        """Shared memory of the staged epilogue: one chunk per consumer (0 without it)."""
        if not self.smem_epilogue:
            return 0
        return staging_bytes(self.consumers, self.warp_tile[1])

    @property
    def reduction_stride(self) -> int:
        """Row stride (floats) of the partial tile: odd, so a column walk hits 32 banks."""
        return reduction_stride(self.cta_tile)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: alignment slack, operand stages, barriers, then what follows
        them (:func:`kernel_smem_bytes` and :func:`after_stages_bytes`, the scheduler's one
        model)."""
        after = after_stages_bytes(
            self.consumers, self.cta_tile, self.warp_tile[1], staged=self.smem_epilogue,
            splitk_cluster=self.splitk_cluster, streamk=self.streamk,
        )  # fmt: skip
        return kernel_smem_bytes(self.cta_tile, self.operand_dtype.itemsize, self.stages, after)

    @property
    def accumulators(self) -> int:
        """float32 accumulator registers per consumer thread."""
        wm, wn, _ = self.warp_tile
        return wm * wn // WARPGROUP

    @property
    def kernel_name(self) -> str:
        """The kernel's one name (``hopper_<name>``): logs, dumps, the tuning database, the
        generated module and so the PTX ``.entry``, ``hopper_gemm`` inside it."""
        return f"hopper_{self.name}"

    @property
    def name(self) -> str:
        """A short readable id: ``config_label`` and the kernel's options."""
        return (
            f"{config_label(self)}{'_se' if self.smem_epilogue else ''}"
            f"{'_ps' if self.packed_stores else ''}"
            f"{'_ts' if self.tma_stores else ''}"
            f"{'_pp' if self.pingpong else ''}"
            f"{f'_c{self.cluster_m}' if self.cluster_m > 1 else ''}"
            f"{f'_cn{self.cluster_n}' if self.cluster_n > 1 else ''}"
            f"{f'_h{self.horizontal}' if self.horizontal > 1 else ''}"
            f"{'_bs' if self.block_scaled else ''}"
            f"{'_swap' if self.swap_ab else ''}"
            f"{'_kc' if self.splitk_cluster else ''}"
            f"{'_sk' if self.streamk else ''}"
        )


def wgmma_k(dtype: DType) -> int:
    """K of one wgmma for *dtype* operands: 16 (16-bit) or 32 (FP8), 32 bytes either way."""
    return WGMMA_K_BYTES // dtype.itemsize


def k_box(dtype: DType) -> int:
    """K elements of one TMA box of a K-major operand: one 128-byte swizzle row (64 16-bit or
    128 FP8 elements); cta_tile k is a whole number of them."""
    return SWIZZLE_BYTES // dtype.itemsize


def dtype_problems(dtype: DType, a_k_inner: bool, b_k_inner: bool) -> list[str]:
    """Why operands of *dtype* in this layout cannot be wgmma operands (empty when they can)."""
    if not dtype.is_narrow:
        return [
            "wgmma takes float16, bfloat16, float8_e4m3fn or float8_e5m2 operands, not "
            f"{dtype.label}"
        ]
    if dtype.is_float8 and not (a_k_inner and b_k_inner):
        return [
            f"FP8 wgmma reads K-major operands only; A is {'K' if a_k_inner else 'M'}-major and "
            f"B {'K' if b_k_inner else 'N'}-major"
        ]
    return []


def promoted_by_chunks(warp_n: int) -> bool:
    """Whether a block-scaled warp tile *warp_n* wide spans several blocks of B's scales, so
    that its sums are promoted ``BLOCK_CHUNK`` columns at a time."""
    return warp_n > SCALE_BLOCK


def promoted_columns(warp_n: int) -> int:
    """Columns of a block-scaled consumer's partial sums: its whole tile, or two sets of
    ``BLOCK_CHUNK`` columns (promoted in turn) where it is promoted by chunks."""
    return 2 * BLOCK_CHUNK if promoted_by_chunks(warp_n) else warp_n


def block_sums(warp_tile: tuple[int, int, int], cta_k: int) -> int:
    """float32 sums a block-scaled consumer thread holds: its accumulators and, for each scale
    block of a stage's K, partial sums of ``promoted_columns``."""
    wm, wn, _ = warp_tile
    return wm * (wn + cta_k // SCALE_BLOCK * promoted_columns(wn)) // WARPGROUP


def block_columns(n_out: int, warp_n: int) -> bool:
    """The columns of every set of a block-scaled tile's partial sums lie within one 128-column
    block of B's scales: the tile's n divides 128 (one block of B's scales a tile), or the tile
    is one warp tile wide of whole blocks (promoted by chunks, each chunk's block its own)."""
    return n_out > 0 and (SCALE_BLOCK % n_out == 0 or n_out == warp_n and warp_n % SCALE_BLOCK == 0)


def block_tile(cta_k: int, n_out: int, warp_n: int) -> bool:
    """A block-scaled kernel's CTA tile: one or two scale blocks of K per stage, its columns
    as ``block_columns`` allows."""
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


def kernel_smem_bytes(
    cta_tile: tuple[int, int, int], itemsize: int, stages: int, staging: int
) -> int:
    """Dynamic shared memory of the generated kernel, the hopper scheduler's one model (its
    rules, its ``resources``, :attr:`HopperKernelConfig.smem_bytes` and so the launch, the
    default heuristic): ``SMEM_ALIGN`` bytes of alignment slack; per stage the A and B tiles
    and a full and an empty mbarrier; then *staging* bytes of epilogue staging
    (:func:`staging_bytes`, 0 without the smem epilogue)."""
    bm, bn, bk = cta_tile
    per_stage = (bm + bn) * bk * itemsize + 2 * MBARRIER_BYTES
    return SMEM_ALIGN + stages * per_stage + staging


def after_stages_bytes(
    consumers: int,
    cta_tile: tuple[int, int, int],
    warp_n: int,
    *,
    staged: bool,
    splitk_cluster: bool,
    streamk: bool,
) -> int:
    """Shared memory after the stages and their mbarriers (:func:`kernel_smem_bytes`'s
    *staging*): the staged epilogue's chunks (*staged*), the cluster reduction's partial tile,
    stream-K's counts. The kernel config and the rules (``limits.resources``) both read it."""
    after = staging_bytes(consumers, warp_n) if staged else 0
    after += reduction_bytes(cta_tile) if splitk_cluster else 0
    return after + streamk_bytes(streamk)


def streamk_bytes(streamk: bool) -> int:
    """Shared memory of stream-K's fix-up: a word per consumer warpgroup, where its first
    thread leaves the count it read off the tile's counter (``MAX_CONSUMERS`` words,
    16-byte rounded; 0 without stream-K)."""
    return -(-4 * MAX_CONSUMERS // VECTOR_ALIGN) * VECTOR_ALIGN if streamk else 0


def reduction_stride(cta_tile: tuple[int, int, int]) -> int:
    """Floats per row of a CTA's partial tile in the cluster reduction: n + 1."""
    return cta_tile[1] + 1


def reduction_bytes(cta_tile: tuple[int, int, int]) -> int:
    """Shared memory of the cluster's split-K reduction: two mbarriers (the cluster's partials
    written, this CTA's partial read by all) and the float32 partial tile, 16-byte rounded."""
    tile = cta_tile[0] * reduction_stride(cta_tile) * 4
    return 2 * MBARRIER_BYTES + -(-tile // VECTOR_ALIGN) * VECTOR_ALIGN


def epilogue_chunk(wn: int) -> int:
    """Columns staged at a time by the smem epilogue: 32, 16 or 8, dividing *wn*."""
    return next(c for c in (32, 16, 8) if wn % c == 0)


def horizontal_chunk(wn: int, h: int) -> int:
    """Columns per product a staged chunk of a horizontal fusion holds: the h products' chunks
    side by side in one staged row of ``epilogue_chunk(wn)`` floats, each 32, 16 or 8 columns
    dividing the product's ``wn / h``; 0 when none fits."""
    room, share = epilogue_chunk(wn), wn // h
    return next((c for c in (32, 16, 8) if share % c == 0 and h * c <= room), 0)


def epilogue_outputs(epilogue: EpilogueProgram, workspace: bool) -> tuple[DType, ...]:
    """Dtypes of the arrays the main kernel's epilogue stores element by element: the
    program's outputs but its amax scalars, or the float32 split-K *workspace*."""
    if workspace:
        return (DType.float32,)
    return tuple(o.dtype for _, o in epilogue.stored)


def staging_bytes(consumers: int, wn: int) -> int:
    """Shared memory of the smem epilogue: ``STAGED_ROWS`` rows of ``4 * chunk + 32`` bytes per
    consumer (the epilogues stage one 64-row fragment block's chunk at a time, whatever the
    warp tile's height), then ``COLUMN_ROWS`` column rows of ``wn`` floats per consumer.

    The rows hold the staged path's float32 chunk (``chunk + 4`` floats a row) and, with
    ``packed_stores``, two 16-bit chunk buffers or one float32 one (``chunk * size + 16`` bytes a
    row, see :func:`packed_row_bytes`). The column rows hold the packed epilogue's N-only
    inputs (a bias, an FP8 column scale) widened, written once per tile instead of loaded from
    global memory at every chunk (runs 54-55: those loads cost the fused fp16 4096^3 kernel
    14%, the column row 5%).
    """
    return consumers * (STAGED_ROWS * staging_row_bytes(wn) + 4 * wn * COLUMN_ROWS)


def staging_row_bytes(wn: int) -> int:
    """Bytes of one row of a consumer's staging region."""
    return 4 * epilogue_chunk(wn) + 32


def packed_row_bytes(dtype: DType, wn: int) -> int:
    """Bytes of one packed row of an output chunk: the chunk's columns and 16 bytes of padding
    (rows stay 16-byte aligned for vector loads, and the 8 rows of a fragment store land on 8
    distinct bank groups)."""
    return epilogue_chunk(wn) * dtype.itemsize + 16


def tma_row_bytes(dtype: DType, wn: int) -> int:
    """Bytes of one row of an output chunk that a TMA store reads: the chunk's columns, no
    padding (the swizzle of :func:`tma_swizzle` spreads a fragment store over the banks)."""
    return epilogue_chunk(wn) * dtype.itemsize


def tma_swizzle(row_bytes: int) -> int:
    """The swizzle span of a TMA store box with *row_bytes* rows: the row itself when it is
    32, 64 or 128 bytes (the 8 rows of a fragment store then land on distinct banks), else
    none (a 16-byte row)."""
    return row_bytes if row_bytes in (32, 64, 128) else 0


def tma_buffers(outputs: tuple[DType, ...], wn: int) -> int:
    """Chunk buffers (every output's ``STAGED_ROWS`` rows, each output's 1024-byte aligned)
    that fit a consumer's staging region for TMA stores: 2 for one 16-bit or FP8 output, 1 for
    a float32 output or two 16-bit ones, 0 when none fits or a row is not whole 16-byte units
    (TMA's innermost coordinate and box row)."""
    rows = [tma_row_bytes(d, wn) for d in outputs]
    if not rows or any(r % VECTOR_ALIGN or r > SWIZZLE_BYTES for r in rows):
        return 0
    return min(2, staging_row_bytes(wn) // sum(rows))


def packed_buffers(outputs: tuple[DType, ...], wn: int) -> int:
    """Chunk buffers (every output's rows) that fit a consumer's staging region: 2 for one
    16-bit or FP8 output, 1 for a float32 output or two 16-bit ones, 0 when they do not fit or
    a chunk row is not whole 16-byte vectors (an FP8 output in chunks of 8 columns)."""
    if any(epilogue_chunk(wn) * d.itemsize % VECTOR_ALIGN for d in outputs):
        return 0
    need = sum(packed_row_bytes(d, wn) for d in outputs)
    return min(2, staging_row_bytes(wn) // need) if need else 0


def config_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why the generator cannot build *cfg* (empty when it can)."""
    bm, bn, bk = cfg.cta_tile
    wm, wn, wk = cfg.warp_tile
    problems = dtype_problems(cfg.operand_dtype, cfg.a_k_inner, cfg.b_k_inner)
    if wm <= 0 or wm % WGMMA_M:
        problems.append(f"warp_tile m must be a positive multiple of {WGMMA_M}, got {wm}")
    n_unit = 8 if cfg.b_k_inner else BOX_INNER
    if not (0 < wn <= MAX_WGMMA_N and wn % n_unit == 0):
        problems.append(
            f"warp_tile n must be a multiple of {n_unit} in {n_unit}..{MAX_WGMMA_N} (the wgmma N"
            f"{'' if cfg.b_k_inner else ' of an N-major B, one 128-byte swizzle row'}), got {wn}"
        )
    if bk <= 0 or bk % k_box(cfg.operand_dtype) or bk > MAX_TMA_BOX or wk != bk:
        problems.append(
            f"cta_tile k must be a multiple of {k_box(cfg.operand_dtype)} up to {MAX_TMA_BOX} "
            f"(whole 128-byte swizzle rows, one TMA box) and equal warp_tile k, got {bk}, {wk}"
        )
    if not problems and cfg.pingpong and (bm, bn) != (wm, wn):
        problems.append(
            f"ping-pong consumers each own a whole tile: cta_tile {cfg.cta_tile} must equal "
            f"warp_tile {cfg.warp_tile}"
        )
    if not problems and (bm % wm or bn % wn):
        problems.append(f"cta_tile {cfg.cta_tile} is not a multiple of warp_tile {cfg.warp_tile}")
    if not problems and max(bm, bn) > MAX_TMA_BOX:
        problems.append(
            f"cta_tile m and n must be <= {MAX_TMA_BOX} (one TMA box), got {cfg.cta_tile}"
        )
    if not problems and cfg.consumers > MAX_CONSUMERS:
        problems.append(
            f"{cfg.consumers} consumer warpgroups; the kernel has at most {MAX_CONSUMERS} "
            "(register budget)"
        )
    if not problems and cfg.accumulators > MAX_ACCUMULATORS:
        problems.append(
            f"warp_tile {wm}x{wn} needs {cfg.accumulators} accumulator registers per thread; "
            f"at most {MAX_ACCUMULATORS} fit beside the addressing registers"
        )
    problems += block_scale_problems(cfg)
    problems += cluster_problems(cfg)
    problems += horizontal_problems(cfg)
    problems += swap_problems(cfg)
    problems += splitk_cluster_problems(cfg)
    problems += streamk_problems(cfg)
    if cfg.stages < MIN_STAGES:
        problems.append(
            f"stages must be >= {MIN_STAGES} (the producer runs ahead), got {cfg.stages}"
        )
    if cfg.splitk < 1:
        problems.append(f"splitk must be >= 1, got {cfg.splitk}")
    problems += grid_problems(cfg.cta_order, cfg.grid_swizzle)
    if cfg.packed_stores and not (cfg.smem_epilogue and cfg.packed_buffers):
        problems.append(
            "packed_stores needs smem_epilogue and outputs whose chunk rows fit the staging "
            f"region (outputs {[d.label for d in cfg.epilogue_outputs]})"
        )
    if cfg.tma_stores and not cfg.tma_storable:
        problems.append("tma_stores needs packed_stores and no split-K workspace")
    return problems


def block_scale_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s block scaling cannot be built (see :func:`block_tile`)."""
    if not cfg.block_scaled:
        return []
    problems = []
    if not cfg.operand_dtype.is_float8:
        problems.append(f"block scales scale FP8 sums, not {cfg.operand_dtype.label} ones")
    if not block_tile(cfg.cta_tile[2], cfg.n_out, cfg.warp_tile[1]):
        problems.append(
            f"block scales: cta_tile {cfg.cta_tile} must have k in {BLOCK_CTA_KS} (one or two "
            f"scale blocks) and n dividing {SCALE_BLOCK}, or n = warp_tile n, a multiple of "
            f"{SCALE_BLOCK} (each set of partial sums within one block of B's scales)"
        )
    if (sums := block_sums(cfg.warp_tile, cfg.cta_tile[2])) > BLOCK_SUMS:
        problems.append(
            f"block scales: warp_tile {cfg.warp_tile[:2]} with cta_tile k {cfg.cta_tile[2]} "
            f"holds {sums} sums a thread (accumulators and partial sums); at most {BLOCK_SUMS}"
        )
    if cfg.horizontal > 1:
        problems.append("block scales are generated for one matmul, not a horizontal fusion")
    if sums > BLOCK_CLUSTER_SUMS and cfg.multicast > 1:
        problems.append(BLOCK_PAIR_CLUSTER)
    return problems


class SharedTile(NamedTuple):
    """The tile a multicast cluster shares, and what its rows must be a multiple of."""

    operand: str  # "A" or "B"
    dim: str  # the cta_tile extent of its rows: "m" (A's) or "n" (B's)
    rows: int
    ctas: int  # the CTAs sharing it
    unit: int


def shared_tile(
    cluster: Sequence[int], cta: Sequence[int], a_k_inner: bool, b_k_inner: bool
) -> SharedTile:
    """The tile a cluster of (m, n) CTAs shares: B's (cta_tile n rows) along M, else A's (m
    rows) along N. Each CTA multicasts a 1/ctas part: whole 8-row groups of a K-major operand
    (16 rows for a pair) or 64-element swizzle rows of an MN-major one (128 for a pair)."""
    ctas = cluster[0] * cluster[1]
    if cluster[0] > 1:
        operand, dim, rows, k_inner = "B", "n", cta[1], b_k_inner
    else:
        operand, dim, rows, k_inner = "A", "m", cta[0], a_k_inner
    return SharedTile(operand, dim, rows, ctas, (8 if k_inner else BOX_INNER) * ctas)


def cluster_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s cluster cannot be built: clusters of 2 or 4 CTAs along M (sharing B's tile)
    or along N (sharing A's), one axis, each CTA multicasting its part of the shared tile
    (whole TMA boxes or 128-byte swizzle rows a part)."""
    if cfg.multicast == 1:
        return []
    if cfg.cluster_m > 1 and cfg.cluster_n > 1:
        return [f"a cluster runs along M or N, not both: got {cfg.cluster_m}x{cfg.cluster_n}"]
    if cfg.multicast not in MULTICAST_CLUSTERS:
        return [f"a cluster has 1, 2 or 4 CTAs, got {cfg.multicast}"]
    cluster = (cfg.cluster_m, cfg.cluster_n)
    tile = shared_tile(cluster, cfg.cta_tile, cfg.a_k_inner, cfg.b_k_inner)
    if tile.rows % tile.unit:
        return [
            f"a cluster of {tile.ctas} multicasts a part of {tile.operand}'s tile from each "
            f"CTA: its {tile.rows} rows must be a multiple of {tile.unit}"
        ]
    return []


def horizontal_unit(b_k_inner: bool) -> int:
    """What each product's share of a horizontal cta_tile n must be a multiple of: whole
    8-row swizzle groups of a K-major B, 64-column swizzle rows of an N-major one."""
    return 8 if b_k_inner else BOX_INNER


def horizontal_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s horizontal fusion cannot be built (docs/decisions.md, "Horizontal fusion")."""
    h = cfg.horizontal
    if h == 1:
        return []
    if h < 1:
        return [f"horizontal must be >= 1, got {h}"]
    bn, wn = cfg.cta_tile[1], cfg.warp_tile[1]
    unit = horizontal_unit(cfg.b_k_inner)
    problems = []
    if bn % (h * unit):
        problems.append(f"horizontal {h}: cta_tile n={bn} must be a multiple of {h * unit}")
    if wn != bn:
        problems.append(
            f"horizontal {h}: consumers split the tile along M only (warp_tile n {wn} must "
            f"equal cta_tile n {bn}: each thread needs every product's column)"
        )
    if cfg.splitk > 1 or cfg.multicast > 1 or cfg.packed_stores:
        problems.append(
            f"horizontal {h} is generated with splitk 1, no cluster and no packed stores"
        )
    if cfg.smem_epilogue and not cfg.horizontal_chunk:
        problems.append(
            f"horizontal {h} with the smem epilogue: each product's {wn // h} columns must split "
            f"into chunks of 32, 16 or 8 that fit {h} to a staged row of {cfg.epilogue_chunk}"
        )
    return problems


def swap_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s operand swap cannot be built: its transposed tile is stored from registers,
    for one matmul without block scales."""
    if cfg.swap_ab and (cfg.smem_epilogue or cfg.horizontal > 1 or cfg.block_scaled):
        return ["swap_ab is generated with the register epilogue, one matmul, no block scales"]
    return []


def splitk_cluster_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s cluster reduction cannot be built: 2 to ``MAX_REDUCE_CLUSTER`` splits, the
    cluster theirs alone, its epilogue its own (from the summed partials in shared memory),
    one tile per consumer group (no ping-pong)."""
    if not cfg.splitk_cluster:
        return []
    problems = []
    if not 2 <= cfg.splitk <= MAX_REDUCE_CLUSTER:
        problems.append(
            f"splitk_cluster: splitk must be 2..{MAX_REDUCE_CLUSTER} (a portable cluster), got "
            f"{cfg.splitk}"
        )
    if cfg.multicast > 1 or cfg.smem_epilogue or cfg.pingpong or cfg.horizontal > 1:
        problems.append(
            "splitk_cluster is generated without a multicast cluster, the staged epilogue, "
            "ping-pong or a horizontal fusion"
        )
    return problems


def streamk_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s stream-K cannot be built: 2 or more pieces a tail tile, CTAs alone (no
    cluster, no cluster reduction), cooperative consumers (no ping-pong), one matmul."""
    if not cfg.streamk:
        return []
    problems = []
    if cfg.splitk < 2:
        problems.append(f"streamk: splitk (pieces of a tail tile) must be >= 2, got {cfg.splitk}")
    if cfg.cluster > 1 or cfg.splitk_cluster or cfg.pingpong or cfg.horizontal > 1:
        problems.append(
            "streamk is generated without clusters, the cluster reduction, ping-pong or a "
            "horizontal fusion"
        )
    return problems


def kernel_params(cfg: HopperKernelConfig) -> list[str]:
    """Parameter names of ``hopper_gemm``, in launch order."""
    scales = list(SCALE_PARAMS) if cfg.block_scaled else []
    strides = list(SCALE_STRIDES) if cfg.block_scaled else []
    if cfg.workspace_splitk:
        return ["maps", "ws", *scales, *SHAPE_PARAMS, *strides, *GRID_PARAMS]
    ins, outs, scal, in_strides, out_strides = epilogue_params(cfg.epilogue)
    workspace = ["ws"] if cfg.streamk else []  # the tail tiles' counters and partial sums
    return [
        "maps", *scales, *ins, *outs, *scal, *SHAPE_PARAMS, *strides, *in_strides, *out_strides,
        *workspace, *GRID_PARAMS,
    ]  # fmt: skip
