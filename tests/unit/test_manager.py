"""The plugin manager: built-ins, blocking, entry points, heuristic choice and environment."""

from __future__ import annotations

import importlib.metadata

import pluggy
import pytest

from mmaplug.errors import PluginError, PluginWarning, UsageError
from mmaplug.hooks.manager import (
    DEFAULT_PLUGINS,
    ESSENTIAL_PLUGINS,
    PluginInfo,
    get_plugin_manager,
    make_plugin_manager,
    options_from_environ,
    reset_plugin_manager,
)
from mmaplug.markers import hookimpl

ENV_VARS = (
    "MMAPLUG_DISABLE",
    "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD",
    "MMAPLUG_HEURISTIC",
    "MMAPLUG_STRICT",
)


class ExternalPlugin:
    @hookimpl
    def mmaplug_matmul_overrides(self):
        return None


class EntryPoint:
    def __init__(self, name: str, load: object, value: str = "ext_module") -> None:
        self.name, self.group, self.value, self._load = name, "mmaplug", value, load

    def load(self) -> object:
        if isinstance(self._load, BaseException):
            raise self._load
        return self._load


class Distribution:
    def __init__(self, *entry_points: EntryPoint) -> None:
        self.metadata = {"name": "ext-dist"}
        self.version = "1.2.3"
        self.entry_points = entry_points


@pytest.fixture
def entry_points(monkeypatch):
    """Make ``importlib.metadata.distributions()`` report the given entry points only."""

    def install(*eps: EntryPoint) -> None:
        monkeypatch.setattr(importlib.metadata, "distributions", lambda: [Distribution(*eps)])

    return install


@pytest.fixture
def clean_env(monkeypatch):
    """No MMAPLUG_* variables, and a fresh process-wide manager before and after."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    reset_plugin_manager()
    yield monkeypatch
    reset_plugin_manager()


def test_builtins_registered_under_short_names():
    """The built-in plugins are registered as default, patterns, ampere, hopper, decode and
    testing."""
    pm = make_plugin_manager(load_entrypoints=False)
    names = {name for name, plugin in pm.list_name_plugin() if plugin is not None}
    assert names == {"default", "patterns", "ampere", "hopper", "decode", "testing"}
    assert pm.plugin_info["ampere"] == PluginInfo(
        "ampere", "mmaplug.plugins.ampere", "mmaplug", importlib.metadata.version("mmaplug")
    )
    assert len(DEFAULT_PLUGINS) == 6 and set(ESSENTIAL_PLUGINS) < set(DEFAULT_PLUGINS)


@pytest.mark.parametrize("name", ["default", "patterns", "mmaplug.heuristics.default"])
def test_essential_plugins_cannot_be_blocked(name):
    """Blocking an essential plugin is a UsageError."""
    with pytest.raises(UsageError, match=f"plugin '{name}' cannot be disabled"):
        make_plugin_manager(block=[name], load_entrypoints=False)


@pytest.mark.parametrize("name", ["ampere", "hopper", "decode", "testing"])
def test_other_builtins_can_be_blocked(name):
    """A blocked built-in is not registered and is listed as blocked."""
    pm = make_plugin_manager(block=[name, " "], load_entrypoints=False)
    assert pm.get_plugin(name) is None and pm.is_blocked(name)
    assert pm.blocked == (name,)


def test_a_taken_name_is_a_plugin_error():
    """Registering under a registered name (a 'name' attribute of 'hopper', say) is a
    PluginError saying who has it, not pluggy's ValueError; registering twice too."""

    class Clash(ExternalPlugin):
        name = "hopper"

    pm = make_plugin_manager(load_entrypoints=False)
    with pytest.raises(PluginError, match="as 'hopper': the name 'hopper' is taken by 'hopper'"):
        pm.register(Clash())
    plugin = ExternalPlugin()
    pm.register(plugin, name="ext")
    with pytest.raises(PluginError, match="it is registered already"):
        pm.register(plugin, name="ext2")


def test_a_builtin_blocked_by_its_module_name():
    """MMAPLUG_DISABLE=mmaplug.plugins.hopper blocks hopper (it was listed as blocked, and
    hopper still ran)."""
    pm = make_plugin_manager(block=["mmaplug.plugins.hopper"], load_entrypoints=False)
    assert pm.get_plugin("hopper") is None and pm.blocked == ("hopper",)


def test_check_pending_rejects_unknown_hooks():
    """An explicit plugin implementing a misspelt hook is a PluginError naming it and the hook."""

    class Misspelt:
        name = "misspelt"

        @hookimpl
        def mmaplug_matmul_param(self):
            return None

    with pytest.raises(
        PluginError, match="'misspelt' implements mmaplug_matmul_param.*mmaplug_matmul_params\\?"
    ) as info:
        make_plugin_manager(plugins=[Misspelt()], load_entrypoints=False)
    assert isinstance(info.value.__cause__, pluggy.PluginValidationError)
    assert (info.value.plugin, info.value.hook) == ("misspelt", "mmaplug_matmul_param")


def test_explicit_plugins_by_object_and_module_name(tmp_path, monkeypatch):
    """Explicit plugins can be objects (named by ``.name``) or importable module names."""

    class Named(ExternalPlugin):
        name = "named"

    (tmp_path / "my_module_plugin.py").write_text(
        "from mmaplug import hookimpl\n\n@hookimpl\ndef mmaplug_matmul_params(problem):\n"
        "    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = make_plugin_manager(plugins=[Named(), "my_module_plugin"], load_entrypoints=False)
    assert pm.has_plugin("named") and pm.has_plugin("my_module_plugin")


@pytest.mark.parametrize("strict", [False, True])
def test_a_plugin_without_any_hook_is_named(strict):
    """An object or module that implements no hook (a forgotten decorator on a method of
    another name, a wrong module) would change nothing: a fault naming it."""

    class Nothing:
        name = "nothing"

        def matmul_params(self, problem):  # no hook of that name, no decorator
            return None

    pm = make_plugin_manager(load_entrypoints=False, strict=strict)
    message = r"plugin 'nothing' \(a .*Nothing\) implements no mmaplug hook"
    if strict:
        with pytest.raises(PluginError, match=message):
            pm.register(Nothing())
        assert not pm.has_plugin("nothing")
    else:
        with pytest.warns(PluginWarning, match=message):
            pm.register(Nothing())
        assert pm.has_plugin("nothing")


def test_register_names_an_object_by_its_name_attribute():
    """``pm.register(obj)`` (the plugin reference's way) registers under ``obj.name``, so
    provenance, warnings and blocking use it; a blocked name is not registered."""

    class Named(ExternalPlugin):
        name = "named"

    pm = make_plugin_manager(load_entrypoints=False)
    plugin = Named()
    assert pm.register(plugin) == "named" and pm.get_plugin("named") is plugin
    blocked = make_plugin_manager(block=["named"], load_entrypoints=False)
    assert blocked.register(Named()) is None and not blocked.has_plugin("named")


def test_entry_point_loaded_with_distribution(entry_points):
    """An entry point is registered under its name with its distribution and version."""
    plugin = ExternalPlugin()
    entry_points(EntryPoint("ext", plugin))
    pm = make_plugin_manager()
    assert pm.get_plugin("ext") is plugin
    assert pm.plugin_info["ext"] == PluginInfo("ext", "ext_module", "ext-dist", "1.2.3")


def test_entry_point_blocked_by_name(entry_points):
    """A blocked entry point is never imported."""
    entry_points(EntryPoint("ext", RuntimeError("must not load")))
    pm = make_plugin_manager(block=["ext"])
    assert not pm.has_plugin("ext") and pm.is_blocked("ext")


def test_autoload_off_skips_entry_points(entry_points):
    """load_entrypoints=False ignores installed plugins."""
    entry_points(EntryPoint("ext", ExternalPlugin()))
    assert not make_plugin_manager(load_entrypoints=False).has_plugin("ext")


def test_broken_entry_point_warns_and_is_skipped(entry_points):
    """In warning mode a plugin that fails to import is skipped with a warning naming it."""
    entry_points(
        EntryPoint("broken", ImportError("no module named nope")),
        EntryPoint("ext", ExternalPlugin()),
    )
    with pytest.warns(PluginWarning, match="'broken' from distribution ext-dist 1.2.3"):
        pm = make_plugin_manager()
    assert not pm.has_plugin("broken") and pm.has_plugin("ext")


def test_broken_entry_point_strict_raises(entry_points):
    """In strict mode a plugin that fails to import raises PluginError from the cause."""
    cause = ImportError("no module named nope")
    entry_points(EntryPoint("broken", cause))
    with pytest.raises(PluginError, match="'broken' from distribution ext-dist") as info:
        make_plugin_manager(strict=True)
    assert info.value.plugin == "broken" and info.value.__cause__ is cause


def test_unknown_heuristic_lists_registered():
    """Strict: selecting an unregistered heuristic is a UsageError listing what is registered."""
    with pytest.raises(
        UsageError,
        match="selects 'tuned', which is not registered; registered: ampere, "
        "decode, default, hopper, patterns, testing",
    ):
        make_plugin_manager(heuristic="tuned", load_entrypoints=False, strict=True)


def test_unknown_heuristic_warns_and_asks_every_heuristic():
    """Leniently an unregistered heuristic is a PluginWarning and no heuristic is selected."""
    with pytest.warns(PluginWarning, match="selects 'tuned', which is not registered"):
        pm = make_plugin_manager(heuristic="tuned", load_entrypoints=False)
    assert pm.heuristic is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, {"block": ("",), "heuristic": None, "load_entrypoints": True, "strict": False}),
        (
            {
                "MMAPLUG_DISABLE": "hopper,ext",
                "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD": "1",
                "MMAPLUG_HEURISTIC": " ext ",
                "MMAPLUG_STRICT": "true",
            },
            {
                "block": ("hopper", "ext"),
                "heuristic": "ext",
                "load_entrypoints": False,
                "strict": True,
            },
        ),
    ],
    ids=["empty", "all_set"],
)
def test_options_from_environ(environ, expected):
    """The MMAPLUG_* variables map onto make_plugin_manager keywords."""
    assert options_from_environ(environ) == expected


def test_bad_switch_is_a_usage_error():
    """A switch variable that is not 0/1 (or similar) is a UsageError naming it."""
    with pytest.raises(UsageError, match="MMAPLUG_STRICT='maybe' is not a switch"):
        options_from_environ({"MMAPLUG_STRICT": "maybe"})


def test_get_plugin_manager_is_built_once_from_env(clean_env, entry_points):
    """The process-wide manager reads the environment once; reset forgets it."""
    entry_points(EntryPoint("ext", ExternalPlugin()))
    clean_env.setenv("MMAPLUG_DISABLE", "hopper")
    clean_env.setenv("MMAPLUG_STRICT", "1")
    pm = get_plugin_manager()
    assert get_plugin_manager() is pm
    assert pm.strict and pm.is_blocked("hopper") and pm.has_plugin("ext")
    clean_env.setenv("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert get_plugin_manager() is pm
    reset_plugin_manager()
    assert not get_plugin_manager().has_plugin("ext")


def test_env_cannot_disable_essential(clean_env):
    """MMAPLUG_DISABLE=default fails with the same UsageError as the API."""
    clean_env.setenv("MMAPLUG_DISABLE", "default")
    with pytest.raises(UsageError, match="cannot be disabled"):
        get_plugin_manager()


class ExternalHeuristic:
    @hookimpl
    def mmaplug_matmul_params(self):
        return None


def test_env_selects_heuristic(clean_env, entry_points):
    """MMAPLUG_HEURISTIC names the selected heuristic plugin."""
    entry_points(EntryPoint("ext", ExternalHeuristic()))
    clean_env.setenv("MMAPLUG_HEURISTIC", "ext")
    assert get_plugin_manager().heuristic == "ext"


def test_a_class_registered_for_its_instance_is_refused():
    """pluggy would bind the problem to self and fail at every plan; refused when registered,
    saying to register an instance (an entry point naming a class does this)."""

    class WideTiles:
        name = "wide"

        @hookimpl
        def mmaplug_matmul_params(self, problem, scheduler):
            return None

    pm = make_plugin_manager(load_entrypoints=False)
    with pytest.raises(
        PluginError,
        match=r"is the class .*WideTiles, whose hooks \(mmaplug_matmul_params\) are instance "
        r"methods: register an instance",
    ):
        pm.register(WideTiles)
    assert not pm.has_plugin("wide")
    assert pm.register(WideTiles()) == "wide"


def test_an_optional_hook_of_a_later_mmaplug_is_listed_apart():
    """A plugin written for a later mmaplug marks its new hook optional: it registers, and the
    plugins record lists that hook as one this mmaplug never calls; unmarked, the fault says
    how to mark it."""
    from mmaplug.planning.records import plugins_record

    class Later:
        name = "later"

        @hookimpl(optionalhook=True)
        def mmaplug_kernel_launched(self, spec):
            return None

        @hookimpl
        def mmaplug_matmul_params(self, problem):
            return None

    pm = make_plugin_manager(plugins=[Later()], load_entrypoints=False, strict=True)
    (later,) = [p for p in plugins_record(pm)["plugins"] if p["name"] == "later"]
    assert later["hooks"] == ["mmaplug_matmul_params"]
    assert later["later_hooks"] == ["mmaplug_kernel_launched"]

    class Unmarked:
        name = "unmarked"

        @hookimpl
        def mmaplug_kernel_launched(self, spec):
            return None

    with pytest.raises(PluginError, match=r"can be marked @mmaplug.hookimpl\(optionalhook=True\)"):
        make_plugin_manager(plugins=[Unmarked()], load_entrypoints=False, strict=True)
