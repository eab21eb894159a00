"""A planned fusion's kernel: built by its scheduler once per kernel configuration, and the
``CompiledFusion`` that launches it (re-planned without a scheduler whose kernel declines)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from mmaplug.errors import InvalidParamsError, KernelBuildError, PluginResultError
from mmaplug.hooks.guard import SKIPPED, Guard, scheduler_label, wrong
from mmaplug.hooks.manager import describe
from mmaplug.log import BUILD
from mmaplug.planning.artifact import KernelArtifact
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler_registry import schedulers, warn_deprecated
from mmaplug.runtime import dump as kernel_dump
from mmaplug.runtime.compiled_fusion import CompiledFusion

if TYPE_CHECKING:
    from mmaplug.analysis.bindings import MatmulAnalysis
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.planning.choices import KernelSpec

_A = TypeVar("_A")


def kernel_key(spec: KernelSpec, analysis: MatmulAnalysis) -> tuple[Hashable, ...]:
    """What a built kernel depends on: scheduler, device, params, the problem but for its
    extents, the epilogue program and the operand prologues. Two plans with one key share one
    kernel."""
    return (
        spec.scheduler,
        spec.device,
        spec.params,
        spec.problem.without_extents(),
        analysis.epilogue,
        analysis.prologue_a,
        analysis.prologue_b,
    )


class KernelPool:
    """The kernels of one compiled fusion, each built once per ``kernel_key``."""

    def __init__(self) -> None:
        self._artifacts: dict[tuple[Hashable, ...], Any] = {}
        self._lock = threading.Lock()

    @property
    def builds(self) -> int:
        """How many kernels were built (calls of ``mmaplug_build_kernel`` that answered)."""
        return len(self._artifacts)

    def get(
        self, spec: KernelSpec, analysis: MatmulAnalysis, build: Callable[[KernelSpec], _A]
    ) -> _A:
        """The kernel for *spec*: one built before with its key, else ``build(spec)``."""
        key = kernel_key(spec, analysis)
        with self._lock:
            artifact: _A | None = self._artifacts.get(key)
            if artifact is None:
                artifact = self._artifacts[key] = build(spec)
        return artifact


def compile_planned(
    analysis: MatmulAnalysis,
    spec: KernelSpec,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
    kernels: KernelPool | None = None,
) -> CompiledFusion:
    """*analysis* planned as *spec*, with its kernel: one of *kernels* (those a fusion with
    symbolic extents built so far) when its configuration matches, else newly built."""
    target, shape_class = spec.device, spec.provenance.shape_class
    pool = KernelPool() if kernels is None else kernels

    def build(spec: KernelSpec) -> KernelArtifact:
        return pool.get(spec, analysis, new_kernel)

    def new_kernel(spec: KernelSpec) -> KernelArtifact:
        guard = Guard(pm)
        start = time.perf_counter()
        artifact = _build(guard, spec, analysis)
        if BUILD.isEnabledFor(logging.INFO):
            BUILD.info(
                "%s: kernel %s built by plugin %s in %.3f s",
                spec.name, artifact.kernel_name, spec.provenance.scheduler_plugin,
                time.perf_counter() - start,
            )  # fmt: skip
        guard.notify("mmaplug_kernel_built", spec=spec, artifact=artifact)
        kernel_dump.on_build(spec, artifact)
        return artifact

    def replan(declined: Mapping[str, str]) -> tuple[KernelSpec, KernelArtifact, str]:
        note = ""
        problem = analysis.problem
        try:
            again = plan_problem(
                problem, target, pm=pm, overrides=overrides, declined=declined,
                shape_class=shape_class,
            )  # fmt: skip
        except InvalidParamsError:  # the caller's overrides were meant for the declined kernel
            again = plan_problem(problem, target, pm=pm, declined=declined, shape_class=shape_class)
            note = " (planned without the caller's overrides, which it cannot take)"
        return again, build(again), note

    return CompiledFusion(analysis, spec, build(spec), replan)


def _build(guard: Guard, spec: KernelSpec, analysis: MatmulAnalysis) -> KernelArtifact:
    """The chosen scheduler object's artifact; else (deprecated) the first valid artifact of
    ``mmaplug_build_kernel``, where the plugin that offered the scheduler must give one."""
    hook = "mmaplug_build_kernel"
    owner = spec.provenance.scheduler_plugin
    own = schedulers(guard.pm, guard=guard).get(spec.scheduler)
    if own is not None and owner in ("", own[0]):
        plugin, scheduler = own
        label = scheduler_label(spec.scheduler, "build")
        artifact = guard.ask(plugin, label, scheduler.build, spec, analysis)
        if artifact is not SKIPPED:  # a fault raised: building has no fallback
            fault = _artifact_fault(artifact)
            if not fault:
                return artifact  # type: ignore[return-value]
            guard.fault(plugin, label, fault, cls=PluginResultError, fallback=None)
    for plugin, artifact in guard.call(hook, needed=owner, spec=spec, analysis=analysis):
        fault = _artifact_fault(artifact)
        if not fault:
            warn_deprecated(guard.pm, plugin, hook)
            return artifact  # type: ignore[return-value]
        fallback = None if plugin == owner else ""
        guard.fault(plugin, hook, fault, cls=PluginResultError, fallback=fallback)
    who = f"plugin {describe(guard.pm, owner)}" if owner else "the plugin that offered it"
    raise KernelBuildError(
        f"no plugin built a kernel for scheduler {spec.scheduler!r}; {who} must implement "
        f"{hook} and answer for it (deprecated: a scheduler object returned from "
        "mmaplug_schedulers builds its own kernels)"
    )


def _artifact_fault(artifact: object) -> str:
    """What an artifact lacks of ``KernelArtifact`` ("" if nothing)."""
    try:
        name = getattr(artifact, "kernel_name", None)
        missing = [a for a in ("ptx", "launch", "bind") if not callable(getattr(artifact, a, None))]
    except Exception as error:  # a hostile __getattr__
        return f"returned an artifact that raised {type(error).__name__} on reading: {error}"
    if not isinstance(name, str) or missing:
        lacks = ", ".join(missing + ([] if isinstance(name, str) else ["kernel_name (a str)"]))
        return f"{wrong(artifact, 'a KernelArtifact')}, which lacks {lacks}"
    return ""
