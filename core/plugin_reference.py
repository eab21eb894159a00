"""The generated parts of ``docs/plugin-reference.md``: every MatmulParams field with what each
scheduler accepts, the rules the schedulers state, the test sentinels and what a hook receives.

Nothing here restates a rule. Fields, types and defaults come from ``attrs.fields``; the values a
scheduler accepts come from planning a representative problem with each candidate value as a
caller override (the public validation path: ``plan_problem``, strict); the rules are every check
the chosen scheduler's ``limits`` module makes while validating that plan, in its own words.
Descriptions of fields are the only hand-written text, and a field without one is an error.

    python -m mmaplug.plugin_reference docs/plugin-reference.md          # refresh in place
    python -m mmaplug.plugin_reference --check docs/plugin-reference.md  # exit 1 when stale

Only the text between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` is
rewritten; the rest of the page is written by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import functools
import inspect
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final
from unittest import mock

import attrs

from . import hookspecs
from .choices import KernelSpec, Provenance
from .device import Device, get_device
from .dtypes import DType
from .errors import InvalidParamsError, MatmulError, ParamAdjustedWarning, UsageError
from .manager import PluginManager, make_plugin_manager
from .params import SENTINEL_SCHEDULERS, SENTINELS, MatmulParams, TileShape, Violations
from .plan import plan_problem
from .problem import MatmulProblem, VectorWidths

__all__ = ["SECTIONS", "TARGETS", "main", "refresh", "representative_problem"]

#: (scheduler, device preset) pairs the reference plans for: each scheduler on the GPU it is
#: chosen for (ampere also runs on an H200 whenever hopper declines a problem).
TARGETS: Final = (("ampere", "a100"), ("hopper", "h200"))
INT_PROBES: Final = range(0, 257)
CLUSTER_PROBES: Final = tuple((m, n) for m in (1, 2, 4) for n in (1, 2, 4))

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
    "adds; 1 is none.",
    "use_smem_epilogue": "Stage the output tile through shared memory before storing it.",
    "cluster_dims": "(m, n) CTAs per thread block cluster; (2, 1) pairs CTAs along M, sharing "
    "one multicast B tile.",
    "tiling_strategy": "One output tile per CTA, persistent CTAs looping over tiles, or two "
    "consumer warp groups taking turns (ping-pong).",
    "warp_specialized": "A producer warp group loads while consumer warp groups compute.",
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
        "a_prologue_ops": "element-wise ops between input A and the mma",
        "b_prologue_ops": "element-wise ops between input B and the mma",
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


def representative_problem(
    *, a_k_inner: bool = True, b_k_inner: bool = True, horizontal: int = 1
) -> MatmulProblem:
    """A 4096x4096x4096 float16 problem (TN unless told), the one the reference plans."""
    return MatmulProblem(
        m=4096,
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


#: Problems whose rules are listed (for the hopper scheduler, a horizontal fusion too).
RULE_PROBLEMS: Final = (
    ("TN", representative_problem()),
    ("NT", representative_problem(a_k_inner=False, b_k_inner=False)),
    ("horizontal (h=2)", representative_problem(horizontal=2)),
)


@functools.cache
def _manager() -> PluginManager:
    """The built-in plugins only (no entry points, no environment), strict."""
    return make_plugin_manager(load_entrypoints=False, strict=True)


def _plan(problem: MatmulProblem, scheduler: str, preset: str, **overrides: object) -> KernelSpec:
    """Plan with the built-in plugins only, strict; adjustments of probes are expected."""
    pm = _manager()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParamAdjustedWarning)
        spec = plan_problem(problem, get_device(preset), pm=pm, overrides=overrides)
    if spec.scheduler != scheduler:
        raise UsageError(f"{preset} planned {spec.scheduler}, not {scheduler}, for the reference")
    return spec


def _probe(field: str, value: object, scheduler: str, preset: str) -> tuple[str, str]:
    """(verdict, detail) of planning the representative problem with *field* = *value*."""
    try:
        spec = _plan(representative_problem(), scheduler, preset, **{field: value})
    except InvalidParamsError as error:
        limits = [v.limit for v in error.violations if v.field == field] or [
            f"{v.field}: {v.limit}" for v in error.violations
        ]
        return "refused", "; ".join(f"`{limit}`" for limit in dict.fromkeys(limits))
    except MatmulError as error:
        return "refused", f"`{str(error).splitlines()[0]}`"
    for adjustment in spec.provenance.adjustments:
        if adjustment.field == field:
            reason = adjustment.reason.rsplit(" [by ", 1)[0]
            return "adjusted", f"to {_show(adjustment.new)}: {reason}"
    return "accepted", ""


def _candidates(field: attrs.Attribute[Any]) -> Sequence[object]:
    """Values to probe for *field*, by the type of its default (none for the tiles)."""
    default = field.default
    if default is attrs.NOTHING:
        return ()
    if isinstance(default, bool):
        return (False, True)
    if isinstance(default, enum.Enum):
        return tuple(type(default))
    if isinstance(default, int):
        return INT_PROBES
    if isinstance(default, tuple):
        return CLUSTER_PROBES
    return ()


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
    """``0, 2–8`` for ints (consecutive ones as a range); the values joined otherwise."""
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != len(values):
        return ", ".join(_show(v) for v in values)
    spans: list[list[int]] = []
    for value in ints:
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in spans)


def _verdicts(field: attrs.Attribute[Any], scheduler: str, preset: str) -> list[str]:
    """Each probed outcome of *field*, with the values that got it."""
    groups: dict[tuple[str, str], list[object]] = {}
    for value in _candidates(field):
        groups.setdefault(_probe(field.name, value, scheduler, preset), []).append(value)
    lines = []
    for verdict in ("accepted", "adjusted", "refused"):
        found = [(detail, values) for (v, detail), values in groups.items() if v == verdict]
        if verdict == "refused" and found:
            lines.append(
                "refused " + ", ".join(f"{_runs(values)} ({detail})" for detail, values in found)
            )
        for detail, values in found if verdict != "refused" else ():
            lines.append(f"{verdict} {_runs(values)} {detail}".strip())
    return lines


@contextlib.contextmanager
def _recording_checks() -> Iterator[list[tuple[str, str]]]:
    """Record every ``Violations.check`` (field, limit) made in the block, passing or not."""
    checks: list[tuple[str, str]] = []
    original = Violations.check

    def check(
        self: Violations, ok: bool, field: str, value: object, limit: str, message: str
    ) -> None:
        checks.append((field, limit))
        original(self, ok, field, value, limit, message)

    with mock.patch.object(Violations, "check", check):
        yield checks


def _rules(scheduler: str, preset: str, problem: MatmulProblem) -> list[tuple[str, str]]:
    """The (field, limit) of every check the scheduler makes validating *problem*'s plan."""
    with _recording_checks() as checks:
        try:
            _plan(problem, scheduler, preset)
        except MatmulError:  # the scheduler does not take this problem
            return []
    return list(dict.fromkeys(checks))


def _problem_line(problem: MatmulProblem) -> str:
    return f"`{problem.describe()}`"


def section_accepted() -> str:
    """Per field: meaning, type, default, sentinel, and per scheduler the default heuristic's
    choice, the probed verdicts and the rules it states."""
    problem = representative_problem()
    plans = {s: _plan(problem, s, p).params for s, p in TARGETS}
    rules = {s: _rules(s, p, problem) for s, p in TARGETS}
    out = [
        f"Planned for {_problem_line(problem)}: "
        + ", ".join(f"**{s}** on the `{p}` preset" for s, p in TARGETS)
        + f". Integers are probed {INT_PROBES.start}–{INT_PROBES.stop - 1}, cluster shapes "
        f"{', '.join(map(str, CLUSTER_PROBES))}, one field at a time over the default "
        "heuristic's plan; a refusal quotes the rule's limit as the scheduler states it. "
        "Limits with numbers hold for this problem and plan (shared memory, K tiles).",
        "",
    ]
    for field in attrs.fields(MatmulParams):
        if field.name not in FIELD_DOCS:
            raise UsageError(f"MatmulParams.{field.name} has no description in FIELD_DOCS")
        default = "none (required)" if field.default is attrs.NOTHING else _show(field.default)
        out.append(f"### `{field.name}`")
        out.append("")
        out.append(f"{FIELD_DOCS[field.name]} Type `{field.type}`, default {default}.")
        if field.name in SENTINELS:
            where = ", ".join(sorted(SENTINEL_SCHEDULERS[field.name]))
            out.append(f"Test sentinel: `{_show(SENTINELS[field.name])}` ({where}).")
        out.append("")
        for scheduler, preset in TARGETS:
            bits = [f"default heuristic: `{_show(getattr(plans[scheduler], field.name))}`"]
            bits += _verdicts(field, scheduler, preset)
            stated = [f"`{limit}`" for f, limit in rules[scheduler] if f == field.name]
            if stated:
                bits.append("rules: " + "; ".join(stated))
            out.append(f"- **{scheduler}** ({preset}): " + "; ".join(bits) + ".")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def section_rules() -> str:
    """Every check each scheduler makes, per representative problem it takes."""
    out = []
    for scheduler, preset in TARGETS:
        names = [name for name, p in RULE_PROBLEMS if _rules(scheduler, preset, p)]
        rows: dict[tuple[str, str], set[str]] = {}
        for name, problem in RULE_PROBLEMS:
            for rule in _rules(scheduler, preset, problem):
                rows.setdefault(rule, set()).add(name)
        out.append(f"**{scheduler}** ({preset}; `plugins/{scheduler}/limits.py`):")
        out.append("")
        out.append("| field | limit | " + " | ".join(names) + " |")
        out.append("|---|---|" + "---|" * len(names))
        for (field, limit), seen in rows.items():
            marks = " | ".join("✓" if n in seen else "" for n in names)
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


def section_receives() -> str:
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


def section_sentinels() -> str:
    """``mp.testing.SENTINELS``: a legal value per field that the defaults never choose."""
    out = ["| field | sentinel | legal on |", "|---|---|---|"]
    for name, value in SENTINELS.items():
        shown = value.as_tuple() if isinstance(value, TileShape) else _show(value)
        where = ", ".join(sorted(SENTINEL_SCHEDULERS[name]))
        out.append(f"| `{name}` | `{shown}` | {where} |")
    return "\n".join(out) + "\n"


SECTIONS: Final[dict[str, Callable[[], str]]] = {
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
def _section(name: str) -> str:
    """The text of section *name* (the code cannot change while a process runs)."""
    return SECTIONS[name]()


def refresh(text: str) -> str:
    """*text* with every generated section rewritten; each of ``SECTIONS`` must be there once.

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
    return _BLOCK.sub(lambda m: f"{m.group(1)}\n{_section(m.group('name'))}\n{m.group(4)}", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Refresh the generated sections of a page in place (or, with ``--check``, compare)."""
    parser = argparse.ArgumentParser(prog="python -m mmaplug.plugin_reference")
    parser.add_argument("page", type=Path, help="docs/plugin-reference.md")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = args.page.read_text()
    fresh = refresh(text)
    if args.check:
        if fresh != text:
            print(f"{args.page} is stale: python -m mmaplug.plugin_reference {args.page}")
            return 1
        return 0
    if fresh != text:
        args.page.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
