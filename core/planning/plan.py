"""Planning's entry points: ``plan_problem`` turns a MatmulProblem into a KernelSpec (through
``mmaplug.planning.planner``), ``matmul_params`` gives its params, ``explain`` tells how it was
decided."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import attrs

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.hooks.guard import Guard
from mmaplug.hooks.manager import PluginManager, get_plugin_manager
from mmaplug.log import PLAN
from mmaplug.planning.choices import KernelSpec, Provenance, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.planner import Planner, Retry
from mmaplug.planning.scheduler import planning_with
from mmaplug.planning.scheduler_registry import schedulers

__all__ = [
    "KernelSpec",
    "Provenance",
    "explain",
    "matmul_params",
    "plan_problem",
]


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
    planner = Planner(
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
            except Retry:
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
    """A readable account of how *spec* was decided: inputs, candidates, sources, adjustments.

    :raises UsageError: *spec* is no KernelSpec (a problem is planned first: ``plan_problem``).
    """
    if not isinstance(spec, KernelSpec):
        raise UsageError(
            f"explain takes a KernelSpec (mp.plan_problem(problem, device) or compiled.spec "
            f"makes one; compiled.explain() explains a compiled fusion), not a "
            f"{type(spec).__name__}"
        )
    p, d, prov = spec.problem, spec.device, spec.provenance
    lines = [
        f"plan:       {spec.name}",
        f"problem:    {p.describe()}",
        f"            operands {p.operand_dtype.label}, output {p.output_dtype.label}, "
        f"vector widths a={p.vector_widths.a} b={p.vector_widths.b} "
        f"epilogue={p.vector_widths.epilogue}"
        + (f", epilogue ops {', '.join(p.epilogue_ops)}" if p.epilogue_ops else "")
        + "".join(f", epilogue reads {d.label}" for d in p.epilogue_input_dtypes if d.is_float8)
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
    if spec.params.swap_ab:
        lines.append(
            f"  (swap_ab: the kernel computes the transposed product; its tiles' m covers "
            f"n={p.n}, their n covers m={p.m}, and its A is the problem's B)"
        )
    lines.append("adjustments:" if prov.adjustments else "adjustments: none")
    lines.extend(f"  {a.describe()}" for a in prov.adjustments)
    return "\n".join(lines)
