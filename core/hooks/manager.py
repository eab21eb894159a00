"""The plugin manager: built-in plugins, entry points, blocking, heuristic choice, environment."""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import threading
import types
from collections.abc import Iterable, Mapping
from typing import Final, TypedDict, final

import attrs
import pluggy

from mmaplug import env
from mmaplug.errors import PluginError, PluginWarning, UsageError
from mmaplug.hooks import hookspecs
from mmaplug.hooks.attribution import warn_about, warn_at
from mmaplug.hooks.hookcheck import (
    instance_hooks,
    near_hooks,
    undecorated,
    unknown_arguments,
    unknown_hooks,
)
from mmaplug.markers import PROJECT, PROVENANCE_NAMES

ENTRY_POINT_GROUP: Final = "mmaplug"
DEFAULT_HEURISTIC: Final = "default"
ESSENTIAL_PLUGINS: Final = ("mmaplug.heuristics.default", "mmaplug.analysis.patterns")
DEFAULT_PLUGINS: Final = (
    *ESSENTIAL_PLUGINS,
    "mmaplug.plugins.ampere",
    "mmaplug.plugins.hopper",
    "mmaplug.plugins.decode",
    "mmaplug.testing",
)
BUILTIN_NAMES: Final = frozenset(module.rpartition(".")[2] for module in DEFAULT_PLUGINS)
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
        # installed plugins left out (warning mode): name -> why (``mmaplug plugins`` shows it)
        self.skipped: dict[str, str] = {}
        #: Counts registrations and unregistrations: what depends on the registered plugins
        #: (``mmaplug.planning.scheduler_registry``) is cached until it changes.
        self.generation = 0

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register *plugin* as pluggy does (None when *name* is blocked), checking its hooks.

        :raises PluginError: A hook implementation takes an argument its hook does not have
            (naming plugin, hook, argument and the hook's arguments); strict mode: the plugin
            has ``mmaplug_*`` functions without ``@mmaplug.hookimpl`` (a ``PluginWarning``
            otherwise: pluggy ignores such functions).
        """
        if (taken := name or self.get_canonical_name(plugin)) in PROVENANCE_NAMES:
            raise PluginError(
                f"plugin {_kind(plugin)} cannot be registered as {taken!r}: provenance names "
                f"the values no plugin gave so ({', '.join(PROVENANCE_NAMES)}); name it "
                "otherwise (its entry point, its 'name' attribute, or register(plugin, name=))",
                plugin=taken,
            )
        try:
            registered = super().register(plugin, name)
        except pluggy.PluginValidationError as error:
            name = name or self.get_canonical_name(plugin)
            raise self._invalid(plugin, name, error) from error
        except ValueError as error:  # pluggy: the name, or the object, is registered already
            name = name or self.get_canonical_name(plugin)
            holder = self.get_plugin(name)
            what = (
                f"the name {name!r} is taken by {describe(self, name)}"
                if holder is not None and holder is not plugin
                else "it is registered already"
            )
            raise PluginError(
                f"plugin {plugin!r:.80} cannot be registered as {name!r}: {what}; pass "
                "register(plugin, name=...) or give it another 'name' attribute",
                plugin=name,
            ) from error
        if registered is not None:
            self.generation += 1
            if methods := instance_hooks(self, plugin):
                self.unregister(plugin)
                raise PluginError(
                    f"plugin {describe(self, registered)} is the class {plugin.__qualname__}, "  # type: ignore[attr-defined]
                    f"whose hooks ({', '.join(methods)}) are instance methods: register an "
                    f"instance ({plugin.__qualname__}()); an entry point names a module or an "  # type: ignore[attr-defined]
                    "instance (plugin = MyPlugin() in its module, then 'module:plugin')",
                    plugin=registered,
                )
            if functions := undecorated(self, plugin):
                self._undecorated(plugin, registered, functions)
            elif not self.get_hookcallers(plugin):
                self._hookless(plugin, registered)
        return registered

    def get_canonical_name(self, plugin: object) -> str:
        """The name *plugin* is registered under when ``register`` is given none: its ``name``
        attribute if a string (what the plugin reference tells authors to set), else pluggy's
        (a module's ``__name__``, else a number)."""
        return plugin_name(plugin) or super().get_canonical_name(plugin)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> object | None:
        """Unregister *plugin* (or the plugin called *name*) as pluggy does."""
        removed = super().unregister(plugin, name)
        self.generation += 1
        return removed

    def _invalid(
        self, plugin: object, name: str, error: pluggy.PluginValidationError
    ) -> PluginError:
        """pluggy's refusal of *plugin* as a ``PluginError``: for an argument a hook does not
        pass, naming the plugin, the hook, the argument and the hook's arguments."""
        found = unknown_arguments(self, plugin)
        if found is None:
            what = f"plugin {describe(self, name)} cannot be registered: {error}"
            return PluginError(what, plugin=name)
        hook, unknown, accepted = found
        near = [m for arg in unknown for m in difflib.get_close_matches(arg, accepted, n=1)]
        return PluginError(
            f"plugin {describe(self, name)} implements {hook} with "
            f"{'argument' if len(unknown) == 1 else 'arguments'} {', '.join(map(repr, unknown))}"
            ", which the hook does not have"
            + (f" (did you mean {', '.join(map(repr, near))}?)" if near else "")
            + f"\nhook: {hook}\naccepted arguments: {', '.join(accepted)} (take any of them, by "
            "these names)",
            plugin=name,
            hook=hook,
        )

    def _undecorated(self, plugin: object, name: str, functions: list[str]) -> None:
        """Warn (strict: unregister and raise) about *plugin*'s undecorated *functions*."""
        them = "it" if len(functions) == 1 else "them"
        try:
            fault(
                f"plugin {describe(self, name)} has {', '.join(functions)}, named like "
                f"mmaplug hooks but not decorated with @mmaplug.hookimpl, so pluggy never "
                f"calls {them}; decorate {them} with @mmaplug.hookimpl (or rename {them})",
                strict=self.strict,
                plugin=name,
                hook=functions[0],
                fallback=f"the plugin is registered without {them}",
                at=getattr(plugin, functions[0], None),
            )
        except PluginError:
            self.unregister(plugin)
            raise

    def _hookless(self, plugin: object, name: str) -> None:
        """Warn (strict: unregister and raise) that *plugin* implements no hook at all."""
        try:
            fault(
                f"plugin {describe(self, name)} ({_kind(plugin)}) implements no mmaplug hook: "
                "pluggy would never call it; register an object or module whose mmaplug_* "
                "functions carry @mmaplug.hookimpl (see mmaplug.hooks.hookspecs)",
                strict=self.strict,
                plugin=name,
                fallback="it is registered and changes nothing",
            )
        except PluginError:
            self.unregister(plugin)
            raise

    def check_heuristic(self) -> None:
        """Raise ``UsageError`` unless the selected heuristic is a registered plugin."""
        if self.heuristic is None or self.has_plugin(self.heuristic):
            return
        names = ", ".join(sorted(name for name, p in self.list_name_plugin() if p is not None))
        raise UsageError(f"unknown heuristic plugin {self.heuristic!r}; registered: {names}")

    def check_pending(self) -> None:
        """Reject ``mmaplug_*`` functions that match no hook (a misspelt hook), naming the plugin.

        An installed plugin (entry point) with one is unregistered with a ``PluginWarning``
        (``PluginError`` in strict mode); any other plugin raises ``PluginError``.
        """
        while True:
            try:
                super().check_pending()
                return
            except pluggy.PluginValidationError as error:
                name = self.get_name(error.plugin) or repr(error.plugin)
                hooks = unknown_hooks(self, error.plugin)
                info = self.plugin_info.get(name)
                installed = info is not None and info.distribution not in ("", "mmaplug")
                fault(
                    f"plugin {describe(self, name)} implements {', '.join(hooks)}, which "
                    f"{'is no hook' if len(hooks) == 1 else 'are no hooks'} of mmaplug; "
                    f"check the spelling against mmaplug.hooks.hookspecs{near_hooks(hooks)}; a "
                    f"hook of a later mmaplug than this one ({_VERSION}) can be marked "
                    "@mmaplug.hookimpl(optionalhook=True), and is then left uncalled here",
                    strict=self.strict or not installed,
                    plugin=name,
                    hook=hooks[0],
                    fallback="the plugin is not registered",
                    cause=error,
                    pm=self,
                )
                self.unregister(error.plugin)
                self.plugin_info.pop(name, None)
                self.skipped[name] = f"implements {', '.join(hooks)}, no hook of mmaplug"


def describe(pm: pluggy.PluginManager, name: str, *, quote: bool = True) -> str:
    """*name* (quoted), with its distribution when it has one: ``'x' (distribution d 1.0)``."""
    info = getattr(pm, "plugin_info", {}).get(name)
    text = repr(name) if quote else name
    if name.isdigit() and (plugin := pm.get_plugin(name)) is not None:  # pluggy's id() name
        text += f" (a {type(plugin).__module__}.{type(plugin).__qualname__})"
    if info is None or not info.distribution:
        return text
    if info.distribution == "mmaplug":
        return f"{text} (built in)"
    return f"{text} (distribution {info.distribution} {info.version})"


def is_builtin(pm: pluggy.PluginManager, name: str) -> bool:
    """Whether *name* is one of mmaplug's own plugins (whose faults always raise)."""
    info = getattr(pm, "plugin_info", {}).get(name)
    return info.distribution == "mmaplug" if info is not None else name in BUILTIN_NAMES


def fault(
    message: str,
    *,
    strict: bool,
    plugin: str,
    hook: str = "",
    fallback: str | None,
    cls: type[Exception] = PluginError,
    cause: BaseException | None = None,
    pm: pluggy.PluginManager | None = None,
    at: object = None,
) -> None:
    """The plugin-fault policy: raise *cls* when *strict* or without *fallback*, else warn.

    The warning is a ``PluginWarning`` ending with the *fallback* taken, issued at the line of
    the function *at*, else of *plugin*'s implementation of *hook* in *pm* (``warn_at``); the
    error (a ``PluginError`` unless *cls* says otherwise) is raised from *cause*.
    """
    if strict or fallback is None:
        if issubclass(cls, PluginError):
            raise cls(message, plugin=plugin, hook=hook) from cause
        raise cls(message) from cause
    warning = PluginWarning(
        f"{message}\n{fallback} (MMAPLUG_STRICT=1 raises instead)", plugin=plugin, hook=hook
    )
    if at is not None:
        warn_at(warning, at, stacklevel=4)
    else:
        warn_about(warning, pm, plugin, hook, stacklevel=4)


def _kind(plugin: object) -> str:
    """What *plugin* is, in a few words: ``module x.y`` or ``a Foo``."""
    if isinstance(plugin, types.ModuleType):
        return f"module {plugin.__name__}"
    return f"a {type(plugin).__qualname__}"


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
    :param strict: Raise on a misbehaving plugin (True) or warn and fall back (False); None
        (the default) follows ``MMAPLUG_STRICT``.
    :raises UsageError: An essential plugin is blocked; strict: a blocked name or the heuristic
        is unknown (a ``PluginWarning`` otherwise, and the default heuristic is used).
    :raises PluginError: An explicit plugin implements an unknown hook; strict: an installed
        plugin does, cannot be registered, or clashes with a built-in's name.
    """
    strict = env.strict() if strict is None else strict
    pm = PluginManager(strict=bool(strict), heuristic=heuristic or None)
    names = [name.strip() for name in block if name.strip()]
    for name in names:
        if name in ESSENTIAL_PLUGINS or name in map(short_name, ESSENTIAL_PLUGINS):
            raise UsageError(f"plugin {name!r} cannot be disabled: mmaplug needs it to plan")
    # a built-in blocked by its module (mmaplug.plugins.hopper) is its registered short name
    blocked = tuple(dict.fromkeys(short_name(n) if n in DEFAULT_PLUGINS else n for n in names))
    for name in blocked:
        pm.set_blocked(name)
    pm.blocked = blocked
    for module in DEFAULT_PLUGINS:
        name = short_name(module)
        if pm.is_blocked(name):
            continue
        try:
            builtin = importlib.import_module(module)
        except Exception as error:  # a broken install, not a misbehaving third party
            raise PluginError(
                f"built-in plugin {module!r} failed to import: {error}", plugin=name
            ) from error
        pm.register(builtin, name=name)
        pm.plugin_info[name] = PluginInfo(name, module, "mmaplug", _VERSION)
    if load_entrypoints:
        _load_entrypoints(pm)
    for plugin in plugins:
        if isinstance(plugin, str):
            name, plugin = plugin, importlib.import_module(plugin)
        else:
            name = pm.get_canonical_name(plugin)
        if pm.register(plugin, name=name) is not None:
            module = getattr(plugin, "__name__", type(plugin).__module__)
            pm.plugin_info[name] = PluginInfo(name, module)
    pm.check_pending()
    _check_names(pm, load_entrypoints)
    return pm


def _check_names(pm: PluginManager, load_entrypoints: bool) -> None:
    """Warn (raise when strict) about blocked names and a heuristic that name no plugin."""
    registered = {name for name, plugin in pm.list_name_plugin() if plugin is not None}
    known = registered | BUILTIN_NAMES | set(DEFAULT_PLUGINS)
    unknown = [name for name in pm.blocked if name not in known]
    if unknown:  # entry points are only read when a name needs them
        known |= set(entry_point_names())
    for name in unknown:  # without entry points, only a near miss is surely a typo
        if name not in known and (load_entrypoints or _near(name, known)):
            fault(
                f"MMAPLUG_DISABLE / block names {name!r}, which is no plugin{_near(name, known)}; "
                f"{'installed' if load_entrypoints else 'known'} plugins: "
                f"{', '.join(sorted(known - set(DEFAULT_PLUGINS)))}",
                strict=pm.strict,
                plugin=name,
                fallback="nothing is disabled by that name",
                cls=UsageError,
            )
    heuristics = {impl.plugin_name for impl in pm.hook.mmaplug_matmul_params.get_hookimpls()}
    if pm.heuristic is None or pm.heuristic in heuristics:
        return
    if pm.has_plugin(pm.heuristic):
        what = "implements no mmaplug_matmul_params"
    else:
        blocked = " and is blocked" if pm.is_blocked(pm.heuristic) else ""
        what = f"is not registered{blocked}{_near(pm.heuristic, known)}"
    heuristic, pm.heuristic = pm.heuristic, None
    fault(
        f"MMAPLUG_HEURISTIC / heuristic selects {heuristic!r}, which {what}; "
        f"registered: {', '.join(sorted(registered))}",
        strict=pm.strict,
        plugin=heuristic,
        hook="mmaplug_matmul_params",
        fallback="every heuristic is asked, as without a selection",
        cls=UsageError,
    )


def _near(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def entry_point_names() -> list[str]:
    """The names of the installed ``mmaplug`` entry points."""
    return [
        ep.name
        for dist in importlib.metadata.distributions()
        for ep in dist.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]


def heuristic_order(pm: pluggy.PluginManager) -> list[str]:
    """The plugins implementing ``mmaplug_matmul_params``, in the order planning asks them; the
    first answer that is not None is the base (docs/decisions.md, "Heuristic precedence").

    pluggy's call order: ``tryfirst``, then plain, then ``trylast`` implementations (the
    default heuristic), each group last registered first. With a selected heuristic
    (``MMAPLUG_HEURISTIC``) only it and the default are asked.
    """
    impls = pm.hook.mmaplug_matmul_params.get_hookimpls()
    order = [i.plugin_name for i in reversed(impls) if not (i.hookwrapper or i.wrapper)]
    selected = getattr(pm, "heuristic", None)
    if selected is not None:
        order = [name for name in order if name in (selected, DEFAULT_HEURISTIC)]
    return order


def _entry_points() -> list[tuple[importlib.metadata.EntryPoint, importlib.metadata.Distribution]]:
    """The ``mmaplug`` entry points in registration order: names reverse-alphabetically, so that
    pluggy (the last registered is asked first) asks installed heuristics alphabetically; one
    name's distributions alphabetically, then in ``sys.path`` order (the first keeps the name)."""
    found = [
        (ep, dist)
        for dist in importlib.metadata.distributions()
        for ep in dist.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]
    found.sort(key=lambda pair: pair[1].metadata["name"] or "")  # stable: sys.path order kept
    found.sort(key=lambda pair: pair[0].name, reverse=True)  # stable too
    return found


def installed_plugin(name: str) -> tuple[object, PluginInfo] | None:
    """The installed plugin of entry point *name* (the one ``make_plugin_manager`` registers
    under that name) and where it comes from; None when no distribution has one.

    :raises PluginError: its import fails.
    """
    for ep, dist in _entry_points():
        if ep.name == name:
            return _loaded(ep, dist), _info(ep, dist)
    return None


def _info(ep: importlib.metadata.EntryPoint, dist: importlib.metadata.Distribution) -> PluginInfo:
    return PluginInfo(ep.name, ep.value, dist.metadata["name"] or "?", dist.version)


def _loaded(ep: importlib.metadata.EntryPoint, dist: importlib.metadata.Distribution) -> object:
    """The object entry point *ep* of *dist* names.

    :raises PluginError: its import fails (naming plugin, distribution and mmaplug's version).
    """
    try:
        return ep.load()
    except Exception as error:
        raise PluginError(
            f"plugin {ep.name!r} from distribution {dist.metadata['name'] or '?'} "
            f"{dist.version} failed to import ({ep.value}): {type(error).__name__}: {error} "
            f"(installed: mmaplug {_VERSION})",
            plugin=ep.name,
        ) from error


def _load_entrypoints(pm: PluginManager) -> None:
    """Register each ``mmaplug`` entry point; a faulty one is skipped with a warning (strict:
    raised): an import error, a built-in's or another distribution's name, an invalid hookimpl."""
    for ep, dist in _entry_points():
        if pm.is_blocked(ep.name):
            continue
        dist_name = dist.metadata["name"] or "?"
        origin = f"plugin {ep.name!r} from distribution {dist_name} {dist.version}"
        info = pm.plugin_info.get(ep.name)
        if info is not None and (info.distribution, info.module) == (dist_name, ep.value):
            continue  # the same distribution found twice on sys.path
        if info is not None:
            remedy = (
                "rename its entry point: a built-in's name cannot be taken"
                if info.distribution == "mmaplug"
                else "rename one entry point, or uninstall one distribution (blocking the "
                "name, MMAPLUG_DISABLE, blocks both)"
            )
            _skip(
                pm,
                ep.name,
                f"{origin} has the name of the plugin {describe(pm, ep.name)}; {remedy}",
            )
            continue
        try:
            plugin = _loaded(ep, dist)
        except PluginError as error:
            _skip(pm, ep.name, str(error), error.__cause__)
            continue
        if pm.is_registered(plugin):
            _skip(
                pm,
                ep.name,
                f"{origin} ({ep.value}) is the object registered already as "
                f"{describe(pm, pm.get_name(plugin) or '?')}; one plugin has one name: remove "
                "one of the entry points",
            )
            continue
        if (own := plugin_name(plugin)) is not None and own != ep.name:
            warn_at(
                PluginWarning(
                    f"{origin} sets name = {own!r}; it is registered as {ep.name!r}, its "
                    f"entry-point name, which users select (MMAPLUG_HEURISTIC) and provenance "
                    f"shows, while a test registering the object sees {own!r}: make them one",
                    plugin=ep.name,
                ),
                next(
                    (getattr(plugin, a) for a in dir(plugin) if pm.parse_hookimpl_opts(plugin, a)),
                    None,
                ),
                stacklevel=3,
            )
        pm.plugin_info[ep.name] = _info(ep, dist)
        try:  # with its info already, so that warnings name the distribution
            pm.register(plugin, name=ep.name)
        except Exception as error:  # a bad hookimpl (PluginManager.register's PluginError)
            del pm.plugin_info[ep.name]
            _skip(pm, ep.name, f"{origin} cannot be registered: {error}", error)


def _skip(pm: PluginManager, name: str, message: str, cause: BaseException | None = None) -> None:
    fault(message, strict=pm.strict, plugin=name, fallback="skipped", cause=cause)
    pm.skipped[name] = message


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """A switch the manager reads: a value that is no switch word is a ``UsageError``, as for
    ``MMAPLUG_STRICT`` (both decide which code runs)."""
    return env.switch(name, default=False, environ=environ)


class EnvOptions(TypedDict):
    """What the environment asks of ``make_plugin_manager``."""

    block: tuple[str, ...]
    heuristic: str | None
    load_entrypoints: bool
    strict: bool


def options_from_environ(environ: Mapping[str, str]) -> EnvOptions:
    """The ``make_plugin_manager`` keywords that the ``MMAPLUG_*`` variables ask for."""
    return EnvOptions(
        block=tuple(env.text("MMAPLUG_DISABLE", environ).split(",")),
        heuristic=env.text("MMAPLUG_HEURISTIC", environ) or None,
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


def current_plugin_manager() -> PluginManager | None:
    """The process-wide manager if one was built (``get_plugin_manager`` builds it)."""
    with _lock:
        return _default


def swap_plugin_manager(pm: PluginManager | None) -> PluginManager | None:
    """Make *pm* the process-wide manager (None: built at the next ``get_plugin_manager``);
    the one it replaces is returned (``mmaplug.testing.restoring_plugin_manager``)."""
    global _default
    with _lock:
        old, _default = _default, pm
    return old
