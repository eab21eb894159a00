"""The generated hopper kernel's shared memory, the scheduler's one model of it: operand stages
and their mbarriers, the epilogue's staging rows and chunk buffers, the cluster reduction's
partial tile, stream-K's counts."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.ir.dtypes import DType

from .tiles import MAX_CONSUMERS, SWIZZLE_BYTES

SMEM_ALIGN: Final = 1024  # a 128B-swizzle pattern repeats every 1024 bytes
MBARRIER_BYTES: Final = 8
VECTOR_ALIGN: Final = 16  # packed epilogue stores: 16-byte vectors
STAGED_ROWS: Final = 64  # rows a smem epilogue stages at a time: one wgmma fragment block
# N-only epilogue inputs the packed epilogue stages in shared memory, a float32 row of the
# consumer's columns each: a bias, and FP8's per-column scale of B beside it (run 137: the
# bias loaded from global memory every step cost the per-row FP8 4096^3 kernel ~5%)
COLUMN_ROWS: Final = 2


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
