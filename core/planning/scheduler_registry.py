"""The registered scheduler objects of a plugin manager, by name, and the deprecated hooks'
warning.

``schedulers(pm)`` asks every plugin's ``mmaplug_schedulers`` (through the Guard, so that a
plugin that raises or answers something else than schedulers is named) and keeps the answer
until a plugin is registered or unregistered. Planning, building, ``mmaplug plugins``, the
tuner and the plugin reference read it; a heuristic told only a scheduler's name reads
``mmaplug.planning.scheduler.active(name)`` while planning.
"""

from __future__ import annotations

import threading
import weakref
from typing import Final

import pluggy

from mmaplug.errors import PluginError, PluginResultError
from mmaplug.hooks.attribution import warn_about
from mmaplug.hooks.guard import Guard, wrong
from mmaplug.hooks.manager import describe, get_plugin_manager, is_builtin
from mmaplug.planning.scheduler import Scheduler

__all__ = ["HOOK", "Registry", "owners", "schedulers", "warn_deprecated"]

HOOK: Final = "mmaplug_schedulers"

#: scheduler name -> (the plugin that registered it, the scheduler)
Registry = dict[str, tuple[str, Scheduler]]

_lock: Final = threading.Lock()
# pm -> (its generation when collected, what was collected); only answers without a fault
_cache: weakref.WeakKeyDictionary[pluggy.PluginManager, tuple[int, Registry]] = (
    weakref.WeakKeyDictionary()
)


def schedulers(pm: pluggy.PluginManager | None = None, *, guard: Guard | None = None) -> Registry:
    """Every registered scheduler by name: ``{name: (plugin, scheduler)}``.

    The ``mmaplug_schedulers`` answers are kept until a plugin is registered or unregistered
    (``PluginManager.generation``); answers with a fault are asked again each time, so that
    each caller's policy rules on them.

    :param pm: The plugin manager; ``get_plugin_manager()`` when None.
    :param guard: The planning's Guard: its strictness rules on faults, and a plugin dropped
        for one is dropped from its plan too.
    :raises PluginError: A plugin answered a scheduler name a plugin registered before it
        holds (naming both), or one name twice, raised, or answered something that is no
        ``Scheduler`` (strict mode or a built-in plugin; otherwise a ``PluginWarning``, and its
        schedulers are left out).
    """
    pm = get_plugin_manager() if pm is None else pm
    generation = getattr(pm, "generation", None)
    with _lock:
        cached = _cache.get(pm)
    if cached is not None and cached[0] == generation:
        return dict(cached[1])
    collector = Guard(pm, strict=None if guard is None else guard.strict)
    found = _collect(collector)
    if guard is not None:
        guard.dropped |= collector.dropped
    if isinstance(generation, int) and not collector.dropped:
        with _lock:
            _cache[pm] = (generation, found)
    return dict(found)


def forget(pm: pluggy.PluginManager) -> None:
    """Drop *pm*'s kept ``mmaplug_schedulers`` answers: the next plan asks every plugin again
    (``HookRecorder`` starts so, to record a plan's every hook call)."""
    with _lock:
        _cache.pop(pm, None)


def owners(registry: Registry) -> frozenset[str]:
    """The plugins that registered schedulers in *registry*."""
    return frozenset(plugin for plugin, _ in registry.values())


def _collect(guard: Guard) -> Registry:
    """Every plugin's schedulers, in the order the plugins were registered (the built-ins
    first): a plugin answering a name one registered before it holds, or one name twice, is
    faulty, and none of its schedulers is kept (strict mode raises, naming both plugins)."""
    order = [name for name, _ in guard.pm.list_name_plugin()]
    found: Registry = {}
    for plugin, answer in sorted(guard.call(HOOK), key=lambda item: order.index(item[0])):
        objects = _schedulers_in(answer)
        if isinstance(objects, str):
            guard.fault(plugin, HOOK, objects, cls=PluginResultError)
            continue
        names = [scheduler.name for scheduler in objects]
        taken = [n for n in names if n in found]
        twice = [n for n in dict.fromkeys(names) if names.count(n) > 1]
        if taken or twice:
            holder = (
                f"as plugin {describe(guard.pm, found[taken[0]][0])} does" if taken else "twice"
            )
            guard.fault(
                plugin,
                HOOK,
                f"answered a scheduler named {(taken or twice)[0]!r} {holder}; rename one, or "
                "block one of the plugins (MMAPLUG_DISABLE)",
                cls=PluginError,
                fallback="its schedulers are left out",
            )
            continue
        found.update((scheduler.name, (plugin, scheduler)) for scheduler in objects)
    return found


def _schedulers_in(answer: object) -> tuple[Scheduler, ...] | str:
    """The schedulers of one plugin's answer, or what is wrong with it (a fault's text)."""
    items = (answer,) if _is_scheduler(answer) else answer
    if not isinstance(items, list | tuple):
        return wrong(answer, "a mmaplug.planning.scheduler.Scheduler, a list of them or None")
    for item in items:
        if not _is_scheduler(item):
            return (
                f"{wrong(item, 'mmaplug.planning.scheduler.Scheduler items')}: a scheduler has "
                "name, priority, accepts, space, rules, resources, adjustments and build"
            )
        name, priority = item.name, item.priority
        if not isinstance(name, str) or not name:
            return f"returned a scheduler whose name is {name!r}; expected a non-empty str"
        if not isinstance(priority, int) or isinstance(priority, bool):
            return (
                f"returned scheduler {name!r} whose priority is {priority!r}; expected an int "
                "(higher wins among the schedulers that accept a problem)"
            )
    return tuple(items)


def _is_scheduler(value: object) -> bool:
    try:
        return isinstance(value, Scheduler)
    except Exception:  # a hostile __getattr__
        return False


def warn_deprecated(pm: pluggy.PluginManager, plugin: str, hook: str) -> None:
    """A ``DeprecationWarning`` at *plugin*'s implementation of the deprecated *hook*
    (``mmaplug_scheduler_candidates``, ``mmaplug_build_kernel``), whose answer is used.

    Built-in plugins are not warned about. The warning points at the plugin's function, so the
    ``warnings`` registry shows it once per plugin (``-W default``); tests see it in each test.
    """
    if is_builtin(pm, plugin):
        return
    warning = DeprecationWarning(
        f"plugin {describe(pm, plugin)} implements {hook}, which is deprecated and asked for "
        "one more release only: return your scheduler objects "
        "(mmaplug.planning.scheduler.Scheduler: "
        f"accepts, space, rules, resources, adjustments, build) from {HOOK} instead"
    )
    warn_about(warning, pm, plugin, hook, stacklevel=3)
