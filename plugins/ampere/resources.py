"""The ampere kernel's one resource model: shared memory, threads and copies of a CTA.

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
    "KERNEL_VECTORS",
    "MIN_BUILT_STAGES",
    "WARP_THREADS",
    "built_stages",
    "copies_per_thread",
    "cta_threads",
    "epilogue_tile_bytes",
    "kernel_vectors",
    "operand_ring_bytes",
    "operand_vectors",
    "resources",
    "smem_bytes",
]

WARP_THREADS: Final = 32
MIN_BUILT_STAGES: Final = 2  # the cp.async ring always has two buffers (see adjustments)
EPILOGUE_PAD: Final = 8  # floats of padding per staged accumulator row (epilogue_stride)
_ACCUMULATOR_BYTES: Final = 4  # the staged epilogue tile is float32
KERNEL_VECTORS: Final = (8, 4, 2, 1)  # elements per operand copy the generator emits


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


def kernel_vectors(problem: MatmulProblem) -> tuple[int, int]:
    """Elements per global->shared copy of A and B the kernel is generated with: the widest of
    8/4/2/1 dividing the problem's vector width. A width of 1 is a plain synchronous load; 2, 4
    and 8 are cp.async copies of 4, 8 and 16 B."""
    widths = problem.vector_widths
    return _kernel_vector(widths.a), _kernel_vector(widths.b)


def operand_vectors(params: MatmulParams, problem: MatmulProblem) -> tuple[int, int]:
    """``kernel_vectors`` of the kernel built for *params* (they do not change them)."""
    return kernel_vectors(problem)


def _kernel_vector(width: int) -> int:
    return next(v for v in KERNEL_VECTORS if width % v == 0)


def copies_per_thread(cta: Sequence[int], warp: Sequence[int], vectors: Sequence[int]) -> int:
    """Global->shared copies one thread issues a stage: A's cta_m x cta_k and B's cta_n x
    cta_k elements in copies of *vectors* elements, over the CTA's threads. The copy is
    unrolled with every address live, so this is the kernel's register pressure beside its
    accumulators (``Resources.copies``)."""
    m, n, k = cta
    vec_a, vec_b = vectors
    return -(-(m * k // vec_a + n * k // vec_b) // cta_threads(cta, warp))


def resources(params: MatmulParams, problem: MatmulProblem) -> Resources:
    """What one CTA of the kernel built for *params* takes (stages as built: at least two)."""
    cta, warp = params.cta_tile.as_tuple(), params.warp_tile.as_tuple()
    itemsize = problem.operand_dtype.itemsize
    return Resources(
        smem_bytes=smem_bytes(cta, built_stages(params), itemsize),
        threads=cta_threads(cta, warp),
        copies=copies_per_thread(cta, warp, kernel_vectors(problem)),
    )
