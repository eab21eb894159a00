"""The generated parts of ``docs/plugin-reference.md``: every MatmulParams field with what each
scheduler accepts, the rules the schedulers state, the test sentinels and what a hook receives.

Nothing here restates a rule, and nothing is probed: fields, types and defaults come from
``attrs.fields``; what each registered scheduler accepts of a field is its ``space`` (in its
words, with the legal values where it lists them) and the rules it states are its ``rules``
(field and limit, as data), both asked for a representative problem it takes (a 4096-row GEMM,
else a one-row decode step) on the preset device the scheduler is chosen for. Descriptions of
fields are the only hand-written text, and a field without one is an error.

    python -m mmaplug.planning.plugin_reference docs/plugin-reference.md  # refresh in place
    python -m mmaplug.planning.plugin_reference --check docs/plugin-reference.md  # 1: stale

Only the text between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` is
rewritten; the rest of the page is written by hand. The schedulers are those of a plugin
manager: the built-in plugins only unless ``refresh`` is given another.
"""

from __future__ import annotations

import argparse
import enum
import functools
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.errors import MatmulError, UsageError
from mmaplug.hooks import hookspecs
from mmaplug.hooks.manager import PluginManager, make_plugin_manager
from mmaplug.ir.dtypes import DType
from mmaplug.planning.choices import KernelSpec, Provenance
from mmaplug.planning.device import PRESET_NAMES, Device, get_device
from mmaplug.planning.params import (
    SENTINEL_SCHEDULERS,
    SENTINELS,
    SENTINELS_WITH_TILES,
    MatmulParams,
    TileShape,
)
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import Scheduler, Space
from mmaplug.planning.scheduler_registry import schedulers

__all__ = ["SECTIONS", "main", "refresh", "representative_problem", "targets"]

MAX_SHOWN: Final = 12  # examples listed one by one; more are counted

#: What each MatmulParams field means (the rules are generated; this is the only prose).
FIELD_DOCS: Final = {
    "cta_tile": "(m, n, k) of the output tile one CTA (thread block) computes; k is the depth of "
    "A and B loaded per pipeline stage. For a horizontal fusion n is the width of all its B "
    "tiles stacked.",
    "warp_tile": "(m, n, k) one warp (ampere) or one consumer warp group (hopper) computes; k "
    "equals cta_tile.k (warps do not split K).",
    "instruction_tile": "(m, n, k) of one tensor-core instruction: mma.sync m16n8k16 on ampere, "
    "wgmma m64nNk16 on hopper.",
    "stages": "Operand tiles in flight in the shared-memory pipeline.",
    "prefetch_gap": "How many stages ahead of the math loads are issued.",
    "async_gmem_load_operands": "Load operands asynchronously (cp.async on ampere, TMA on "
    "hopper) instead of with plain loads.",
    "cta_order": "Grid order of output tiles: row_major puts N tiles on blockIdx.x, "
    "column_major M tiles.",
    "grid_swizzle_factor": "Output tiles are walked in groups of this many (L2 reuse); 1 is none.",
    "splitk_factor": "K is split over this many CTAs whose float32 partial sums a second kernel "
    "adds (or the CTAs' cluster: splitk_in_cluster); 1 is none.",
    "use_smem_epilogue": "Stage the output tile through shared memory before storing it.",
    "cluster_dims": "(m, n) CTAs per thread block cluster; (2, 1) pairs CTAs along M, sharing "
    "one multicast B tile, (1, 2) along N, sharing one multicast A tile.",
    "tiling_strategy": "One output tile per CTA, persistent CTAs looping over tiles, two "
    "consumer warp groups taking turns (ping-pong), or persistent CTAs whose last, partly "
    "filled wave of tiles is cut along K into splitk_factor pieces, summed in the kernel by "
    "the CTA that finishes a tile's last piece (stream-K).",
    "warp_specialized": "A producer warp group loads while consumer warp groups compute.",
    "swap_ab": "Compute the transposed product C^T = B^T A^T: the kernel's A is the problem's "
    "B (a weight's rows fill the instruction's 64 rows) and its B the problem's A (a few "
    "activation rows become the instruction's N). The tiles then describe the transposed "
    "product: cta_tile.m covers the problem's N and cta_tile.n its M.",
    "splitk_in_cluster": "The splitk_factor CTAs of an output tile form one thread block "
    "cluster and add their float32 partial sums through distributed shared memory, each CTA "
    "a slice of the tile and its epilogue: no workspace, no second kernel (hopper; 2 to 8 "
    "splits).",
}

#: What the values a hook receives hold (attrs fields; properties carry their docstrings).
ATTRIBUTE_DOCS: Final[dict[type, dict[str, str]]] = {
    MatmulProblem: {
        "m": "rows of A and of the output (product of all M dimensions)",
        "n": "columns of B and of the output (product of all N dimensions)",
        "k": "the reduction extent (product of all K dimensions)",
        "batch": "product of the batch dimensions; 1 without any",
        "a_k_inner": "A's contiguous dimension is K",
        "b_k_inner": "B's contiguous dimension is K",
        "operand_dtype": "type of A and B (`mp.float16`, `mp.bfloat16`, ...)",
        "output_dtype": "type of the fusion's output",
        "vector_widths": "widest vector, in elements, each side may load or store",
        "num_patterns": "matmuls in the fusion",
        "horizontal": "matmuls sharing operand A and meeting in the epilogue; 1 for one matmul",
        "epilogue_ops": "element-wise ops after the matmul, in order (`bias`, `gelu`, ...)",
        "epilogue_input_dtypes": "types of the tensors the epilogue reads, in order (an FP8 "
        "residual: `mp.float8_e4m3fn`)",
        "a_prologue_ops": "element-wise ops between input A and the mma",
        "b_prologue_ops": "element-wise ops between input B and the mma",
        "block_scaled": "FP8 sums scaled per block of 128 of K (`scaled_mm` with block scales); "
        "offered only to schedulers with `block_scales = True`",
    },
    VectorWidths: {
        "a": "elements per load of A",
        "b": "elements per load of B",
        "epilogue": "elements per store of the output",
    },
    Device: {
        "name": "preset name (`a100`, `h100`, `h200`) or the local GPU's name",
        "cc": "compute capability (major, minor)",
        "arch_suffix": '`"a"` where architecture-specific features are targeted (sm_90a)',
        "sm_count": "streaming multiprocessors",
        "smem_per_block_optin": "bytes of shared memory one block may use",
        "smem_per_sm": "bytes of shared memory per SM",
        "regs_per_sm": "32-bit registers per SM",
        "threads_per_sm": "threads resident on one SM at most",
        "ctas_per_sm": "CTAs resident on one SM at most",
        "max_threads_per_block": "threads per block",
        "l2_bytes": "L2 cache bytes (0 when unknown)",
        "warp_size": "threads per warp",
    },
    KernelSpec: {
        "scheduler": "the chosen scheduler's name",
        "problem": "the `MatmulProblem`",
        "device": "the `Device`",
        "params": "the final `MatmulParams`",
        "provenance": "how the params were decided (not part of equality)",
    },
    Provenance: {
        "base": "the plugin whose `mmaplug_matmul_params` answer is the base",
        "sources": "(field, plugin) pairs: who set each field (`caller` for overrides)",
        "adjustments": "`Adjustment(field, old, new, reason)` the scheduler forced",
        "consulted": "plugins asked during planning",
        "candidates": "each scheduler's `SchedulerChoice` or `Rejection`",
        "dropped": "plugins whose answers were dropped (warning mode)",
        "scheduler_plugin": "the plugin that offered the chosen scheduler",
        "shape_class": "the shape class of a fusion with symbolic extents; empty otherwise",
    },
}


#: Rows of the representative problems, in the order they are asked: a square GEMM, then a
#: decode step (for a scheduler that takes no square GEMM).
REPRESENTATIVE_M: Final = (4096, 1)


def representative_problem(
    *, m: int = 4096, a_k_inner: bool = True, b_k_inner: bool = True, horizontal: int = 1
) -> MatmulProblem:
    """An m x 4096 x 4096 float16 problem (TN unless told), the kind the reference asks about."""
    return MatmulProblem(
        m=m,
        n=4096,
        k=4096,
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
        num_patterns=horizontal,
        horizontal=horizontal,
    )


def rule_problems(m: int) -> tuple[tuple[str, MatmulProblem], ...]:
    """Problems of *m* rows whose rules are listed (a horizontal fusion where a scheduler takes
    one)."""
    return (
        ("TN", representative_problem(m=m)),
        ("NT", representative_problem(m=m, a_k_inner=False, b_k_inner=False)),
        ("horizontal (h=2)", representative_problem(m=m, horizontal=2)),
    )


@functools.cache
def _manager() -> PluginManager:
    """The built-in plugins only (no entry points, no environment), strict."""
    return make_plugin_manager(load_entrypoints=False, strict=True)


def targets(pm: PluginManager) -> list[tuple[Scheduler, Device, MatmulProblem]]:
    """Each registered scheduler (by name) with the preset and problem it is asked about: the
    first representative problem (``REPRESENTATIVE_M``) it takes on some preset, and the last
    preset on which it outranks every other scheduler taking that problem, else the last that
    it takes; a scheduler taking none is asked about the first problem on the last preset
    (where its space and rules still answer)."""
    found = [scheduler for _, scheduler in schedulers(pm).values()]
    devices = [get_device(name) for name in PRESET_NAMES]

    def chosen(problem: MatmulProblem, device: Device) -> Scheduler | None:
        rivals = [s for s in found if s.accepts(problem, device) is None]
        return min(rivals, key=lambda s: (-s.priority, s.name), default=None)

    out = []
    for scheduler in sorted(found, key=lambda s: s.name):
        for m in REPRESENTATIVE_M:
            problem = representative_problem(m=m)
            taken = [d for d in devices if scheduler.accepts(problem, d) is None]
            if taken:
                wins = [d for d in taken if chosen(problem, d) is scheduler]
                out.append((scheduler, (wins or taken)[-1], problem))
                break
        else:
            out.append((scheduler, devices[-1], representative_problem()))
    return out


def _default_plan(
    pm: PluginManager, scheduler: Scheduler, device: Device, problem: MatmulProblem
) -> MatmulParams | None:
    """The plan of *problem* on *device*, when it is *scheduler*'s."""
    try:
        spec = plan_problem(problem, device, pm=pm)
    except MatmulError:
        return None
    return spec.params if spec.scheduler == scheduler.name else None


def _show(value: object) -> str:
    """A value as a plugin writes it: tiles as tuples, enums by value, strings quoted."""
    if isinstance(value, TileShape):
        return str(value.as_tuple())
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _runs(values: Sequence[object]) -> str:
    """``0, 2–8`` for ints (three or more consecutive ones as a range); the values joined
    otherwise."""
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != len(values):
        return ", ".join(_show(v) for v in values)
    spans: list[list[int]] = []
    for value in ints:
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ", ".join(
        f"{a}–{b}" if b - a >= 2 else ", ".join(map(str, range(a, b + 1))) for a, b in spans
    )


def _space_line(space: Space | None) -> list[str]:
    """What a field's space says: its words, its values where listed, what the tuner tries."""
    if space is None:
        return ["not read (any value)"]
    bits = [f"accepts `{space.text}`"]
    if space.values and _runs(space.values) not in space.text:
        bits.append(f"values {_runs(space.values)}")
    if space.examples:
        shown = len(space.examples) <= MAX_SHOWN
        tries = _runs(space.examples) if shown else f"{len(space.examples)} values"
        bits.append(f"tuner tries {tries}")
    return bits


def section_accepted(pm: PluginManager) -> str:
    """Per field: meaning, type, default, sentinel, and per scheduler its space, the default
    heuristic's choice and the rules about the field."""
    asked = targets(pm)
    by_problem: dict[MatmulProblem, list[str]] = {}
    for s, d, p in asked:
        by_problem.setdefault(p, []).append(f"**{s.name}** on the `{d.name}` preset")
    out = [
        "; ".join(
            f"{'Asked' if i == 0 else 'asked'} for {_problem_line(p)}: {', '.join(names)}"
            for i, (p, names) in enumerate(by_problem.items())
        )
        + ". Each scheduler says what it accepts of a field (its space, with the values the "
        "tuner tries) and the rules about it, in its own words; rules between fields are "
        "listed under each field they blame. Limits with numbers hold for its problem and "
        "device (shared memory, K tiles).",
        "",
    ]
    spaces = {s.name: {sp.field: sp for sp in s.space(p, d)} for s, d, p in asked}
    rules = {s.name: s.rules(p, d) for s, d, p in asked}
    plans = {s.name: _default_plan(pm, s, d, p) for s, d, p in asked}
    for field in attrs.fields(MatmulParams):
        if field.name not in FIELD_DOCS:
            raise UsageError(f"MatmulParams.{field.name} has no description in FIELD_DOCS")
        default = "none (required)" if field.default is attrs.NOTHING else _show(field.default)
        out.append(f"### `{field.name}`")
        out.append("")
        out.append(f"{FIELD_DOCS[field.name]} Type `{field.type}`, default {default}.")
        if field.name in SENTINELS:
            where = _sentinel_scope(field.name)
            out.append(f"Test sentinel: `{_show(SENTINELS[field.name])}` ({where}).")
        out.append("")
        for scheduler, device, _ in asked:
            bits = _space_line(spaces[scheduler.name].get(field.name))
            if (plan := plans[scheduler.name]) is not None:
                bits.append(f"default heuristic `{_show(getattr(plan, field.name))}`")
            stated = [f"`{r.limit}`" for r in rules[scheduler.name] if r.field == field.name]
            if stated:
                bits.append("rules: " + "; ".join(dict.fromkeys(stated)))
            out.append(f"- **{scheduler.name}** ({device.name}): " + "; ".join(bits) + ".")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _problem_line(problem: MatmulProblem) -> str:
    return f"`{problem.describe()}`"


def section_rules(pm: PluginManager) -> str:
    """Every rule each scheduler states, per representative problem it takes (of the rows it
    is asked about)."""
    out = []
    for scheduler, device, asked in targets(pm):
        problems = rule_problems(asked.m)
        taken = [(n, p) for n, p in problems if scheduler.accepts(p, device) is None]
        rows: dict[tuple[str, str], set[str]] = {}
        for name, problem in taken:
            for rule in scheduler.rules(problem, device):
                rows.setdefault((rule.field, rule.limit), set()).add(name)
        where = type(scheduler).__module__
        rows_note = "" if asked.m == REPRESENTATIVE_M[0] else f", m={asked.m}"
        out.append(f"**{scheduler.name}** ({device.name}{rows_note}; `{where}`):")
        out.append("")
        if not taken:
            out.append(f"takes none of {', '.join(n for n, _ in problems)} on {device.name}.")
            out.append("")
            continue
        out.append("| field | limit | " + " | ".join(n for n, _ in taken) + " |")
        out.append("|---|---|" + "---|" * len(taken))
        for (field, limit), seen in rows.items():
            marks = " | ".join("✓" if n in seen else "" for n, _ in taken)
            out.append(f"| `{field}` | {limit.replace('|', '/')} | {marks} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _attributes(cls: type) -> list[tuple[str, str, str]]:
    """(name, type, meaning) of *cls*'s attrs fields, then its public properties."""
    docs = ATTRIBUTE_DOCS[cls]
    rows = []
    for field in attrs.fields(cls):
        name = field.alias or field.name
        if name not in docs:
            raise UsageError(f"{cls.__name__}.{name} has no description in ATTRIBUTE_DOCS")
        default = "" if field.default is attrs.NOTHING else f" (default {_show(field.default)})"
        rows.append((name, f"`{field.type}`", docs[name] + default))
    for name, member in inspect.getmembers(cls, lambda m: isinstance(m, property)):
        if not name.startswith("_"):
            summary = (inspect.getdoc(member) or "").split("\n\n")[0].replace("\n", " ")
            summary = summary.replace("``", "`")
            rows.append((name, "property", summary))
    return rows


def section_receives(pm: PluginManager) -> str:
    """The hooks (arguments, call style) and the attributes of what they receive."""
    out = ["| hook | arguments | answers |", "|---|---|---|"]
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith("mmaplug_"):
            continue
        opts = getattr(spec, "mmaplug_spec", {}) or {}
        args = ", ".join(inspect.signature(spec).parameters)
        style = "first non-None answer" if opts.get("firstresult") else "every plugin"
        out.append(f"| `{name}` | {args} | {style} |")
    for cls in (MatmulProblem, VectorWidths, Device, KernelSpec, Provenance):
        out += ["", f"`{cls.__name__}`:", "", "| attribute | type | meaning |", "|---|---|---|"]
        out += [f"| `{n}` | {t} | {m} |" for n, t, m in _attributes(cls)]
    members = ", ".join(f"`mp.{d.label}` ({d.char}, {d.itemsize} B)" for d in DType)
    out += ["", f"`DType` members: {members}; attributes `label`, `char`, `itemsize`, `is_half`."]
    return "\n".join(out) + "\n"


def section_sentinels(pm: PluginManager) -> str:
    """``mp.testing.SENTINELS``: a legal value per field that the defaults never choose."""
    out = ["| field | sentinel | legal on |", "|---|---|---|"]
    for name, value in SENTINELS.items():
        shown = value.as_tuple() if isinstance(value, TileShape) else _show(value)
        out.append(f"| `{name}` | `{shown}` | {_sentinel_scope(name)} |")
    return "\n".join(out) + "\n"


def _sentinel_scope(name: str) -> str:
    """Where a sentinel is legal: its schedulers, and for a tile the other tiles it needs."""
    where = ", ".join(sorted(SENTINEL_SCHEDULERS[name]))
    if isinstance(SENTINELS[name], TileShape):
        return f"{where}; only with the other tile sentinels"
    if name in SENTINELS_WITH_TILES:
        return f"{where}; on {SENTINELS_WITH_TILES[name]} only with the tile sentinels"
    return where


SECTIONS: Final[dict[str, Callable[[PluginManager], str]]] = {
    "accepted": section_accepted,
    "rules": section_rules,
    "sentinels": section_sentinels,
    "receives": section_receives,
}
_BLOCK: Final = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+)[^\n]*-->\n)(?P<body>.*?)"
    r"(<!-- end generated: (?P=name) -->)",
    re.S,
)


@functools.cache
def _builtin_section(name: str) -> str:
    """Section *name* for the built-in plugins (their code cannot change while a process runs)."""
    return SECTIONS[name](_manager())


def refresh(text: str, pm: PluginManager | None = None) -> str:
    """*text* with every generated section rewritten; each of ``SECTIONS`` must be there once.

    :param pm: Whose schedulers the page describes; the built-in plugins only when None.

    :raises UsageError: a section is missing, repeated or unknown.
    """
    found = [m.group("name") for m in _BLOCK.finditer(text)]
    unknown = sorted(set(found) - set(SECTIONS))
    missing = [name for name in SECTIONS if found.count(name) != 1]
    if unknown or missing:
        raise UsageError(
            f"generated sections: unknown {unknown or 'none'}, missing or repeated "
            f"{missing or 'none'}; each of {', '.join(SECTIONS)} goes once between "
            "'<!-- generated: NAME (...) -->' and '<!-- end generated: NAME -->'"
        )

    def write(name: str) -> str:
        return _builtin_section(name) if pm is None else SECTIONS[name](pm)

    return _BLOCK.sub(lambda m: f"{m.group(1)}\n{write(m.group('name'))}\n{m.group(4)}", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Refresh the generated sections of a page in place (or, with ``--check``, compare)."""
    parser = argparse.ArgumentParser(prog="python -m mmaplug.planning.plugin_reference")
    parser.add_argument("page", type=Path, help="docs/plugin-reference.md")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = args.page.read_text()
    fresh = refresh(text)
    if args.check:
        if fresh != text:
            print(f"{args.page} is stale: python -m mmaplug.planning.plugin_reference {args.page}")
            return 1
        return 0
    if fresh != text:
        args.page.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
