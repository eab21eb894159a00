"""JSON-ready records of plans and plugins: the stable keys of ``--json`` and the plan dump."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final

from mmaplug.hooks.manager import heuristic_order
from mmaplug.planning.choices import SchedulerChoice
from mmaplug.planning.params import TileShape
from mmaplug.planning.scheduler_registry import schedulers

if TYPE_CHECKING:
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.planning.choices import KernelSpec

#: Bumped when a key is renamed or removed (adding keys keeps the number).
SCHEMA: Final = 2


def plain(value: object) -> Any:
    """*value* as JSON data: tiles as ``[m, n, k]``, enums as their value, tuples as lists."""
    if isinstance(value, TileShape):
        return list(value.as_tuple())
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def plan_record(spec: KernelSpec) -> dict[str, Any]:
    """What ``mmaplug explain --json`` prints: the plan of *spec* and how it was decided."""
    p, d, prov = spec.problem, spec.device, spec.provenance
    return {
        "schema": SCHEMA,
        "plan": spec.name,
        "scheduler": spec.scheduler,
        "scheduler_plugin": prov.scheduler_plugin,
        "problem": {
            "m": p.m,
            "n": p.n,
            "k": p.k,
            "batch": p.batch,
            "layout": p.layout.value,
            "a_k_inner": p.a_k_inner,
            "b_k_inner": p.b_k_inner,
            "operand_dtype": p.operand_dtype.label,
            "output_dtype": p.output_dtype.label,
            "precision": p.precision,
            "vector_widths": {
                "a": p.vector_widths.a,
                "b": p.vector_widths.b,
                "epilogue": p.vector_widths.epilogue,
            },
            "epilogue_ops": list(p.epilogue_ops),
            "epilogue_input_dtypes": [d.label for d in p.epilogue_input_dtypes],
        },
        "device": {
            "name": d.name,
            "target": d.target,
            "cc": list(d.cc),
            "sm_count": d.sm_count,
            "smem_per_block_optin": d.smem_per_block_optin,
        },
        "candidates": [
            {"name": c.name, "accepted": True, "priority": c.priority, "reason": ""}
            if isinstance(c, SchedulerChoice)
            else {"name": c.name, "accepted": False, "priority": None, "reason": c.reason}
            for c in prov.candidates
        ],
        "consulted": list(prov.consulted),
        "dropped": list(prov.dropped),
        "base": prov.base,
        "params": {field: plain(value) for field, value in spec.params.as_dict().items()},
        "sources": {field: prov.source(field) for field in spec.params.as_dict()},
        "adjustments": [
            {"field": a.field, "old": plain(a.old), "new": plain(a.new), "reason": a.reason}
            for a in prov.adjustments
        ],
    }


def plugins_record(pm: PluginManager) -> dict[str, Any]:
    """What ``mmaplug plugins --json`` prints: registered plugins, scheduler objects (highest
    priority first), heuristics, selection, blocks, policy."""
    plugins = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        info = pm.plugin_info.get(name)
        callers = pm.get_hookcallers(plugin) or ()
        plugins.append(
            {
                "name": name,
                "distribution": info.distribution if info else "",
                "version": info.version if info else "",
                "module": info.module if info else type(plugin).__module__,
                "hooks": sorted(c.name for c in callers if c.has_spec()),
                # optional hooks (@hookimpl(optionalhook=True)) this mmaplug does not have
                "later_hooks": sorted(c.name for c in callers if not c.has_spec()),
            }
        )
    return {
        "schema": SCHEMA,
        "plugins": plugins,
        "schedulers": [
            {"name": name, "priority": scheduler.priority, "plugin": plugin}
            for name, (plugin, scheduler) in sorted(
                schedulers(pm).items(), key=lambda item: (-item[1][1].priority, item[0])
            )
        ],
        "heuristics": heuristics_record(pm),
        "heuristic": pm.heuristic,
        "blocked": list(pm.blocked),
        "skipped": [{"name": n, "why": why} for n, why in sorted(pm.skipped.items())],
        "strict": pm.strict,
    }


def heuristics_record(pm: PluginManager) -> list[dict[str, Any]]:
    """Each plugin implementing ``mmaplug_matmul_params``, in the order planning asks them:
    ``rank`` (1 answers first; None when ``MMAPLUG_HEURISTIC`` selects another), ``order``
    (``tryfirst``, ``trylast`` or ``""``) and ``shadowed_by``, the heuristic asked just before
    it: this one answers only for problems that one declines (returns None)."""
    asked = heuristic_order(pm)
    impls = {
        impl.plugin_name: impl
        for impl in reversed(pm.hook.mmaplug_matmul_params.get_hookimpls())
        if not (impl.hookwrapper or impl.wrapper)
    }
    records = []
    for name in [*asked, *(name for name in impls if name not in asked)]:
        rank = asked.index(name) + 1 if name in asked else None
        impl = impls[name]
        records.append(
            {
                "name": name,
                "rank": rank,
                "order": "tryfirst" if impl.tryfirst else "trylast" if impl.trylast else "",
                "shadowed_by": asked[rank - 2] if rank is not None and rank > 1 else None,
            }
        )
    return records


def precedence_text(heuristic: dict[str, Any], selected: str | None) -> str:
    """A ``heuristics_record`` entry in words, for ``mmaplug plugins`` (*selected*: the
    ``MMAPLUG_HEURISTIC`` selection)."""
    if heuristic["rank"] is None:
        return f"not asked (MMAPLUG_HEURISTIC selects {selected!r})"
    order = f", {heuristic['order']}" if heuristic["order"] else ""
    shadow = heuristic["shadowed_by"]
    if shadow is None:
        return f"rank {heuristic['rank']}{order}: answers first"
    return (
        f"rank {heuristic['rank']}{order}: shadowed by {shadow!r} (asked only for problems "
        f"{shadow!r} declines)"
    )
