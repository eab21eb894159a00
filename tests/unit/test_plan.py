"""Planning through the hooks: scheduler choice, base params, overrides, validation, policy."""

from __future__ import annotations

import random

import attrs
import pytest

import mmaplug
from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.errors import (
    InvalidParamsError,
    KernelBuildError,
    NoSchedulerError,
    OverrideConflictError,
    ParamAdjustedWarning,
    PluginError,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
    UsageError,
)
from mmaplug.heuristics.default import ampere_params, hopper_params
from mmaplug.hooks import hookspecs
from mmaplug.hooks.manager import DEFAULT_PLUGINS, PluginManager, make_plugin_manager, short_name
from mmaplug.ir.dtypes import DType
from mmaplug.markers import hookimpl
from mmaplug.planning.choices import Adjustment, Rejection, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import (
    SENTINELS,
    CtaOrder,
    MatmulParams,
    ParamOverride,
    TileShape,
    TilingStrategy,
    Violation,
)
from mmaplug.planning.plan import KernelSpec, Provenance, explain, matmul_params, plan_problem
from mmaplug.planning.scheduler import Resources
from mmaplug.testing import FakeHeuristic, override_matmul_params, registered, sentinels

A100 = get_device("a100")  # ampere is the only scheduler here: planning tests use it
H200 = get_device("h200")
#: Why decode (M <= 16 only) declines make_problem's default 4096 rows.
DECODE_DECLINES = Rejection(
    "decode",
    "takes at most 16 activation rows (decode and small batches), not m=4096; "
    "the tensor-core GEMMs take more",
)


def make_problem(
    m: int = 4096, n: int = 4096, k: int = 4096, *, dtype: DType = DType.float16, vec: int = 8
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=dtype,
        output_dtype=dtype,
        vector_widths=VectorWidths(a=vec, b=vec, epilogue=8),
    )


@pytest.fixture
def problem() -> MatmulProblem:
    return make_problem()


@pytest.fixture
def default_spec(mmaplug_pm: PluginManager, problem: MatmulProblem) -> KernelSpec:
    return plan_problem(problem, A100, pm=mmaplug_pm)


def test_default_plan_uses_ampere_and_default_heuristic(default_spec):
    """On sm_80 the ampere scheduler and the default heuristic decide; decode and hopper say
    why not."""
    assert default_spec.scheduler == "ampere"
    assert default_spec.provenance.base == "default"
    assert default_spec.params.use_smem_epilogue  # what the kernel builds: nothing adjusted
    assert default_spec.provenance.adjustments == ()
    assert {source for _, source in default_spec.provenance.sources} == {"default"}
    assert default_spec.provenance.candidates == (
        SchedulerChoice("ampere", 10),
        DECODE_DECLINES,
        Rejection("hopper", "needs wgmma and TMA (sm_90a); a100 is sm_80"),
    )


@pytest.mark.parametrize("device", ["h100", "h200"])
def test_default_plan_on_sm90a_uses_hopper(mmaplug_pm, problem, device):
    """On sm_90a hopper (priority 20) wins over ampere, which still accepts (priority 10)."""
    gpu = get_device(device)
    spec = plan_problem(problem, gpu, pm=mmaplug_pm)
    assert (spec.scheduler, spec.provenance.base) == ("hopper", "default")
    assert spec.provenance.candidates == (
        SchedulerChoice("ampere", 10),
        DECODE_DECLINES,
        SchedulerChoice("hopper", 20),
    )
    assert spec.params == hopper_params(problem, gpu)
    assert {source for _, source in spec.provenance.sources} == {"default"}


def test_blocking_hopper_plans_ampere_on_sm90a(problem):
    """With hopper blocked, sm_90a gets the ampere scheduler and its default params."""
    pm = make_plugin_manager(block=["hopper"], load_entrypoints=False, strict=True)
    spec = plan_problem(problem, H200, pm=pm)
    assert spec.scheduler == "ampere"
    assert spec.provenance.candidates == (SchedulerChoice("ampere", 10), DECODE_DECLINES)
    assert spec.params == ampere_params(problem, H200)


def test_hopper_declines_what_tma_cannot_load(mmaplug_pm):
    """An fp16 problem whose K rows are not 16-byte aligned goes to ampere on sm_90a."""
    prob = make_problem(k=100, vec=4)  # 200-byte rows: 8-byte (4-element) vectors
    spec = plan_problem(prob, H200, pm=mmaplug_pm)
    assert spec.scheduler == "ampere"
    (rejection,) = [c for c in spec.provenance.candidates if c.name == "hopper"]
    assert "TMA needs 16-byte aligned row pitches" in rejection.reason


def test_sentinels_reach_final_params(mmaplug_pm, mmaplug_recorder, problem):
    """A fake's sentinel values arrive untouched, provenance names it, hooks run in order."""
    fake = FakeHeuristic("fake", sentinels("ampere"))
    with registered(mmaplug_pm, fake):
        spec = plan_problem(problem, A100, pm=mmaplug_pm)
    for field, value in sentinels("ampere").items():
        assert getattr(spec.params, field) == value, field
        assert spec.provenance.source(field) == "fake"
    assert spec.provenance.source("cta_order") == "default"
    assert "fake" in spec.provenance.consulted
    mmaplug_recorder.assert_order(
        [
            "mmaplug_schedulers",  # asked once per set of registered plugins
            "mmaplug_matmul_params",
            "mmaplug_matmul_overrides",
        ]
    )  # the scheduler objects' methods are no hooks: the recorder does not see them


@pytest.mark.parametrize("scheduler, device", [("ampere", A100), ("hopper", H200)])
@pytest.mark.parametrize(
    "shape", [(4096, 4096, 4096, True), (1000, 520, 200, True), (64, 4096, 1024, False)]
)
def test_a_schedulers_sentinels_apply_as_one_set(mmaplug_pm, scheduler, device, shape):
    """``sentinels(scheduler)``, the documented set, is kept whole by that scheduler, in any
    layout of A and with a K-major B; every field of SENTINELS is in some scheduler's set."""
    m, n, k, a_k_inner = shape
    prob = attrs.evolve(make_problem(m, n, k), a_k_inner=a_k_inner)
    wanted = sentinels(scheduler)
    with override_matmul_params(**wanted):
        spec = plan_problem(prob, device, pm=mmaplug_pm)
    assert spec.scheduler == scheduler
    assert {f: getattr(spec.params, f) for f in wanted} == dict(wanted)
    assert spec.provenance.adjustments == ()
    assert set(sentinels("ampere")) | set(sentinels("hopper")) == set(SENTINELS)


def test_sentinels_of_a_scheduler_without_them():
    with pytest.raises(
        UsageError, match="no test sentinels for scheduler 'decode'; .*ampere, hopper"
    ):
        sentinels("decode")


@pytest.mark.parametrize("seed", [0, 1, 2, 3], ids=lambda s: f"seed{s}")
def test_registration_order_does_not_matter(seed, problem, default_spec):
    """Registering the built-ins and a fake in shuffled order gives the same spec."""
    plugins = [(short_name(m), __import__(m, fromlist=["_"])) for m in DEFAULT_PLUGINS]
    plugins.append(("fake", FakeHeuristic("fake", {"stages": 3})))
    random.Random(seed).shuffle(plugins)
    pm = PluginManager(strict=True)
    for name, plugin in plugins:
        pm.register(plugin, name=name)
    spec = plan_problem(problem, A100, pm=pm)
    assert spec == default_spec.__class__(
        scheduler="ampere",
        problem=problem,
        device=A100,
        params=default_spec.params.with_overrides(stages=3),
        provenance=spec.provenance,
    )
    reference = make_plugin_manager(
        plugins=[FakeHeuristic("fake", {"stages": 3})], load_entrypoints=False, strict=True
    )
    expected = plan_problem(problem, A100, pm=reference)
    assert (spec, spec.provenance) == (expected, expected.provenance)


def test_conflicting_fakes_name_both(mmaplug_pm, problem):
    """Two plugins setting one field differently raise an error naming both."""
    with registered(
        mmaplug_pm, FakeHeuristic("left", {"stages": 2}), FakeHeuristic("right", {"stages": 3})
    ):
        with pytest.raises(OverrideConflictError, match="'left' and 'right'") as info:
            plan_problem(problem, A100, pm=mmaplug_pm)
    assert (info.value.field, info.value.sources) == ("stages", ("left", "right"))


def test_agreeing_fakes_do_not_conflict(mmaplug_pm, problem):
    """Two plugins giving one field the same value (tuple or TileShape) are not a conflict."""
    with registered(
        mmaplug_pm,
        FakeHeuristic("a", {"cta_tile": (128, 128, 32)}),
        FakeHeuristic("b", {"cta_tile": TileShape(128, 128, 32)}),
    ):
        spec = plan_problem(problem, A100, pm=mmaplug_pm)
    assert spec.provenance.source("cta_tile") == "a"


def test_caller_overrides_win(mmaplug_pm, problem):
    """Caller overrides beat plugin overrides and are recorded with source 'caller'."""
    with registered(mmaplug_pm, FakeHeuristic("fake", {"stages": 2})):
        spec = plan_problem(problem, A100, pm=mmaplug_pm, overrides={"stages": 3})
    assert (spec.params.stages, spec.provenance.source("stages")) == (3, "caller")


class Sourced:
    """An overrides plugin whose ParamOverride carries *source*."""

    name = "sourced"

    def __init__(self, source: object) -> None:
        self.source = source

    @hookimpl
    def mmaplug_matmul_overrides(self):
        return ParamOverride(self.source, {"stages": 3})


@pytest.mark.parametrize("source", [None, "", "default", "caller", "ampere"])
def test_override_source_must_be_its_own(problem, source):
    """A ParamOverride source that is no str, or another plugin's name (credited and blamed
    for the values in its place), is the plugin's fault, named; warning mode drops it."""
    pm = make_plugin_manager(plugins=[Sourced(source)], load_entrypoints=False, strict=False)
    with pytest.warns(PluginWarning, match="mmaplug_matmul_overrides: plugin 'sourced'"):
        spec = plan_problem(problem, A100, pm=pm)
    assert spec.provenance.source("stages") == "default"
    strict = make_plugin_manager(plugins=[Sourced(source)], load_entrypoints=False, strict=True)
    with pytest.raises(PluginError, match="plugin 'sourced'"):
        plan_problem(problem, A100, pm=strict)


def test_override_source_of_its_own_choosing(problem):
    """A source that names no plugin (a tuned table's file, say) is shown as given."""
    pm = make_plugin_manager(plugins=[Sourced("tuned.csv")], load_entrypoints=False, strict=True)
    spec = plan_problem(problem, A100, pm=pm)
    assert (spec.params.stages, spec.provenance.source("stages")) == (3, "tuned.csv")


class SitePolicy:
    name = "site_policy"

    @hookimpl
    def mmaplug_validate_params(self, params):
        return [Violation("max_stages", params.stages, "<= 3", "at most 3 stages")]


def test_a_violation_of_no_field_is_the_validators_fault(problem):
    """A Violation must name a MatmulParams field (blame goes to whoever chose its value); one
    that does not was blamed on the default heuristic: now it is the validator's fault."""
    strict = make_plugin_manager(plugins=[SitePolicy()], load_entrypoints=False, strict=True)
    with pytest.raises(PluginResultError, match="'site_policy' answered a Violation of 'max_st"):
        plan_problem(problem, A100, pm=strict)
    lenient = make_plugin_manager(plugins=[SitePolicy()], load_entrypoints=False, strict=False)
    with pytest.warns(PluginWarning, match="its rules are not applied"):
        spec = plan_problem(problem, A100, pm=lenient)
    assert spec.provenance.dropped == ("site_policy",)


def test_caller_unknown_key_suggests(mmaplug_pm, problem):
    """An unknown caller key raises UnknownParamError with a near miss."""
    with pytest.raises(UnknownParamError, match="did you mean 'stages'"):
        plan_problem(problem, A100, pm=mmaplug_pm, overrides={"stage": 3})


def test_invalid_caller_value_is_an_error_even_when_lenient(mmaplug_pm, problem):
    """A caller value breaking a rule raises, naming the caller, in warning mode too."""
    with pytest.raises(InvalidParamsError, match="value from: caller"):
        plan_problem(problem, A100, pm=mmaplug_pm, overrides={"stages": 9}, strict=False)


def test_a_base_value_broken_by_the_caller_is_named_with_whose_it_is():
    """A caller's tile that breaks the pair the default chose for its own tile (8192^3 runs in
    pairs along M) names the cluster as the default's, chosen before the caller's tile fields;
    a value the caller set itself gets no such line."""
    pm = make_plugin_manager(load_entrypoints=False, strict=True, block=["decode", "ampere"])
    big = make_problem(8192, 8192, 8192)
    assert plan_problem(big, H200, pm=pm).params.cluster_dims == (2, 1)
    tile = {"cta_tile": (64, 40, 64), "warp_tile": (64, 40, 64), "instruction_tile": (64, 40, 16)}
    with pytest.raises(InvalidParamsError) as info:
        plan_problem(big, H200, pm=pm, overrides=tile)
    assert (
        "value from: caller; rule of: hopper\n  cluster_dims=(2, 1) came from default, which "
        "chose it before caller's cta_tile, instruction_tile, warp_tile; set cluster_dims with "
        "them"
    ) in str(info.value)
    assert plan_problem(big, H200, pm=pm, overrides={**tile, "cluster_dims": (1, 1)})
    with pytest.raises(InvalidParamsError) as info:
        plan_problem(big, H200, pm=pm, overrides={"stages": 9})
    assert "came from" not in str(info.value)


class Raises:
    name = "raises"

    @hookimpl
    def mmaplug_matmul_overrides(self):
        raise RuntimeError("boom")


class GarbageParams:
    name = "garbage_params"

    @hookimpl
    def mmaplug_matmul_params(self):
        return {"stages": 3}


class GarbageOverride:
    name = "garbage_override"

    @hookimpl
    def mmaplug_matmul_overrides(self):
        return 42


class UnknownKey:
    name = "unknown_key"

    @hookimpl
    def mmaplug_matmul_overrides(self):
        return {"num_stages": 3}


class GarbageCandidate:
    name = "garbage_candidate"

    @hookimpl
    def mmaplug_scheduler_candidates(self):
        return "ampere"


class GarbageValidator:
    name = "garbage_validator"

    @hookimpl
    def mmaplug_validate_params(self):
        return "fine"


MISBEHAVING = [
    pytest.param(Raises(), PluginError, id="raises"),
    pytest.param(GarbageParams(), PluginResultError, id="garbage_params"),
    pytest.param(GarbageOverride(), PluginResultError, id="garbage_override"),
    pytest.param(UnknownKey(), UnknownParamError, id="unknown_key"),
    pytest.param(GarbageCandidate(), PluginResultError, id="garbage_candidate"),
    pytest.param(GarbageValidator(), PluginResultError, id="garbage_validator"),
    pytest.param(
        FakeHeuristic("invalid_override", {"stages": 9}), InvalidParamsError, id="invalid_override"
    ),
]


@pytest.mark.parametrize(("plugin", "error"), MISBEHAVING)
def test_misbehaving_plugin_strict_raises(mmaplug_pm, problem, plugin, error):
    """In strict mode a misbehaving plugin raises an error naming it."""
    with registered(mmaplug_pm, plugin), pytest.raises(error, match=plugin.name):
        plan_problem(problem, A100, pm=mmaplug_pm)


@pytest.mark.parametrize(("plugin", "error"), MISBEHAVING)
def test_misbehaving_plugin_lenient_warns(mmaplug_pm, problem, default_spec, plugin, error):
    """In warning mode it is named in a PluginWarning and the default answer is used."""
    with registered(mmaplug_pm, plugin), pytest.warns(PluginWarning, match=plugin.name):
        spec = plan_problem(problem, A100, pm=mmaplug_pm, strict=False)
    assert spec == default_spec
    assert plugin.name in spec.provenance.dropped


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_invalid_base_params(mmaplug_pm, problem, default_spec, strict):
    """Invalid base params name the plugin; leniently the default heuristic answers instead."""
    bad = FakeHeuristic("bad_base", {"stages": 9}, base=default_spec.params)
    with registered(mmaplug_pm, bad):
        if strict:
            with pytest.raises(InvalidParamsError, match="value from: bad_base"):
                plan_problem(problem, A100, pm=mmaplug_pm)
            return
        with pytest.warns(PluginWarning, match="invalid stages from bad_base"):
            spec = plan_problem(problem, A100, pm=mmaplug_pm, strict=False)
    assert (spec.params, spec.provenance.base) == (default_spec.params, "default")


def test_all_violations_of_all_plugins_in_one_error(mmaplug_pm, problem):
    """Values from two plugins breaking two rules give one error naming both plugins."""
    with registered(
        mmaplug_pm,
        FakeHeuristic("too_deep", {"stages": 9}),
        FakeHeuristic("wrong_mma", {"instruction_tile": (16, 16, 16)}),
    ):
        with pytest.raises(
            InvalidParamsError, match="(?s)too_deep.*wrong_mma|wrong_mma.*too_deep"
        ) as info:
            plan_problem(problem, A100, pm=mmaplug_pm)
    assert {v.field for v in info.value.violations} >= {"stages", "instruction_tile"}


def test_no_scheduler_lists_every_rejection(mmaplug_pm):
    """A pre-Ampere GPU gets NoSchedulerError listing the ampere, decode and hopper reasons."""
    turing = Device(
        name="t4", cc=(7, 5), sm_count=40, smem_per_block_optin=65536, smem_per_sm=65536
    )
    with pytest.raises(
        NoSchedulerError,
        match=r"(?s)ampere: needs mma.sync.*decode: needs mma.sync m16n8k16 \(sm_80 or newer\); "
        r"t4 is sm_75.*hopper: needs wgmma and TMA \(sm_90a\); t4 is sm_75",
    ) as info:
        plan_problem(make_problem(), turing, pm=mmaplug_pm)
    assert [r.name for r in info.value.rejections] == ["ampere", "decode", "hopper"]


class Scheduler:
    """A scheduler object accepting every problem, registered by itself (its own plugin)."""

    def __init__(self, name: str, priority: int) -> None:
        self.name = name
        self.priority = priority

    @hookimpl
    def mmaplug_schedulers(self):
        return [self]

    def accepts(self, problem, device):
        return None

    def space(self, problem, device):
        return []

    def rules(self, problem, device):
        return []

    def resources(self, params, problem):
        return Resources(smem_bytes=0, threads=128)

    def adjustments(self, params, problem, device):
        return []

    def build(self, spec, analysis):
        raise KernelBuildError("not built here")


class LegacyScheduler:
    """The same in the deprecated form (``mmaplug_scheduler_candidates``)."""

    def __init__(self, name: str, priority: int) -> None:
        self.name = name
        self.priority = priority

    @hookimpl
    def mmaplug_scheduler_candidates(self):
        return SchedulerChoice(self.name, self.priority)


def test_a_legacy_candidate_cannot_take_a_scheduler_objects_name(problem):
    """The deprecated hook answering 'ampere' (a scheduler object's name) is named, as two
    objects of one name are; it had won the plan and failed at build."""
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(LegacyScheduler("ampere", 99), name="legacy")
    with pytest.raises(PluginResultError, match="answered scheduler 'ampere', the name of"):
        plan_problem(problem, A100, pm=pm, strict=True)


@pytest.mark.parametrize("form", [Scheduler, LegacyScheduler], ids=["object", "legacy"])
@pytest.mark.parametrize(
    ("priorities", "winner"),
    [
        ({"zeta": 20, "alpha": 20}, "alpha"),
        ({"zeta": 30, "alpha": 20}, "zeta"),
        ({"zeta": 5, "alpha": 5}, "ampere"),
    ],
    ids=["tie_by_name", "priority", "ampere_higher"],
)
def test_highest_priority_scheduler_wins(
    mmaplug_pm, problem, default_spec, priorities, winner, form
):
    """The highest priority wins and ties go to the alphabetically first name."""
    schedulers = [form(name, p) for name, p in priorities.items()]
    base = FakeHeuristic("base", {}, base=default_spec.params)
    with registered(mmaplug_pm, *schedulers, base):
        if form is Scheduler:
            assert plan_problem(problem, A100, pm=mmaplug_pm).scheduler == winner
            return
        with pytest.warns(DeprecationWarning, match="mmaplug_scheduler_candidates"):
            assert plan_problem(problem, A100, pm=mmaplug_pm).scheduler == winner


class StageCap:
    name = "stage_cap"

    @hookimpl
    def mmaplug_adjust_params(self, params, scheduler):
        if scheduler != "ampere" or params.stages <= 3:
            return None
        return [Adjustment("stages", params.stages, 3, "K loop too short for more")]


class TwoCaps:
    name = "two_caps"

    @hookimpl
    def mmaplug_adjust_params(self, params):
        return [
            Adjustment("stages", params.stages, 3, "cap A"),
            Adjustment("stages", params.stages, 2, "cap B"),
        ]


@pytest.mark.parametrize("strict", [True, False])
def test_one_plugin_adjusting_a_field_twice_is_its_fault(problem, strict):
    """Two values for one field from one adjuster: named (the last had silently won, and
    provenance recorded both changes with the final value)."""
    pm = make_plugin_manager(plugins=[TwoCaps()], load_entrypoints=False, strict=strict)
    match = "'two_caps' answered adjustments of 'stages' to both 3 and 2"
    if strict:
        with pytest.raises(PluginResultError, match=match):
            plan_problem(problem, A100, pm=pm)
    else:
        with pytest.warns(PluginWarning, match=match):
            spec = plan_problem(problem, A100, pm=pm)
        assert spec.provenance.adjustments == () and spec.provenance.dropped == ("two_caps",)


def test_adjustments_are_recorded(mmaplug_pm, problem):
    """A scheduler's forced change appears in provenance and explain()."""
    with registered(mmaplug_pm, StageCap()):
        spec = plan_problem(problem, A100, pm=mmaplug_pm)
    assert spec.params.stages == 3
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.field, adjustment.old, adjustment.new) == ("stages", 4, 3)
    assert "stages: 4 -> 3 (K loop too short for more [by stage_cap])" in explain(spec)


def test_adjusting_a_plugin_value_warns(mmaplug_pm, problem):
    """Changing a value a non-default plugin chose issues a ParamAdjustedWarning; the field's
    source is then the adjuster, whose value it holds (a test checking the source of its
    override sees that it did not take effect)."""
    with registered(mmaplug_pm, StageCap(), FakeHeuristic("fake", {"stages": 7})):
        with pytest.warns(ParamAdjustedWarning, match="stage_cap changed fake's stages: 7 -> 3"):
            spec = plan_problem(problem, A100, pm=mmaplug_pm)
    assert spec.provenance.source("stages") == "stage_cap"
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.old, adjustment.new) == (7, 3)


def test_heuristic_leaving_the_register_epilogue_is_adjusted_with_warning(mmaplug_pm, problem):
    """A heuristic answering use_smem_epilogue=False (the attrs default) for ampere gets True:
    the adjustment is recorded, shown by explain() and warned about."""
    base = MatmulParams(
        cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=3
    )
    with registered(mmaplug_pm, FakeHeuristic("third", base=base)):
        with pytest.warns(
            ParamAdjustedWarning, match="ampere changed third's use_smem_epilogue: False -> True"
        ):
            spec = plan_problem(problem, A100, pm=mmaplug_pm)
    assert spec.params == base.with_overrides(use_smem_epilogue=True)
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.field, adjustment.old, adjustment.new) == ("use_smem_epilogue", False, True)
    assert (
        "use_smem_epilogue: False -> True (the ampere kernel always stages the epilogue tile "
        "through shared memory (its limits count that tile) [by ampere])"
    ) in explain(spec)


def test_hopper_plan_is_not_adjusted_by_ampere(mmaplug_pm, problem):
    """Only the chosen scheduler adjusts: a hopper plan with a register epilogue, which ampere
    would change, is not adjusted."""
    from mmaplug.plugins.ampere.scheduler import SCHEDULER as AMPERE

    register = {"use_smem_epilogue": False}
    spec = plan_problem(problem, H200, pm=mmaplug_pm, overrides=register)
    assert (spec.scheduler, spec.provenance.adjustments) == ("hopper", ())
    assert [a.field for a in AMPERE.adjustments(spec.params, problem, H200)] == [
        "use_smem_epilogue"
    ]


@pytest.mark.parametrize(
    ("heuristic", "expected"),
    [(None, "later"), ("earlier", "earlier"), ("deferring", "default")],
    ids=["none", "earlier", "defers_to_default"],
)
def test_selected_heuristic_answers_alone(problem, default_spec, heuristic, expected):
    """With a selected heuristic only it (then the default) answers the base params."""
    params = default_spec.params
    earlier = FakeHeuristic("earlier", {"stages": 2}, base=params)
    later = FakeHeuristic("later", {"stages": 3}, base=params)
    deferring = FakeHeuristic("deferring", {"stages": 2}, base=params, when=lambda p: False)
    pm = make_plugin_manager(
        plugins=[earlier, deferring, later],
        heuristic=heuristic,
        load_entrypoints=False,
        strict=True,
    )
    assert plan_problem(problem, A100, pm=pm).provenance.base == expected


def test_selected_heuristic_must_stay_registered(problem):
    """Planning with a selected heuristic that was unregistered is a UsageError."""
    fake = FakeHeuristic("gone", {}, base=None)
    pm = make_plugin_manager(plugins=[fake], heuristic="gone", load_entrypoints=False)
    pm.unregister(fake)
    with pytest.raises(UsageError, match="unknown heuristic plugin 'gone'; registered: ampere"):
        plan_problem(problem, A100, pm=pm)


def test_explain_reports_everything(mmaplug_pm, problem):
    """explain() shows layout letters and k-inner flags, device, candidates and sources."""
    with override_matmul_params(stages=3):
        text = explain(plan_problem(problem, A100, pm=mmaplug_pm))
    for part in (
        "layout=TN (a_k_inner=True, b_k_inner=True)",
        "a100 (sm_80",
        "scheduler:  ampere",
        "hopper       rejected: needs wgmma and TMA (sm_90a); a100 is sm_80",
        "plugins consulted: ampere",
        "from override_matmul_params",
        "base params from: default",
        "adjustments: none",
    ):
        assert part in text


def test_explain_on_sm90a_lists_ampere_as_lower_priority(mmaplug_pm, problem):
    """On h200 explain() names hopper as the scheduler and ampere as accepted below it."""
    text = explain(plan_problem(problem, H200, pm=mmaplug_pm))
    for part in (
        "h200 (sm_90a",
        "scheduler:  hopper",
        "ampere       accepted (priority 10)",
        "hopper       accepted (priority 20)",
        "tiling_strategy            persistent         from default",
    ):
        assert part in text


@pytest.mark.parametrize(
    ("device", "prefix"),
    [
        ("a100", "mm_sm80_ampere_f16f16_TN_cta128x128x32_warp64x64x32_inst16x8x16_s4_k1"),
        (
            "h200",
            "mm_sm90a_hopper_f16f16_TN_cta128x256x64_warp64x256x64_inst64x256x16_s4_k1_sw8_smemepi_persistent_ws",
        ),
    ],
)
def test_spec_name_and_repr_round_trip(mmaplug_pm, problem, device, prefix):
    """KernelSpec.name is stable and repr() evaluates back to an equal spec."""
    default_spec = plan_problem(problem, get_device(device), pm=mmaplug_pm)
    assert default_spec.name.startswith(prefix)
    namespace = {
        cls.__name__: cls
        for cls in (
            KernelSpec,
            Provenance,
            MatmulProblem,
            VectorWidths,
            Device,
            MatmulParams,
            TileShape,
            CtaOrder,
            TilingStrategy,
            SchedulerChoice,
            Rejection,
            Adjustment,
        )
    }
    again = eval(repr(default_spec), {**namespace, "mp": mmaplug})
    assert (again, again.provenance) == (default_spec, default_spec.provenance)


def test_matmul_params_convenience(monkeypatch, problem, default_spec):
    """matmul_params(problem, 'h200') returns the planned params from the global manager."""
    monkeypatch.setattr(
        "mmaplug.planning.plan.get_plugin_manager",
        lambda: make_plugin_manager(load_entrypoints=False),
    )
    assert matmul_params(problem, "a100") == default_spec.params


def test_hookspecs_are_documented():
    """Every hookspec has a docstring; firstresult ones say they stop at the first result."""
    for name in dir(hookspecs):
        spec = getattr(hookspecs, name)
        if name.startswith("mmaplug_"):
            assert spec.__doc__, name
            firstresult = spec.mmaplug_spec.get("firstresult")
            assert ("Stops at first non-None result." in spec.__doc__) == bool(firstresult)
