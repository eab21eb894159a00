"""What the hopper generator can build: why a :class:`HopperKernelConfig` cannot be (empty when
it can). ``limits`` holds the same rules over a plan's ``MatmulParams`` and the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmaplug.codegen.grid import grid_problems
from mmaplug.ir.dtypes import DType
from mmaplug.ir.ops import SCALE_BLOCK

from .tiles import (
    BLOCK_CTA_KS,
    BLOCK_PAIR_CLUSTER,
    BLOCK_SUMS,
    BOX_INNER,
    CLUSTER_SHAPES,
    MAX_ACCUMULATORS,
    MAX_CONSUMERS,
    MAX_REDUCE_CLUSTER,
    MAX_TMA_BOX,
    MAX_WGMMA_N,
    MIN_STAGES,
    STRADDLING_WIDTHS,
    WGMMA_M,
    block_cluster_spills,
    block_sums,
    block_tile,
    horizontal_unit,
    k_box,
    shared_tiles,
)

if TYPE_CHECKING:
    from .config import HopperKernelConfig


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
            f"{SCALE_BLOCK} (each set of partial sums within one block of B's scales) or one "
            f"straddling two blocks with k {SCALE_BLOCK} {STRADDLING_WIDTHS}"
        )
    if (sums := block_sums(cfg.warp_tile, cfg.cta_tile[2])) > BLOCK_SUMS:
        problems.append(
            f"block scales: warp_tile {cfg.warp_tile[:2]} with cta_tile k {cfg.cta_tile[2]} "
            f"holds {sums} sums a thread (accumulators and partial sums); at most {BLOCK_SUMS}"
        )
    if cfg.horizontal > 1:
        problems.append("block scales are generated for one matmul, not a horizontal fusion")
    if block_cluster_spills(sums, cfg.cluster_m, cfg.cluster_n, cfg.splitk_cluster):
        problems.append(BLOCK_PAIR_CLUSTER)
    return problems


def cluster_problems(cfg: HopperKernelConfig) -> list[str]:
    """Why *cfg*'s cluster cannot be built: 2 or 4 CTAs along M (sharing B's tile) or along N
    (sharing A's), or 2x2 (both), each CTA multicasting its part of each shared tile (whole
    TMA boxes or 128-byte swizzle rows a part)."""
    cluster = (cfg.cluster_m, cfg.cluster_n)
    if cluster == (1, 1):
        return []
    if cluster not in CLUSTER_SHAPES:
        shapes = ", ".join(f"{m}x{n}" for m, n in CLUSTER_SHAPES[1:])
        return [
            f"a cluster is {shapes} CTAs (along M x along N), got {cfg.cluster_m}x{cfg.cluster_n}"
        ]
    return [
        f"a cluster of {tile.ctas} along {'M' if tile.operand == 'B' else 'N'} multicasts a "
        f"part of {tile.operand}'s tile from each CTA: its {tile.rows} rows must be a multiple "
        f"of {tile.unit}"
        for tile in shared_tiles(cluster, cfg.cta_tile, cfg.a_k_inner, cfg.b_k_inner)
        if tile.rows % tile.unit
    ]


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
    """Why *cfg*'s operand swap cannot be built: one matmul without block scales, its staged
    epilogue unpacked (the transposed chunk is read back as float32)."""
    if cfg.swap_ab and (cfg.packed_stores or cfg.horizontal > 1 or cfg.block_scaled):
        return ["swap_ab is generated for one matmul without block scales, its epilogue unpacked"]
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
