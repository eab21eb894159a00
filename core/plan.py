"""Planning: the only caller of the scheduling hooks; turns a MatmulProblem into a KernelSpec."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Final

import attrs

from .choices import Adjustment, KernelSpec, Provenance, Rejection, SchedulerChoice
from .device import Device, get_device
from .errors import (
    InvalidParamsError,
    MatmulError,
    NoSchedulerError,
    OverrideConflictError,
    ParamAdjustedWarning,
    PluginError,
    PluginResultError,
    PluginWarning,
    UnknownParamError,
)
from .manager import DEFAULT_HEURISTIC, PluginManager, get_plugin_manager
from .params import PARAM_NAMES, MatmulParams, ParamOverride, Violation, check_param_names, to_tile
from .problem import MatmulProblem

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


@attrs.define
class _Planner:
    pm: PluginManager
    strict: bool
    problem: MatmulProblem
    device: Device
    consulted: set[str] = attrs.Factory(set)
    dropped: set[str] = attrs.Factory(set)

    def call(
        self, hook: str, only: frozenset[str] | None = None, **kwargs: object
    ) -> Iterator[tuple[str, object]]:
        """Call each implementation of *hook* alone, in pluggy's order, to attribute answers."""
        caller = getattr(self.pm.hook, hook)
        impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        firstresult = bool(caller.spec and caller.spec.opts.get("firstresult"))
        for impl in reversed(impls):
            name = impl.plugin_name
            if name in self.dropped or (only is not None and name not in only):
                continue
            self.consulted.add(name)
            subset = self.pm.subset_hook_caller(hook, [i.plugin for i in impls if i is not impl])
            try:
                result = subset(**kwargs)
            except Exception as error:
                self.fail(PluginError, name, hook, f"raised {type(error).__name__}: {error}", error)
                continue
            if not firstresult:
                result = result[0] if result else None
            if result is not None:
                yield name, result

    def fail(
        self,
        cls: type[MatmulError],
        plugin: str,
        hook: str,
        what: str,
        cause: BaseException | None = None,
    ) -> None:
        """Raise (strict mode, or the default heuristic failed) or warn and drop *plugin*."""
        message = f"{hook} {what}\nplugin: {plugin}\nhook: {hook}"
        if self.strict or plugin == DEFAULT_HEURISTIC:
            error = cls(message, plugin=plugin) if issubclass(cls, PluginError) else cls(message)
            raise error from cause
        warnings.warn(
            PluginWarning(f"{message}\nignored; using the default heuristic"), stacklevel=5
        )
        self.dropped.add(plugin)

    def choose(self) -> tuple[SchedulerChoice, tuple[SchedulerChoice | Rejection, ...]]:
        answers: list[SchedulerChoice | Rejection] = []
        hook = "mmaplug_scheduler_candidates"
        for plugin, answer in self.call(hook, problem=self.problem, device=self.device):
            if isinstance(answer, SchedulerChoice | Rejection):
                answers.append(answer)
            else:
                self.fail(
                    PluginResultError,
                    plugin,
                    hook,
                    _wrong(answer, "SchedulerChoice, Rejection or None"),
                )
        candidates = tuple(sorted(answers, key=lambda a: a.name))
        accepted = sorted(
            (a for a in answers if isinstance(a, SchedulerChoice)),
            key=lambda c: (-c.priority, c.name),
        )
        if not accepted:
            rejections = tuple(a for a in candidates if isinstance(a, Rejection))
            lines = "".join(f"\n  {r.name}: {r.reason}" for r in rejections) or " (none answered)"
            raise NoSchedulerError(
                f"no scheduler accepts {self.problem.describe()} on "
                f"{self.device.name} ({self.device.target}):{lines}",
                rejections,
            )
        return accepted[0], candidates

    def base(self, scheduler: str) -> tuple[str, MatmulParams]:
        hook = "mmaplug_matmul_params"
        heuristic = self.pm.heuristic
        only = None if heuristic is None else frozenset({heuristic, DEFAULT_HEURISTIC})
        for asked in (only, frozenset({DEFAULT_HEURISTIC})):  # after a dropped answer: default
            for plugin, params in self.call(
                hook, asked, problem=self.problem, device=self.device, scheduler=scheduler
            ):
                if not isinstance(params, MatmulParams):
                    self.fail(
                        PluginResultError, plugin, hook, _wrong(params, "MatmulParams or None")
                    )
                elif not self.check(
                    params, scheduler, dict.fromkeys(PARAM_NAMES, plugin), retry=False
                ):
                    return plugin, params
                break
        raise PluginResultError(
            f"no plugin answered {hook}; is {DEFAULT_HEURISTIC!r} registered?",
            plugin=DEFAULT_HEURISTIC,
        )

    def overrides(self, params: MatmulParams) -> list[tuple[str, ParamOverride]]:
        hook = "mmaplug_matmul_overrides"
        found: list[tuple[str, ParamOverride]] = []
        for plugin, answer in self.call(
            hook, problem=self.problem, device=self.device, params=params
        ):
            try:
                if isinstance(answer, Mapping):
                    answer = ParamOverride(plugin, answer)
            except UnknownParamError as error:
                self.fail(UnknownParamError, plugin, hook, str(error), error)
                continue
            if isinstance(answer, ParamOverride):
                found.append((plugin, answer))
            else:
                self.fail(
                    PluginResultError,
                    plugin,
                    hook,
                    _wrong(answer, "ParamOverride, a mapping or None"),
                )
        return sorted(found, key=lambda item: (item[1].source, item[0]))

    def check(
        self,
        params: MatmulParams,
        scheduler: str,
        owners: dict[str, str],
        *,
        retry: bool,
        error: InvalidParamsError | None = None,
    ) -> list[Violation]:
        """Validate; in warning mode drop offending plugins and return their violations."""
        hook = "mmaplug_validate_params"
        found: list[tuple[str, Violation]] = [
            ("core", v) for v in (error.violations if error else ())
        ]
        if error is None:
            for plugin, answer in self.call(
                hook, problem=self.problem, device=self.device, params=params, scheduler=scheduler
            ):
                if isinstance(answer, list | tuple) and all(
                    isinstance(v, Violation) for v in answer
                ):
                    found.extend((plugin, v) for v in answer)
                else:
                    self.fail(PluginResultError, plugin, hook, _wrong(answer, "list[Violation]"))
        if not found:
            return []
        fallback = owners.get("cta_tile", DEFAULT_HEURISTIC)
        offenders = {owners.get(v.field.partition(".")[0], fallback) for _, v in found}
        lines = [
            f"{v.message}\n  value from: {owners.get(v.field.partition('.')[0], fallback)}"
            f"; rule of: {checker}"
            for checker, v in found
        ]
        if self.strict or offenders & {DEFAULT_HEURISTIC, CALLER}:
            raise InvalidParamsError("\n".join(lines), tuple(v for _, v in found))
        fields = ", ".join(sorted({v.field for _, v in found}))
        warnings.warn(
            PluginWarning(
                f"invalid {fields} from {', '.join(sorted(offenders))}:\n"
                + "\n".join(lines)
                + "\nignored; using the default heuristic"
            ),
            stacklevel=4,
        )
        self.dropped |= offenders
        if retry:
            raise _Retry
        return [v for _, v in found]

    def plan(self, overrides: Mapping[str, object]) -> KernelSpec:
        choice, candidates = self.choose()
        base_plugin, base = self.base(choice.name)
        owners = dict.fromkeys(PARAM_NAMES, base_plugin)
        sources = dict(owners)
        merged: dict[str, tuple[object, str]] = {}
        for plugin, override in self.overrides(base):
            for key, value in override.changes.items():
                if key in merged and _norm(key, merged[key][0]) != _norm(key, value):
                    first = merged[key][1]
                    raise OverrideConflictError(
                        f"plugins {first!r} and {override.source!r} both override {key!r}: "
                        f"{merged[key][0]!r} != {value!r}; block one of them (MMAPLUG_DISABLE) "
                        "or make them agree",
                        field=key,
                        sources=(first, override.source),
                    )
                if key not in merged:  # agreeing sources: the first (by name) is recorded
                    merged[key] = (value, override.source)
                    owners[key.partition(".")[0]] = plugin
                    sources[key.partition(".")[0]] = override.source
        check_param_names(overrides, source=CALLER)
        for key, value in overrides.items():
            merged[key] = (value, CALLER)
            owners[key.partition(".")[0]] = sources[key.partition(".")[0]] = CALLER
        try:
            params = base.with_overrides(**{key: value for key, (value, _) in merged.items()})
        except InvalidParamsError as error:
            self.check(base, choice.name, owners, retry=True, error=error)
            raise  # unreachable: check raised or retries
        self.check(params, choice.name, owners, retry=True)
        params, adjustments = self.adjust(params, choice.name, sources)
        provenance = Provenance(
            base=base_plugin,
            sources=tuple(sources.items()),
            adjustments=adjustments,
            consulted=tuple(sorted(self.consulted)),
            candidates=candidates,
            dropped=tuple(sorted(self.dropped)),
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
        hook = "mmaplug_adjust_params"
        done: list[Adjustment] = []
        for plugin, answer in self.call(
            hook, problem=self.problem, device=self.device, params=params, scheduler=scheduler
        ):
            ok = isinstance(answer, list | tuple) and all(
                isinstance(a, Adjustment) and a.field in PARAM_NAMES for a in answer
            )
            if not ok:
                self.fail(
                    PluginResultError,
                    plugin,
                    hook,
                    _wrong(answer, "list[Adjustment] of MatmulParams fields"),
                )
                continue
            for adj in answer:  # type: ignore[union-attr]
                old = getattr(params, adj.field)
                params = params.with_overrides(**{adj.field: adj.new})
                done.append(
                    Adjustment(
                        adj.field, old, getattr(params, adj.field), f"{adj.reason} [by {plugin}]"
                    )
                )
                if sources[adj.field] != DEFAULT_HEURISTIC:
                    warnings.warn(
                        ParamAdjustedWarning(
                            f"{plugin} changed {sources[adj.field]}'s {done[-1].describe()}"
                        ),
                        stacklevel=4,
                    )
        if done:
            owners = dict.fromkeys(PARAM_NAMES, scheduler)
            self.strict = True  # a scheduler breaking its own rules is always an error
            self.check(params, scheduler, owners, retry=False)
        return params, tuple(done)


def _wrong(value: object, expected: str) -> str:
    return f"returned {value!r} ({type(value).__name__}); expected {expected}"


def _norm(key: str, value: object) -> object:
    if key in _TILES:
        try:
            return to_tile(value)
        except MatmulError:
            return value
    return value


def plan_problem(
    problem: MatmulProblem,
    device: Device,
    *,
    pm: PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
    strict: bool | None = None,
) -> KernelSpec:
    """Choose the scheduler and params for *problem* on *device* through the plugin hooks.

    :param pm: The plugin manager; ``get_plugin_manager()`` when None.
    :param overrides: Caller changes to MatmulParams fields; applied last, they always win.
    :param strict: Raise on a misbehaving plugin (True) or warn and use the default heuristic
        (False); None follows ``pm.strict`` (``MMAPLUG_STRICT``).
    :raises NoSchedulerError: No scheduler accepted; lists every rejection.
    :raises InvalidParamsError: The final params break rules; every violation, each naming the
        plugin whose value broke it.
    :raises OverrideConflictError: Two plugins set one field differently.
    :raises PluginError: A plugin raised or answered wrongly (strict mode).
    """
    pm = get_plugin_manager() if pm is None else pm
    pm.check_heuristic()
    planner = _Planner(
        pm=pm, strict=pm.strict if strict is None else strict, problem=problem, device=device
    )
    while True:  # each retry drops at least one more plugin, so this ends
        try:
            return planner.plan(dict(overrides or {}))
        except _Retry:
            continue


def matmul_params(problem: MatmulProblem, device: Device | str | None = None) -> MatmulParams:
    """The final MatmulParams for *problem* on *device* (a preset name, or the local GPU)."""
    return plan_problem(problem, get_device(device)).params


def explain(spec: KernelSpec) -> str:
    """A readable account of how *spec* was decided: inputs, candidates, sources, adjustments."""
    p, d, prov = spec.problem, spec.device, spec.provenance
    lines = [
        f"kernel:     {spec.name}",
        f"problem:    {p.describe()}",
        f"            operands {p.operand_dtype.label}, output {p.output_dtype.label}, "
        f"vector widths a={p.vector_widths.a} b={p.vector_widths.b} "
        f"epilogue={p.vector_widths.epilogue}"
        + (f", epilogue ops {', '.join(p.epilogue_ops)}" if p.epilogue_ops else ""),
        f"device:     {d.name} ({d.target}, cc {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, "
        f"{d.smem_per_block_optin:,} B shared memory per block)",
        f"scheduler:  {spec.scheduler}",
        "candidates:",
    ]
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
