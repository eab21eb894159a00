"""mmaplug: matmul fusions to tensor-core GPU kernels, with pluggy scheduler and heuristic plugins."""

from __future__ import annotations

from .analysis import MatmulAnalysis, analyze, matmul_problem
from .dtypes import DType, bfloat16, float16, float32, float64
from .errors import (
    FusionError,
    MatmulError,
    MatmulWarning,
    UnsupportedFusionError,
)
from .evaluate import evaluate
from .frontend import FusionDefinition
from .fusion import Fusion, TensorView
from .markers import hookimpl, hookspec
from .patterns import MatmulPattern, find_matmul_patterns
from .problem import Layout, MatmulProblem, VectorWidths
from .translate import translate_matmul_patterns

__all__ = [
    "DType",
    "Fusion",
    "FusionDefinition",
    "FusionError",
    "Layout",
    "MatmulAnalysis",
    "MatmulError",
    "MatmulPattern",
    "MatmulProblem",
    "MatmulWarning",
    "TensorView",
    "UnsupportedFusionError",
    "VectorWidths",
    "analyze",
    "bfloat16",
    "evaluate",
    "find_matmul_patterns",
    "float16",
    "float32",
    "float64",
    "hookimpl",
    "hookspec",
    "matmul_problem",
    "translate_matmul_patterns",
]
