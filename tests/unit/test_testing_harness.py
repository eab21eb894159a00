"""The public test harness: override_matmul_params, FakeHeuristic, registered, HookRecorder."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.errors import (
    InvalidParamsError,
    PluginError,
    PluginWarning,
    UnknownParamError,
    UsageError,
)
from mmaplug.ir.dtypes import DType
from mmaplug.markers import hookimpl
from mmaplug.planning import params as params_module
from mmaplug.planning.device import get_device
from mmaplug.planning.plan import plan_problem
from mmaplug.testing import (
    SENTINELS,
    FakeHeuristic,
    HookRecorder,
    make_plugin_manager,
    override_matmul_params,
    registered,
)

pytest_plugins = ["pytester"]

A100 = get_device("a100")  # ampere is the only scheduler on sm_80


def make_problem(m: int = 4096) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=4096,
        k=4096,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
    )


def test_reexports():
    """SENTINELS and make_plugin_manager are the core objects, re-exported."""
    from mmaplug.hooks import manager

    assert SENTINELS is params_module.SENTINELS
    assert make_plugin_manager is manager.make_plugin_manager


def test_override_reaches_params_with_its_source(mmaplug_pm):
    """override_matmul_params changes the plan and is recorded as its source."""
    with override_matmul_params(stages=3, cta_tile=(128, 256, 32)):
        spec = plan_problem(make_problem(), A100, pm=mmaplug_pm)
    assert (spec.params.stages, spec.params.cta_tile.as_tuple()) == (3, (128, 256, 32))
    assert spec.provenance.source("stages") == "override_matmul_params"


def test_override_nests_inner_key_wins(mmaplug_pm):
    """Nested blocks merge, the inner value wins, and leaving restores the outer one."""
    with override_matmul_params(stages=3, grid_swizzle_factor=3) as outer:
        with override_matmul_params(stages=2) as inner:
            assert dict(inner) == {"stages": 2, "grid_swizzle_factor": 3}
            assert plan_problem(make_problem(), A100, pm=mmaplug_pm).params.stages == 2
        assert dict(outer) == {"stages": 3, "grid_swizzle_factor": 3}
        assert plan_problem(make_problem(), A100, pm=mmaplug_pm).params.stages == 3
    assert plan_problem(make_problem(), A100, pm=mmaplug_pm).provenance.source("stages") == (
        "default"
    )


def test_override_unknown_key_fails_at_entry():
    """An unknown key raises before the block runs, with a near miss."""
    with pytest.raises(UnknownParamError, match="did you mean 'stages'"):
        with override_matmul_params(stage=3):
            pytest.fail("block must not run")


def test_override_is_isolated_per_thread(mmaplug_pm):
    """Another thread does not see this thread's override."""
    seen: list[str] = []

    def plan() -> None:
        seen.append(plan_problem(make_problem(), A100, pm=mmaplug_pm).provenance.source("stages"))

    with override_matmul_params(stages=3):
        thread = threading.Thread(target=plan)
        thread.start()
        thread.join()
    assert seen == ["default"]


def test_override_is_isolated_per_task(mmaplug_pm):
    """Concurrent asyncio tasks each see only their own override."""

    async def plan(stages: int) -> int:
        with override_matmul_params(stages=stages):
            await asyncio.sleep(0)
            return plan_problem(make_problem(), A100, pm=mmaplug_pm).params.stages

    async def both() -> list[int]:
        return list(await asyncio.gather(plan(2), plan(3)))

    assert asyncio.run(both()) == [2, 3]


def test_override_wins_over_a_plugins_override(mmaplug_pm):
    """A block wins over a plugin setting the same field (no conflict), as the caller's
    overrides do; the plugin's other fields stay; the caller still wins over the block."""
    fake = FakeHeuristic("fake", {"stages": 4, "grid_swizzle_factor": 2})
    with registered(mmaplug_pm, fake), override_matmul_params(stages=3):
        spec = plan_problem(make_problem(), A100, pm=mmaplug_pm)
        caller = plan_problem(make_problem(), A100, pm=mmaplug_pm, overrides={"stages": 2})
    assert (spec.params.stages, spec.provenance.source("stages")) == (3, "override_matmul_params")
    assert spec.provenance.source("grid_swizzle_factor") == "fake"
    assert (caller.params.stages, caller.provenance.source("stages")) == (2, "caller")


@pytest.mark.parametrize("strict", [False, True])
def test_override_with_the_testing_plugin_blocked_is_a_fault(strict):
    """With ``testing`` blocked a block would change nothing: a warning (strict: an error)
    says so instead of a silent default."""
    pm = make_plugin_manager(block=["testing"], load_entrypoints=False, strict=strict)
    with override_matmul_params(stages=3):
        if strict:
            with pytest.raises(UsageError, match="'testing' plugin that applies it is blocked"):
                plan_problem(make_problem(), A100, pm=pm)
        else:
            with pytest.warns(PluginWarning, match="the block changes nothing"):
                spec = plan_problem(make_problem(), A100, pm=pm)
            assert spec.provenance.source("stages") == "default"
    assert plan_problem(make_problem(), A100, pm=pm).provenance.source("stages") == "default"


def test_fake_heuristic_when(mmaplug_pm):
    """A FakeHeuristic answers only for the problems its predicate accepts."""
    fake = FakeHeuristic("big_only", {"stages": 3}, when=lambda p: p.m >= 4096)
    with registered(mmaplug_pm, fake):
        big = plan_problem(make_problem(4096), A100, pm=mmaplug_pm)
        small = plan_problem(make_problem(2048), A100, pm=mmaplug_pm)
    assert (big.provenance.source("stages"), small.provenance.source("stages")) == (
        "big_only",
        "default",
    )


def test_fake_heuristic_checks_keys():
    """A FakeHeuristic with an unknown key fails when built, naming itself."""
    with pytest.raises(UnknownParamError, match="from 'fake'; did you mean 'splitk_factor'"):
        FakeHeuristic("fake", {"split_k_factor": 2})


def test_registered_always_unregisters(mmaplug_pm):
    """Plugins are unregistered when the block ends, even by an exception."""
    fake = FakeHeuristic("fake", {"stages": 3})
    with pytest.raises(RuntimeError, match="inside"):
        with registered(mmaplug_pm, fake) as names:
            assert names == ("fake",) and mmaplug_pm.get_plugin("fake") is fake
            raise RuntimeError("inside")
    assert not mmaplug_pm.is_registered(fake)


def test_registered_skips_blocked_names():
    """A blocked fake is not registered and takes no part in planning."""
    pm = make_plugin_manager(block=["fake"], load_entrypoints=False, strict=True)
    with registered(pm, FakeHeuristic("fake", {"stages": 3})) as names:
        assert names == (None,)
        assert plan_problem(make_problem(), A100, pm=pm).provenance.source("stages") == "default"


def test_recorder_calls(mmaplug_pm):
    """getcalls, popcall and hook_names expose the recorded calls with their arguments."""
    with HookRecorder(mmaplug_pm) as recorder:
        plan_problem(make_problem(), A100, pm=mmaplug_pm)
    plan_problem(make_problem(), A100, pm=mmaplug_pm)  # after finish: not recorded
    assert recorder.hook_names() == [
        "mmaplug_schedulers",
        "mmaplug_matmul_params",
        "mmaplug_matmul_overrides",
    ]  # the chosen scheduler's rules and adjustments are its object's methods, not hooks
    schedulers = recorder.getcalls("mmaplug_schedulers")
    assert sorted(c.plugins[0] for c in schedulers) == ["ampere", "decode", "hopper"]
    call = recorder.popcall("mmaplug_matmul_params")
    assert (call.scheduler, call.device) == ("ampere", A100)
    assert not recorder.getcalls(["mmaplug_matmul_params"])


def test_recorder_assert_order_failure(mmaplug_recorder, mmaplug_pm):
    """assert_order fails with the recorded sequence when the order differs."""
    plan_problem(make_problem(), A100, pm=mmaplug_pm)
    with pytest.raises(AssertionError, match="recorded: \\['mmaplug_schedulers'"):
        mmaplug_recorder.assert_order(["mmaplug_matmul_overrides", "mmaplug_matmul_params"])
    with pytest.raises(AssertionError, match="no call of 'mmaplug_build_kernel'"):
        mmaplug_recorder.popcall("mmaplug_build_kernel")


def test_pytest_plugin_fixtures(pytester):
    """The pytest11 plugin provides mmaplug_pm (strict, hermetic) and mmaplug_recorder."""
    pytester.makepyfile(
        """
        from mmaplug.testing import FakeHeuristic, registered
        from mmaplug.planning.device import get_device
        from mmaplug.ir.dtypes import DType
        from mmaplug.planning.plan import plan_problem
        from mmaplug.analysis.problem import MatmulProblem, VectorWidths

        PROBLEM = MatmulProblem(m=256, n=256, k=256, a_k_inner=True, b_k_inner=True,
                                operand_dtype=DType.float16, output_dtype=DType.float16,
                                vector_widths=VectorWidths(a=8, b=8, epilogue=8))

        def test_pm(mmaplug_pm):
            assert mmaplug_pm.strict
            names = {name for name, _ in mmaplug_pm.list_name_plugin()}
            assert names == {"default", "patterns", "ampere", "hopper", "decode", "testing"}

        def test_recorder(mmaplug_pm, mmaplug_recorder):
            with registered(mmaplug_pm, FakeHeuristic("fake", {"stages": 3})):
                spec = plan_problem(PROBLEM, get_device("a100"), pm=mmaplug_pm)
            assert spec.provenance.source("stages") == "fake"
            mmaplug_recorder.assert_order(["mmaplug_matmul_params", "mmaplug_matmul_overrides"])
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


GLOBAL_MANAGER_TESTS = """
import mmaplug as mp
from mmaplug import hookimpl
from mmaplug.hooks.manager import get_plugin_manager

class Wide:
    name = "wide"

    @hookimpl
    def mmaplug_matmul_overrides(self, problem):
        return {"grid_swizzle_factor": 3}

def heuristic():
    return get_plugin_manager().heuristic

def test_env(monkeypatch):
    monkeypatch.setenv("MMAPLUG_HEURISTIC", "default")
    assert heuristic() == "default"

def test_plain_1():
    assert heuristic() is None
    assert not get_plugin_manager().has_plugin("wide")
    assert not get_plugin_manager().is_blocked("decode")

test_plain_2 = test_plain_1

def test_registers():
    get_plugin_manager().register(Wide())
    get_plugin_manager().set_blocked("decode")
    assert get_plugin_manager().has_plugin("wide")
"""


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_each_test_finds_the_global_manager_as_before_it(pytester, order):
    """A test that built the process-wide manager under its own MMAPLUG_* or registered
    plugins on it leaves nothing behind for the next test, in either order."""
    pytester.makepyfile(GLOBAL_MANAGER_TESTS)
    names = ["test_env", "test_plain_1", "test_registers", "test_plain_2"]
    ids = [f"test_each_test_finds_the_global_manager_as_before_it.py::{n}" for n in names]
    if order == "reverse":
        ids.reverse()
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *ids).assert_outcomes(
        passed=4
    )


def test_the_global_manager_built_before_a_test_gets_its_plugins_back():
    """restoring_plugin_manager on an existing manager: what the block registered goes, what
    it unregistered or blocked comes back, and the same object stays."""
    from mmaplug.hooks.manager import get_plugin_manager, reset_plugin_manager
    from mmaplug.testing import restoring_plugin_manager

    reset_plugin_manager()
    try:
        pm = get_plugin_manager()
        plugins = list(pm.list_name_plugin())  # in order: pluggy calls them so
        strict = pm.strict
        schedulers = [i.plugin_name for i in pm.hook.mmaplug_schedulers.get_hookimpls()]
        with restoring_plugin_manager():
            pm.register(FakeHeuristic("fake", {"stages": 3}))
            pm.unregister(name="ampere")
            pm.set_blocked("decode")
            pm.heuristic, pm.strict = "fake", not pm.strict
        assert get_plugin_manager() is pm
        assert list(pm.list_name_plugin()) == plugins
        assert [i.plugin_name for i in pm.hook.mmaplug_schedulers.get_hookimpls()] == schedulers
        assert (pm.heuristic, pm.strict) == (None, strict) and not pm.has_plugin("fake")
        with restoring_plugin_manager():  # a reset inside: the old manager still comes back whole
            pm.register(FakeHeuristic("leaky", {"stages": 3}))
            reset_plugin_manager()
            assert get_plugin_manager() is not pm
        assert get_plugin_manager() is pm and not pm.has_plugin("leaky")
    finally:
        reset_plugin_manager()


def test_registered_takes_an_installed_plugin_by_its_entry_point_name(
    mmaplug_pm, monkeypatch, tmp_path
):
    """A plugin package's own tests register it as users select it: by its entry-point name,
    with its distribution named in messages; a module name is imported."""
    from mmaplug.hooks import manager

    class Dist:
        metadata = {"name": "my-tiles"}
        version = "1.2"
        entry_points = ()

    class Point:
        name, group, value = "my_tiles", "mmaplug", "my_tiles_pkg:plugin"

        def load(self):
            class Plugin:  # named by nothing but its entry point
                @hookimpl
                def mmaplug_matmul_overrides(self, problem):
                    return {"stages": 3}

            return Plugin()

    monkeypatch.setattr(manager, "_entry_points", lambda: [(Point(), Dist())])
    (tmp_path / "my_swizzle.py").write_text(
        "from mmaplug import hookimpl\n\n@hookimpl\ndef mmaplug_matmul_overrides(problem):\n"
        "    return {'grid_swizzle_factor': 3}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with registered(mmaplug_pm, "my_tiles", "my_swizzle") as names:
        assert names == ("my_tiles", "my_swizzle")
        assert mmaplug_pm.plugin_info["my_tiles"].distribution == "my-tiles"
        spec = plan_problem(make_problem(), A100, pm=mmaplug_pm)
        assert spec.provenance.source("stages") == "my_tiles"
        assert spec.provenance.source("grid_swizzle_factor") == "my_swizzle"
    assert not mmaplug_pm.has_plugin("my_tiles") and "my_tiles" not in mmaplug_pm.plugin_info
    assert not mmaplug_pm.has_plugin("my_swizzle")


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (None, "a plugin is None"),
        ("no_such_plugin_xyz", "'no_such_plugin_xyz' is neither an installed mmaplug plugin"),
    ],
)
def test_registered_refuses_what_is_no_plugin(mmaplug_pm, plugin, message):
    with pytest.raises(UsageError, match=message):
        with registered(mmaplug_pm, plugin):
            pass


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "changes": {}}, "name must be a non-empty str, got ''"),
        ({"name": None, "changes": {}}, "name must be a non-empty str, got None"),
        ({"name": "caller", "changes": {}}, "name 'caller' is provenance's name"),
        ({"name": "override_matmul_params"}, "name 'override_matmul_params' is provenance's"),
        ({"name": "f", "changes": [("stages", 3)]}, "changes must be a mapping .* got list"),
        ({"name": "f", "base": {"stages": 3}}, "base must be MatmulParams or None, got dict"),
    ],
)
def test_a_fake_is_checked_when_made(kwargs, message):
    """What the planner would fault later (or crash on) is refused where the test wrote it."""
    with pytest.raises(UsageError, match=message):
        FakeHeuristic(**kwargs)


def test_a_fake_keeps_the_changes_it_was_given():
    changes = {"stages": 3}
    fake = FakeHeuristic("fake", changes)
    changes["stagez"] = 4  # the caller's dict changes later: the fake's does not
    assert dict(fake.changes) == {"stages": 3}


@pytest.mark.parametrize("name", ["caller", "override_matmul_params"])
def test_no_plugin_takes_a_provenance_name(mmaplug_pm, name):
    class Plugin:
        @hookimpl
        def mmaplug_matmul_overrides(self, problem):
            return {"stages": 3}

    with pytest.raises(PluginError, match=f"cannot be registered as '{name}': provenance"):
        mmaplug_pm.register(Plugin(), name=name)


def test_a_refused_block_value_is_named_as_the_block(mmaplug_pm):
    """The harness's values are blamed on override_matmul_params, the call the test wrote,
    not on the built-in plugin that applies them."""
    with override_matmul_params(stages="3"), pytest.raises(InvalidParamsError) as caught:
        plan_problem(make_problem(), A100, pm=mmaplug_pm)
    assert "value from: override_matmul_params; rule of:" in str(caught.value)
    assert "value from: testing" not in str(caught.value)


def test_a_gpu_test_skipped_without_a_gpu_is_reported_at_its_own_line(pytester):
    from mmaplug.cuda.presence import cuda_device_count

    if cuda_device_count():
        pytest.skip("a machine with a GPU runs gpu tests")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_one():
            pass

        @pytest.mark.gpu
        def test_two():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] *.py:3: marked gpu: needs*", "SKIPPED [[]1[]] *.py:7: marked gpu: needs*"]
    )
    result.stdout.no_fnmatch_line("*pytest_plugin.py*")


def test_a_recorder_records_every_hook_of_a_plan_on_a_manager_that_planned(mmaplug_pm):
    plan_problem(make_problem(), A100, pm=mmaplug_pm)  # the schedulers' answers are kept
    with HookRecorder(mmaplug_pm) as recorder:
        plan_problem(make_problem(), A100, pm=mmaplug_pm)
    recorder.assert_order(["mmaplug_schedulers", "mmaplug_matmul_params"])


def _symbolic_linear() -> object:
    import mmaplug as mp

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, 4096], dtype=mp.float16)
        w = fd.define_tensor([4096, 4096], dtype=mp.float16)
        fd.add_output(fd.ops.linear(x, w))
    return fd


SHAPES = [[(4096, 4096), (4096, 4096)], [(8192, 4096), (4096, 4096)]]


def test_a_symbolic_fusion_plans_under_the_blocks_of_its_compile(mmaplug_pm):
    """A fusion with symbolic extents plans at each shape class, after mp.compile returned:
    its plans see the override blocks in force at mp.compile (as its caller's overrides), and
    a block around a later call changes nothing, as for static extents."""
    import mmaplug as mp

    with override_matmul_params(grid_swizzle_factor=3):
        compiled = mp.compile(_symbolic_linear(), "a100", pm=mmaplug_pm)
    first = compiled.specialize(SHAPES[0]).spec
    assert first.params.grid_swizzle_factor == 3
    assert first.provenance.source("grid_swizzle_factor") == "override_matmul_params"
    with override_matmul_params(grid_swizzle_factor=5):
        later = compiled.specialize(SHAPES[1]).spec
    assert later.params.grid_swizzle_factor == 3


def test_a_symbolic_fusion_planned_after_its_plugins_left_warns(mmaplug_pm):
    import mmaplug as mp

    with registered(mmaplug_pm, FakeHeuristic("fake", {"stages": 3})):
        compiled = mp.compile(_symbolic_linear(), "a100", pm=mmaplug_pm)
        assert compiled.specialize(SHAPES[0]).spec.params.stages == 3
    with pytest.warns(
        mp.MatmulWarning, match=r"plugins registered at mp.compile are gone now \(fake\)"
    ):
        assert compiled.specialize(SHAPES[1]).spec.params.stages != 3


def test_a_segmented_symbolic_fusion_plans_under_the_blocks_of_its_compile(mmaplug_pm):
    """The same for a fusion of symbolic extents that no one kernel takes (two linears):
    each segment's plan sees the blocks of mp.compile, not those around a later call."""
    import mmaplug as mp

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, 4096], dtype=mp.float16)
        w1 = fd.define_tensor([4096, 4096], dtype=mp.float16)
        w2 = fd.define_tensor([4096, 4096], dtype=mp.float16)
        fd.add_output(fd.ops.linear(fd.ops.linear(x, w1), w2))
    shapes = [(8192, 4096), (4096, 4096), (4096, 4096)]
    with override_matmul_params(grid_swizzle_factor=3):
        compiled = mp.compile(fd, "a100", pm=mmaplug_pm)
    with override_matmul_params(grid_swizzle_factor=5):
        kernels = compiled.specialize(shapes).kernels.values()
    assert [k.params.grid_swizzle_factor for k in kernels] == [3, 3]


def test_registered_names_a_plugin_modules_own_missing_import(mmaplug_pm, monkeypatch, tmp_path):
    """A module that exists and fails to import (its dependency, whose name is a prefix of
    its own, is missing) raises its own error, not 'no such plugin'."""
    (tmp_path / "my_tiles_v2.py").write_text("import my_tiles\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="No module named 'my_tiles'"):
        with registered(mmaplug_pm, "my_tiles_v2"):
            pass
