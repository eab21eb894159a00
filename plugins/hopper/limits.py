"""What the Hopper scheduler (TMA, mbarriers, wgmma m64nNk16, sm_90a) can build, as Violations."""

from __future__ import annotations

from typing import Final

from mmaplug.device import Device
from mmaplug.params import MatmulParams, TilingStrategy, Violation, Violations
from mmaplug.problem import MatmulProblem

__all__ = ["MAX_CLUSTER_SIZE", "MAX_TMA_BOX", "smem_bytes", "violations"]

MAX_CLUSTER_SIZE: Final = 8  # portable cluster size limit
MAX_TMA_BOX: Final = 256  # elements per TMA box dimension
MBARRIER_BYTES_PER_STAGE: Final = 16  # a full and an empty mbarrier per stage
WARP_GROUP_THREADS: Final = 128


def smem_bytes(params: MatmulParams, problem: MatmulProblem) -> int:
    """Shared memory per block: the operand stages (+ mbarriers), plus the output tile when the
    epilogue stages through shared memory or tiles are persistent (no reuse of operand smem)."""
    cta = params.cta_tile
    per_stage = (cta.m + cta.n) * cta.k * problem.operand_dtype.itemsize
    if params.warp_specialized:
        per_stage += MBARRIER_BYTES_PER_STAGE
    total = params.stages * per_stage
    if params.use_smem_epilogue or params.tiling_strategy is TilingStrategy.persistent:
        total += cta.m * cta.n * problem.output_dtype.itemsize
    return total


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
    check(
        inst.m == 64 and inst.k == 16 and inst.n % 8 == 0 and 8 <= inst.n <= 256,
        "instruction_tile",
        inst,
        "64xNx16, N in 8..256 step 8",
        f"instruction_tile={inst}; wgmma is m64nNk16 with N a multiple of 8 up to 256. "
        "Set instruction_tile=(64, N, 16).",
    )
    check(
        warp.m % 64 == 0,
        "warp_tile",
        warp,
        "m % 64 == 0",
        f"warp_tile={warp}: a warp group computes 64-row slices, so warp_tile.m must be a "
        "multiple of 64. Round warp_tile.m to a multiple of 64.",
    )
    check(
        cta.m % warp.m == 0 and cta.n % warp.n == 0 and cta.k == warp.k,
        "cta_tile",
        cta,
        "multiple of warp_tile, same k",
        f"cta_tile={cta} must be a multiple of warp_tile={warp} with the same k. "
        "Change either tile.",
    )
    big = [d for d in "mnk" if getattr(cta, d) > MAX_TMA_BOX]
    check(
        not big,
        "cta_tile",
        cta,
        f"each dim <= {MAX_TMA_BOX}",
        f"cta_tile={cta} exceeds the TMA box limit of {MAX_TMA_BOX} elements along "
        f"{', '.join(big)}. Shrink the CTA tile.",
    )
    groups = (cta.m // warp.m) * (cta.n // warp.n) + (1 if params.warp_specialized else 0)
    threads = WARP_GROUP_THREADS * groups
    check(
        threads <= device.max_threads_per_block,
        "cta_tile",
        cta,
        f"<= {device.max_threads_per_block} threads",
        f"cta_tile={cta} over warp_tile={warp} needs {threads:,} threads per block; {target} "
        f"allows {device.max_threads_per_block:,}. Grow the warp tile or shrink the CTA tile.",
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
        params.async_gmem_load_operands,
        "async_gmem_load_operands",
        False,
        "True",
        "the hopper scheduler always loads operands with TMA; set "
        "async_gmem_load_operands=True or use the ampere scheduler.",
    )
    cm, cn = params.cluster_dims
    check(
        cm * cn <= MAX_CLUSTER_SIZE,
        "cluster_dims",
        params.cluster_dims,
        f"cluster size <= {MAX_CLUSTER_SIZE}",
        f"cluster_dims={params.cluster_dims} is a cluster of {cm * cn} CTAs; {target} allows "
        f"{MAX_CLUSTER_SIZE}. Lower cluster_dims.",
    )
    m_tiles, n_tiles = -(-problem.m // cta.m), -(-problem.n // cta.n)
    check(
        m_tiles % cm == 0 and n_tiles % cn == 0,
        "cluster_dims",
        params.cluster_dims,
        "divides the tile grid",
        f"cluster_dims={params.cluster_dims} does not divide the {m_tiles}x{n_tiles} tile grid "
        f"of cta_tile={cta}. Pick cluster dims that divide the tile counts.",
    )
    persistent = params.tiling_strategy is TilingStrategy.persistent
    check(
        not (persistent and params.splitk_factor > 1),
        "splitk_factor",
        params.splitk_factor,
        "1 with persistent tiling",
        f"splitk_factor={params.splitk_factor} cannot be combined with persistent tiling. Set "
        "splitk_factor=1 or tiling_strategy='one_tile_per_cta'.",
    )
    k_tiles = -(-problem.k // cta.k)
    check(
        params.splitk_factor <= k_tiles,
        "splitk_factor",
        params.splitk_factor,
        f"<= ceil(k / cta_k) = {k_tiles}",
        f"splitk_factor={params.splitk_factor} exceeds the {k_tiles} K tiles of k={problem.k} "
        f"with cta_k={cta.k}. Lower splitk_factor or cta_tile.k.",
    )
    check(
        not params.warp_specialized or params.stages > 1,
        "warp_specialized",
        True,
        "stages > 1",
        "warp_specialized=True needs stages > 1 so the producer can run ahead. Raise stages or "
        "set warp_specialized=False.",
    )
    return found
