"""The plugin manager: built-in plugins, entry points, blocking, heuristic choice, environment."""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Final, TypedDict, final

import attrs
import pluggy

from . import env, hookspecs
from .errors import PluginError, PluginWarning, UsageError
from .markers import PROJECT

ENTRY_POINT_GROUP: Final = "mmaplug"
DEFAULT_HEURISTIC: Final = "default"
ESSENTIAL_PLUGINS: Final = ("mmaplug.heuristics.default", "mmaplug.patterns")
DEFAULT_PLUGINS: Final = (
    *ESSENTIAL_PLUGINS,
    "mmaplug.plugins.ampere",
    "mmaplug.plugins.hopper",
    "mmaplug.testing",
)
_VERSION: Final = importlib.metadata.version("mmaplug")  # only importable when installed


def short_name(module: str) -> str:
    """The registered name of a built-in plugin module: its last dotted component."""
    return module.rpartition(".")[2]


@final
@attrs.frozen
class PluginInfo:
    """Where a registered plugin came from: its module and distribution (name, version)."""

    name: str
    module: str
    distribution: str = ""
    version: str = ""


@final
class PluginManager(pluggy.PluginManager):
    """A pluggy manager carrying mmaplug's policy: strict or warn, and the chosen heuristic."""

    def __init__(self, *, strict: bool = False, heuristic: str | None = None) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(hookspecs)
        self.strict = strict
        self.heuristic = heuristic
        self.blocked: tuple[str, ...] = ()
        self.plugin_info: dict[str, PluginInfo] = {}

    def check_heuristic(self) -> None:
        """Raise ``UsageError`` unless the selected heuristic is a registered plugin."""
        if self.heuristic is None or self.has_plugin(self.heuristic):
            return
        names = ", ".join(sorted(name for name, _ in self.list_name_plugin()))
        raise UsageError(f"unknown heuristic plugin {self.heuristic!r}; registered: {names}")


def plugin_name(plugin: object) -> str | None:
    """The name to register *plugin* under: its ``name`` attribute if a string, else pluggy's."""
    name = getattr(plugin, "name", None)
    return name if isinstance(name, str) else None


def make_plugin_manager(
    *,
    plugins: Iterable[object] = (),
    block: Iterable[str] = (),
    heuristic: str | None = None,
    load_entrypoints: bool = True,
    strict: bool | None = None,
) -> PluginManager:
    """Build a plugin manager; tests pass ``load_entrypoints=False`` for a hermetic one.

    :param plugins: Extra plugin objects or module names, registered after the entry points.
    :param block: Plugin names never to register (built-in short names or entry-point names).
    :param heuristic: The only plugin (besides the default) asked for ``mmaplug_matmul_params``.
    :param load_entrypoints: Load the ``mmaplug`` entry points of installed distributions.
    :param strict: Raise on a misbehaving plugin (True) or warn and fall back (False, default).
    :raises UsageError: An essential plugin is blocked or the heuristic is unknown.
    """
    pm = PluginManager(strict=bool(strict), heuristic=heuristic or None)
    blocked = tuple(dict.fromkeys(name.strip() for name in block if name.strip()))
    for name in blocked:
        if name in ESSENTIAL_PLUGINS or name in map(short_name, ESSENTIAL_PLUGINS):
            raise UsageError(f"plugin {name!r} cannot be disabled: mmaplug needs it to plan")
        pm.set_blocked(name)
    pm.blocked = blocked
    for module in DEFAULT_PLUGINS:
        name = short_name(module)
        if pm.is_blocked(name):
            continue
        try:
            plugin = importlib.import_module(module)
        except Exception as error:  # a broken install, not a misbehaving third party
            raise PluginError(
                f"built-in plugin {module!r} failed to import: {error}", plugin=name
            ) from error
        pm.register(plugin, name=name)
        pm.plugin_info[name] = PluginInfo(name, module, "mmaplug", _VERSION)
    if load_entrypoints:
        _load_entrypoints(pm)
    for plugin in plugins:
        if isinstance(plugin, str):
            name, plugin = plugin, importlib.import_module(plugin)
        else:
            name = plugin_name(plugin) or pm.get_canonical_name(plugin)
        if pm.register(plugin, name=name) is not None:
            module = getattr(plugin, "__name__", type(plugin).__module__)
            pm.plugin_info[name] = PluginInfo(name, module)
    pm.check_pending()
    pm.check_heuristic()
    return pm


def _load_entrypoints(pm: PluginManager) -> None:
    """Register each ``mmaplug`` entry point; one that fails to import is skipped or raised."""
    for dist in list(importlib.metadata.distributions()):
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            dist_name = dist.metadata["name"] or "?"
            try:
                plugin = ep.load()
            except Exception as error:
                message = (
                    f"plugin {ep.name!r} from distribution {dist_name} {dist.version} failed to "
                    f"import ({ep.value}): {type(error).__name__}: {error}"
                )
                if pm.strict:
                    raise PluginError(message, plugin=ep.name) from error
                warnings.warn(PluginWarning(f"{message}; skipped"), stacklevel=3)
                continue
            if not pm.is_registered(plugin):
                pm.register(plugin, name=ep.name)
                pm.plugin_info[ep.name] = PluginInfo(ep.name, ep.value, dist_name, dist.version)


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return env.flag(name, default=False, environ=environ)


class EnvOptions(TypedDict):
    """What the environment asks of ``make_plugin_manager``."""

    block: tuple[str, ...]
    heuristic: str | None
    load_entrypoints: bool
    strict: bool


def options_from_environ(environ: Mapping[str, str]) -> EnvOptions:
    """The ``make_plugin_manager`` keywords that the ``MMAPLUG_*`` variables ask for."""
    return EnvOptions(
        block=tuple(environ.get("MMAPLUG_DISABLE", "").split(",")),
        heuristic=environ.get("MMAPLUG_HEURISTIC", "").strip() or None,
        load_entrypoints=not _flag(environ, "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD"),
        strict=_flag(environ, "MMAPLUG_STRICT"),
    )


_lock: Final = threading.Lock()
_default: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide manager, built once from ``MMAPLUG_*`` (``options_from_environ``).

    ``MMAPLUG_DISABLE=a,b``, ``MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1``, ``MMAPLUG_HEURISTIC=<name>``,
    ``MMAPLUG_STRICT=1``; call ``reset_plugin_manager()`` after changing them.
    """
    global _default
    with _lock:
        if _default is None:
            _default = make_plugin_manager(**options_from_environ(os.environ))
        return _default


def reset_plugin_manager() -> None:
    """Forget the process-wide manager; the next ``get_plugin_manager()`` builds a new one."""
    global _default
    with _lock:
        _default = None
