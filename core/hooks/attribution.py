"""Where a warning about a plugin points: the source line of the plugin's own code."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pluggy

__all__ = ["hookimpl_function", "warn_about", "warn_at"]


def hookimpl_function(
    pm: pluggy.PluginManager | None, plugin: str, hook: str
) -> Callable[..., object] | None:
    """The function with which *plugin* implements *hook* in *pm*, if it does."""
    caller = getattr(pm.hook, hook, None) if pm is not None and hook else None
    if caller is None:
        return None
    for impl in caller.get_hookimpls():
        if impl.plugin_name == plugin:
            return impl.function
    return None


def warn_about(
    warning: Warning, pm: pluggy.PluginManager | None, plugin: str, hook: str, *, stacklevel: int
) -> None:
    """Issue *warning* at the line of *plugin*'s implementation of *hook* (see :func:`warn_at`).

    :param stacklevel: Where it points otherwise, counted from the caller of this function.
    """
    warn_at(warning, hookimpl_function(pm, plugin, hook), stacklevel=stacklevel + 1)


def warn_at(warning: Warning, function: object, *, stacklevel: int) -> None:
    """Issue *warning* at the ``def`` line of *function* (a plugin's code), so that the warning
    shows, and filters match, the plugin rather than mmaplug's planner.

    mmaplug's own functions (built-in plugins, the harness's fakes) and functions without source
    fall back to ``warnings.warn(stacklevel=...)``, counted from the caller of this function.
    """
    where = _source_line(function)
    if where is None:
        warnings.warn(warning, stacklevel=stacklevel + 1)
        return
    filename, lineno, module, module_globals = where
    warnings.warn_explicit(
        warning,
        type(warning),
        filename,
        lineno,
        module=module,
        registry=module_globals.setdefault("__warningregistry__", {}),
        module_globals=module_globals,
    )


def _source_line(function: object) -> tuple[str, int, str, dict[str, Any]] | None:
    """(file, ``def`` line, module, globals) of *function*; None for mmaplug's own or unknown."""
    function = getattr(function, "__func__", function)  # a bound method: its function
    if inspect.isfunction(function):
        function = inspect.unwrap(function)
    if not inspect.isfunction(function):
        return None
    module = getattr(function, "__module__", None) or ""
    if module == "mmaplug" or module.startswith("mmaplug."):
        return None
    try:
        filename = inspect.getsourcefile(function)
        lines, lineno = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    if filename is None:
        return None
    starts = ("def ", "async def ")
    offset = next((i for i, line in enumerate(lines) if line.lstrip().startswith(starts)), 0)
    return filename, lineno + offset, module, function.__globals__
