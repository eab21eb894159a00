"""Planning: the only caller of the scheduling hooks; turns a MatmulProblem into a KernelSpec."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

import attrs

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import (
    InvalidParamsError,
    MatmulError,
    NoSchedulerError,
    OverrideConflictError,
    ParamAdjustedWarning,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
    UsageError,
)
from mmaplug.log import PLAN
from mmaplug.planning.attribution import warn_about
from mmaplug.planning.choices import Adjustment, KernelSpec, Provenance, Rejection, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.guard import SKIPPED, Guard, scheduler_label, wrong
from mmaplug.planning.manager import (
    DEFAULT_HEURISTIC,
    PluginManager,
    describe,
    get_plugin_manager,
    is_builtin,
)
from mmaplug.planning.params import (
    PARAM_NAMES,
    MatmulParams,
    ParamOverride,
    Violation,
    check_param_names,
    to_tile,
)
from mmaplug.planning.scheduler import Scheduler, planning_with
from mmaplug.planning.scheduler import violations as rule_violations
from mmaplug.planning.scheduler_registry import Registry, owners, schedulers, warn_deprecated

__all__ = [
    "CALLER",
    "KernelSpec",
    "Provenance",
    "explain",
    "matmul_params",
    "plan_problem",
]

CALLER: Final = "caller"
_TILES: Final = frozenset({"cta_tile", "warp_tile", "instruction_tile"})


class _Retry(Exception):
    """Internal: a plugin's contribution was dropped (warning mode); plan again without it."""


Layer = tuple[str, Mapping[str, object]]  # (plugin, changes) applied on top of valid params


@attrs.define
class _Planner:
    guard: Guard
    problem: MatmulProblem
    device: Device
    declined: Mapping[str, str] = attrs.field(factory=dict)  # scheduler -> why, at launch
    schedulers: Registry = attrs.field(factory=dict)  # the registered scheduler objects
    chosen: tuple[str, Scheduler] | None = None  # the chosen one's plugin and object, if any
    # field -> (plugin, hook) that supplied its value: where a warning about it points
    owners: dict[str, tuple[str, str]] = attrs.field(factory=dict)

    def choose(self) -> tuple[SchedulerChoice, str, tuple[SchedulerChoice | Rejection, ...]]:
        answers: list[tuple[str, SchedulerChoice | Rejection]] = []
        for plugin, answer in [*self.accepting(), *self.legacy_candidates()]:
            if isinstance(answer, SchedulerChoice) and answer.name in self.declined:
                reason = f"its kernel declined the tensors: {self.declined[answer.name]}"
                answer = Rejection(answer.name, reason)
            answers.append((plugin, answer))
        candidates = tuple(sorted((a for _, a in answers), key=lambda a: a.name))
        accepted = sorted(
            ((p, a) for p, a in answers if isinstance(a, SchedulerChoice)),
            key=lambda pair: (-pair[1].priority, pair[1].name),
        )
        if not accepted:
            rejections = tuple(a for a in candidates if isinstance(a, Rejection))
            lines = "".join(f"\n  {r.name}: {r.reason}" for r in rejections) or " (none answered)"
            raise NoSchedulerError(
                f"no scheduler accepts {self.problem.describe()} on "
                f"{self.device.name} ({self.device.target}):{lines}",
                rejections,
            )
        plugin, choice = accepted[0]
        return choice, plugin, candidates

    def accepting(self) -> Iterator[tuple[str, SchedulerChoice | Rejection]]:
        """Each scheduler object's answer: whether it takes the problem."""
        for name, (plugin, scheduler) in sorted(self.schedulers.items()):
            label = scheduler_label(name, "accepts")
            reason = self.guard.ask(plugin, label, scheduler.accepts, self.problem, self.device)
            if reason is None:
                yield plugin, SchedulerChoice(name, scheduler.priority)
            elif isinstance(reason, str) and reason:
                yield plugin, Rejection(name, reason)
            elif reason is not SKIPPED:
                expected = "None (it accepts) or the reason it declines (a str)"
                self.guard.fault(plugin, label, wrong(reason, expected), cls=PluginResultError)

    def legacy_candidates(self) -> Iterator[tuple[str, SchedulerChoice | Rejection]]:
        """The deprecated hook's answers, of plugins without scheduler objects."""
        hook = "mmaplug_scheduler_candidates"
        for plugin, answer in self.guard.call(
            hook, skip=owners(self.schedulers), problem=self.problem, device=self.device
        ):
            if isinstance(answer, SchedulerChoice | Rejection):
                warn_deprecated(self.guard.pm, plugin, hook)
                yield plugin, answer
            else:
                expected = "SchedulerChoice, Rejection or None"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)

    def base(self, scheduler: str) -> tuple[str, MatmulParams]:
        hook = "mmaplug_matmul_params"
        heuristic = getattr(self.guard.pm, "heuristic", None)
        only = None if heuristic is None else frozenset({heuristic, DEFAULT_HEURISTIC})
        for asked in (only, frozenset({DEFAULT_HEURISTIC})):  # after a dropped answer: default
            for plugin, params in self.guard.call(
                hook, only=asked, problem=self.problem, device=self.device, scheduler=scheduler
            ):
                if not isinstance(params, MatmulParams):
                    expected = "MatmulParams or None"
                    self.guard.fault(plugin, hook, wrong(params, expected), cls=PluginResultError)
                elif not self.check(params, scheduler, plugin, [], hook, retry=False):
                    return plugin, params
                break
        raise PluginResultError(
            f"no plugin answered {hook}; is {DEFAULT_HEURISTIC!r} registered?",
            plugin=DEFAULT_HEURISTIC,
            hook=hook,
        )

    def overrides(self, params: MatmulParams) -> list[tuple[str, ParamOverride]]:
        hook = "mmaplug_matmul_overrides"
        found: list[tuple[str, ParamOverride]] = []
        for plugin, answer in self.guard.call(
            hook, problem=self.problem, device=self.device, params=params
        ):
            try:
                if isinstance(answer, Mapping):
                    answer = ParamOverride(plugin, answer)
            except UnknownParamError as error:
                self.guard.fault(plugin, hook, str(error), error, cls=UnknownParamError)
                continue
            except Exception as error:  # a mapping that cannot be read or sorted
                what = f"{wrong(answer, 'a mapping of field names')}: {error}"
                self.guard.fault(plugin, hook, what, error, cls=PluginResultError)
                continue
            if isinstance(answer, ParamOverride):
                found.append((plugin, answer))
            else:
                expected = "ParamOverride, a mapping or None"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)
        return sorted(found, key=lambda item: (item[1].source, item[0]))

    def own(self, scheduler: str) -> tuple[str, Scheduler] | None:
        """The chosen scheduler's plugin and object, when it is *scheduler* and has one."""
        if self.chosen is not None and self.chosen[1].name == scheduler:
            return self.chosen
        return None

    def violations(self, params: MatmulParams, scheduler: str) -> list[tuple[str, Violation]]:
        """Every rule *params* break, each with the plugin whose rule it is: the scheduler
        object's rules, then the ``mmaplug_validate_params`` answers (one rule once)."""
        hook = "mmaplug_validate_params"
        found: list[tuple[str, Violation]] = []
        if (own := self.own(scheduler)) is not None:
            plugin, obj = own
            label = scheduler_label(scheduler, "rules")
            broken = self.guard.ask(
                plugin, label, rule_violations, obj, params, self.problem, self.device, at=obj.rules
            )
            if broken is not SKIPPED:
                found.extend((plugin, v) for v in broken)
        for plugin, answer in self.guard.call(
            hook, problem=self.problem, device=self.device, params=params, scheduler=scheduler
        ):
            if isinstance(answer, list | tuple) and all(isinstance(v, Violation) for v in answer):
                found.extend((plugin, v) for v in answer)
            else:
                expected = "list[Violation]"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)
        unique: list[tuple[str, Violation]] = []  # a plugin answering both ways: each rule once
        for item in found:
            if item not in unique:
                unique.append(item)
        return unique

    def apply(
        self, base: MatmulParams, layers: Sequence[Layer], scheduler: str
    ) -> tuple[MatmulParams | None, list[tuple[str, Violation]]]:
        """*base* with *layers* applied (None if core refuses) and the violations found."""
        changes = {key: value for _, layer in layers for key, value in layer.items()}
        try:
            params = base.with_overrides(**changes)
        except InvalidParamsError as error:
            return None, [("core", v) for v in error.violations]
        return params, self.violations(params, scheduler)

    def check(
        self,
        base: MatmulParams,
        scheduler: str,
        base_plugin: str,
        layers: Sequence[Layer],
        hook: str,
        *,
        retry: bool,
        found: list[tuple[str, Violation]] | None = None,
    ) -> list[tuple[str, Violation]]:
        """Rule on the violations *found* in valid *base* (by *base_plugin*) plus *layers*.

        Each violation is blamed on the plugins whose layer alone, applied to *base*, breaks
        the same field (the base's plugin when there are no layers). Strict mode, a built-in
        or the caller raise ``InvalidParamsError``; in warning mode the culprits are dropped,
        with a warning at the culprit's implementation of *hook* (which gave the values).
        """
        if found is None:
            found = self.violations(base, scheduler)
        if not found:
            return []
        lines, culprits = [], set()
        for checker, v in found:
            blamed = self.blame(v, base, base_plugin, layers, scheduler)
            culprits |= blamed
            who = ", ".join(sorted(blamed))
            lines.append(f"{v.message}\n  value from: {who}; rule of: {checker}")
        pm = self.guard.pm
        if self.guard.strict or CALLER in culprits or any(is_builtin(pm, c) for c in culprits):
            raise InvalidParamsError("\n".join(lines), tuple(v for _, v in found))
        fields = ", ".join(sorted({v.field for _, v in found}))
        names = ", ".join(describe(pm, c, quote=False) for c in sorted(culprits))
        warning = PluginWarning(
            f"invalid {fields} from {names}:\n"
            + "\n".join(lines)
            + "\nignored; using the default heuristic (MMAPLUG_STRICT=1 raises instead)",
            plugin=", ".join(sorted(culprits)),
            hook="mmaplug_validate_params",
        )
        warn_about(warning, pm, min(culprits), hook, stacklevel=4)
        self.guard.dropped |= culprits
        if retry:
            raise _Retry
        return found

    def blame(
        self,
        v: Violation,
        base: MatmulParams,
        base_plugin: str,
        layers: Sequence[Layer],
        scheduler: str,
    ) -> set[str]:
        """The plugins whose changes break *v*'s field (see ``check``)."""
        if not layers:
            return {base_plugin}
        field = v.field.partition(".")[0]
        alone = set()
        for plugin, changes in layers:
            _, found = self.apply(base, [(plugin, changes)], scheduler)
            if any(w.field.partition(".")[0] == field for _, w in found):
                alone.add(plugin)
        if alone:
            return alone
        owners = [p for p, changes in layers if field in {k.partition(".")[0] for k in changes}]
        return {owners[-1]} if owners else {p for p, _ in layers}

    def merge(
        self, base: MatmulParams, overrides: Mapping[str, object]
    ) -> tuple[list[Layer], dict[str, str]]:
        """Plugin overrides (a conflict raises), then the caller's, as layers; field sources."""
        sources = dict.fromkeys(PARAM_NAMES, "")
        merged: dict[str, tuple[object, str]] = {}
        layers: dict[str, dict[str, object]] = {}
        for plugin, override in self.overrides(base):
            for key, value in override.changes.items():
                clash = _clash(key, value, merged)
                if clash is not None:
                    other, other_value, first = clash
                    raise OverrideConflictError(
                        f"plugins {first!r} and {override.source!r} both override {key!r}: "
                        f"{other}={other_value!r} != {key}={value!r}; block one of them "
                        "(MMAPLUG_DISABLE) or make them agree",
                        field=key,
                        sources=(first, override.source),
                    )
                if key not in merged:  # agreeing sources: the first (by name) is recorded
                    merged[key] = (value, override.source)
                    layers.setdefault(plugin, {})[key] = value
                    sources[key.partition(".")[0]] = override.source
                    self.owners[key.partition(".")[0]] = (plugin, "mmaplug_matmul_overrides")
        check_param_names(overrides, source=CALLER)
        for key, value in overrides.items():
            for changes in layers.values():  # the caller wins: drop what it replaces
                for other in [k for k in changes if _overlaps(k, key) and "." not in key]:
                    del changes[other]
            layers.setdefault(CALLER, {})[key] = value
            sources[key.partition(".")[0]] = CALLER
            self.owners.pop(key.partition(".")[0], None)
        return [(p, c) for p, c in layers.items() if c], sources

    def plan(self, overrides: Mapping[str, object]) -> KernelSpec:
        choice, scheduler_plugin, candidates = self.choose()
        own = self.schedulers.get(choice.name)
        self.chosen = own if own is not None and own[0] == scheduler_plugin else None
        base_plugin, base = self.base(choice.name)
        self.owners = dict.fromkeys(PARAM_NAMES, (base_plugin, "mmaplug_matmul_params"))
        layers, sources = self.merge(base, overrides)
        sources = {k: v or base_plugin for k, v in sources.items()}
        params, found = self.apply(base, layers, choice.name)
        hook = "mmaplug_matmul_overrides"
        self.check(base, choice.name, base_plugin, layers, hook, retry=True, found=found)
        if params is None:  # unreachable: check raised or retried on core's violations
            raise _Retry
        params, adjustments = self.adjust(params, choice.name, sources)
        provenance = Provenance(
            base=base_plugin,
            sources=tuple(sources.items()),
            adjustments=adjustments,
            consulted=tuple(sorted(self.guard.consulted)),
            candidates=candidates,
            dropped=tuple(sorted(self.guard.dropped)),
            scheduler_plugin=scheduler_plugin,
        )
        return KernelSpec(
            scheduler=choice.name,
            problem=self.problem,
            device=self.device,
            params=params,
            provenance=provenance,
        )

    def adjust(
        self, params: MatmulParams, scheduler: str, sources: dict[str, str]
    ) -> tuple[MatmulParams, tuple[Adjustment, ...]]:
        """Apply the adjustments (the scheduler object's, then the ``mmaplug_adjust_params``
        answers); an invalid one is blamed on the plugin that made it."""
        hook = "mmaplug_adjust_params"
        asked: list[tuple[str, str, object]] = []  # (plugin, hook or label, answer)
        if (own := self.own(scheduler)) is not None:
            plugin, obj = own
            label = scheduler_label(scheduler, "adjustments")
            forced: object = self.guard.ask(
                plugin, label, obj.adjustments, params, self.problem, self.device
            )
            if forced is not SKIPPED and forced is not None:  # None: nothing to force
                asked.append((plugin, label, forced))
        asked.extend(
            (plugin, hook, answer)
            for plugin, answer in self.guard.call(
                hook, problem=self.problem, device=self.device, params=params, scheduler=scheduler
            )
        )
        answers: dict[str, list[Adjustment]] = {}
        for plugin, label, answer in asked:
            if isinstance(answer, list | tuple) and all(
                isinstance(a, Adjustment) and a.field in PARAM_NAMES for a in answer
            ):
                mine = answers.setdefault(plugin, [])  # answering both ways: each change once
                mine += [a for a in answer if a not in mine]
            else:
                expected = "list[Adjustment] of MatmulParams fields"
                self.guard.fault(plugin, label, wrong(answer, expected), cls=PluginResultError)
        layers = [
            (plugin, {a.field: a.new for a in answer})
            for plugin, answer in answers.items()
            if answer
        ]
        if not layers:
            return params, ()
        _check_agree(layers, "adjust")
        adjusted, found = self.apply(params, layers, scheduler)
        self.check(params, scheduler, scheduler, layers, hook, retry=True, found=found)
        if adjusted is None:  # unreachable: check raised or retried on core's violations
            raise _Retry
        done = []
        for plugin, answer in answers.items():
            for adj in answer:
                old, new = getattr(params, adj.field), getattr(adjusted, adj.field)
                done.append(Adjustment(adj.field, old, new, f"{adj.reason} [by {plugin}]"))
                if sources[adj.field] != DEFAULT_HEURISTIC:
                    warning = ParamAdjustedWarning(
                        f"{plugin} changed {sources[adj.field]}'s {done[-1].describe()}"
                    )  # at the hookimpl that chose the value; for the caller's, its line
                    owner, chose = self.owners.get(adj.field, (CALLER, ""))
                    warn_about(warning, self.guard.pm, owner, chose, stacklevel=4)
        return adjusted, tuple(done)


def _check_agree(layers: Sequence[Layer], what: str) -> None:
    """Raise ``OverrideConflictError`` when two plugins' *layers* set one field differently."""
    seen: dict[str, tuple[object, str]] = {}
    for plugin, changes in layers:
        for key, value in changes.items():
            clash = _clash(key, value, seen)
            if clash is not None:
                other, other_value, first = clash
                raise OverrideConflictError(
                    f"plugins {first!r} and {plugin!r} both {what} {key!r}: "
                    f"{other}={other_value!r} != {key}={value!r}; block one of them "
                    "(MMAPLUG_DISABLE) or make them agree",
                    field=key,
                    sources=(first, plugin),
                )
            seen.setdefault(key, (value, plugin))


def _overlaps(a: str, b: str) -> bool:
    """Whether override keys *a* and *b* set a common value (``cta_tile`` and ``cta_tile.m``)."""
    field_a, _, dim_a = a.partition(".")
    field_b, _, dim_b = b.partition(".")
    return field_a == field_b and (not dim_a or not dim_b or dim_a == dim_b)


def _clash(
    key: str, value: object, merged: Mapping[str, tuple[object, str]]
) -> tuple[str, object, str] | None:
    """The earlier override (key, value, source) setting part of *key* differently, if any."""
    for other, (other_value, source) in merged.items():
        if _overlaps(key, other) and _part(key, value, other) != _part(other, other_value, key):
            return other, other_value, source
    return None


def _part(key: str, value: object, other: str) -> object:
    """The part of *value* (set by *key*) that *other* sets too, normalised for comparison."""
    field, _, dim = key.partition(".")
    if field not in _TILES or dim:
        return value
    try:
        tile = to_tile(value)
    except MatmulError:
        return value
    other_dim = other.partition(".")[2]
    return getattr(tile, other_dim) if other_dim else tile


def plan_problem(
    problem: MatmulProblem,
    device: Device | str | None,
    *,
    pm: PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
    strict: bool | None = None,
    declined: Mapping[str, str] | None = None,
    shape_class: str = "",
) -> KernelSpec:
    """Choose the scheduler and params for *problem* on *device* through the plugin hooks.

    :param device: A ``Device``, a preset name (``"h200"``) or None (the local GPU), as
        ``mp.compile`` takes it (``get_device``).
    :param pm: The plugin manager; ``get_plugin_manager()`` when None.
    :param overrides: Caller changes to MatmulParams fields; applied last, they always win.
    :param strict: Raise on a misbehaving plugin (True) or warn and use the default heuristic
        (False); None follows ``pm.strict`` (``MMAPLUG_STRICT``).
    :param declined: Schedulers whose built kernel declined the tensors of a launch, with the
        reason: each becomes a Rejection (``CompiledFusion`` re-plans this way).
    :param shape_class: Recorded in the provenance: the shape class of a fusion with symbolic
        extents this plan is for (``MatmulProblem.shape_class``).
    :raises NoSchedulerError: No scheduler accepted; lists every rejection.
    :raises InvalidParamsError: The final params break rules; every violation, each naming the
        plugin whose value broke it.
    :raises OverrideConflictError: Two plugins set one field differently.
    :raises PluginError: A plugin raised or answered wrongly (strict mode).
    :raises UsageError: *device* is no preset name or Device.
    """
    device = get_device(device)
    if not isinstance(problem, MatmulProblem):
        raise UsageError(
            "plan_problem's problem must be a MatmulProblem (mp.matmul_problem(fusion) makes "
            f"one), not a {type(problem).__name__}"
        )
    pm = get_plugin_manager() if pm is None else pm
    pm.check_heuristic()
    guard = Guard(pm, strict=strict)
    registry = schedulers(pm, guard=guard)
    planner = _Planner(
        guard=guard,
        problem=problem,
        device=device,
        declined=declined or {},
        schedulers=registry,
    )
    # heuristics are told the scheduler's name: planning.scheduler.active(name) is its object
    with planning_with({name: scheduler for name, (_, scheduler) in registry.items()}):
        while True:  # each retry drops at least one more plugin, so this ends
            try:
                spec = planner.plan(dict(overrides or {}))
            except _Retry:
                continue
            if shape_class:
                spec = attrs.evolve(
                    spec, provenance=attrs.evolve(spec.provenance, shape_class=shape_class)
                )
            _log_plan(spec)
            return spec


def _log_plan(spec: KernelSpec) -> None:
    """The chosen scheduler and params at INFO, the whole ``explain`` text at DEBUG."""
    if PLAN.isEnabledFor(logging.INFO):
        changes = "; ".join(a.describe() for a in spec.provenance.adjustments) or "none"
        PLAN.info(
            "%s on %s: scheduler %s, params %s (base from %s; adjustments: %s)",
            spec.problem.describe(), spec.device.name, spec.scheduler, spec.params.name,
            spec.provenance.base, changes,
        )  # fmt: skip
    if PLAN.isEnabledFor(logging.DEBUG):
        PLAN.debug("plan of %s:\n%s", spec.name, explain(spec))


def matmul_params(problem: MatmulProblem, device: Device | str | None = None) -> MatmulParams:
    """The final MatmulParams for *problem* on *device* (a preset name, or the local GPU)."""
    return plan_problem(problem, device).params


def explain(spec: KernelSpec) -> str:
    """A readable account of how *spec* was decided: inputs, candidates, sources, adjustments."""
    p, d, prov = spec.problem, spec.device, spec.provenance
    lines = [
        f"plan:       {spec.name}",
        f"problem:    {p.describe()}",
        f"            operands {p.operand_dtype.label}, output {p.output_dtype.label}, "
        f"vector widths a={p.vector_widths.a} b={p.vector_widths.b} "
        f"epilogue={p.vector_widths.epilogue}"
        + (f", epilogue ops {', '.join(p.epilogue_ops)}" if p.epilogue_ops else "")
        + "".join(
            f", {side} prologue ops {', '.join(ops)}"
            for side, ops in (("A", p.a_prologue_ops), ("B", p.b_prologue_ops))
            if ops
        ),
        f"device:     {d.name} ({d.target}, cc {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, "
        f"{d.smem_per_block_optin:,} B shared memory per block)",
        f"scheduler:  {spec.scheduler}",
        "candidates:",
    ]
    if prov.shape_class:
        lines.insert(1, f"shape class: {prov.shape_class} (symbolic extents; one plan per class)")
    for c in prov.candidates:
        verdict = (
            f"accepted (priority {c.priority})"
            if isinstance(c, SchedulerChoice)
            else f"rejected: {c.reason}"
        )
        lines.append(f"  {c.name:<12} {verdict}")
    lines.append(f"plugins consulted: {', '.join(prov.consulted) or '(none)'}")
    if prov.dropped:
        lines.append(f"plugins dropped (invalid answers): {', '.join(prov.dropped)}")
    lines.append(f"base params from: {prov.base}")
    lines.append("params:")
    for field in spec.params.as_dict():
        value = getattr(spec.params, field)
        lines.append(f"  {field:<26} {value!s:<18} from {prov.source(field)}")
    lines.append("adjustments:" if prov.adjustments else "adjustments: none")
    lines.extend(f"  {a.describe()}" for a in prov.adjustments)
    return "\n".join(lines)
