"""Issues 24 and 25's kernel targets as data, and their verdict on measured rows.

``mmaplug targets`` times every target's problems once (``mmaplug bench --corpus ... --graph``'s
rows: CUDA-graph replays, ours beside torch in the same run) and prints one table; ``--rows``
judges rows saved by ``--json`` (or by ``mmaplug bench --json --graph``) without a GPU. Each
target is measured on the warm replays, as the issues measured their anchors; the cold ones
(operands past L2) are shown beside them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from mmaplug.tune.corpus import BUILTIN, LLAMA_WEIGHTS, TuneProblem, shaped

__all__ = ["TARGETS", "Target", "Verdict", "judge", "markdown", "problems"]

#: What a target reads off a row: graph replays, ours against torch's time (cuBLAS, cuBLASLt),
#: our TF/s, our TB/s (the least bytes a call moves), or our fused time over our bare twin's.
MEASURES: Final = ("ratio", "tflops", "tbps", "cost")
_UNITS: Final = {"ratio": "x", "tflops": " TF/s", "tbps": " TB/s", "cost": "x bare"}
#: Decode problems: weights of at least 16 Mi elements (the issue's N·K >= 16 M).
DECODE_MIN_WEIGHT: Final = 16 << 20


@attrs.frozen(kw_only=True)
class Target:
    """One target: every problem's *measure* at least *each* (at most, for ``cost``), and their
    geometric mean at least *mean*."""

    issue: int
    text: str
    problems: tuple[TuneProblem, ...]
    measure: str = attrs.field(validator=attrs.validators.in_(MEASURES))
    each: float | None = None
    mean: float | None = None


@attrs.frozen(kw_only=True)
class Verdict:
    """A target against the rows: its values by problem, what was not measured, what was
    wrong (its output failed the float64 check, so it was not timed), what falls outside, and
    whether it is met (every problem measured and within bounds)."""

    target: Target
    values: Mapping[TuneProblem, float]
    cold: Mapping[TuneProblem, float]
    missing: tuple[TuneProblem, ...]
    failing: tuple[TuneProblem, ...]
    wrong: tuple[TuneProblem, ...] = ()

    @property
    def mean(self) -> float | None:
        """The geometric mean of the values (None without any)."""
        if not self.values:
            return None
        return math.exp(sum(math.log(v) for v in self.values.values()) / len(self.values))

    @property
    def met(self) -> bool:
        """Every problem measured, none failing, and the mean within its bound."""
        mean_ok = self.target.mean is None or (self.mean or 0.0) >= self.target.mean
        return not self.missing and not self.failing and not self.wrong and mean_ok


def _fused_twins(problems: Iterable[TuneProblem]) -> tuple[TuneProblem, ...]:
    """Each fused problem and its bare twin (epilogue ``none``), which ``cost`` divides by."""
    return tuple(p for f in problems for p in (f, attrs.evolve(f, epilogue="none")))


def _deep_k(p: TuneProblem) -> bool:
    """K at least 4 times the larger of M and N: where the default heuristic starts splitting K
    (its ``deep_k``; core imports no heuristic, so the bound is stated here as the issue's
    class of problems)."""
    return p.k >= 4 * max(p.m, p.n)


_LLAMA_4096: Final = [(4096, n, k) for n, k in dict.fromkeys(LLAMA_WEIGHTS.values())]
_FP8_LARGE: Final = list(dict.fromkeys([(4096, 4096, 4096), (8192, 8192, 8192),
                                        (2048, 14336, 5120), *_LLAMA_4096]))  # fmt: skip
_E4M3: Final = "float8_e4m3fn"
_DECODE: Final = tuple(
    p
    for p in shaped([(m, n, k) for m in (1, 2, 4, 8, 16) for n, k in LLAMA_WEIGHTS.values()],
            dtype="bfloat16")
    + shaped([(m, 4096, 4096) for m in (1, 16)] + [(m, 8192, 8192) for m in (1, 16)],
              dtype="float16")
    + shaped([(m, n, k) for m in (1, 4, 8, 16)
               for n, k in (LLAMA_WEIGHTS["8b_o"], LLAMA_WEIGHTS["8b_gate_up"],
                            LLAMA_WEIGHTS["70b_o"])], dtype=_E4M3, scale="tensor")
    if p.n * p.k >= DECODE_MIN_WEIGHT
)  # fmt: skip
_FP8_FUSED: Final = tuple(
    TuneProblem(m=4096, n=4096, k=4096, dtype=_E4M3, scale=s, epilogue="bias_gelu")
    for s in ("tensor", "row")
)
_SERVING: Final = tuple(p for p in BUILTIN["serving"] if p not in _DECODE)
_FEW_ROWS: Final = tuple(
    dict.fromkeys(
        _DECODE
        + shaped([(m, n, k) for m in (32, 64) for n, k in LLAMA_WEIGHTS.values()], dtype="bfloat16")
        + tuple(p for p in _SERVING if p.m <= 64 or _deep_k(p))
    )
)
_LARGE: Final = tuple(
    p
    for p in dict.fromkeys(_SERVING + BUILTIN["llm"] + BUILTIN["odd"])
    if p.m > 64 and not _deep_k(p)
)

TARGETS: Final = (
    Target(issue=24, text="FP8 per tensor >= 1.0x cuBLASLt at 4096³, 8192³ and the llama shapes",
           problems=shaped(_FP8_LARGE, dtype=_E4M3, scale="tensor"), measure="ratio", each=1.0),
    Target(issue=24, text="FP8 per row >= 1.0x cuBLASLt at 4096³, 8192³ and the llama shapes",
           problems=shaped(_FP8_LARGE, dtype=_E4M3, scale="row"), measure="ratio", each=1.0),
    Target(issue=24, text="FP8 at M = 128 >= 0.9x cuBLASLt",
           problems=shaped([(128, 4096, 4096)], dtype=_E4M3, scale="tensor")
           + shaped([(128, 4096, 4096)], dtype=_E4M3, scale="row"), measure="ratio", each=0.9),
    Target(issue=24, text="block-scaled FP8 >= 1,200 TF/s at 8192³",
           problems=shaped([(8192, 8192, 8192)], dtype=_E4M3, scale="block"),
           measure="tflops", each=1200.0),
    Target(issue=24, text="block-scaled FP8 >= 1,000 TF/s at the llama shapes",
           problems=shaped([(2048, 14336, 5120), *_LLAMA_4096], dtype=_E4M3, scale="block"),
           measure="tflops", each=1000.0),
    Target(issue=24, text="FP8 + bias + GELU <= 1.03x our bare FP8 (4096³)",
           problems=_fused_twins(_FP8_FUSED), measure="cost", each=1.03),
    Target(issue=24, text="FP8 + bias + GELU faster than torch._scaled_mm + torch's GELU",
           problems=_FP8_FUSED, measure="ratio", each=1.0),
    Target(issue=25, text="decode (M <= 16, N·K >= 16 Mi) >= 3.85 TB/s",
           problems=_DECODE, measure="tbps", each=3.85),
    Target(issue=25, text="decode (M <= 16, N·K >= 16 Mi) >= 1.0x cuBLAS",
           problems=_DECODE, measure="ratio", each=1.0),
    Target(issue=25, text="M <= 64 and deep K: >= 0.95x cuBLAS each, geometric mean >= 1.0",
           problems=_FEW_ROWS, measure="ratio", each=0.95, mean=1.0),
    Target(issue=25, text="large problems: geometric mean >= 1.0x, none < 0.93",
           problems=_LARGE, measure="ratio", each=0.93, mean=1.0),
    Target(issue=25, text="bias + GELU <= 1.02x our bare kernel at 4096³ (16-bit)",
           problems=_fused_twins(TuneProblem(m=4096, n=4096, k=4096, dtype=d, epilogue="bias_gelu")
                                 for d in ("bfloat16", "float16")),
           measure="cost", each=1.02),
)  # fmt: skip


def problems(targets: Sequence[Target] = TARGETS) -> list[TuneProblem]:
    """Every problem the *targets* read, each once, in order."""
    return list(dict.fromkeys(p for t in targets for p in t.problems))


def _value(target: Target, p: TuneProblem, rows: Mapping[str, Mapping[str, Any]],
           cold: bool) -> float | None:  # fmt: skip
    """*target*'s measure of *p* in *rows* (warm replays, or *cold*); None where not measured."""
    time = "ours_cold_us" if cold else "ours_graph_us"
    row = rows.get(p.key, {})
    us = row.get(time)
    if us is None:
        return None
    if target.measure == "ratio":
        return row.get("cold_ratio" if cold else "graph_ratio")
    if target.measure == "tflops":
        return p.flops / us / 1e6
    if target.measure == "tbps":
        return row["bytes"] / us / 1e6
    bare = rows.get(attrs.evolve(p, epilogue="none").key, {})
    bare_us = bare.get(time)
    return us / bare_us if bare_us else None


def judge(targets: Sequence[Target], rows: Iterable[Mapping[str, Any]]) -> list[Verdict]:
    """Each target against *rows* (``run_corpus``'s, by problem key; a row whose output failed
    the float64 check carries no times: its problem is wrong, and a fused cost over it is not
    measured)."""
    by_key = {r["problem"]: r for r in rows}
    verdicts = []
    for t in targets:
        judged = [p for p in t.problems if t.measure != "cost" or p.epilogue != "none"]
        wrong = [p for p in t.problems if p.key in by_key and "ours_ms" not in by_key[p.key]]
        values: dict[TuneProblem, float] = {}
        cold: dict[TuneProblem, float] = {}
        missing = []
        for p in judged:
            value = _value(t, p, by_key, cold=False)
            if value is None:
                missing += [] if p in wrong else [p]
                continue
            values[p] = value
            if (c := _value(t, p, by_key, cold=True)) is not None:
                cold[p] = c
        if t.each is None:
            failing = []
        elif t.measure == "cost":
            failing = [k for k, v in values.items() if v > t.each]
        else:
            failing = [k for k, v in values.items() if v < t.each]
        verdicts.append(Verdict(target=t, values=values, cold=cold, missing=tuple(missing),
                                failing=tuple(failing), wrong=tuple(wrong)))  # fmt: skip
    return verdicts


_SHORT: Final = {"float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3",
                 "float8_e5m2": "e5m2"}  # fmt: skip


def _short(p: TuneProblem) -> str:
    """*p* in a few words: ``bf16 16×8192×8192``, ``e4m3 per row bias_gelu 4096×4096×4096``."""
    parts = [_SHORT[p.dtype], *([f"per {p.scale}"] if p.scale else []),
             *([p.layout] if p.layout != "TN" else []),
             *([p.epilogue] if p.epilogue != "none" else []),
             f"{f'{p.batch} × ' if p.batch > 1 else ''}{p.m}×{p.n}×{p.k}"]  # fmt: skip
    return " ".join(parts)


def _fmt(value: float, measure: str, *, unit: bool = True) -> str:
    """*value* of *measure* as the table writes it: ratios to three places (0.996 is under
    1.0), TF/s whole, TB/s to two places."""
    places = {"ratio": 3, "cost": 3, "tflops": 0, "tbps": 2}[measure]
    return f"{value:,.{places}f}{_UNITS[measure] if unit else ''}"


def _named(
    problems: Sequence[TuneProblem], values: Mapping[TuneProblem, float], measure: str,
    most: int = 4,
) -> str:  # fmt: skip
    shown = ", ".join(f"{_short(p)} {_fmt(values[p], measure)}" for p in problems[:most])
    return shown + (f" and {len(problems) - most} more" if len(problems) > most else "")


#: the GPU the targets are set on (issues 24 and 25: "H200, same run")
TARGET_GPU: Final = "H200"
#: HBM bandwidth by GPU name (TB/s, the vendors' data sheets), so that a TB/s row measured on
#: another GPU than the H200 also reads as a share of the peak its own memory has
HBM_PEAK_TBPS: Final = {"H200": 4.8, "H100 80GB HBM3": 3.35, "H100 NVL": 3.9}


def _hbm_peak(device: str) -> tuple[str, float] | None:
    """The GPU of *device* (``torch.cuda.get_device_name``'s text) and its HBM peak in TB/s,
    where ``HBM_PEAK_TBPS`` knows it."""
    return next(((name, peak) for name, peak in HBM_PEAK_TBPS.items() if name in device), None)


def _worst(v: Verdict) -> TuneProblem:
    """The problem of *v* furthest from its target (the highest cost, else the lowest value)."""
    return (max if v.target.measure == "cost" else min)(v.values, key=v.values.__getitem__)


def _before(v: Verdict, old: Verdict | None) -> str:
    """*old*'s worst value and mean beside *v*'s: where the worst problem is another, named."""
    if old is None or not old.values:
        return "not measured"
    measure, worst = v.target.measure, _worst(old)
    named = "" if v.values and _worst(v) == worst else f" ({_short(worst)})"
    mean = f", mean {_fmt(old.mean or 0.0, measure)}" if len(old.values) > 1 else ""
    return f"worst {_fmt(old.values[worst], measure)}{named}{mean}; {'met' if old.met else 'no'}"


def markdown(
    verdicts: Sequence[Verdict], device: str = "", before: Sequence[Verdict] = (),
    before_device: str = "",
) -> str:  # fmt: skip
    """The targets table: issue, target, what was measured (the worst value, the mean, the
    failing and missing problems), and whether it is met; under a line naming *device*, the
    GPU that measured it, where known (a table of another GPU than ``TARGET_GPU`` says so).
    With *before* (the same targets judged on earlier rows, measured on *before_device*), a
    column of their worst value and mean."""
    lines = []
    if device:
        other = "" if TARGET_GPU in device else f" (the targets are set on the {TARGET_GPU})"
        lines += [f"Measured on {device}{other}.", ""]
    old = {v.target.text: v for v in before}
    extra = f" before{f' ({before_device})' if before_device else ''} |" if before else ""
    lines += [f"| issue | target | measured (graph replays; cold: operands past L2) | met |{extra}",
              f"|---|---|---|---|{'---|' if before else ''}"]  # fmt: skip
    for v in verdicts:
        t = v.target
        parts = []
        if v.values:
            worst = _worst(v)
            count = f"{len(v.values)} problem{'s' if len(v.values) > 1 else ''}"
            parts.append(f"{count}; worst {_short(worst)} {_fmt(v.values[worst], t.measure)}")
            if len(v.values) > 1:
                parts.append(f"geometric mean {_fmt(v.mean or 0.0, t.measure)}")
            if t.measure == "tbps" and (peak := _hbm_peak(device)):
                parts.append(f"{100 * (v.mean or 0.0) / peak[1]:.0f}% of the {peak[0]}'s "
                             f"{peak[1]:g} TB/s HBM")  # fmt: skip
            if v.cold:
                low, high = min(v.cold.values()), max(v.cold.values())
                cold = _fmt(low, t.measure) if len(v.cold) == 1 else (
                    f"{_fmt(low, t.measure, unit=False)}–{_fmt(high, t.measure)}")  # fmt: skip
                parts.append(f"cold {cold}")
        if v.failing:
            parts.append(f"outside: {_named(v.failing, v.values, t.measure)}")
        if v.wrong:
            parts.append(f"WRONG output (not timed): {', '.join(_short(p) for p in v.wrong)}")
        if v.missing:
            parts.append(f"not measured: {', '.join(_short(p) for p in v.missing)}")
        then = f" {_before(v, old.get(t.text))} |" if before else ""
        lines.append(
            f"| {t.issue} | {t.text} | {'; '.join(parts)} | {'yes' if v.met else 'no'} |{then}"
        )
    return "\n".join(lines)
