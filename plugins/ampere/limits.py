"""What the Ampere scheduler (mma.sync m16n8k16, cp.async pipeline) can build, as Violations."""

from __future__ import annotations

from typing import Final

from mmaplug.device import Device
from mmaplug.params import MatmulParams, TileShape, TilingStrategy, Violation, Violations
from mmaplug.problem import MatmulProblem

__all__ = ["INSTRUCTION_TILE", "MAX_STAGES", "operand_smem_bytes", "violations"]

INSTRUCTION_TILE: Final = TileShape(16, 8, 16)
MAX_STAGES: Final = 8
_CP_ASYNC_BYTES: Final = frozenset({4, 8, 16})


def operand_smem_bytes(params: MatmulParams, problem: MatmulProblem) -> int:
    """Shared memory the operand pipeline needs: stages x (cta_m + cta_n) x cta_k x itemsize."""
    cta = params.cta_tile
    return params.stages * (cta.m + cta.n) * cta.k * problem.operand_dtype.itemsize


def violations(params: MatmulParams, problem: MatmulProblem, device: Device) -> list[Violation]:
    """Every reason the Ampere scheduler cannot build *params* for *problem* on *device*.

    :returns: an empty list when the parameters are legal.
    """
    found = Violations()
    check = found.check

    cta, warp, inst = params.cta_tile, params.warp_tile, params.instruction_tile
    target = device.target
    check(
        device.cc >= (8, 0),
        "device",
        target,
        "sm_80 or newer",
        f"the ampere scheduler needs mma.sync m16n8k16 and cp.async (sm_80+); {device.name} "
        f"is {target}. Use an sm_80 or newer GPU or preset.",
    )
    check(
        inst == INSTRUCTION_TILE,
        "instruction_tile",
        inst,
        "16x8x16",
        f"instruction_tile={inst}; the ampere kernel issues mma.sync m16n8k16 only. "
        "Set instruction_tile=(16, 8, 16).",
    )
    check(
        warp.m % 16 == 0 and warp.n % 8 == 0 and warp.k % 16 == 0,
        "warp_tile",
        warp,
        "m % 16, n % 8, k % 16 == 0",
        f"warp_tile={warp} must be a multiple of 16x8x16 (m16n8k16 fragments). "
        "Round the warp tile up to such a multiple.",
    )
    check(
        cta.m % warp.m == 0 and cta.n % warp.n == 0,
        "cta_tile",
        cta,
        "multiple of warp_tile",
        f"cta_tile={cta} is not a multiple of warp_tile={warp}. Change either tile.",
    )
    warps = (cta.m // warp.m) * (cta.n // warp.n)
    threads = device.warp_size * warps
    check(
        device.warp_size <= threads <= device.max_threads_per_block,
        "cta_tile",
        cta,
        f"32..{device.max_threads_per_block} threads",
        f"cta_tile={cta} over warp_tile={warp} needs {threads:,} threads per block; "
        f"{target} allows {device.max_threads_per_block:,}. Grow the warp tile or shrink "
        "the CTA tile.",
    )
    smem = operand_smem_bytes(params, problem)
    check(
        smem <= device.smem_per_block_optin,
        "stages",
        params.stages,
        f"<= {device.smem_per_block_optin:,} B shared memory",
        f"stages={params.stages} needs {smem:,} B of shared memory per block; {target} allows "
        f"{device.smem_per_block_optin:,} B. Lower stages or the CTA tile.",
    )
    if params.use_smem_epilogue:
        # The epilogue stages the float32 accumulator tile, reusing the operand buffers.
        epilogue = cta.m * cta.n * 4
        check(
            epilogue <= device.smem_per_block_optin,
            "use_smem_epilogue",
            True,
            f"<= {device.smem_per_block_optin:,} B shared memory",
            f"use_smem_epilogue=True stages a {cta.m}x{cta.n} float32 tile ({epilogue:,} B); "
            f"{target} allows {device.smem_per_block_optin:,} B. Shrink the CTA tile or set "
            "use_smem_epilogue=False.",
        )
    check(
        1 <= params.stages <= MAX_STAGES,
        "stages",
        params.stages,
        f"1..{MAX_STAGES}",
        f"stages={params.stages}; the ampere pipeline supports 1 to {MAX_STAGES} stages. "
        f"Set stages between 1 and {MAX_STAGES}.",
    )
    check(
        params.stages <= 2 or params.async_gmem_load_operands,
        "stages",
        params.stages,
        "<= 2 without async loads",
        f"stages={params.stages} needs cp.async loads, but async_gmem_load_operands=False. "
        "Set async_gmem_load_operands=True or stages <= 2.",
    )
    if params.async_gmem_load_operands:
        widths = problem.vector_widths
        itemsize = problem.operand_dtype.itemsize
        copy = itemsize * min(widths.a, widths.b)
        check(
            copy in _CP_ASYNC_BYTES,
            "async_gmem_load_operands",
            True,
            "cp.async copies of 4, 8 or 16 B",
            f"async_gmem_load_operands=True needs cp.async copies of 4, 8 or 16 B, but the "
            f"operands allow {min(widths.a, widths.b)} x {itemsize} B = {copy} B. Set "
            "async_gmem_load_operands=False (and stages <= 2).",
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
        params.cluster_dims == (1, 1),
        "cluster_dims",
        params.cluster_dims,
        "(1, 1)",
        f"the ampere scheduler does not support thread block clusters (cluster_dims="
        f"{params.cluster_dims}); use the hopper scheduler or set cluster_dims=(1, 1).",
    )
    check(
        params.tiling_strategy is TilingStrategy.one_tile_per_cta,
        "tiling_strategy",
        params.tiling_strategy,
        "one_tile_per_cta",
        f"the ampere scheduler does not support {params.tiling_strategy.value} tiling; use the "
        "hopper scheduler or set tiling_strategy='one_tile_per_cta'.",
    )
    check(
        not params.warp_specialized,
        "warp_specialized",
        True,
        "False",
        "the ampere scheduler does not support warp specialization; use the hopper scheduler "
        "or set warp_specialized=False.",
    )
    return found
