"""An example mmaplug heuristic for the hopper scheduler (TMA + wgmma, sm_90a).

Two hooks, each for one shape class; for anything else they return None and mmaplug's
default heuristic decides:

* ``mmaplug_matmul_params``: a large 16-bit matmul (M and N at least ``LARGE``, K at least
  1024) planned for the hopper scheduler gets ``PAIRS``: 128x256x64 CTA tiles over two 64x256
  consumer warp groups, 4 stages, persistent, and CTA pairs along M (``cluster_dims=(2, 1)``:
  the two CTAs of a pair share one multicast B tile). The default heuristic pairs CTAs only
  on grids of many waves.
* ``mmaplug_matmul_overrides``: on a hopper plan of a deep-K problem whose output tiles do not
  fill the GPU's SMs, split K in two (``splitk_factor=2``), whatever the base tiles.

It illustrates the hooks; the values are not tuned (``mmaplug tune`` and ``mmaplug report``
measure such choices on a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mmaplug import MatmulParams, TilingStrategy, hookimpl
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device

__all__ = ["DEEP_K", "LARGE", "PAIRS", "mmaplug_matmul_overrides", "mmaplug_matmul_params"]

#: Registered name (``mmaplug.testing.registered`` uses it); the same as the entry point's.
name: Final = "hopper_tiles"

LARGE: Final = 4096  # M and N from which PAIRS answers
DEEP_K: Final = 8192  # K from which a problem of few output tiles splits K
PAIRS: Final = MatmulParams(
    cta_tile=(128, 256, 64),  # k: whole 128-byte swizzle rows of 16-bit operands
    warp_tile=(64, 256, 64),  # two consumer warp groups, one per 64 rows
    instruction_tile=(64, 256, 16),  # wgmma m64nNk16 with N = warp_tile.n: the only choice
    stages=4,  # 4 x 48 KiB of operands, and the staged epilogue, fit in 227 KiB
    use_smem_epilogue=True,
    cluster_dims=(2, 1),  # a pair along M; 256 halves into whole boxes of either B layout
    tiling_strategy=TilingStrategy.persistent,
    warp_specialized=True,  # the hopper kernel always is (a TMA producer warp group)
)


@hookimpl
def mmaplug_matmul_params(problem: MatmulProblem, scheduler: str) -> MatmulParams | None:
    """``PAIRS`` for a large single 16-bit matmul on the hopper scheduler; None otherwise."""
    if scheduler != "hopper" or problem.horizontal > 1 or problem.operand_dtype.itemsize != 2:
        return None  # (PAIRS's K steps of 16 are 16-bit wgmmas: FP8 ones take 32)
    if min(problem.m, problem.n) < LARGE or problem.k < 1024:
        return None
    return PAIRS


@hookimpl
def mmaplug_matmul_overrides(
    problem: MatmulProblem, device: Device, params: MatmulParams
) -> Mapping[str, object] | None:
    """``splitk_factor=2`` for a deep-K hopper plan whose output tiles leave SMs idle.

    The overrides hook is not told the scheduler: only hopper plans are warp-specialized (the
    ampere scheduler refuses ``warp_specialized=True``), so that tells them apart.
    """
    if not params.warp_specialized or problem.horizontal > 1 or params.splitk_factor != 1:
        return None
    cta = params.cta_tile
    tiles = problem.batch * -(-problem.m // cta.m) * -(-problem.n // cta.n)
    if problem.k < DEEP_K or tiles >= device.sm_count:
        return None
    return {"splitk_factor": 2}
