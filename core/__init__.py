"""mmaplug: matmul fusions to tensor-core GPU kernels, with pluggy scheduler and heuristic plugins."""

from __future__ import annotations

from .dtypes import DType, bfloat16, float16, float32, float64
from .errors import MatmulError, MatmulWarning
from .problem import Layout, MatmulProblem

__all__ = [
    "DType",
    "Layout",
    "MatmulError",
    "MatmulProblem",
    "MatmulWarning",
    "bfloat16",
    "float16",
    "float32",
    "float64",
]
