"""Test helpers for plugins: fakes, scoped registration, a hook recorder, sentinels, overrides."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple, final

import attrs
import pluggy

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.hooks.manager import (
    PluginInfo,
    PluginManager,
    current_plugin_manager,
    entry_point_names,
    installed_plugin,
    make_plugin_manager,
    plugin_name,
    swap_plugin_manager,
)
from mmaplug.markers import HARNESS_SOURCE, PROVENANCE_NAMES, hookimpl
from mmaplug.planning.params import (
    HARNESS_CHANGES,
    SENTINEL_SCHEDULERS,
    SENTINELS,
    MatmulParams,
    ParamOverride,
    check_param_names,
)
from mmaplug.planning.scheduler_registry import forget as forget_schedulers

__all__ = [
    "OVERRIDE_SOURCE",
    "SENTINELS",
    "FakeHeuristic",
    "HookCall",
    "HookRecorder",
    "make_plugin_manager",
    "override_matmul_params",
    "registered",
    "restoring_plugin_manager",
    "sentinels",
]

OVERRIDE_SOURCE: Final = HARNESS_SOURCE


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
    tile fields together: a sentinel warp tile divides no default CTA tile; on hopper, stages 7
    too (hopper's default tiles hold fewer). Each of the others is legal on its own. The set
    holds for 16-bit operands, B K-major (layouts TN and TT; an N-major B needs hopper warp
    tiles of 64 columns) and K of at least 3 CTA tiles (split-K 3).

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


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise UsageError(f"FakeHeuristic: name must be a non-empty str, got {name!r}")
    if name in PROVENANCE_NAMES:
        raise UsageError(
            f"FakeHeuristic: name {name!r} is provenance's name for values no plugin gave "
            f"({', '.join(PROVENANCE_NAMES)}); give the fake its own name"
        )


def _frozen(changes: object) -> Mapping[str, object]:
    """A copy of *changes* that nobody can change (the caller's dict may change later)."""
    if not isinstance(changes, Mapping):
        raise UsageError(
            f"FakeHeuristic: changes must be a mapping of MatmulParams fields to values "
            f"(changes={{'stages': 3}}), got {type(changes).__name__}"
        )
    return MappingProxyType(dict(changes))


def _check_base(base: object) -> None:
    if base is not None and not isinstance(base, MatmulParams):
        raise UsageError(
            f"FakeHeuristic: base must be MatmulParams or None, got {type(base).__name__} "
            "(build one with MatmulParams(...) or params.with_overrides(...))"
        )


@final
@attrs.frozen(eq=False)
class FakeHeuristic:
    """A heuristic plugin for tests: *changes* as an override, or *base* with them as base params.

    Register it with :func:`registered` (or ``make_plugin_manager(plugins=[...])``) so that it
    is registered under *name*, which provenance and error messages then show.

    :param when: answer only for problems it returns True for; defer (None) otherwise.
    """

    name: str = attrs.field(validator=lambda _, __, name: _check_name(name))
    changes: Mapping[str, object] = attrs.field(factory=dict, converter=_frozen)
    base: MatmulParams | None = attrs.field(
        default=None, validator=lambda _, __, base: _check_base(base)
    )
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

    A plugin with a string ``name`` attribute is registered under it. A string is an installed
    plugin's entry-point name (loaded and registered under that name, as users select it), else
    a module to import (registered under its dotted name), as ``make_plugin_manager(plugins=)``
    takes them. A blocked name is skipped (its entry in the yielded tuple is None), as
    ``PluginManager.register`` does.

    :raises UsageError: a plugin is None, or a string names neither an entry point nor a module.
    """
    added: list[tuple[object, str]] = []
    try:
        names = []
        for plugin in plugins:
            plugin, name, info = _resolved(plugin)
            name = pm.register(plugin, name=name)
            names.append(name)
            if name is not None:
                added.append((plugin, name))
                infos = getattr(pm, "plugin_info", None)
                if info is not None and infos is not None:
                    infos[name] = info
        pm.check_pending()
        yield tuple(names)
    finally:
        for plugin, name in reversed(added):
            if pm.is_registered(plugin):
                pm.unregister(plugin)
            getattr(pm, "plugin_info", {}).pop(name, None)


def _resolved(plugin: object) -> tuple[object, str | None, PluginInfo | None]:
    """*plugin* for ``registered``: the object, the name to register it under, its origin."""
    if plugin is None:
        raise UsageError("registered: a plugin is None; pass plugin objects, modules or names")
    if not isinstance(plugin, str):
        return plugin, plugin_name(plugin), None
    if (found := installed_plugin(plugin)) is not None:
        return found[0], plugin, found[1]
    try:
        module = importlib.import_module(plugin)
    except ModuleNotFoundError as error:
        if error.name != plugin and not plugin.startswith(f"{error.name}."):
            raise  # the module exists and fails inside: its own error
        installed = ", ".join(sorted(set(entry_point_names()))) or "none"
        raise UsageError(
            f"registered: {plugin!r} is neither an installed mmaplug plugin (entry points: "
            f"{installed}) nor an importable module"
        ) from error
    return module, plugin, PluginInfo(plugin, plugin)


@contextlib.contextmanager
def restoring_plugin_manager() -> Iterator[None]:
    """Undo, after the block, what it did to the process-wide manager (``mp.compile`` without
    ``pm=``): a manager built in it (from the ``MMAPLUG_*`` of that moment) is forgotten; the
    one from before comes back as it was, its plugins in their order (pluggy calls them so),
    its blocks, heuristic and policy. The pytest plugin runs every test in one."""
    before = current_plugin_manager()
    state = _state(before) if before is not None else None
    try:
        yield
    finally:
        swap_plugin_manager(before)
        if before is not None and state is not None and _state(before) != state:
            _restore(before, state)


class _ManagerState(NamedTuple):
    """What a test may change of a plugin manager."""

    plugins: list[tuple[str, object]]  # in registration order; a blocked name holds None
    heuristic: str | None
    strict: bool
    blocked: tuple[str, ...]
    skipped: dict[str, str]
    plugin_info: dict[str, PluginInfo]


def _state(pm: PluginManager) -> _ManagerState:
    return _ManagerState(list(pm.list_name_plugin()), pm.heuristic, pm.strict, pm.blocked,
                         dict(pm.skipped), dict(pm.plugin_info))  # fmt: skip


def _restore(pm: PluginManager, state: _ManagerState) -> None:
    """*pm* as *state* recorded it: every plugin unregistered (blocks lifted) and registered
    again in the recorded order."""
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            pm.unblock(name)
        else:
            pm.unregister(plugin)
    for name, plugin in state.plugins:
        if plugin is None:
            pm.set_blocked(name)
        else:
            pm.register(plugin, name=name)
    pm.heuristic, pm.strict, pm.blocked = state.heuristic, state.strict, state.blocked
    pm.skipped, pm.plugin_info = dict(state.skipped), dict(state.plugin_info)


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
    plugin implementing it; ``hook_names()`` collapses such runs. Planning keeps the answers
    of ``mmaplug_schedulers`` until the plugins change; the recorder drops them when it
    starts, so the first plan it records asks every hook, whatever *pm* planned before.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.calls: list[HookCall] = []
        forget_schedulers(pm)

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
