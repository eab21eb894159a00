"""A third scheduler, registered as an object from a test, plans, validates, adjusts and builds
without a change to core; the deprecated hooks still work, with a DeprecationWarning."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import pytest

import mmaplug as mp
from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.errors import (
    InvalidParamsError,
    KernelBuildError,
    NoSchedulerError,
    ParamAdjustedWarning,
    PluginError,
    PluginResultError,
    PluginWarning,
)
from mmaplug.hooks.manager import PluginManager, make_plugin_manager
from mmaplug.planning.choices import Adjustment, KernelSpec, Rejection, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams, TileShape
from mmaplug.planning.plan import explain, plan_problem
from mmaplug.planning.records import plugins_record
from mmaplug.planning.scheduler import Resources, Rule, Scheduler, Space, active
from mmaplug.planning.scheduler_registry import schedulers
from mmaplug.testing import FakeHeuristic, registered

H200 = get_device("h200")


def problem(m: int = 64, n: int = 48, k: int = 32) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=mp.float16,
        output_dtype=mp.float16,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
    )


def linear_fusion(m: int = 64) -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, 32], dtype=mp.float16)
        b = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.linear(a, b))
    return fd.fusion


class ToyArtifact:
    """A launchable-looking artifact (never launched here)."""

    kernel_name = "toy_gemm"

    def ptx(self) -> str:
        return "// toy"

    def launch(self, args: object) -> None:
        pass

    def bind(self, args: object) -> Callable[..., None]:
        return lambda *a: None


def _stages_rule(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if p.stages in STAGES.values:
        return None
    return f"toy runs 2 to 4 stages, not stages={p.stages}; set stages=4"


def _depth_rule(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if p.stages * p.splitk_factor <= 6:
        return None
    return (
        f"toy keeps stages * splitk_factor <= 6, not {p.stages} * {p.splitk_factor}; "
        "lower one of them"
    )


STAGES = Space("stages", "2 to 4", values=(2, 3, 4))


@attrs.define(eq=False)
class Toy:
    """A scheduler for problems of m == 64 only, above hopper (20) and ampere (10)."""

    name: str = "toy"
    priority: int = 30
    built: list[KernelSpec] = attrs.field(factory=list)
    accepts_raises: bool = False
    artifact: Callable[[], object] = ToyArtifact
    # "rules": rules() raises; "space": space() answers 7; "rule_bool": a rule's check answers
    # False (a bool, not None or a message); "adjustments": adjustments() answers garbage
    broken: str = ""

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        if self.accepts_raises:
            raise RuntimeError("toy cannot tell")
        return None if problem.m == 64 else f"toy takes m == 64 only, not m={problem.m}"

    def space(self, problem: MatmulProblem, device: Device) -> Sequence[Space]:
        if self.broken == "space":
            return 7  # type: ignore[return-value]
        tile = Space(
            "cta_tile",
            "m == 64",
            accepts=lambda t: isinstance(t, TileShape) and t.m == 64,
            examples=((64, 64, 32),),
        )
        return [STAGES, tile]

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        if self.broken == "rules":
            raise ValueError("toy lost its rules")
        if self.broken == "rule_bool":
            return [Rule("stages", "2 to 4", lambda params, problem, device: False)]
        return [
            Rule("stages", "2 to 4", _stages_rule),
            Rule("splitk_factor", "stages * splitk_factor <= 6", _depth_rule),
        ]

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        tile = params.cta_tile
        return Resources(smem_bytes=params.stages * (tile.m + tile.n) * tile.k * 2, threads=128)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> Sequence[Adjustment]:
        if self.broken == "adjustments":
            return "stages"  # type: ignore[return-value]
        if params.stages > 3 and problem.k <= 64:
            return [Adjustment("stages", params.stages, 3, "toy: a short K loop needs 3 stages")]
        return []

    def build(self, spec: KernelSpec, analysis: object) -> object:
        self.built.append(spec)
        return self.artifact()


class ToyPlugin:
    """Registers its scheduler, and base params for it found through ``active``."""

    def __init__(self, scheduler: object, name: str = "toyplug") -> None:
        self.name = name
        self.scheduler = scheduler
        self.answer: object = [scheduler]

    @mp.hookimpl
    def mmaplug_schedulers(self) -> object:
        return self.answer

    @mp.hookimpl
    def mmaplug_matmul_params(
        self, problem: MatmulProblem, device: Device, scheduler: str
    ) -> MatmulParams | None:
        own = active(scheduler)  # the heuristic is told only the name
        if own is not self.scheduler:
            return None
        stages = max(own.space(problem, device)[0].values)
        return MatmulParams(
            cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), instruction_tile=(16, 8, 16),
            stages=stages,
        )  # fmt: skip


@pytest.fixture
def toy() -> Toy:
    return Toy()


@pytest.fixture
def pm(mmaplug_pm: PluginManager) -> PluginManager:
    """The hermetic strict manager of the built-in plugins."""
    return mmaplug_pm


def test_toy_is_a_scheduler(toy: Toy) -> None:
    """The protocol is checked at run time: the toy has every member."""
    assert isinstance(toy, Scheduler)


def test_toy_wins_by_priority(pm: PluginManager, toy: Toy) -> None:
    """It accepts m == 64 and outranks hopper; its adjustment is recorded, by its plugin."""
    with registered(pm, ToyPlugin(toy)), pytest.warns(ParamAdjustedWarning, match="toyplug"):
        spec = plan_problem(problem(), H200, pm=pm)
    prov = spec.provenance
    assert (spec.scheduler, prov.scheduler_plugin, prov.base) == ("toy", "toyplug", "toyplug")
    assert SchedulerChoice("toy", 30) in prov.candidates
    assert SchedulerChoice("hopper", 20) in prov.candidates
    assert spec.params.stages == 3
    assert [a.describe() for a in prov.adjustments] == [
        "stages: 4 -> 3 (toy: a short K loop needs 3 stages [by toyplug])"
    ]
    text = explain(spec)
    assert "toy          accepted (priority 30)" in text and "scheduler:  toy" in text


def test_toy_rejects_and_explain_says_why(pm: PluginManager, toy: Toy) -> None:
    """For another m it declines with its reason, listed among the candidates."""
    with registered(pm, ToyPlugin(toy)):
        spec = plan_problem(problem(m=128), H200, pm=pm)
    assert spec.scheduler == "hopper"
    assert Rejection("toy", "toy takes m == 64 only, not m=128") in spec.provenance.candidates
    assert "toy          rejected: toy takes m == 64 only, not m=128" in explain(spec)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stages": 5}, "toy runs 2 to 4 stages, not stages=5; set stages=4"),
        (
            {"splitk_factor": 2},
            "toy keeps stages \\* splitk_factor <= 6, not 4 \\* 2; lower one of them",
        ),
    ],
    ids=["one_field", "cross_field"],
)
def test_a_broken_toy_rule_names_the_caller(
    pm: PluginManager, toy: Toy, overrides: dict[str, object], message: str
) -> None:
    """The toy's rules are checked; the error names the value's source and the rule's plugin."""
    with registered(pm, ToyPlugin(toy)), pytest.raises(InvalidParamsError) as info:
        plan_problem(problem(), H200, pm=pm, overrides=overrides)
    assert info.match(f"{message}\n  value from: caller; rule of: toyplug")
    (violation,) = info.value.violations
    assert violation.field == next(iter(overrides))


def test_a_broken_toy_rule_blames_the_plugin(pm: PluginManager, toy: Toy) -> None:
    """An override plugin's value breaking a toy rule is blamed on that plugin."""
    with registered(pm, ToyPlugin(toy), FakeHeuristic("deep", {"splitk_factor": 3})):
        with pytest.raises(InvalidParamsError, match="value from: deep; rule of: toyplug"):
            plan_problem(problem(), H200, pm=pm)


def test_compile_builds_with_the_toy(pm: PluginManager, toy: Toy) -> None:
    """mp.compile asks the chosen scheduler object to build the kernel."""
    with registered(pm, ToyPlugin(toy)), pytest.warns(ParamAdjustedWarning):
        compiled = mp.compile(linear_fusion(), "h200", pm=pm)
    assert compiled.kernel_name == "toy_gemm" and compiled.spec.scheduler == "toy"
    assert toy.built == [compiled.spec]


def test_a_toy_build_failure_is_a_verdict(pm: PluginManager, toy: Toy) -> None:
    """KernelBuildError from build propagates, noting the plugin; another error is a fault."""

    def refuse() -> object:
        raise KernelBuildError("toy: nvvm refused")

    toy.artifact = refuse
    with registered(pm, ToyPlugin(toy)), pytest.warns(ParamAdjustedWarning):
        with pytest.raises(KernelBuildError, match="refused") as info:
            mp.compile(linear_fusion(), "h200", pm=pm)
    assert "raised by plugin 'toyplug' in mmaplug_schedulers (toy.build)" in info.value.__notes__
    toy.artifact = lambda: 42
    lenient = make_plugin_manager(load_entrypoints=False, strict=False)
    with registered(lenient, ToyPlugin(toy)), pytest.warns(ParamAdjustedWarning):
        with pytest.raises(PluginResultError, match=r"\(toy.build\): plugin 'toyplug' returned 42"):
            mp.compile(linear_fusion(), "h200", pm=lenient)


@pytest.mark.parametrize("base", [False, True], ids=["overrides", "answers_every_scheduler"])
def test_a_selected_heuristic_leaves_a_scheduler_to_its_plugin(toy: Toy, base: bool) -> None:
    """MMAPLUG_HEURISTIC selects which heuristic plans the built-in schedulers; a plugin's own
    scheduler is planned by that plugin first (before, every such plan failed), whichever was
    registered first, even when the selected one answers for every scheduler."""
    every = MatmulParams(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32),
                         instruction_tile=(16, 8, 16), stages=2)  # fmt: skip
    other = (
        FakeHeuristic("other", base=every)
        if base
        else FakeHeuristic("other", {"grid_swizzle_factor": 3})
    )
    pm = make_plugin_manager(load_entrypoints=False, strict=True, heuristic="other",
                             plugins=[ToyPlugin(toy), other] if base else [other])  # fmt: skip
    with registered(pm, *([] if base else [ToyPlugin(toy)])):
        with pytest.warns(ParamAdjustedWarning):
            spec = plan_problem(problem(), H200, pm=pm)
    assert (spec.scheduler, spec.provenance.base) == ("toy", "toyplug")
    if not base:
        assert spec.provenance.source("grid_swizzle_factor") == "other"


def test_a_scheduler_whose_plugin_is_dropped_is_not_planned(toy: Toy) -> None:
    """Warning mode: the plugin's invalid base params drop it, and with it its scheduler; the
    plan goes to the next scheduler (before: 'no heuristic answered', after a warning that
    promised the default)."""

    class Invalid(ToyPlugin):
        @mp.hookimpl
        def mmaplug_matmul_params(
            self, problem: MatmulProblem, device: Device, scheduler: str
        ) -> MatmulParams | None:
            if scheduler != "toy":
                return None
            return MatmulParams(
                cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), instruction_tile=(16, 8, 16),
                stages=9,
            )  # fmt: skip

    pm = make_plugin_manager(load_entrypoints=False, strict=False)
    left_out = "(?s)invalid .*ignored; its scheduler 'toy' is left out and the plan made again"
    with registered(pm, Invalid(toy)), pytest.warns(PluginWarning, match=left_out):
        spec = plan_problem(problem(), H200, pm=pm)
    assert spec.scheduler == "hopper" and spec.provenance.dropped == ("toyplug",)


class Unplanned:
    """A plugin adding a scheduler and no heuristic for it."""

    name = "unplanned"

    @mp.hookimpl
    def mmaplug_schedulers(self) -> object:
        return [Toy()]


def test_a_scheduler_nobody_plans_is_named(pm: PluginManager) -> None:
    """No heuristic answers for a new scheduler: the error names it and its plugin, and says
    that the default plans only the built-in schedulers."""
    with registered(pm, Unplanned()):
        with pytest.raises(PluginResultError, match="for scheduler 'toy' \\(of plugin 'unplanned'"):
            plan_problem(problem(), H200, pm=pm)


def test_no_scheduler_left_says_what_was_blocked() -> None:
    """With every scheduler blocked, the error lists the blocked names."""
    pm = make_plugin_manager(block=["ampere", "hopper", "decode"], load_entrypoints=False)
    with pytest.raises(NoSchedulerError, match=r"blocked \(MMAPLUG_DISABLE or block=\): ampere, "):
        plan_problem(problem(), H200, pm=pm)


def test_two_schedulers_of_one_name(pm: PluginManager) -> None:
    """Two plugins registering a scheduler 'toy': the fault of the one registered later,
    naming both; strict, a PluginError."""
    clash = "plugin 'second' answered a scheduler named 'toy' as plugin 'first' does"
    with registered(pm, ToyPlugin(Toy(), "first"), ToyPlugin(Toy(), "second")):
        with pytest.raises(PluginError, match=clash):
            plan_problem(problem(), H200, pm=pm)
        with pytest.raises(PluginError, match=clash):
            schedulers(pm)


def test_two_schedulers_of_one_name_leniently() -> None:
    """Warning mode: the later plugin's schedulers are left out with a warning naming both;
    planning goes on with the first's (mmaplug plugins lists them, and exits 0)."""
    lenient = make_plugin_manager(load_entrypoints=False, strict=False)
    first, second = Toy(), Toy()
    with registered(lenient, ToyPlugin(first, "first"), ToyPlugin(second, "second")):
        with pytest.warns(PluginWarning, match="'second' answered a scheduler named 'toy'"):
            found = schedulers(lenient)
        assert found["toy"] == ("first", first)
        with pytest.warns(PluginWarning), pytest.warns(ParamAdjustedWarning):
            spec = plan_problem(problem(), H200, pm=lenient)
    assert (spec.scheduler, spec.provenance.scheduler_plugin) == ("toy", "first")
    assert "second" in spec.provenance.dropped


def test_a_raising_accepts_is_named(pm: PluginManager) -> None:
    """Strict: a PluginError naming plugin and method; lenient: a warning, and toy is dropped."""
    with registered(pm, ToyPlugin(Toy(accepts_raises=True))):
        with pytest.raises(PluginError, match="toy cannot tell") as info:
            plan_problem(problem(), H200, pm=pm)
        assert info.value.plugin == "toyplug"
        assert info.value.hook == "mmaplug_schedulers (toy.accepts)"
        with pytest.warns(PluginWarning, match="toyplug.*\n.*its answer is ignored"):
            spec = plan_problem(problem(), H200, pm=pm, strict=False)
    assert spec.scheduler == "hopper" and spec.provenance.dropped == ("toyplug",)


@pytest.mark.parametrize(
    ("broken", "error", "match", "fallback", "scheduler"),
    [
        # a scheduler is never used without its rules: hopper plans instead
        ("rules", PluginError, "raised ValueError: toy lost its rules", "are not used", "hopper"),
        ("space", PluginResultError, "answered 7, not a sequence of Space", "are not", "hopper"),
        ("rule_bool", PluginError, "raised PluginResultError: .*False", "are not", "hopper"),
        ("adjustments", PluginResultError, "returned 'stages'", "its adjustments are not", "toy"),
    ],
)
def test_a_faulty_toy_method_is_named(
    pm: PluginManager,
    broken: str,
    error: type[Exception],
    match: str,
    fallback: str,
    scheduler: str,
) -> None:
    """Strict: an error naming plugin and method; lenient: a warning and the fallback."""
    with registered(pm, ToyPlugin(Toy(broken=broken))):
        method = "rules" if broken == "rule_bool" else broken
        with pytest.raises(error, match=rf"\(toy.{method}\): plugin 'toyplug' {match}"):
            plan_problem(problem(), H200, pm=pm)
        with pytest.warns(PluginWarning, match=fallback):
            spec = plan_problem(problem(), H200, pm=pm, strict=False)
    assert spec.scheduler == scheduler and spec.provenance.dropped == ("toyplug",)
    assert spec.provenance.adjustments == ()  # a dropped plugin is asked nothing more


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        ("toy", "returned 'toy' \\(str\\); expected a mmaplug.planning.scheduler.Scheduler"),
        ([object()], "expected mmaplug.planning.scheduler.Scheduler items"),
        ([Toy(priority="high")], "priority is 'high'; expected an int"),  # type: ignore[arg-type]
        ([Toy(name="")], "whose name is ''"),
    ],
    ids=["str", "not_a_scheduler", "priority", "name"],
)
def test_a_wrong_answer_to_mmaplug_schedulers(answer: object, match: str) -> None:
    """Strict: PluginResultError naming the plugin; lenient: a warning, its schedulers ignored."""
    bad = ToyPlugin(None, "bad")
    bad.answer = answer
    strict = make_plugin_manager(load_entrypoints=False, strict=True)
    with registered(strict, bad), pytest.raises(PluginResultError, match=f"'bad' .*{match}"):
        plan_problem(problem(), H200, pm=strict)
    lenient = make_plugin_manager(load_entrypoints=False, strict=False)
    with registered(lenient, bad), pytest.warns(PluginWarning, match="its schedulers are ignored"):
        spec = plan_problem(problem(), H200, pm=lenient)
    assert spec.scheduler == "hopper" and "bad" in spec.provenance.dropped


def test_registry_follows_registration(pm: PluginManager, toy: Toy) -> None:
    """Registering and unregistering a plugin changes the registry (it is cached between)."""
    with registered(pm, ToyPlugin(toy)):
        assert schedulers(pm)["toy"] == ("toyplug", toy)
        assert schedulers(pm) == schedulers(pm)
    assert "toy" not in schedulers(pm)
    assert plan_problem(problem(), H200, pm=pm).scheduler == "hopper"


def test_plugins_record_lists_schedulers(pm: PluginManager, toy: Toy) -> None:
    """mmaplug plugins --json: each scheduler's name, priority and plugin."""
    with registered(pm, ToyPlugin(toy)):
        record = plugins_record(pm)
    assert {"name": "toy", "priority": 30, "plugin": "toyplug"} in record["schedulers"]


class Legacy:
    """A scheduler plugin in the deprecated form: candidates and build hooks."""

    name = "legacy"

    @mp.hookimpl
    def mmaplug_scheduler_candidates(self, problem: MatmulProblem) -> object:
        if problem.m == 64:
            return SchedulerChoice("old", 40)
        return Rejection("old", "old takes m == 64 only")

    @mp.hookimpl
    def mmaplug_matmul_params(self, scheduler: str) -> MatmulParams | None:
        if scheduler != "old":
            return None
        return MatmulParams(
            cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), instruction_tile=(16, 8, 16)
        )

    @mp.hookimpl
    def mmaplug_build_kernel(self, spec: KernelSpec) -> object:
        return ToyArtifact() if spec.scheduler == "old" else None


def test_the_deprecated_hooks_still_plan_and_build(pm: PluginManager) -> None:
    """The legacy plugin plans and builds, each hook used with a DeprecationWarning naming it."""
    with registered(pm, Legacy()):
        with pytest.warns(DeprecationWarning, match="'legacy' implements mmaplug_scheduler_cand"):
            spec = plan_problem(problem(), H200, pm=pm)
        assert (spec.scheduler, spec.provenance.scheduler_plugin) == ("old", "legacy")
        with pytest.warns(DeprecationWarning) as record:
            compiled = mp.compile(linear_fusion(), "h200", pm=pm)
    assert compiled.kernel_name == "toy_gemm"
    messages = [str(w.message) for w in record]
    assert any("mmaplug_build_kernel" in m and "mmaplug_schedulers" in m for m in messages)


def test_the_deprecated_candidates_keep_their_order(pm: PluginManager, toy: Toy) -> None:
    """Objects and legacy answers compete by priority: old (40) beats toy (30); both listed."""
    with registered(pm, ToyPlugin(toy), Legacy()), pytest.warns(DeprecationWarning):
        spec = plan_problem(problem(), H200, pm=pm)
    assert spec.scheduler == "old"
    names = [c.name for c in spec.provenance.candidates]
    assert names == ["ampere", "decode", "hopper", "old", "toy"]


def test_a_faulty_legacy_builder_of_another_scheduler() -> None:
    """Lenient: a deprecated builder that raises for a scheduler it does not own is skipped
    with a warning, and the next builder is asked."""
    pm = make_plugin_manager(load_entrypoints=False, strict=False)

    class Faulty:
        name = "faulty"

        @mp.hookimpl
        def mmaplug_build_kernel(self) -> object:
            raise RuntimeError("boom")

    with registered(pm, Legacy(), Faulty()), pytest.warns(Warning) as record:
        compiled = mp.compile(linear_fusion(), "h200", pm=pm)
    assert compiled.spec.scheduler == "old" and compiled.kernel_name == "toy_gemm"
    kinds = {(w.category, str(w.message).partition(":")[0]) for w in record}
    assert (PluginWarning, "mmaplug_build_kernel") in kinds
    assert any(w.category is DeprecationWarning and "'legacy'" in str(w.message) for w in record)


def test_scheduler_names_go_to_the_plugin_registered_first() -> None:
    """Clashes are settled in registration order, whatever order pluggy calls the plugins in:
    B takes A's name and is left out whole, so C keeps the name only B clashed with; a plugin
    naming one scheduler twice is left out; a plugin cannot take a built-in's scheduler."""
    lenient = make_plugin_manager(load_entrypoints=False, strict=False)
    a, b1, b2, c = Toy(name="y"), Toy(name="x"), Toy(name="y"), Toy(name="x")
    twice = ToyPlugin(Toy(name="z"), "twice")
    twice.answer = [Toy(name="z"), Toy(name="z")]
    hop = ToyPlugin(Toy(name="hopper"), "hop")
    b = ToyPlugin(b1, "b")
    b.answer = [b1, b2]
    with registered(lenient, ToyPlugin(a, "a"), b, ToyPlugin(c, "c"), twice, hop):
        with pytest.warns(PluginWarning) as caught:
            found = schedulers(lenient)
    texts = [str(w.message) for w in caught]
    assert {n: found[n][0] for n in ("y", "x", "hopper")} == {
        "y": "a",
        "x": "c",
        "hopper": "hopper",
    }
    assert "z" not in found
    assert any("'b' answered a scheduler named 'y' as plugin 'a' does" in w for w in texts)
    assert any("'twice' answered a scheduler named 'z' twice" in w for w in texts)
    assert any(
        "'hop' answered a scheduler named 'hopper' as plugin 'hopper' (built in)" in w
        for w in texts
    )
