"""Hostile plugins: every fault, in every hook and at registration, is named and ruled on.

Each case is a plugin written to misbehave. Strict mode raises an error naming the plugin and the
hook (or the field); warning mode names them in a ``PluginWarning`` and compiles with the hook's
fallback, or raises where there is none (docs/decisions.md, "Plugin faults").
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.patterns import MatmulPattern
from mmaplug.analysis.translate import translate_as
from mmaplug.errors import (
    InvalidParamsError,
    KernelBuildError,
    OverrideConflictError,
    PluginError,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
    UsageError,
)
from mmaplug.hooks.manager import make_plugin_manager, reset_plugin_manager
from mmaplug.ir.fusion import Expr, IterDomain, IterType
from mmaplug.ir.ops import LinearOp
from mmaplug.planning.choices import Adjustment
from mmaplug.planning.params import MatmulParams, Violation
from mmaplug.planning.scheduler import Resources
from mmaplug.testing import registered

DEVICE = "a100"  # the ampere scheduler plans and builds it without a GPU
BASE = MatmulParams(
    cta_tile=(64, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=2
)


def plugin(name: str, **hooks: Callable[..., Any]) -> object:
    """A plugin object registered as *name*, implementing ``mmaplug_<key>`` for each hook."""
    namespace: dict[str, Any] = {"name": name}
    for hook, function in hooks.items():
        namespace[f"mmaplug_{hook}"] = mp.hookimpl(function)
    return type(name, (), namespace)()


def boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("boom")


class NTMatmulOp(Expr):
    """A plugin's own op, ``a @ b.T``, that only a plugin recognises and translates."""

    kind = "nt_matmul"
    dim_pairs = LinearOp.dim_pairs

    def evaluate(self, args: list) -> np.ndarray:
        return args[0] @ args[1].T


def linear_fusion() -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        b = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.relu(fd.ops.linear(a, b)))
    return fd.fusion


def nt_fusion() -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        b = fd.define_tensor([48, 32], dtype=mp.float16)
        fusion = fd.fusion
        out = fusion.new_tensor(
            mp.float16, [IterDomain(64), IterDomain(48), IterDomain(32, IterType.REDUCTION)]
        )
        fusion.attach(NTMatmulOp([out], [a, b]))
        fd.add_output(fd.ops.cast(out, mp.float16))
    return fusion


def nt_patterns(self: object, fusion: mp.Fusion) -> list[MatmulPattern]:
    return [
        MatmulPattern(e.inputs[0], e.inputs[1], e.output, "nt_matmul")
        for e in fusion.exprs()
        if isinstance(e, NTMatmulOp)
    ]


RECOGNISER = plugin("nt_recogniser", matmul_patterns=nt_patterns)


def first_expr(fusion: mp.Fusion, kind: type) -> Expr:
    return next(e for e in fusion.exprs() if isinstance(e, kind))


def linear_pattern(fusion: mp.Fusion, **changes: object) -> MatmulPattern:
    """The built-in recogniser's pattern of the fusion's LinearOp, with *changes*."""
    e = first_expr(fusion, LinearOp)
    return attrs.evolve(MatmulPattern(e.inputs[0], e.inputs[1], e.output, "linear"), **changes)


def adjust(field: str, new: object) -> Adjustment:
    return Adjustment(field, None, new, "hostile")


class Artifact:
    """A launchable-looking artifact (never launched here)."""

    kernel_name = "fake"

    def ptx(self) -> str:
        return ""

    def launch(self, args: object) -> None:
        pass

    def bind(self, args: object) -> Callable[..., None]:
        return lambda *a: None


class Hostile:
    """An artifact whose every attribute read raises."""

    def __getattr__(self, name: str) -> object:
        raise ValueError(f"no {name} for you")

    def __repr__(self) -> str:
        raise ValueError("no repr either")


@attrs.define
class OwnScheduler:
    """A third-party scheduler object (priority 100) taking what *accept* accepts."""

    name: str
    make: Callable[[], object]
    accept: Callable[[], str | None] = lambda: None
    priority: int = 100

    def accepts(self, problem: object, device: object) -> str | None:
        return self.accept()

    def space(self, problem: object, device: object) -> list[object]:
        return []

    def rules(self, problem: object, device: object) -> list[object]:
        return []

    def resources(self, params: object, problem: object) -> Resources:
        return Resources(smem_bytes=0, threads=128)

    def adjustments(self, params: object, problem: object, device: object) -> list[object]:
        return []

    def build(self, spec: object, analysis: object) -> object:
        return self.make()


def own_scheduler(
    name: str, build: Callable[[], object], accept: Callable[[], str | None] = lambda: None
) -> object:
    """A third-party scheduler *name* (priority 100) with its own base params and builder."""
    own = OwnScheduler(name, build, accept)
    return plugin(
        name,
        schedulers=lambda self: [own],
        matmul_params=lambda self, scheduler: BASE if scheduler == name else None,
    )


class BadMapping(Mapping[str, object]):
    """A mapping that cannot be read."""

    def __getitem__(self, key: str) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return 1


@attrs.frozen
class Case:
    """A hostile plugin set, what strict mode raises, and what warning mode does instead."""

    id: str
    plugins: Callable[[], tuple[object, ...]]
    error: type[Exception]
    match: str  # names the culprit plugin and the hook or field
    lenient: type[Warning] | None = PluginWarning  # None: no fallback, raises in both modes
    fusion: Callable[[], mp.Fusion] = linear_fusion


def case(id: str, plugins: Callable[[], tuple[object, ...]], *rest: Any, **kw: Any) -> Any:
    return pytest.param(Case(id, plugins, *rest, **kw), id=id)


P = "mmaplug_matmul_patterns: plugin 'bad'"
T = "mmaplug_translate_pattern: plugin 'bad'"
B = r"mmaplug_schedulers \(bad.build\): plugin 'bad'"
CASES = [
    # -- translation ---------------------------------------------------------------------------
    case(
        "patterns_raise",
        lambda: (plugin("bad", matmul_patterns=boom),),
        PluginError,
        f"{P} raised RuntimeError: boom",
    ),
    case(
        "patterns_not_a_list",
        lambda: (plugin("bad", matmul_patterns=lambda self: 42),),
        PluginResultError,
        f"{P} returned 42 .*expected a list of MatmulPattern",
    ),
    case(
        "patterns_items_not_patterns",
        lambda: (plugin("bad", matmul_patterns=lambda self: ["matmul"]),),
        PluginResultError,
        f"{P} returned 'matmul' .*expected MatmulPattern items",
    ),
    case(
        "patterns_foreign_tensors",
        lambda: (plugin("bad", matmul_patterns=lambda self: [linear_pattern(linear_fusion())]),),
        PluginResultError,
        f"{P} returned a pattern whose a .* is not a tensor of this fusion",
    ),
    case(
        "patterns_kind_not_a_str",
        lambda: (
            plugin("bad", matmul_patterns=lambda self, fusion: [linear_pattern(fusion, kind=7)]),
        ),
        PluginResultError,
        f"{P} returned a pattern whose kind is 7",
    ),
    case(
        "patterns_builtin_kind_on_other_op",
        lambda: (
            plugin(
                "bad", matmul_patterns=lambda self, fusion: [linear_pattern(fusion, kind="matmul")]
            ),
        ),
        PluginResultError,
        f"{P} returned a 'matmul' pattern whose output .* not defined by a MatmulOp",
    ),
    case(
        "patterns_swapped_operands",
        lambda: (
            plugin(
                "bad",
                matmul_patterns=lambda self, fusion: [
                    MatmulPattern(
                        (e := first_expr(fusion, LinearOp)).inputs[1],
                        e.inputs[0],
                        e.output,
                        "linear",
                    )
                ],
            ),
        ),
        PluginResultError,
        f"{P} returned a 'linear' pattern whose a and b .* are not the first two inputs",
    ),
    case(
        "patterns_unprintable",
        lambda: (plugin("bad", matmul_patterns=lambda self: [Hostile()]),),
        PluginResultError,
        f"{P} returned <unprintable: ValueError>",
    ),
    case(
        "translate_raise",
        lambda: (RECOGNISER, plugin("bad", translate_pattern=boom)),
        PluginError,
        f"{T} raised RuntimeError: boom",
        None,
        fusion=nt_fusion,
    ),
    case(
        "translate_answer_not_bool",
        lambda: (RECOGNISER, plugin("bad", translate_pattern=lambda self: "yes")),
        PluginResultError,
        f"{T} returned 'yes' .*expected True or None",
        None,
        fusion=nt_fusion,
    ),
    case(
        "translate_true_without_mma",
        lambda: (RECOGNISER, plugin("bad", translate_pattern=lambda self: True)),
        PluginResultError,
        f"{T} returned True, but pattern 'nt_matmul' is not an MmaOp",
        None,
        fusion=nt_fusion,
    ),
    case(
        "translated_observer_raise",
        lambda: (plugin("bad", fusion_translated=boom),),
        PluginError,
        "mmaplug_fusion_translated: plugin 'bad' raised RuntimeError",
    ),
    # -- planning ------------------------------------------------------------------------------
    case(
        "candidates_raise",
        lambda: (plugin("bad", scheduler_candidates=boom),),
        PluginError,
        "mmaplug_scheduler_candidates: plugin 'bad' raised RuntimeError",
    ),
    case(
        "candidates_raise_library_error",
        lambda: (plugin("bad", scheduler_candidates=lambda self: mp.get_device("nope")),),
        PluginError,
        "mmaplug_scheduler_candidates: plugin 'bad' raised UsageError",
    ),
    case(
        "scheduler_accepts_raise",
        lambda: (own_scheduler("bad", Artifact, accept=boom),),
        PluginError,
        r"mmaplug_schedulers \(bad.accepts\): plugin 'bad' raised RuntimeError: boom",
    ),
    case(
        "scheduler_accepts_answer_int",
        lambda: (own_scheduler("bad", Artifact, accept=lambda: 42),),
        PluginResultError,
        r"mmaplug_schedulers \(bad.accepts\): plugin 'bad' returned 42 .*expected None",
    ),
    case(
        "schedulers_answer_str",
        lambda: (plugin("bad", schedulers=lambda self: "ampere"),),
        PluginResultError,
        "mmaplug_schedulers: plugin 'bad' returned 'ampere' .*expected a "
        "mmaplug.planning.scheduler",
    ),
    case(
        "schedulers_raise",
        lambda: (plugin("bad", schedulers=boom),),
        PluginError,
        "mmaplug_schedulers: plugin 'bad' raised RuntimeError: boom",
    ),
    case(
        "candidates_answer_str",
        lambda: (plugin("bad", scheduler_candidates=lambda s: "ampere"),),
        PluginResultError,
        "mmaplug_scheduler_candidates: plugin 'bad' returned 'ampere'",
    ),
    case(
        "params_raise",
        lambda: (plugin("bad", matmul_params=boom),),
        PluginError,
        "mmaplug_matmul_params: plugin 'bad' raised RuntimeError",
    ),
    case(
        "params_answer_dict",
        lambda: (plugin("bad", matmul_params=lambda self: {"stages": 3}),),
        PluginResultError,
        "mmaplug_matmul_params: plugin 'bad' returned \\{'stages': 3\\}",
    ),
    case(
        "params_invalid",
        lambda: (plugin("bad", matmul_params=lambda self: BASE.with_overrides(stages=9)),),
        InvalidParamsError,
        "(?s)stages=9.*value from: bad",
    ),
    case(
        "overrides_raise",
        lambda: (plugin("bad", matmul_overrides=boom),),
        PluginError,
        "mmaplug_matmul_overrides: plugin 'bad' raised RuntimeError",
    ),
    case(
        "overrides_answer_int",
        lambda: (plugin("bad", matmul_overrides=lambda self: 42),),
        PluginResultError,
        "mmaplug_matmul_overrides: plugin 'bad' returned 42",
    ),
    case(
        "overrides_unknown_field",
        lambda: (plugin("bad", matmul_overrides=lambda self: {"stage": 3}),),
        UnknownParamError,
        "mmaplug_matmul_overrides: plugin 'bad' unknown parameter 'stage' from 'bad'",
    ),
    case(
        "overrides_unreadable_mapping",
        lambda: (plugin("bad", matmul_overrides=lambda self: BadMapping()),),
        PluginResultError,
        "mmaplug_matmul_overrides: plugin 'bad' returned .*cannot iterate",
    ),
    case(
        "overrides_invalid_value",
        lambda: (plugin("bad", matmul_overrides=lambda self: {"stages": 9}),),
        InvalidParamsError,
        "(?s)stages=9.*value from: bad; rule of: ampere",
    ),
    case(
        "overrides_wrong_type",
        lambda: (plugin("bad", matmul_overrides=lambda self: {"stages": "three"}),),
        InvalidParamsError,
        "(?s)stages='three'.*value from: bad; rule of: core",
    ),
    case(
        "overrides_cross_field",  # was blamed on 'default', whose cta_tile it breaks
        lambda: (plugin("bad", matmul_overrides=lambda self: {"warp_tile.n": 48}),),
        InvalidParamsError,
        "(?s)cta_tile=64x128x32 is not divisible by warp_tile.*value from: bad; rule of: core",
    ),
    case(
        "overrides_cross_field_of_two",  # only the plugin whose change breaks the rule
        lambda: (
            plugin("bad", matmul_overrides=lambda self: {"warp_tile.n": 48}),
            plugin("good", matmul_overrides=lambda self: {"stages": 3}),
        ),
        InvalidParamsError,
        "(?s)value from: bad; rule of: core",
    ),
    case(
        "validate_raise",
        lambda: (plugin("bad", validate_params=boom),),
        PluginError,
        "mmaplug_validate_params: plugin 'bad' raised RuntimeError",
    ),
    case(
        "validate_answer_str",
        lambda: (plugin("bad", validate_params=lambda self: "fine"),),
        PluginResultError,
        "mmaplug_validate_params: plugin 'bad' returned 'fine'",
    ),
    case(
        "validate_items_not_violations",
        lambda: (plugin("bad", validate_params=lambda self: [("stages", 2)]),),
        PluginResultError,
        "mmaplug_validate_params: plugin 'bad' returned .*list\\[Violation\\]",
    ),
    case(
        "validate_refuses_default",  # its own rule: blamed on default, a built-in, so raised
        lambda: (
            plugin(
                "bad",
                validate_params=lambda self, params: [
                    Violation("stages", params.stages, "odd", "bad wants odd stages")
                ],
            ),
        ),
        InvalidParamsError,
        "(?s)bad wants odd stages.*value from: default; rule of: bad",
        None,
    ),
    case(
        "adjust_raise",
        lambda: (plugin("bad", adjust_params=boom),),
        PluginError,
        "mmaplug_adjust_params: plugin 'bad' raised RuntimeError",
    ),
    case(
        "adjust_answer_dict",
        lambda: (plugin("bad", adjust_params=lambda self: {"stages": 3}),),
        PluginResultError,
        "mmaplug_adjust_params: plugin 'bad' returned",
    ),
    case(
        "adjust_unknown_field",
        lambda: (plugin("bad", adjust_params=lambda self: [Adjustment("stagez", 2, 3, "why")]),),
        PluginResultError,
        "mmaplug_adjust_params: plugin 'bad' returned .*MatmulParams fields",
    ),
    case(
        "adjust_to_invalid",  # was blamed on 'ampere', the scheduler
        lambda: (plugin("bad", adjust_params=lambda self: [adjust("splitk_factor", 64)]),),
        InvalidParamsError,
        "(?s)splitk_factor=64.*value from: bad; rule of: ampere",
    ),
    case(
        "adjust_to_wrong_type",
        lambda: (plugin("bad", adjust_params=lambda self: [adjust("splitk_factor", "x")]),),
        InvalidParamsError,
        "(?s)splitk_factor='x'.*value from: bad; rule of: core",
    ),
    case(
        "adjust_conflict",
        lambda: (
            plugin("bad", adjust_params=lambda self: [adjust("cta_order", "row_major")]),
            plugin("bad2", adjust_params=lambda s: [adjust("cta_order", "column_major")]),
        ),
        OverrideConflictError,
        "plugins 'bad2' and 'bad' both adjust 'cta_order'",
        None,
    ),
    case(
        "conflict_tile_and_dim",  # cta_tile and cta_tile.m overlap
        lambda: (
            plugin("left", matmul_overrides=lambda self: {"cta_tile": (128, 128, 32)}),
            plugin("right", matmul_overrides=lambda self: {"cta_tile.m": 64}),
        ),
        OverrideConflictError,
        "plugins 'left' and 'right' both override 'cta_tile.m'",
        None,
    ),
    # -- building ------------------------------------------------------------------------------
    case(
        "build_answer_str",
        lambda: (own_scheduler("bad", lambda: "kernel"),),
        PluginResultError,
        f"{B} returned 'kernel' .*lacks ptx, launch, bind",
        None,
    ),
    case(
        "build_partial_artifact",
        lambda: (own_scheduler("bad", lambda: attrs.make_class("A", {})()),),
        PluginResultError,
        f"{B} returned .*lacks ptx, launch, bind, kernel_name",
        None,
    ),
    case(
        "build_hostile_artifact",
        lambda: (own_scheduler("bad", Hostile),),
        PluginResultError,
        f"{B} returned an artifact that raised ValueError",
        None,
    ),
    case(
        "build_own_scheduler_raise",
        lambda: (own_scheduler("bad", lambda: boom()),),
        PluginError,
        f"{B} raised RuntimeError: boom",
        None,
    ),
    case(
        "build_own_scheduler_garbage",
        lambda: (own_scheduler("bad", lambda: 42),),
        PluginResultError,
        f"{B} returned 42",
        None,
    ),
    case(
        "build_own_scheduler_nothing",
        lambda: (own_scheduler("bad", lambda: None),),
        PluginResultError,
        f"{B} returned None",
        None,
    ),
    case(
        "build_own_scheduler_verdict",
        lambda: (own_scheduler("bad", lambda: (_ for _ in ()).throw(KernelBuildError("nvvm"))),),
        KernelBuildError,
        r"nvvm\nraised by plugin 'bad' in mmaplug_schedulers \(bad.build\)",
        None,
    ),
    case(
        "kernel_built_observer_raise",
        lambda: (plugin("bad", kernel_built=boom),),
        PluginError,
        "mmaplug_kernel_built: plugin 'bad' raised RuntimeError: boom",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_strict_mode_raises_naming_the_plugin(case: Case) -> None:
    """Strict: the error names the plugin and the hook or field."""
    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    with registered(pm, *case.plugins()), pytest.raises(case.error, match=case.match) as info:
        mp.compile(case.fusion(), DEVICE, pm=pm)
    if isinstance(info.value, PluginError):
        assert info.value.plugin == "bad" and info.value.hook in case.match.replace("\\", "")


@pytest.mark.parametrize("case", CASES)
def test_warning_mode_falls_back_or_raises(case: Case) -> None:
    """Warning mode: a warning naming the plugin and the fallback, or the error without one."""
    pm = make_plugin_manager(load_entrypoints=False, strict=False)
    with registered(pm, *case.plugins()):
        if case.lenient is None:
            with pytest.raises(case.error, match=case.match):
                mp.compile(case.fusion(), DEVICE, pm=pm)
            return
        with pytest.warns(case.lenient) as record:
            compiled = mp.compile(case.fusion(), DEVICE, pm=pm)
    assert compiled.spec.scheduler == "ampere"
    assert any("bad" in str(w.message) for w in record if issubclass(w.category, PluginWarning))


def test_dropped_override_plans_as_without_it() -> None:
    """A dropped plugin takes no part: the plan equals the plan without it, and names it."""
    pm = make_plugin_manager(load_entrypoints=False)
    expected = mp.compile(linear_fusion(), DEVICE, pm=pm).spec
    bad = plugin("bad", matmul_overrides=lambda self: {"warp_tile.n": 48})
    with registered(pm, bad), pytest.warns(PluginWarning, match="invalid cta_tile from bad"):
        spec = mp.compile(linear_fusion(), DEVICE, pm=pm).spec
    assert spec == expected and spec.provenance.dropped == ("bad",)


def test_agreeing_tile_and_dim_overrides_do_not_conflict() -> None:
    """cta_tile=(128, 128, 32) and cta_tile.m=128 agree: both apply, no conflict."""
    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    left = plugin("left", matmul_overrides=lambda self: {"cta_tile": (128, 128, 32)})
    right = plugin("right", matmul_overrides=lambda self: {"cta_tile.m": 128})
    with registered(pm, left, right):
        spec = mp.compile(linear_fusion(), DEVICE, pm=pm).spec
    assert spec.params.cta_tile == (128, 128, 32) or spec.params.cta_tile.as_tuple() == (
        128,
        128,
        32,
    )


def test_a_broken_builtin_always_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in plugin that raises is a PluginError naming it, in warning mode too."""
    from mmaplug.plugins.ampere.scheduler import SCHEDULER

    monkeypatch.setattr(SCHEDULER, "adjustments", boom)
    pm = make_plugin_manager(load_entrypoints=False, strict=False)
    match = r"mmaplug_schedulers \(ampere.adjustments\): plugin 'ampere' \(built in\)"
    with pytest.raises(PluginError, match=match):
        mp.compile(linear_fusion(), DEVICE, pm=pm)


def test_own_translator_still_works() -> None:
    """The guard leaves a well-behaved recogniser and translator alone."""
    translator = plugin(
        "translator",
        translate_pattern=lambda self, fusion, pattern: (
            translate_as(fusion, pattern, "linear") or True
        ),
    )
    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    with registered(pm, RECOGNISER, translator):
        assert mp.compile(nt_fusion(), DEVICE, pm=pm).spec.scheduler == "ampere"


# -- registration of installed plugins ---------------------------------------------------------


class EntryPoint:
    def __init__(self, name: str, load: object, value: str = "ext_module") -> None:
        self.name, self.group, self.value, self._load = name, "mmaplug", value, load

    def load(self) -> object:
        return self._load


class Distribution:
    def __init__(self, name: str, *entry_points: EntryPoint) -> None:
        self.metadata = {"name": name}
        self.version = "1.0"
        self.entry_points = entry_points


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make ``importlib.metadata.distributions()`` report the given distributions only."""

    def install(*dists: Distribution) -> None:
        monkeypatch.setattr(importlib.metadata, "distributions", lambda: list(dists))

    return install


class Misspelt:
    @mp.hookimpl
    def mmaplug_matmul_param(self) -> None:
        return None


class BadArgument:
    @mp.hookimpl
    def mmaplug_matmul_params(self, problm: object) -> None:
        return None


class Heuristic:
    @mp.hookimpl
    def mmaplug_matmul_params(self) -> None:
        return None


SHARED = Heuristic()  # one object under two entry points

REGISTRATION = [
    pytest.param(
        [Distribution("ext-dist", EntryPoint("typo", Misspelt()))],
        {},
        PluginError,
        "'typo' \\(distribution ext-dist 1.0\\) implements mmaplug_matmul_param, which is no "
        "hook.*did you mean mmaplug_matmul_params",
        "typo",
        id="entry_point_misspelt_hook",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("badarg", BadArgument()))],
        {},
        PluginError,
        "(?s)plugin 'badarg' from distribution ext-dist 1.0 cannot be registered: .*problm",
        "badarg",
        id="entry_point_unknown_argument",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("ampere", Heuristic()))],
        {},
        PluginError,
        "plugin 'ampere' from distribution ext-dist 1.0 has the name of the plugin 'ampere' "
        "\\(built in\\); rename its entry point: a built-in's name cannot be taken",
        None,
        id="entry_point_named_like_builtin",
    ),
    pytest.param(
        [
            Distribution("one-dist", EntryPoint("same", Heuristic(), "one")),
            Distribution("two-dist", EntryPoint("same", Heuristic(), "two")),
        ],
        {},
        PluginError,
        "plugin 'same' from distribution two-dist 1.0 has the name of the plugin 'same' "
        "\\(distribution one-dist 1.0\\); rename one entry point, or uninstall one "
        "distribution \\(blocking the name, MMAPLUG_DISABLE, blocks both\\)",
        "same",
        id="two_distributions_one_name",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("cls", Heuristic, "ext_module:Heuristic"))],
        {},
        PluginError,
        "(?s)plugin 'cls' from distribution ext-dist 1.0 cannot be registered: .*is the class "
        "Heuristic, whose hooks \\(mmaplug_matmul_params\\) are instance methods",
        "cls",
        id="entry_point_names_a_class",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("alias", SHARED), EntryPoint("main", SHARED))],
        {},
        PluginError,
        "plugin 'alias' from distribution ext-dist 1.0 \\(ext_module\\) is the object "
        "registered already as 'main' \\(distribution ext-dist 1.0\\); one plugin has one name",
        "alias",
        id="two_entry_points_one_object",
    ),
    pytest.param(
        [],
        {"block": ["ampre"]},
        UsageError,
        "names 'ampre', which is no plugin \\(did you mean 'ampere'\\?\\)",
        None,
        id="disable_unknown_name",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("ext", Heuristic()))],
        {"heuristic": "ets"},
        UsageError,
        "heuristic selects 'ets', which is not registered \\(did you mean 'ext'\\?\\)",
        None,
        id="heuristic_unknown_name",
    ),
    pytest.param(
        [],
        {"heuristic": "ampere"},
        UsageError,
        "heuristic selects 'ampere', which implements no mmaplug_matmul_params",
        None,
        id="heuristic_not_a_heuristic",
    ),
    pytest.param(
        [Distribution("ext-dist", EntryPoint("ext", Heuristic()))],
        {"heuristic": "ext", "block": ["ext"]},
        UsageError,
        "heuristic selects 'ext', which is not registered and is blocked",
        None,
        id="heuristic_blocked",
    ),
]


@pytest.mark.parametrize(("dists", "kwargs", "error", "match", "skipped"), REGISTRATION)
def test_registration_fault_strict_raises(installed, dists, kwargs, error, match, skipped):
    """Strict: a registration fault raises naming the plugin (and its distribution)."""
    installed(*dists)
    with pytest.raises(error, match=match):
        make_plugin_manager(strict=True, **kwargs)


@pytest.mark.parametrize(("dists", "kwargs", "error", "match", "skipped"), REGISTRATION)
def test_registration_fault_warns_and_goes_on(installed, dists, kwargs, error, match, skipped):
    """Warning mode: a PluginWarning naming it, the plugin skipped, planning still works."""
    installed(*dists)
    with pytest.warns(PluginWarning, match=match):
        pm = make_plugin_manager(strict=False, **kwargs)
    if skipped is not None:
        assert skipped not in pm.plugin_info or pm.plugin_info[skipped].distribution == "one-dist"
        assert skipped in pm.skipped  # listed by mmaplug plugins
    assert mp.compile(linear_fusion(), DEVICE, pm=pm).spec.scheduler == "ampere"


class Named:
    name = "internal"

    @mp.hookimpl
    def mmaplug_matmul_params(self) -> None:
        return None


def test_a_name_attribute_other_than_the_entry_point_warns(installed) -> None:
    """Installed, a plugin is named by its entry point; a ``name`` attribute saying otherwise
    (what a test registering the object sees) is pointed out, and the entry point wins."""
    installed(Distribution("ext-dist", EntryPoint("ext", Named())))
    with pytest.warns(PluginWarning, match="sets name = 'internal'; it is registered as 'ext'"):
        pm = make_plugin_manager(strict=True)
    assert pm.has_plugin("ext") and not pm.has_plugin("internal")


def test_same_distribution_found_twice_is_quiet(installed) -> None:
    """One distribution listed twice (two sys.path entries) registers once, without a word."""
    dist = Distribution("ext-dist", EntryPoint("ext", Heuristic()))
    installed(dist, dist)
    assert make_plugin_manager(strict=True).plugin_info["ext"].distribution == "ext-dist"


def test_cli_plugins_survives_a_misspelt_entry_point(installed, monkeypatch, capsys) -> None:
    """`mmaplug plugins` lists the plugins with a warning instead of a pluggy traceback."""
    from mmaplug.cli import main as cli

    for var in ("MMAPLUG_STRICT", "MMAPLUG_DISABLE", "MMAPLUG_HEURISTIC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    installed(Distribution("ext-dist", EntryPoint("typo", Misspelt())))
    reset_plugin_manager()
    try:
        with pytest.warns(PluginWarning, match="'typo' \\(distribution ext-dist 1.0\\)"):
            assert cli.main(["plugins"]) == 0
    finally:
        reset_plugin_manager()
    out = capsys.readouterr().out
    assert "ampere" in out
    assert "skipped plugins (faulty; see the warnings):\n  typo " in out


def test_env_disable_typo_warns(monkeypatch) -> None:
    """MMAPLUG_DISABLE=ampre warns with the near miss; nothing is disabled."""
    monkeypatch.setenv("MMAPLUG_DISABLE", "ampre")
    monkeypatch.setenv("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("MMAPLUG_STRICT", raising=False)
    reset_plugin_manager()
    try:
        with pytest.warns(PluginWarning, match="'ampre'.*did you mean 'ampere'"):
            pm = mp.get_plugin_manager()
    finally:
        reset_plugin_manager()
    assert pm.has_plugin("ampere")
