"""Issue 22, item 3: smaller faults, each named in the words of the API it concerns.

No CUDA driver, ``plan_problem`` with a preset name, the manager's switches and strict mode,
undecorated ``mmaplug_*`` functions, a hookimpl with a wrong argument, warnings that point at
the plugin, and which of two heuristics answers.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import linecache
import os
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.cli.main import main
from mmaplug.cuda import driver
from mmaplug.cuda.launching import simulating
from mmaplug.errors import (
    LaunchError,
    ParamAdjustedWarning,
    PluginError,
    PluginWarning,
    UsageError,
)
from mmaplug.hooks.manager import (
    heuristic_order,
    make_plugin_manager,
    options_from_environ,
    reset_plugin_manager,
)
from mmaplug.markers import hookimpl
from mmaplug.planning.choices import Adjustment
from mmaplug.planning.plan import plan_problem
from mmaplug.testing import registered

A100 = mp.get_device("a100")
NO_DRIVER = (
    r"(?s)no CUDA driver here.*mp\.compile\(fusion, device=\"h200\"\).*mp\.evaluate"
    r".*NUMBA_ENABLE_CUDASIM=1"
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ambient MMAPLUG_* variables, and a fresh process-wide manager around each test."""
    for name in list(os.environ):
        if name.upper().startswith("MMAPLUG_"):
            monkeypatch.delenv(name)
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def fusion() -> mp.FusionDefinition:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([128, 64], dtype=mp.float16)
        b = fd.define_tensor([64, 256], dtype=mp.float16)
        fd.add_output(fd.ops.matmul(a, b))
    return fd


def inputs() -> list[np.ndarray]:
    return [np.ones((128, 64), np.float16), np.ones((64, 256), np.float16)]


@pytest.fixture
def problem() -> MatmulProblem:
    return mp.matmul_problem(fusion().fusion)


@pytest.fixture
def pm() -> mp.PluginManager:
    return make_plugin_manager(load_entrypoints=False, strict=True)


# -- 1. no CUDA driver -----------------------------------------------------------------------


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_loads(), reason="a CUDA driver is here: execute reaches the GPU")
def test_execute_without_a_driver_says_so_and_what_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without libcuda, execute is a LaunchError naming what works without one
    (not cuda.pathfinder's DynamicLibNotFoundError)."""
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    if simulating():
        pytest.skip("Numba's CUDA simulator is on in this process")
    compiled = mp.compile(fusion(), device="h200")
    with pytest.raises(LaunchError, match=NO_DRIVER):
        compiled.execute(inputs())


def test_execute_with_libcuda_missing_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with libcuda made unloadable, so that it runs on GPU machines too."""
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    if simulating():
        pytest.skip("Numba's CUDA simulator is on in this process")
    compiled = mp.compile(fusion(), device="h200")

    def missing(name: str, *args: object, **kwargs: object) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(driver, "_state", {})
    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(LaunchError, match=NO_DRIVER):
        compiled.execute(inputs())


def test_a_driver_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuInit failing (a driver, no usable GPU) names the error and what works without one."""

    class NoGPU:
        def __getattr__(self, name: str) -> Any:
            return lambda *args: 100 if name == "cuInit" else 1

    monkeypatch.setattr(driver, "_state", {})
    monkeypatch.setattr(ctypes, "CDLL", lambda name: NoGPU())
    with pytest.raises(LaunchError, match=r"finds no usable GPU \(CUresult \(100\) from cuInit"):
        driver.ensure_driver()


# -- 2. plan_problem takes a device as compile does ------------------------------------------


def test_plan_problem_takes_a_preset_name(pm: mp.PluginManager, problem: MatmulProblem) -> None:
    """plan_problem(problem, "h200") plans for the preset, as compile(device="h200") does."""
    spec = plan_problem(problem, "h200", pm=pm)
    assert (spec.device, spec.scheduler) == (mp.get_device("h200"), "hopper")
    assert plan_problem(problem, " A100 ", pm=pm).device == mp.get_device("a100")


@pytest.mark.parametrize(
    ("device", "match"),
    [
        (3, "device must be a preset name, a Device or None, not 3"),
        ("h2000", "unknown device 'h2000'; did you mean 'h200'"),
    ],
    ids=["int", "typo"],
)
def test_plan_problem_refuses_a_wrong_device(
    pm: mp.PluginManager, problem: MatmulProblem, device: object, match: str
) -> None:
    """A device of the wrong type or name is a UsageError naming it, not a plugin's fault."""
    with pytest.raises(UsageError, match=match):
        plan_problem(problem, device, pm=pm)  # type: ignore[arg-type]


def test_plan_problem_refuses_a_fusion_for_a_problem(pm: mp.PluginManager) -> None:
    """A Fusion where the problem goes is a UsageError saying how to make a problem."""
    with pytest.raises(UsageError, match=r"problem must be a MatmulProblem .* not a Fusion"):
        plan_problem(fusion().fusion, "h200", pm=pm)  # type: ignore[arg-type]


# -- 3. the manager's switches and MMAPLUG_STRICT ---------------------------------------------


@pytest.mark.parametrize("value", ["maybe", "1.0", "enable"])
def test_autoload_switch_is_refused_like_strict(value: str) -> None:
    """MMAPLUG_DISABLE_PLUGIN_AUTOLOAD with no switch word is a UsageError, as MMAPLUG_STRICT."""
    environ = {"MMAPLUG_DISABLE_PLUGIN_AUTOLOAD": value}
    with pytest.raises(UsageError, match=f"MMAPLUG_DISABLE_PLUGIN_AUTOLOAD='{value}' is not a"):
        options_from_environ(environ)
    with pytest.raises(UsageError, match=f"MMAPLUG_STRICT='{value}' is not a switch"):
        options_from_environ({"MMAPLUG_STRICT": value})


def test_make_plugin_manager_follows_mmaplug_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without strict=, make_plugin_manager raises under MMAPLUG_STRICT=1 on what it warns
    about otherwise; an explicit strict=False still warns."""
    with pytest.warns(PluginWarning, match="names 'ampre', which is no plugin"):
        assert not make_plugin_manager(block=["ampre"], load_entrypoints=False).strict
    monkeypatch.setenv("MMAPLUG_STRICT", "1")
    with pytest.raises(UsageError, match="names 'ampre', which is no plugin"):
        make_plugin_manager(block=["ampre"], load_entrypoints=False)
    assert make_plugin_manager(load_entrypoints=False).strict
    with pytest.warns(PluginWarning, match="names 'ampre'"):
        make_plugin_manager(block=["ampre"], load_entrypoints=False, strict=False)
    monkeypatch.setenv("MMAPLUG_STRICT", "maybe")
    with pytest.raises(UsageError, match="MMAPLUG_STRICT='maybe' is not a switch"):
        make_plugin_manager(load_entrypoints=False)


# -- 4. mmaplug_* functions without @hookimpl --------------------------------------------------


class Undecorated:
    name = "undecorated"

    def mmaplug_matmul_params(self, problem: MatmulProblem) -> None:
        return None

    @staticmethod
    def mmaplug_matmul_overrides() -> None:
        return None

    def mmaplug_not_a_method(self) -> None:  # named like a hook: flagged too
        return None

    @property
    def mmaplug_property(self) -> None:  # never run, and not a function
        raise AssertionError("a property of a plugin was read")


UNDECORATED = "mmaplug_matmul_overrides, mmaplug_matmul_params, mmaplug_not_a_method"


def test_undecorated_hook_functions_warn_naming_them() -> None:
    """Warning mode: the plugin is registered, with a PluginWarning naming it, the functions
    and the fix, at the first function's ``def`` line."""
    with pytest.warns(PluginWarning, match=f"'undecorated' has {UNDECORATED}, named like") as got:
        pm = make_plugin_manager(plugins=[Undecorated()], load_entrypoints=False, strict=False)
    assert pm.has_plugin("undecorated")
    assert "decorate them with @mmaplug.hookimpl" in str(got[0].message)
    assert got[0].filename == __file__
    assert linecache.getline(got[0].filename, got[0].lineno).strip().startswith("def mmaplug_")


@pytest.mark.parametrize("how", ["registered", "make_plugin_manager", "register"])
def test_undecorated_hook_functions_raise_in_strict_mode(pm: mp.PluginManager, how: str) -> None:
    """Strict mode: a PluginError on every path that registers, and the plugin is not left
    registered."""
    plugin = Undecorated()
    with pytest.raises(PluginError, match=f"has {UNDECORATED}.*@mmaplug.hookimpl") as info:
        if how == "registered":
            with registered(pm, plugin):
                pass
        elif how == "register":
            pm.register(plugin, name="undecorated")
        else:
            make_plugin_manager(plugins=[plugin], load_entrypoints=False, strict=True)
    assert (info.value.plugin, info.value.hook) == ("undecorated", "mmaplug_matmul_overrides")
    assert not pm.is_registered(plugin)


def test_undecorated_hook_functions_of_an_installed_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed plugin: the warning names its distribution; strict mode skips it with a
    PluginError."""
    _install(monkeypatch, Distribution("ext-dist", EntryPoint("undecorated", Undecorated())))
    with pytest.warns(PluginWarning, match=r"'undecorated' \(distribution ext-dist 1.0\) has"):
        pm = make_plugin_manager(strict=False)
    assert pm.has_plugin("undecorated")
    with pytest.raises(PluginError, match="ext-dist 1.0 cannot be registered: .* has mmaplug_"):
        make_plugin_manager(strict=True)


def test_undecorated_function_in_a_module_plugin(pm: mp.PluginManager) -> None:
    """A plugin module whose function lacks the decorator is caught the same way."""
    module = types.ModuleType("third_party_heuristic")

    def mmaplug_matmul_params(problem: MatmulProblem) -> None:
        return None

    module.mmaplug_matmul_params = mmaplug_matmul_params  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match="third_party_heuristic' has mmaplug_matmul_params"):
        pm.register(module, name="third_party_heuristic")


# -- 5. a hookimpl argument the hook does not have ---------------------------------------------


class BadArgument:
    name = "badarg"

    @hookimpl
    def mmaplug_matmul_params(self, problem: MatmulProblem, devcie: object) -> None:
        return None


BAD_ARGUMENT = (
    "plugin 'badarg' implements mmaplug_matmul_params with argument 'devcie', which the hook "
    "does not have \\(did you mean 'device'\\?\\)\nhook: mmaplug_matmul_params\naccepted "
    "arguments: problem, device, scheduler"
)


@pytest.mark.parametrize("how", ["registered", "make_plugin_manager", "register"])
def test_wrong_argument_name_is_a_plugin_error(pm: mp.PluginManager, how: str) -> None:
    """pluggy's PluginValidationError becomes a PluginError naming plugin, hook, argument and
    the hook's arguments, on every path that registers."""
    plugin = BadArgument()
    with pytest.raises(PluginError, match=BAD_ARGUMENT) as info:
        if how == "registered":
            with registered(pm, plugin):
                pass
        elif how == "register":
            pm.register(plugin, name="badarg")
        else:
            make_plugin_manager(plugins=[plugin], load_entrypoints=False)
    assert (info.value.plugin, info.value.hook) == ("badarg", "mmaplug_matmul_params")
    assert not pm.is_registered(plugin)


def test_wrong_argument_in_the_override_harness() -> None:
    """The process-wide manager (what override_matmul_params plans with) refuses it alike."""
    with pytest.raises(PluginError, match=BAD_ARGUMENT):
        mp.get_plugin_manager().register(BadArgument(), name="badarg")


# -- 6. warnings about a plugin point at the plugin ----------------------------------------------


class ChoosesStages:
    name = "chooser"

    @hookimpl
    def mmaplug_matmul_overrides(self) -> dict[str, object]:
        return {"stages": 7}


class StageCap:
    name = "stage_cap"

    @hookimpl
    def mmaplug_adjust_params(self, params: mp.MatmulParams, scheduler: str) -> object:
        if scheduler != "ampere" or params.stages <= 3:
            return None
        return [Adjustment("stages", params.stages, 3, "K loop too short for more")]


class Raises:
    name = "raiser"

    @hookimpl
    def mmaplug_matmul_overrides(self) -> None:
        raise RuntimeError("boom")


def _at_def(record: warnings.WarningMessage, function: str) -> bool:
    line = linecache.getline(record.filename, record.lineno).strip()
    return record.filename == __file__ and line.startswith(f"def {function}(")


def test_param_adjusted_warning_points_at_the_plugin(
    pm: mp.PluginManager, problem: MatmulProblem
) -> None:
    """The warning that a scheduler changed a plugin's value is at that plugin's hookimpl."""
    with registered(pm, StageCap(), ChoosesStages()):
        with pytest.warns(ParamAdjustedWarning, match="stage_cap changed chooser's stages") as got:
            plan_problem(problem, A100, pm=pm)
    (record,) = got
    assert _at_def(record, "mmaplug_matmul_overrides"), (record.filename, record.lineno)


def test_param_adjusted_warning_for_the_caller_points_at_the_caller(
    pm: mp.PluginManager, problem: MatmulProblem
) -> None:
    """A value the caller chose: the warning is at the caller's line, as before."""
    with registered(pm, StageCap()):
        with pytest.warns(ParamAdjustedWarning, match="changed caller's stages") as got:
            plan_problem(problem, A100, pm=pm, overrides={"stages": 7})
    assert got[0].filename == __file__ and "plan_problem(" in linecache.getline(
        got[0].filename, got[0].lineno
    )


def test_plugin_fault_warning_points_at_the_plugin(problem: MatmulProblem) -> None:
    """A plugin that raises (warning mode): the PluginWarning is at its hookimpl."""
    pm = make_plugin_manager(load_entrypoints=False, strict=False)
    with registered(pm, Raises()):
        with pytest.warns(PluginWarning, match="plugin 'raiser' raised RuntimeError") as got:
            plan_problem(problem, A100, pm=pm)
    assert _at_def(got[0], "mmaplug_matmul_overrides"), (got[0].filename, got[0].lineno)


def test_invalid_value_warning_points_at_the_plugin(problem: MatmulProblem) -> None:
    """An invalid value (warning mode): the PluginWarning is at the hookimpl that gave it."""

    class Invalid:
        name = "invalid"

        @hookimpl
        def mmaplug_matmul_overrides(self) -> dict[str, object]:
            return {"stages": 64}

    pm = make_plugin_manager(load_entrypoints=False, strict=False)
    with registered(pm, Invalid()):
        with pytest.warns(PluginWarning, match="invalid stages from invalid") as got:
            spec = plan_problem(problem, A100, pm=pm)
    assert spec.provenance.dropped == ("invalid",)
    assert _at_def(got[0], "mmaplug_matmul_overrides"), (got[0].filename, got[0].lineno)


# -- 7. which heuristic answers -------------------------------------------------------------------


class Heuristic:
    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def mmaplug_matmul_params(self) -> None:
        return None


class EntryPoint:
    def __init__(self, name: str, load: object) -> None:
        self.name, self.group, self.value, self._load = name, "mmaplug", f"{name}_module", load

    def load(self) -> object:
        return self._load


class Distribution:
    def __init__(self, name: str, *entry_points: EntryPoint) -> None:
        self.metadata = {"name": name}
        self.version = "1.0"
        self.entry_points = entry_points


def _install(monkeypatch: pytest.MonkeyPatch, *dists: Distribution) -> None:
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: list(dists))


def test_explicit_heuristics_are_asked_last_registered_first() -> None:
    """pluggy's rule: the heuristic registered last is asked first; the default (trylast) last."""
    pm = make_plugin_manager(
        plugins=[Heuristic("first"), Heuristic("second")], load_entrypoints=False
    )
    assert heuristic_order(pm) == ["second", "first", "default"]


@pytest.mark.parametrize("reverse", [False, True], ids=["listed", "reversed"])
def test_installed_heuristics_are_asked_alphabetically(
    monkeypatch: pytest.MonkeyPatch, reverse: bool
) -> None:
    """Installed heuristics are asked in their names' alphabetical order, whatever order the
    distributions are found in; explicit plugins before them, the default last."""
    dists = [
        Distribution("zeta-dist", EntryPoint("alpha", Heuristic("alpha"))),
        Distribution("alpha-dist", EntryPoint("gamma", Heuristic("gamma"))),
        Distribution("mid-dist", EntryPoint("beta", Heuristic("beta"))),
    ]
    _install(monkeypatch, *(reversed(dists) if reverse else dists))
    pm = make_plugin_manager(plugins=[Heuristic("mine")])
    assert heuristic_order(pm) == ["mine", "alpha", "beta", "gamma", "default"]


def test_plugins_command_shows_rank_and_shadowing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """mmaplug plugins (and --json) give each heuristic its rank and the one shadowing it."""
    _install(
        monkeypatch,
        Distribution("b-dist", EntryPoint("beta", Heuristic("beta"))),
        Distribution("a-dist", EntryPoint("alpha", Heuristic("alpha"))),
    )
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "heuristic: rank 1: answers first" in out
    shadowed = "heuristic: rank 2: shadowed by 'alpha' (asked only for problems 'alpha' declines)"
    assert shadowed in out
    assert "heuristic: rank 3, trylast: shadowed by 'beta'" in out
    assert "heuristics asked, in order: alpha, beta, default (selected: any)" in out
    assert main(["plugins", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["heuristics"][:2] == [
        {"name": "alpha", "rank": 1, "order": "", "shadowed_by": None},
        {"name": "beta", "rank": 2, "order": "", "shadowed_by": "alpha"},
    ]
    default = next(h for h in record["heuristics"] if h["name"] == "default")
    assert (default["order"], default["shadowed_by"]) == ("trylast", "beta")


def test_plugins_command_with_a_selected_heuristic(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MMAPLUG_HEURISTIC: the selected one and the default are asked; the others are not."""
    _install(
        monkeypatch,
        Distribution("b-dist", EntryPoint("beta", Heuristic("beta"))),
        Distribution("a-dist", EntryPoint("alpha", Heuristic("alpha"))),
    )
    monkeypatch.setenv("MMAPLUG_HEURISTIC", "beta")
    assert main(["plugins", "--json"]) == 0
    ranks = {h["name"]: h["rank"] for h in json.loads(capsys.readouterr().out)["heuristics"]}
    assert ranks == {"beta": 1, "default": 2, "alpha": None}
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "heuristic: not asked (MMAPLUG_HEURISTIC selects 'beta')" in out
    assert "heuristics asked, in order: beta, default (selected: beta)" in out
