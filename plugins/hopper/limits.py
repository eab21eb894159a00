"""What the Hopper scheduler (TMA, mbarriers, wgmma m64nNk16, sm_90a) builds, as Violations.

Every MatmulParams field is either honoured by the generated kernel or refused here: the
rules mirror ``config.config_problems`` (what the generator can emit) plus the device and the
fields the kernel has no variant for yet.
"""

from __future__ import annotations

from typing import Final

from mmaplug.device import Device
from mmaplug.params import MatmulParams, TilingStrategy, Violation, Violations
from mmaplug.problem import MatmulProblem

from .config import (
    BOX_INNER,
    MBARRIER_BYTES,
    SMEM_ALIGN,
    WARPGROUP,
    epilogue_chunk,
    horizontal_chunk,
    horizontal_unit,
    pair_n_unit,
    staging_bytes,
)

__all__ = ["MAX_CONSUMERS", "MAX_TMA_BOX", "smem_bytes", "violations"]

MAX_TMA_BOX: Final = 256  # elements per TMA box dimension
MAX_CONSUMERS: Final = 2  # consumer warpgroups beside the producer (register budget)
MAX_ACCUMULATORS: Final = 128  # float32 accumulator registers per consumer thread
MAX_UNITS: Final = 2**31 - 1  # work units are walked with int64, the grid x with int32


def smem_bytes(params: MatmulParams, problem: MatmulProblem) -> int:
    """Dynamic shared memory of the generated kernel: alignment slack, stages, mbarriers and,
    with ``use_smem_epilogue``, the epilogue staging buffers."""
    cta, warp = params.cta_tile, params.warp_tile
    per_stage = (cta.m + cta.n) * cta.k * problem.operand_dtype.itemsize + 2 * MBARRIER_BYTES
    total = SMEM_ALIGN + params.stages * per_stage
    if params.use_smem_epilogue and warp.m and warp.n % 8 == 0:
        total += staging_bytes(_consumers(params), warp.n)
    return total


def _consumers(params: MatmulParams) -> int:
    """Consumer warpgroups: the CTA tile's grid of warp tiles, or two taking turns (ping-pong)."""
    if params.tiling_strategy is TilingStrategy.persistent_pingpong:
        return 2
    cta, warp = params.cta_tile, params.warp_tile
    return max(1, cta.m // max(warp.m, 1)) * max(1, cta.n // max(warp.n, 1))


def violations(params: MatmulParams, problem: MatmulProblem, device: Device) -> list[Violation]:
    """Every reason the Hopper scheduler cannot build *params* for *problem* on *device*.

    :returns: an empty list when the parameters are legal.
    """
    found = Violations()
    check = found.check
    cta, warp, inst = params.cta_tile, params.warp_tile, params.instruction_tile
    target = device.target
    check(
        device.cc == (9, 0) and device.arch_suffix == "a",
        "device",
        target,
        "sm_90a",
        f"the hopper scheduler emits wgmma and setmaxnreg, which need sm_90a; {device.name} is "
        f"{target}. Use an H100/H200 (or preset 'h100'/'h200'), or the ampere scheduler.",
    )
    n_unit = 8 if problem.b_k_inner else BOX_INNER
    check(
        warp.m % 64 == 0 and warp.n % n_unit == 0 and warp.n <= 256,
        "warp_tile",
        warp,
        f"m % 64 == 0, n % {n_unit} == 0, n <= 256",
        f"warp_tile={warp}: a consumer warpgroup issues m64nNk16 wgmmas (N = warp_tile.n), "
        f"so m must be a multiple of 64 and n a multiple of {n_unit} up to 256"
        + ("" if problem.b_k_inner else " (an N-major B is read in 64-column swizzle rows)")
        + ". Round the warp tile.",
    )
    check(
        inst.m == 64 and inst.k == 16 and inst.n == warp.n,
        "instruction_tile",
        inst,
        f"64x{warp.n}x16",
        f"instruction_tile={inst}; the kernel issues one m64nNk16 wgmma per 64 rows with N the "
        f"warp tile's n. Set instruction_tile=(64, {warp.n}, 16).",
    )
    check(
        cta.k == warp.k and cta.k % BOX_INNER == 0 and cta.k <= MAX_TMA_BOX,
        "cta_tile",
        cta,
        "k in 64, 128, 192, 256 and equal to warp_tile.k",
        f"cta_tile={cta}: k must be a multiple of 64 (whole 128-byte swizzle rows) up to "
        f"{MAX_TMA_BOX} and equal warp_tile.k={warp.k}. Set cta_tile.k=64.",
    )
    check(
        cta.m % warp.m == 0 and cta.n % warp.n == 0 and max(cta.m, cta.n) <= MAX_TMA_BOX,
        "cta_tile",
        cta,
        f"a multiple of warp_tile, m and n <= {MAX_TMA_BOX}",
        f"cta_tile={cta} must be a multiple of warp_tile={warp} with m and n at most "
        f"{MAX_TMA_BOX} (one TMA box). Change either tile.",
    )
    consumers = _consumers(params)
    pingpong = params.tiling_strategy is TilingStrategy.persistent_pingpong
    check(
        not pingpong or (cta.m, cta.n) == (warp.m, warp.n),
        "cta_tile",
        cta,
        "equal to warp_tile with ping-pong",
        f"cta_tile={cta} with tiling_strategy='persistent_pingpong': each of the two consumer "
        f"warpgroups owns a whole tile, so cta_tile must equal warp_tile={warp}. Set both alike.",
    )
    check(
        consumers <= MAX_CONSUMERS,
        "cta_tile",
        cta,
        f"<= {MAX_CONSUMERS} warp tiles",
        f"cta_tile={cta} over warp_tile={warp} makes {consumers} consumer warpgroups; the kernel "
        f"runs at most {MAX_CONSUMERS} (their registers share the SM's 64K). Grow the warp tile.",
    )
    accs = warp.m * warp.n // WARPGROUP
    check(
        accs <= MAX_ACCUMULATORS,
        "warp_tile",
        warp,
        f"m * n / 128 <= {MAX_ACCUMULATORS}",
        f"warp_tile={warp} needs {accs} float32 accumulators per thread; at most "
        f"{MAX_ACCUMULATORS} fit beside addressing registers. Use 64x256 or 128x128.",
    )
    smem = smem_bytes(params, problem)
    check(
        smem <= device.smem_per_block_optin,
        "stages",
        params.stages,
        f"<= {device.smem_per_block_optin:,} B shared memory",
        f"stages={params.stages} needs {smem:,} B of shared memory per block; {target} allows "
        f"{device.smem_per_block_optin:,} B. Lower stages or the CTA tile.",
    )
    check(
        params.stages >= 2,
        "stages",
        params.stages,
        ">= 2",
        f"stages={params.stages}: the producer fills one stage while the consumers read "
        "another, so at least 2 are needed. Raise stages.",
    )
    check(
        params.prefetch_gap == 1,
        "prefetch_gap",
        params.prefetch_gap,
        "1",
        f"prefetch_gap={params.prefetch_gap}: the TMA producer refills a stage as soon as "
        "the consumers release it; there is no other gap to choose. Set prefetch_gap=1.",
    )
    check(
        params.async_gmem_load_operands,
        "async_gmem_load_operands",
        False,
        "True",
        "the hopper scheduler always loads operands with TMA; set "
        "async_gmem_load_operands=True or use the ampere scheduler.",
    )
    check(
        params.warp_specialized,
        "warp_specialized",
        False,
        "True",
        "the hopper kernel is always warp-specialized (a TMA producer warpgroup and consumer "
        "warpgroups); set warp_specialized=True or use the ampere scheduler.",
    )
    cluster = tuple(params.cluster_dims)
    check(
        cluster in ((1, 1), (2, 1)),
        "cluster_dims",
        params.cluster_dims,
        "(1, 1) or (2, 1)",
        f"cluster_dims={params.cluster_dims}: the kernel pairs CTAs along M, the pair sharing "
        "one multicast B tile; other cluster shapes are not generated. Set (1, 1) or (2, 1).",
    )
    pair_unit = pair_n_unit(problem.b_k_inner)
    check(
        cluster != (2, 1) or cta.n % pair_unit == 0,
        "cluster_dims",
        params.cluster_dims,
        "(1, 1) with a cta_tile n that does not halve into whole boxes",
        f"cluster_dims=(2, 1) with cta_tile={cta}: each CTA of a pair multicasts half of the "
        f"B tile, so n must be a multiple of {pair_unit} for this layout. Set cluster_dims=(1, 1) "
        f"or n to a multiple of {pair_unit}.",
    )
    k_tiles = -(-problem.k // cta.k) if cta.k else 0
    check(
        params.splitk_factor <= max(1, k_tiles),
        "splitk_factor",
        params.splitk_factor,
        f"<= ceil(k / cta_k) = {k_tiles}",
        f"splitk_factor={params.splitk_factor} exceeds the {k_tiles} K tiles of k={problem.k} "
        f"with cta_k={cta.k}. Lower splitk_factor or cta_tile.k.",
    )
    _check_horizontal(found, params, problem)
    n_out = cta.n // problem.horizontal
    tiles = -(-problem.m // cta.m) * -(-problem.n // n_out) if cta.m and n_out else 0
    units = problem.batch * params.splitk_factor * tiles
    check(
        units <= MAX_UNITS,
        "cta_tile",
        cta,
        f"batch * splitk * tiles <= {MAX_UNITS:,}",
        f"{units:,} work units (batch x split-K x tiles) exceed the grid's {MAX_UNITS:,}. "
        "Grow the CTA tile.",
    )
    return found


def _check_horizontal(found: Violations, params: MatmulParams, problem: MatmulProblem) -> None:
    """A horizontal fusion's h B tiles stacked along N in one wgmma (docs/decisions.md,
    "Horizontal fusion"): what the generated kernel supports of it."""
    h, check = problem.horizontal, found.check
    if h == 1:
        return
    cta, warp = params.cta_tile, params.warp_tile
    unit = h * horizontal_unit(problem.b_k_inner)
    check(
        cta.n % unit == 0,
        "cta_tile",
        cta,
        f"n a multiple of {unit}",
        f"cta_tile={cta} for a horizontal fusion of {h} matmuls: cta_tile.n is the wgmma's N, "
        f"{h} B tiles of n/{h} columns each, and each must be whole "
        + (
            "8-row swizzle groups (K-major B)"
            if problem.b_k_inner
            else "64-column swizzle rows (N-major B)"
        )
        + f". Use a cta_tile.n of {h} x the output tile's n, a multiple of {unit}.",
    )
    check(
        warp.n == cta.n,
        "warp_tile",
        warp,
        f"n == cta_tile.n ({cta.n})",
        f"warp_tile={warp} for a horizontal fusion: each consumer thread must hold column c of "
        f"every product, so consumers split the CTA tile along M only. Set warp_tile.n = "
        f"{cta.n}.",
    )
    check(
        params.splitk_factor == 1,
        "splitk_factor",
        params.splitk_factor,
        "1",
        f"splitk_factor={params.splitk_factor} with a horizontal fusion: the products are "
        "combined in the epilogue, which a split-K reduce of one workspace cannot do. Set "
        "splitk_factor=1.",
    )
    check(
        tuple(params.cluster_dims) == (1, 1),
        "cluster_dims",
        params.cluster_dims,
        "(1, 1)",
        f"cluster_dims={params.cluster_dims} with a horizontal fusion: B multicast per tensor "
        "map is not generated. Set cluster_dims=(1, 1).",
    )
    chunk = horizontal_chunk(warp.n, h)
    check(
        not params.use_smem_epilogue or chunk > 0,
        "use_smem_epilogue",
        True,
        "False for this warp_tile",
        f"use_smem_epilogue=True with a horizontal fusion and warp_tile={warp}: the staged "
        f"epilogue puts the {h} products' chunks side by side in one staged row of "
        f"{epilogue_chunk(warp.n)} columns, each chunk 32, 16 or 8 columns dividing "
        f"warp_tile.n / {h} = {warp.n // h}; none fits. Set use_smem_epilogue=False, or a "
        f"cta_tile n whose share per product is a multiple of 8 no wider than 1/{h} of the row.",
    )
