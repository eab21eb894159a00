"""The ampere kernel's one resource model: shared memory and threads of a CTA.

The rules (``limits``), the kernel config (``AmpereKernelConfig.smem_bytes``, ``.threads``) and,
through ``SCHEDULER.resources``, the default heuristic all count with these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.scheduler import Resources

__all__ = [
    "EPILOGUE_PAD",
    "MIN_BUILT_STAGES",
    "WARP_THREADS",
    "built_stages",
    "cta_threads",
    "epilogue_tile_bytes",
    "operand_ring_bytes",
    "resources",
    "smem_bytes",
]

WARP_THREADS: Final = 32
MIN_BUILT_STAGES: Final = 2  # the cp.async ring always has two buffers (see adjustments)
EPILOGUE_PAD: Final = 8  # floats of padding per staged accumulator row (epilogue_stride)
_ACCUMULATOR_BYTES: Final = 4  # the staged epilogue tile is float32


def built_stages(params: MatmulParams) -> int:
    """Stages of the built pipeline: ``params.stages``, but at least two."""
    return max(MIN_BUILT_STAGES, params.stages)


def operand_ring_bytes(cta: Sequence[int], stages: int, itemsize: int) -> int:
    """Shared memory of the operand ring: stages x (cta_m + cta_n) x cta_k x itemsize."""
    m, n, k = cta
    return stages * (m + n) * k * itemsize


def epilogue_tile_bytes(cta: Sequence[int]) -> int:
    """Shared memory of the staged float32 accumulator tile (rows padded by EPILOGUE_PAD)."""
    m, n, _ = cta
    return m * (n + EPILOGUE_PAD) * _ACCUMULATOR_BYTES


def smem_bytes(cta: Sequence[int], stages: int, itemsize: int) -> int:
    """Dynamic shared memory of a CTA: the epilogue reuses the operand ring, so the larger."""
    return max(operand_ring_bytes(cta, stages, itemsize), epilogue_tile_bytes(cta))


def cta_threads(cta: Sequence[int], warp: Sequence[int]) -> int:
    """Threads of a CTA: one warp per warp tile of the CTA tile."""
    return WARP_THREADS * (cta[0] // warp[0]) * (cta[1] // warp[1])


def resources(params: MatmulParams, problem: MatmulProblem) -> Resources:
    """What one CTA of the kernel built for *params* takes (stages as built: at least two)."""
    cta, warp = params.cta_tile.as_tuple(), params.warp_tile.as_tuple()
    itemsize = problem.operand_dtype.itemsize
    return Resources(
        smem_bytes=smem_bytes(cta, built_stages(params), itemsize),
        threads=cta_threads(cta, warp),
    )
