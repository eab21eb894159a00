"""JSON-ready records of plans and plugins: the stable keys of ``--json`` and the plan dump."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final

from .choices import SchedulerChoice
from .params import TileShape

if TYPE_CHECKING:
    from .choices import KernelSpec
    from .manager import PluginManager

#: Bumped when a key is renamed or removed (adding keys keeps the number).
SCHEMA: Final = 1


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
        "kernel": spec.name,
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
    """What ``mmaplug plugins --json`` prints: registered plugins, selection, blocks, policy."""
    plugins = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        info = pm.plugin_info.get(name)
        plugins.append(
            {
                "name": name,
                "distribution": info.distribution if info else "",
                "version": info.version if info else "",
                "module": info.module if info else type(plugin).__module__,
                "hooks": sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()),
            }
        )
    return {
        "schema": SCHEMA,
        "plugins": plugins,
        "heuristic": pm.heuristic,
        "blocked": list(pm.blocked),
        "strict": pm.strict,
    }
