"""Test helpers for plugins: fakes, scoped registration, a hook recorder, sentinels, overrides."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, final

import attrs
import pluggy

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.hooks.manager import make_plugin_manager, plugin_name
from mmaplug.markers import hookimpl
from mmaplug.planning.params import (
    HARNESS_CHANGES,
    SENTINEL_SCHEDULERS,
    SENTINELS,
    MatmulParams,
    ParamOverride,
    check_param_names,
)

__all__ = [
    "OVERRIDE_SOURCE",
    "SENTINELS",
    "FakeHeuristic",
    "HookCall",
    "HookRecorder",
    "make_plugin_manager",
    "override_matmul_params",
    "registered",
    "sentinels",
]

OVERRIDE_SOURCE: Final = "override_matmul_params"


@contextlib.contextmanager
def override_matmul_params(**changes: object) -> Iterator[Mapping[str, object]]:
    """Within the block, every plan in this thread or async task gets *changes* as an override.

    Contexts nest (an inner key wins); each thread and asyncio task sees only its own. The
    changes reach the params through the built-in ``testing`` plugin, with the provenance source
    ``"override_matmul_params"``; the keys are checked when the block is entered.

    :raises UnknownParamError: a key is not a MatmulParams field (with a near miss).
    :returns: the changes in force inside the block.
    """
    check_param_names(changes, source=OVERRIDE_SOURCE)
    merged = MappingProxyType({**HARNESS_CHANGES.get(), **changes})
    token = HARNESS_CHANGES.set(merged)
    try:
        yield merged
    finally:
        HARNESS_CHANGES.reset(token)


def sentinels(scheduler: str) -> Mapping[str, object]:
    """The ``SENTINELS`` legal on *scheduler* (``"ampere"`` or ``"hopper"``): one set.

    Apply them together (``override_matmul_params(**sentinels("hopper"))``), or at least the
    tile fields together: a sentinel warp tile divides no default CTA tile. Each of the others
    is legal on its own. The set holds for 16-bit operands, B K-major (layouts TN and TT; an
    N-major B needs hopper warp tiles of 64 columns) and K of at least 3 CTA tiles (split-K 3).

    :raises UsageError: *scheduler* has no sentinels.
    """
    scoped = {name for scope in SENTINEL_SCHEDULERS.values() for name in scope}
    if scheduler not in scoped:
        raise UsageError(f"no test sentinels for scheduler {scheduler!r}; sentinels exist for "
                         f"{', '.join(sorted(scoped))}")  # fmt: skip
    return MappingProxyType(
        {k: v for k, v in SENTINELS.items() if scheduler in SENTINEL_SCHEDULERS[k]}
    )


@hookimpl
def mmaplug_matmul_overrides() -> ParamOverride | None:
    """The changes of the active ``override_matmul_params`` block, if any."""
    changes = HARNESS_CHANGES.get()
    return ParamOverride(OVERRIDE_SOURCE, changes) if changes else None


def _always(problem: MatmulProblem) -> bool:
    return True


@final
@attrs.frozen(eq=False)
class FakeHeuristic:
    """A heuristic plugin for tests: *changes* as an override, or *base* with them as base params.

    Register it with :func:`registered` (or ``make_plugin_manager(plugins=[...])``) so that it
    is registered under *name*, which provenance and error messages then show.

    :param when: answer only for problems it returns True for; defer (None) otherwise.
    """

    name: str
    changes: Mapping[str, object] = attrs.field(factory=dict, converter=MappingProxyType)
    base: MatmulParams | None = None
    when: Callable[[MatmulProblem], bool] = _always

    def __attrs_post_init__(self) -> None:
        check_param_names(self.changes, source=self.name)

    @hookimpl
    def mmaplug_matmul_params(self, problem: MatmulProblem) -> MatmulParams | None:
        """``base`` with ``changes`` applied, when a base was given and *problem* matches."""
        if self.base is None or not self.when(problem):
            return None
        return self.base.with_overrides(**self.changes)

    @hookimpl
    def mmaplug_matmul_overrides(self, problem: MatmulProblem) -> ParamOverride | None:
        """``changes`` from source *name*, when no base was given and *problem* matches."""
        if self.base is not None or not self.when(problem) or not self.changes:
            return None
        return ParamOverride(self.name, self.changes)


@contextlib.contextmanager
def registered(pm: pluggy.PluginManager, *plugins: object) -> Iterator[tuple[str | None, ...]]:
    """Register *plugins* for the block and always unregister them (nvFuser's factory guard).

    A plugin with a string ``name`` attribute is registered under it. A blocked name is skipped
    (its entry in the yielded tuple is None), as ``PluginManager.register`` does.
    """
    added: list[object] = []
    try:
        names = []
        for plugin in plugins:
            name = pm.register(plugin, name=plugin_name(plugin))
            names.append(name)
            if name is not None:
                added.append(plugin)
        pm.check_pending()
        yield tuple(names)
    finally:
        for plugin in reversed(added):
            if pm.is_registered(plugin):
                pm.unregister(plugin)


@final
class HookCall:
    """One recorded hook call: ``name``, ``kwargs`` (also readable as attributes), ``plugins``."""

    def __init__(self, name: str, kwargs: Mapping[str, object], plugins: Sequence[str]) -> None:
        self.name = name
        self.kwargs = dict(kwargs)
        self.plugins = tuple(plugins)

    def __getattr__(self, key: str) -> object:
        try:
            return self.__dict__["kwargs"][key]
        except KeyError:
            raise AttributeError(key) from None

    def __repr__(self) -> str:
        return f"<HookCall {self.name} plugins={list(self.plugins)}>"


@final
class HookRecorder:
    """Record every hook call of *pm* (through ``add_hookcall_monitoring``) until finished.

    Core calls each implementation on its own, so one logical hook call can appear once per
    plugin implementing it; ``hook_names()`` collapses such runs.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.calls: list[HookCall] = []

        def before(
            name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]
        ) -> None:
            self.calls.append(HookCall(name, kwargs, [impl.plugin_name for impl in impls]))

        def after(outcome: object, name: str, impls: object, kwargs: object) -> None:
            pass

        self._undo: Callable[[], None] | None = pm.add_hookcall_monitoring(before, after)

    def finish_recording(self) -> None:
        """Stop recording (idempotent)."""
        if self._undo is not None:
            self._undo()
            self._undo = None

    def __enter__(self) -> HookRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish_recording()

    def getcalls(self, names: str | Iterable[str]) -> list[HookCall]:
        """The calls of the hooks in *names* (a list, or a space-separated string), in order."""
        wanted = set(names.split() if isinstance(names, str) else names)
        return [call for call in self.calls if call.name in wanted]

    def popcall(self, name: str) -> HookCall:
        """Remove and return the first recorded call of *name*."""
        for index, call in enumerate(self.calls):
            if call.name == name:
                return self.calls.pop(index)
        raise AssertionError(f"no call of {name!r} recorded; recorded: {self.hook_names()}")

    def hook_names(self) -> list[str]:
        """Hook names in call order, consecutive repeats collapsed."""
        names: list[str] = []
        for call in self.calls:
            if not names or names[-1] != call.name:
                names.append(call.name)
        return names

    def assert_order(self, names: Sequence[str]) -> None:
        """Assert that *names* were called in this order (other calls may come in between)."""
        seen = iter(self.hook_names())
        missing = [name for name in names if not any(name == got for got in seen)]
        if missing:
            raise AssertionError(
                f"hooks not called in order {list(names)}; recorded: {self.hook_names()}"
            )
