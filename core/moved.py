"""Module paths of release 0.1 that moved into subpackages: they keep working for one release.

``import mmaplug.params`` (or any path in ``MOVED``) gives the module at its new path, with a
``DeprecationWarning`` that names the importing module's file and the new path. Three old modules
became packages (``analysis``, ``codegen``, ``cli``); their names stay reachable as attributes of
the package (``package_getattr``). Not aliased: ``compile``, ``evaluate`` and ``prebuild``, whose
names on ``mmaplug`` are the public functions (an alias would replace them). Remove this module in
0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Final

#: Old dotted path -> new dotted path.
MOVED: Final = {
    "mmaplug.arguments": "mmaplug.ir.arguments",
    "mmaplug.attribution": "mmaplug.hooks.attribution",
    "mmaplug.bench": "mmaplug.cli.bench",
    "mmaplug.bindings": "mmaplug.analysis.bindings",
    "mmaplug.cache": "mmaplug.cuda.cache",
    "mmaplug.choices": "mmaplug.planning.choices",
    "mmaplug.cli_args": "mmaplug.cli.args",
    "mmaplug.cli_cache": "mmaplug.cli.cache",
    "mmaplug.cli_run": "mmaplug.cli.run",
    "mmaplug.cuda.emulation": "mmaplug.sim.intrinsics",
    "mmaplug.cuda.sim_internals": "mmaplug.sim.simulator",
    "mmaplug.cuda.sm90_emulation": "mmaplug.sim.sm90",
    "mmaplug.cuda.sm90_sim_block": "mmaplug.sim.block",
    "mmaplug.cuda.sm90_sim_cluster": "mmaplug.sim.cluster",
    "mmaplug.cuda.sm90_sim_wgmma": "mmaplug.sim.wgmma",
    "mmaplug.cuda.tensors": "mmaplug.cuda.kernel_views",
    "mmaplug.demo": "mmaplug.cli.demo",
    "mmaplug.device": "mmaplug.planning.device",
    "mmaplug.dtypes": "mmaplug.ir.dtypes",
    "mmaplug.dump": "mmaplug.runtime.dump",
    "mmaplug.epilogue": "mmaplug.analysis.epilogue",
    "mmaplug.framework_ops": "mmaplug.runtime.framework_segments",
    "mmaplug.frontend": "mmaplug.ir.frontend",
    "mmaplug.frontend_dims": "mmaplug.ir.frontend_dims",
    "mmaplug.frontend_ops": "mmaplug.ir.frontend_ops",
    "mmaplug.frontend_shapes": "mmaplug.ir.frontend_shape_ops",
    "mmaplug.fusion": "mmaplug.ir.fusion",
    "mmaplug.gpu": "mmaplug.cuda.presence",
    "mmaplug.guard": "mmaplug.hooks.guard",
    "mmaplug.hookcheck": "mmaplug.hooks.hookcheck",
    "mmaplug.hookspecs": "mmaplug.hooks.hookspecs",
    "mmaplug.horizontal": "mmaplug.analysis.horizontal",
    "mmaplug.lower_epilogue": "mmaplug.analysis.lower_epilogue",
    "mmaplug.manager": "mmaplug.hooks.manager",
    "mmaplug.params": "mmaplug.planning.params",
    "mmaplug.patterns": "mmaplug.analysis.patterns",
    "mmaplug.plan": "mmaplug.planning.plan",
    "mmaplug.plugin_reference": "mmaplug.planning.plugin_reference",
    "mmaplug.problem": "mmaplug.analysis.problem",
    "mmaplug.records": "mmaplug.planning.records",
    "mmaplug.scheduler": "mmaplug.planning.scheduler",
    "mmaplug.scheduler_registry": "mmaplug.planning.scheduler_registry",
    "mmaplug.segment": "mmaplug.runtime.segmentation",
    "mmaplug.segmented": "mmaplug.runtime.segmented_fusion",
    "mmaplug.shapes": "mmaplug.ir.symbolic",
    "mmaplug.specialize": "mmaplug.runtime.specialize",
    "mmaplug.staged_epilogue": "mmaplug.codegen.staged_epilogue",
    "mmaplug.translate": "mmaplug.analysis.translate",
    "mmaplug.tune.cli": "mmaplug.cli.tune",
    "mmaplug.tune.cli_report": "mmaplug.cli.report",
    "mmaplug.view_ops": "mmaplug.ir.view_ops",
}

#: Old modules that are now packages: old path -> the module that holds their names.
BECAME_PACKAGES: Final = {
    "mmaplug.analysis": "mmaplug.analysis.matmul_analysis",
    "mmaplug.cli": "mmaplug.cli.main",
    "mmaplug.codegen": "mmaplug.codegen.emitter",
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(
        f"{old} moved to {new} in mmaplug 0.2 (the old path works until 0.3): import {new}, "
        "or the name from mmaplug itself where it is public",
        DeprecationWarning,
        stacklevel=stacklevel + 1,  # the warnings module skips importlib's frames itself
    )


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (the same module object)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(spec.name, self.new, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already executed."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of ``MOVED``; installed on ``sys.meta_path`` by ``import mmaplug``."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put a ``MovedFinder`` on ``sys.meta_path`` once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())


def package_getattr(package: str, name: str) -> Any:
    """A name the old module *package* had (now in a module of the package), with the warning."""
    old = package
    holder = BECAME_PACKAGES[old]
    module = importlib.import_module(holder)
    submodule = importlib.util.find_spec(f"{package}.{name}") is not None
    if name.startswith("__") or submodule or not hasattr(module, name):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{old}.{name}", f"{holder}.{name}", stacklevel=3)
    value = getattr(module, name)
    setattr(sys.modules[package], name, value)  # warned once
    return value
