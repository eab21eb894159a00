"""A plugin's hook functions checked at registration: what pluggy ignores or words tersely."""

from __future__ import annotations

import difflib
import inspect

import pluggy

from mmaplug.hooks import hookspecs
from mmaplug.markers import PROJECT

__all__ = ["instance_hooks", "near_hooks", "undecorated", "unknown_arguments", "unknown_hooks"]

_BY_POSITION = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def undecorated(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The ``mmaplug_*`` functions of *plugin* that are no hookimpl: pluggy never calls them."""
    found = []
    for attr in dir(plugin):
        if not attr.startswith(f"{PROJECT}_") or pm.parse_hookimpl_opts(plugin, attr) is not None:
            continue
        raw = inspect.getattr_static(plugin, attr, None)  # no property is run, as in pluggy
        function = getattr(raw, "__func__", raw)  # staticmethod, classmethod
        if inspect.isroutine(function) and not hasattr(function, f"{PROJECT}_spec"):
            found.append(attr)
    return found


def instance_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks of *plugin*, a class, that are instance methods: pluggy would call them with
    the problem as ``self`` (the class was registered where an instance was meant)."""
    if not isinstance(plugin, type):
        return []
    return [
        attr
        for attr in dir(plugin)
        if pm.parse_hookimpl_opts(plugin, attr) is not None
        and inspect.isfunction(inspect.getattr_static(plugin, attr, None))
    ]


def unknown_arguments(
    pm: pluggy.PluginManager, plugin: object
) -> tuple[str, list[str], list[str]] | None:
    """The first hook of *plugin* whose implementation takes arguments the hook does not pass:
    ``(hook, those arguments, the hook's arguments)``; None when there is none."""
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        spec = getattr(getattr(pm.hook, hook, None), "spec", None)
        if spec is None:
            continue
        accepted = [*spec.argnames, *spec.kwargnames]
        try:
            arguments = inspect.signature(getattr(plugin, attr)).parameters.values()
        except (TypeError, ValueError):  # no signature to read
            continue
        unknown = [
            arg.name  # as pluggy: arguments without a default must be ones the hook passes
            for arg in arguments
            if arg.kind in _BY_POSITION and arg.default is arg.empty and arg.name not in accepted
        ]
        if unknown:
            return hook, unknown, accepted
    return None


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks *plugin* implements that have no spec (misspelt hook names)."""
    return sorted(
        name
        for name, caller in vars(pm.hook).items()
        if not name.startswith("_")
        and not caller.has_spec()
        and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
    )


def near_hooks(hooks: list[str]) -> str:
    """`` (did you mean ...?)`` naming the hooks closest to *hooks*, or ``""``."""
    known = [name for name in dir(hookspecs) if name.startswith(f"{PROJECT}_")]
    near = [m for hook in hooks for m in difflib.get_close_matches(hook, known, n=1)]
    return f" (did you mean {', '.join(near)}?)" if near else ""
