"""mmaplug: matmul fusions to tensor-core kernels, with pluggy scheduler and heuristic plugins."""

from __future__ import annotations

#: The distribution's version; pyproject.toml reads it from here (its one source).
__version__ = "0.1.0"

from mmaplug import moved, testing
from mmaplug.analysis.matmul_analysis import MatmulAnalysis, analyze, matmul_problem
from mmaplug.analysis.patterns import MatmulPattern
from mmaplug.analysis.problem import Layout, MatmulProblem, VectorWidths
from mmaplug.analysis.translate import find_matmul_patterns, translate_matmul_patterns
from mmaplug.errors import (
    DeclinedLaunchError,
    FallbackWarning,
    FusionError,
    InvalidParamsError,
    KernelBuildError,
    LaunchError,
    MatmulError,
    MatmulWarning,
    NoSchedulerError,
    OverrideConflictError,
    PluginError,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
    UnsupportedFusionError,
    UnsupportedTargetError,
    UsageError,
)
from mmaplug.hooks.manager import (
    DEFAULT_PLUGINS,
    ESSENTIAL_PLUGINS,
    PluginManager,
    get_plugin_manager,
    make_plugin_manager,
    reset_plugin_manager,
)
from mmaplug.ir.dtypes import (
    DType,
    bfloat16,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
)
from mmaplug.ir.evaluate import evaluate
from mmaplug.ir.frontend import FusionDefinition
from mmaplug.ir.fusion import Fusion, TensorView
from mmaplug.markers import hookimpl, hookspec
from mmaplug.planning.choices import Adjustment, KernelSpec, Provenance, Rejection, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import (
    CtaOrder,
    MatmulParams,
    ParamOverride,
    TileShape,
    TilingStrategy,
    Violation,
)
from mmaplug.planning.plan import explain, matmul_params, plan_problem
from mmaplug.runtime.compile import compile
from mmaplug.runtime.compiled_fusion import CompiledFusion
from mmaplug.runtime.prebuild import Prebuilt, prebuild

__all__ = [
    "DEFAULT_PLUGINS",
    "ESSENTIAL_PLUGINS",
    "Adjustment",
    "CompiledFusion",
    "CtaOrder",
    "DType",
    "DeclinedLaunchError",
    "Device",
    "FallbackWarning",
    "Fusion",
    "FusionDefinition",
    "FusionError",
    "InvalidParamsError",
    "KernelBuildError",
    "KernelSpec",
    "Layout",
    "LaunchError",
    "MatmulAnalysis",
    "MatmulError",
    "MatmulParams",
    "MatmulPattern",
    "MatmulProblem",
    "MatmulWarning",
    "NoSchedulerError",
    "OverrideConflictError",
    "ParamOverride",
    "PluginError",
    "PluginManager",
    "PluginResultError",
    "PluginWarning",
    "Prebuilt",
    "Provenance",
    "Rejection",
    "SchedulerChoice",
    "TensorView",
    "TileShape",
    "TilingStrategy",
    "UnknownParamError",
    "UnsupportedFusionError",
    "UnsupportedTargetError",
    "UsageError",
    "VectorWidths",
    "Violation",
    "analyze",
    "bfloat16",
    "compile",
    "evaluate",
    "explain",
    "find_matmul_patterns",
    "float16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "get_device",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "make_plugin_manager",
    "matmul_params",
    "matmul_problem",
    "plan_problem",
    "prebuild",
    "reset_plugin_manager",
    "testing",
    "translate_matmul_patterns",
]

moved.install()
