"""The planner: the only caller of the scheduling hooks. One plan chooses the scheduler, takes
the base params, merges the overrides, validates (blaming each violation on a plugin) and applies
the adjustments; a plugin dropped on the way (warning mode) makes it plan again without it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

import attrs

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import (
    InvalidParamsError,
    NoSchedulerError,
    OverrideConflictError,
    ParamAdjustedWarning,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
    UsageError,
)
from mmaplug.hooks.attribution import warn_about
from mmaplug.hooks.guard import SKIPPED, Guard, scheduler_label, shown, wrong
from mmaplug.hooks.manager import BUILTIN_NAMES, DEFAULT_HEURISTIC, describe, fault, is_builtin
from mmaplug.markers import CALLER, HARNESS_SOURCE
from mmaplug.planning.choices import Adjustment, KernelSpec, Provenance, Rejection, SchedulerChoice
from mmaplug.planning.device import Device
from mmaplug.planning.layers import Layer, check_agree, find_clash, set_twice, win
from mmaplug.planning.params import (
    HARNESS_CHANGES,
    PARAM_NAMES,
    MatmulParams,
    ParamOverride,
    Violation,
    check_param_names,
)
from mmaplug.planning.scheduler import Rule, Scheduler, Space
from mmaplug.planning.scheduler import violations as rule_violations
from mmaplug.planning.scheduler_registry import Registry, owners, warn_deprecated

#: The built-in plugin that answers the ``override_matmul_params`` blocks' changes as overrides.
HARNESS: Final = "testing"
#: Why a scheduler that does not say ``block_scales = True`` is not offered a block-scaled
#: problem: a kernel that ignored ``LaunchArgs.scales`` would return a silently wrong sum.
NO_BLOCK_SCALES: Final = (
    "the problem is block-scaled (scales per 128 of K, applied inside the sum) and this "
    "scheduler does not apply block scales (a scheduler that does sets block_scales = True)"
)


class Retry(Exception):
    """Raised by ``Planner.plan``: a plugin's contribution was dropped (warning mode); plan
    again without it."""


@attrs.define
class Planner:
    """One plan of *problem* on *device*: the scheduler, base params, overrides, validation
    (each violation blamed on a plugin) and adjustments, asked through *guard*."""

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
            lines = "".join(f"\n  {r.name}: {r.reason}" for r in rejections)
            hook = self.guard.pm.hook.mmaplug_schedulers
            providers = {i.plugin_name for i in hook.get_hookimpls()}
            if dropped := sorted(self.guard.dropped & providers):
                lines += f"\n  dropped (their warnings say why): {', '.join(dropped)}"
            if blocked := getattr(self.guard.pm, "blocked", ()):
                lines += f"\n  blocked (MMAPLUG_DISABLE or block=): {', '.join(blocked)}"
            lines = lines or " (none answered)"
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
            if self.problem.block_scaled and getattr(scheduler, "block_scales", False) is not True:
                yield plugin, Rejection(name, NO_BLOCK_SCALES)
                continue
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
            if isinstance(answer, SchedulerChoice | Rejection) and answer.name in self.schedulers:
                owner = self.schedulers[answer.name][0]
                what = (
                    f"answered scheduler {answer.name!r}, the name of plugin "
                    f"{describe(self.guard.pm, owner)}'s scheduler object; name yours differently"
                )
                self.guard.fault(plugin, hook, what, cls=PluginResultError)
            elif isinstance(answer, SchedulerChoice | Rejection):
                warn_deprecated(self.guard.pm, plugin, hook)
                if self.problem.block_scaled and isinstance(answer, SchedulerChoice):
                    answer = Rejection(answer.name, NO_BLOCK_SCALES)
                yield plugin, answer
            else:
                expected = "SchedulerChoice, Rejection or None"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)

    def base(self, scheduler: str) -> tuple[str, MatmulParams]:
        """The base params of *scheduler*: the first answer of the heuristics (with one
        selected, ``MMAPLUG_HEURISTIC``: a plugin's own scheduler's plugin first, then the
        selected one and the default), else, after a dropped answer, the default's (or the
        plugin's)."""
        hook = "mmaplug_matmul_params"
        heuristic = getattr(self.guard.pm, "heuristic", None)
        own = self.own(scheduler)
        fallback = frozenset({DEFAULT_HEURISTIC, *([own[0]] if own is not None else [])})
        only = None if heuristic is None else fallback | {heuristic}
        rounds = [only, fallback]
        if heuristic is not None and own is not None:  # the selection: its owner first
            rounds.insert(0, frozenset({own[0]}))
        for asked in rounds:
            for plugin, params in self.guard.call(
                hook, only=asked, problem=self.problem, device=self.device, scheduler=scheduler
            ):
                if not isinstance(params, MatmulParams):
                    expected = "MatmulParams or None"
                    self.guard.fault(plugin, hook, wrong(params, expected), cls=PluginResultError)
                elif not self.check(params, scheduler, plugin, [], hook, retry=False):
                    return plugin, params
                break
        if own is not None and own[0] in self.guard.dropped:
            raise Retry  # its plugin is dropped: plan again without its scheduler
        plugin = own[0] if own is not None else DEFAULT_HEURISTIC
        raise PluginResultError(
            f"no heuristic answered {hook} for scheduler {scheduler!r}"
            + (f" (of plugin {describe(self.guard.pm, plugin)})" if own is not None else "")
            + f"; the built-in {DEFAULT_HEURISTIC!r} heuristic plans only the built-in "
            "schedulers, so a plugin that adds a scheduler also answers mmaplug_matmul_params "
            "for it (docs/plugin-reference.md)",
            plugin=plugin,
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
            if isinstance(answer, ParamOverride) and self.borrowed(answer.source, plugin):
                what = (
                    f"answered a ParamOverride whose source {answer.source!r} names another "
                    "plugin, which would then be credited (and blamed) for its values; use "
                    f"{plugin!r} or a name no plugin has"
                )
                self.guard.fault(plugin, hook, what, cls=PluginResultError)
            elif isinstance(answer, ParamOverride):
                found.append((plugin, answer))
            else:
                expected = "ParamOverride, a mapping or None"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)
        return sorted(found, key=lambda item: (item[1].source, item[0]))

    def borrowed(self, source: str, plugin: str) -> bool:
        """Whether an override's *source* names another plugin than *plugin*, or the caller."""
        if source == plugin:
            return False
        return source in (CALLER, *BUILTIN_NAMES) or self.guard.pm.get_plugin(source) is not None

    def vet(self, scheduler: str) -> None:
        """The chosen scheduler object's ``space`` and ``rules``, read once through the guard
        before any heuristic reads them (the default heuristic does, and a fault there would be
        blamed on it): raising or answering the wrong kind is the scheduler's plugin's fault;
        warning mode drops it and plans again without it."""
        if (own := self.own(scheduler)) is None:
            return
        plugin, obj = own
        for method, problems in (("space", _space_problems), ("rules", _rules_problems)):
            label = scheduler_label(scheduler, method)
            function = getattr(obj, method)
            answer = self.guard.ask(plugin, label, function, self.problem, self.device)
            if answer is not SKIPPED and (what := problems(answer)):
                self.guard.fault(plugin, label, what, cls=PluginResultError)
            if plugin in self.guard.dropped:
                raise Retry

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
            if broken is SKIPPED:  # its plugin is dropped
                raise Retry  # a scheduler is never used without its rules
            found.extend((plugin, v) for v in broken)
        for plugin, answer in self.guard.call(
            hook, problem=self.problem, device=self.device, params=params, scheduler=scheduler
        ):
            if not isinstance(answer, list | tuple) or not all(
                isinstance(v, Violation) for v in answer
            ):
                expected = "list[Violation]"
                self.guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)
            elif unknown := sorted(
                {f"{v.field}" for v in answer if f"{v.field}".partition(".")[0] not in PARAM_NAMES}
            ):
                what = (
                    f"answered a Violation of {', '.join(map(repr, unknown))}, which is no "
                    "MatmulParams field (a violation names the field whose value breaks the "
                    "rule, so that the plugin that chose it is blamed)"
                )
                self.guard.fault(plugin, hook, what, cls=PluginResultError)
            else:
                found.extend((plugin, v) for v in answer)
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
            who = ", ".join(sorted(_source(b) for b in blamed))
            lines.append(f"{v.message}\n  value from: {who}; rule of: {checker}")
            lines.extend(_kept(v.field.partition(".")[0], base, base_plugin, layers, blamed))
        pm = self.guard.pm
        if self.guard.strict or CALLER in culprits or any(is_builtin(pm, c) for c in culprits):
            raise InvalidParamsError("\n".join(lines), tuple(v for _, v in found))
        fields = ", ".join(sorted({v.field for _, v in found}))
        names = ", ".join(describe(pm, c, quote=False) for c in sorted(culprits))
        own = self.own(scheduler)
        then = (
            f"its scheduler {scheduler!r} is left out and the plan made again"
            if own is not None and own[0] in culprits
            else "using the default heuristic"
        )
        warning = PluginWarning(
            f"invalid {fields} from {names}:\n"
            + "\n".join(lines)
            + f"\nignored; {then} (MMAPLUG_STRICT=1 raises instead)",
            plugin=", ".join(sorted(culprits)),
            hook="mmaplug_validate_params",
        )
        warn_about(warning, pm, min(culprits), hook, stacklevel=4)
        self.guard.dropped |= culprits
        if retry:
            raise Retry
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
        owners = _setters(field, layers)
        return {owners[-1]} if owners else {p for p, _ in layers}

    def merge(
        self, base: MatmulParams, overrides: Mapping[str, object]
    ) -> tuple[list[Layer], dict[str, str]]:
        """Plugin overrides (a conflict raises), then the ``override_matmul_params`` blocks',
        then the caller's, as layers, each winning over those before; field sources."""
        sources = dict.fromkeys(PARAM_NAMES, "")
        merged: dict[str, tuple[object, str]] = {}
        layers: dict[str, dict[str, object]] = {}
        harness = []
        for plugin, override in self.overrides(base):
            if plugin == HARNESS:
                harness.append(override)
                continue
            for key, value in override.changes.items():
                clash = find_clash(key, value, merged)
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
        if not harness and HARNESS_CHANGES.get() and self.guard.pm.get_plugin(HARNESS) is None:
            fault(
                f"an override_matmul_params block is active ({dict(HARNESS_CHANGES.get())}), but "
                f"the {HARNESS!r} plugin that applies it is blocked in this plugin manager "
                "(MMAPLUG_DISABLE or block=)",
                strict=self.guard.strict,
                plugin=HARNESS,
                hook="mmaplug_matmul_overrides",
                fallback="the block changes nothing",
                cls=UsageError,
            )
        for override in harness:
            for field in win(layers, sources, HARNESS, override.source, override.changes):
                self.owners[field] = (HARNESS, "mmaplug_matmul_overrides")
        check_param_names(overrides, source=CALLER)
        for field in win(layers, sources, CALLER, CALLER, overrides):
            self.owners.pop(field, None)  # the caller's own values: no warning points there
        return [(p, c) for p, c in layers.items() if c], sources

    def plan(self, overrides: Mapping[str, object]) -> KernelSpec:
        choice, scheduler_plugin, candidates = self.choose()
        own = self.schedulers.get(choice.name)
        self.chosen = own if own is not None and own[0] == scheduler_plugin else None
        self.vet(choice.name)
        base_plugin, base = self.base(choice.name)
        self.owners = dict.fromkeys(PARAM_NAMES, (base_plugin, "mmaplug_matmul_params"))
        layers, sources = self.merge(base, overrides)
        sources = {k: v or base_plugin for k, v in sources.items()}
        params, found = self.apply(base, layers, choice.name)
        hook = "mmaplug_matmul_overrides"
        self.check(base, choice.name, base_plugin, layers, hook, retry=True, found=found)
        if params is None:  # unreachable: check raised or retried on core's violations
            raise Retry
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
                mine = answers.get(plugin, [])  # answering both ways: each change once
                mine = mine + [a for a in answer if a not in mine]
                if twice := set_twice(mine):
                    self.guard.fault(plugin, label, twice, cls=PluginResultError)
                    answers.pop(plugin, None)
                else:
                    answers[plugin] = mine
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
        check_agree(layers, "adjust")
        adjusted, found = self.apply(params, layers, scheduler)
        self.check(params, scheduler, scheduler, layers, hook, retry=True, found=found)
        if adjusted is None:  # unreachable: check raised or retried on core's violations
            raise Retry
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
                if new != old:  # the value the field holds is the adjuster's now
                    sources[adj.field] = plugin
        return adjusted, tuple(done)


def _space_problems(answer: object) -> str:
    """What is wrong with *answer* as a ``Scheduler.space`` (a sequence of ``Space``, one per
    MatmulParams field), or ''."""
    if not isinstance(answer, Sequence) or not all(isinstance(s, Space) for s in answer):
        return f"answered {shown(answer)}, not a sequence of Space"
    if unknown := sorted({s.field for s in answer} - set(PARAM_NAMES)):
        return f"answered a Space of {', '.join(map(repr, unknown))}, no MatmulParams field"
    return ""


def _rules_problems(answer: object) -> str:
    """What is wrong with *answer* as a ``Scheduler.rules`` (a sequence of ``Rule``), or ''."""
    if not isinstance(answer, Sequence) or not all(isinstance(r, Rule) for r in answer):
        return f"answered {shown(answer)}, not a sequence of Rule"
    return ""


def _source(plugin: str) -> str:
    """*plugin* as a violation names the source of a value."""
    return HARNESS_SOURCE if plugin == HARNESS else plugin


def _setters(field: str, layers: Sequence[Layer]) -> list[str]:
    """The plugins whose layer sets *field* (whole or one dimension), in layer order."""
    return [p for p, changes in layers if field in {k.partition(".")[0] for k in changes}]


def _kept(
    field: str, base: MatmulParams, base_plugin: str, layers: Sequence[Layer], blamed: set[str]
) -> list[str]:
    """The line that names the base plan as the source of the *field* value the *blamed*
    layers broke, where no layer set it: the default's cluster, say, chosen for its own tile
    before a caller's tile."""
    if field not in PARAM_NAMES or base_plugin in blamed or _setters(field, layers):
        return []
    changed = sorted({k.partition(".")[0] for p, ch in layers if p in blamed for k in ch})
    theirs = " and ".join(f"{_source(p)}'s" for p in sorted(blamed))
    return [
        f"  {field}={_text(getattr(base, field))} came from {_source(base_plugin)}, which chose "
        f"it before {theirs} {', '.join(changed)}; set {field} with them"
    ]


def _text(value: object) -> str:
    """A params value as the rules' messages write it."""
    return repr(value.value) if isinstance(value, enum.Enum) else str(value)
