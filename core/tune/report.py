"""``mmaplug report`` and ``mmaplug diff``: heuristics' decisions against the tuning database.

A heuristic is named by a *plugin set*: ``default`` (the built-in heuristic alone), the name of
an installed heuristic plugin (it answers first, the default after it), or a ``path/to/file.py``
holding a plugin module (another version of a plugin, registered under the file's stem).

Plugin sets plan while ``$MMAPLUG_TUNING_DB`` names the report's database, so a heuristic that
reads it (the tuned table) answers from the rows the report compares with. Leave-one-out
(``NAME/loo`` columns): for each problem, it names a copy without that problem's rows instead,
so the heuristic answers as it would for a problem it never measured.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from mmaplug.errors import UsageError
from mmaplug.hooks.manager import make_plugin_manager
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.records import plugins_record
from mmaplug.tune import db, work
from mmaplug.tune.candidates import scheduler_names
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.sweep import heuristic_choice, planned_choice

LOO: Final = "/loo"  # the suffix of a leave-one-out column
ANY: Final = ""  # a plugin set without an @scheduler suffix: whichever scheduler plans it
Choice = tuple[str, MatmulParams] | None  # (scheduler, params) a plugin set chooses


#: Rows (candidates measured ok) a problem needs before its ratio compares the choice with
#: anything: with one, the best is the choice itself wherever the choice was measured.
COMPARED_ROWS: Final = 2


def installed_heuristics() -> list[str]:
    """Names of installed (entry-point) plugins that answer ``mmaplug_matmul_params``."""
    record = plugins_record(make_plugin_manager(block=["ampere"]))
    return [
        p["name"]
        for p in record["plugins"]
        if p["distribution"] and "mmaplug_matmul_params" in p["hooks"]
    ]


def split_set(plugin_set: str) -> tuple[str, str]:
    """(*plugin_set* without its ``@scheduler`` suffix, the scheduler whose decisions it names;
    ``ANY`` without a suffix: the set's plan with every scheduler, as a user's call gets it)."""
    base, at, scheduler = plugin_set.rpartition("@")
    if not at:
        return plugin_set, ANY
    if scheduler not in (names := scheduler_names()):
        raise UsageError(
            f"plugin set {plugin_set!r} names scheduler {scheduler!r}; end it with "
            f"{' or '.join('@' + s for s in names)}, or with none (every scheduler)"
        )
    return base, scheduler


def label(plugin_set: str) -> str:
    """A plugin set's column name: a plugin file's module name (a package's ``__init__.py``:
    the package's), else the set as given; an ``@scheduler`` suffix stays."""
    base, at, scheduler = plugin_set.rpartition("@") if "@" in plugin_set else ("", "", "")
    base = base or plugin_set
    if base.endswith(".py"):
        path = Path(base)
        base = path.parent.name if path.stem == "__init__" else path.stem
    return f"{base}{at}{scheduler}"


def manager(plugin_set: str) -> Any:
    """The plugin manager whose heuristic is *plugin_set*; with an ``@scheduler`` suffix the
    other schedulers blocked (as in tuning)."""
    name, scheduler = split_set(plugin_set)
    block = work.others(scheduler) if scheduler != ANY else []
    if name == "default":
        return make_plugin_manager(block=block, load_entrypoints=False)
    if name.endswith(".py"):
        path = Path(name)
        spec = importlib.util.spec_from_file_location(f"mmaplug_diff_{label(name)}", path)
        if spec is None or spec.loader is None or not path.is_file():
            raise UsageError(f"plugin file {name!r} does not exist")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as error:  # the user's file: one line, as explain --fusion says it
            raise UsageError(
                f"plugin file {name!r} failed to run: {type(error).__name__}: {error}"
            ) from None
        return make_plugin_manager(
            block=block, load_entrypoints=False, plugins=[module], heuristic=module.__name__
        )
    names = installed_heuristics()
    if name not in names:
        raise UsageError(
            f"heuristic {name!r} is not installed; installed: "
            f"{', '.join(names) or '(none)'}; or give 'default' or a .py file"
        )
    return make_plugin_manager(block=block, heuristic=name)


def choose(problem: TuneProblem, device: Device, plugin_set: str, pm: Any) -> Choice:
    """(scheduler, params) that *pm* (the manager of *plugin_set*) chooses for *problem* on
    the set's scheduler, or on any without a suffix; None when no such scheduler plans it."""
    scheduler = split_set(plugin_set)[1]
    if scheduler == ANY:
        return planned_choice(problem, device, pm)
    params = heuristic_choice(problem, device, pm, scheduler)
    return None if params is None else (scheduler, params)


def _ratio(best: float | None, time_ms: float | None) -> float | None:
    """best / time_ms; None unless both are positive times (a row written by hand may not be)."""
    if isinstance(best, float | int) and isinstance(time_ms, float | int):
        return best / time_ms if best > 0 and time_ms > 0 else None
    return None


def geomean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the known (positive) values (None when there are none)."""
    known = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, known)) / len(known)) if known else None


@contextlib.contextmanager
def tuning_db(path: str) -> Iterator[None]:
    """Meanwhile ``$MMAPLUG_TUNING_DB`` names *path*: heuristics that read the tuning database
    (the tuned table) read that file."""
    saved = os.environ.get("MMAPLUG_TUNING_DB")
    os.environ["MMAPLUG_TUNING_DB"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MMAPLUG_TUNING_DB", None)
        else:
            os.environ["MMAPLUG_TUNING_DB"] = saved


def database_file(conn: sqlite3.Connection) -> str:
    """The file *conn* has open."""
    return str(next(r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"))


def _labels(sets: Sequence[str]) -> dict[str, str]:
    """Each set's column name (the sets as given when two would share one)."""
    names = {s: label(s) for s in sets}
    return names if len(set(names.values())) == len(names) else {s: s for s in sets}


def columns(sets: Sequence[str], leave_one_out: bool) -> list[str]:
    """The report's columns: each plugin set's :func:`label`, then (*leave_one_out*)
    ``NAME/loo`` for each set but the default's (it reads no database)."""
    labels = _labels(sets)
    loo = [n for s, n in labels.items() if split_set(s)[0] != "default" and leave_one_out]
    return [*labels.values(), *(f"{n}{LOO}" for n in loo)]


def choices(
    conn: sqlite3.Connection,
    problems: Sequence[TuneProblem],
    device: Device,
    sets: Sequence[str],
    *,
    leave_one_out: bool = False,
) -> dict[str, dict[str, Choice]]:
    """Per problem key and column (:func:`columns`): the plugin set's :func:`choose`."""
    labels = _labels(sets)
    managers = {name: (plugin_set, manager(plugin_set)) for plugin_set, name in labels.items()}
    found: dict[str, dict[str, Choice]] = {}
    with tempfile.TemporaryDirectory(prefix="mmaplug-loo-") as folder:
        for i, problem in enumerate(problems):
            with tuning_db(database_file(conn)):
                found[problem.key] = {
                    name: choose(problem, device, *pair) for name, pair in managers.items()
                }
            if not leave_one_out or len(managers) == 1:
                continue
            path = Path(folder) / f"{i}.sqlite"
            db.copy_without(conn, path, problem.key)
            with tuning_db(str(path)):
                for name, pair in managers.items():
                    if split_set(pair[0])[0] != "default":
                        found[problem.key][f"{name}{LOO}"] = choose(problem, device, *pair)
    return found


def report(
    conn: sqlite3.Connection,
    problems: Sequence[TuneProblem],
    device: Device,
    sets: Sequence[str],
    *,
    leave_one_out: bool = False,
) -> dict[str, Any]:
    """Per problem: the best time in the database (over ``ok_rows`` measured candidates) and
    each column's choice, its time and the best time over it (1.0: the heuristic found the
    best measured kernel)."""
    key = db.device_key(device)
    cols = columns(sets, leave_one_out)
    chosen = choices(conn, problems, device, sets, leave_one_out=leave_one_out)
    rows = []
    for problem in problems:
        ok = db.rows(conn, problem_key=problem.key, device=key, status="ok")
        best_ms = ok[0]["time_ms"] if ok else None
        entry: dict[str, Any] = {
            "problem": problem.key,
            "best_ms": best_ms,
            "best_params": ok[0]["params_name"] if ok else None,
            "ok_rows": len(ok),
        }
        for col in cols:
            choice = chosen[problem.key][col]
            params = choice[1] if choice else None
            ms = db.time_of(conn, problem.key, key, choice[1].name, choice[0]) if choice else None
            entry[col] = {
                "scheduler": choice[0] if choice else None,
                "params": params.name if params else None,
                "time_ms": ms,
                "of_best": _ratio(best_ms, ms),
            }
        rows.append(entry)
    summary = {col: geomean([r[col]["of_best"] for r in rows]) for col in cols}
    # a problem whose one measured row is the choice itself says 1.0 of nothing (a sweep cut
    # short): the means over the problems with a candidate beside the choice say how close it is
    compared = [r for r in rows if r["ok_rows"] >= COMPARED_ROWS]
    return {
        "device": key,
        "columns": cols,
        "rows": rows,
        "geomean_of_best": summary,
        "compared_problems": len(compared),
        "geomean_of_best_compared": {
            col: geomean([r[col]["of_best"] for r in compared]) for col in cols
        },
    }


def format_report(result: dict[str, Any], sets: Sequence[str]) -> str:
    """The report as a table: per problem and plugin set, the fraction of the best time."""
    width = {s: max(14, len(s)) + 2 for s in sets}
    head = f"{'problem':<44}{'rows':>5}{'best ms':>10}" + "".join(f"{s:>{width[s]}}" for s in sets)
    lines = [
        f"device {result['device']}; rows: candidates measured ok; each heuristic column: "
        "best time / the time of its choice",
        head,
    ]
    for r in result["rows"]:
        best = f"{r['best_ms']:.4f}" if r["best_ms"] else "-"
        cells = "".join(f"{_fmt(r[s]['of_best']):>{width[s]}}" for s in sets)
        lines.append(f"{r['problem']:<44}{r['ok_rows']:>5}{best:>10}{cells}")
    means = "".join(f"{_fmt(result['geomean_of_best'][s]):>{width[s]}}" for s in sets)
    lines.append(f"{'geometric mean':<44}{'':>15}{means}")
    measured = sum(1 for r in result["rows"] if r["ok_rows"])
    if result["compared_problems"] < measured:  # some bests rest on one row
        compared = result["geomean_of_best_compared"]
        means = "".join(f"{_fmt(compared[s]):>{width[s]}}" for s in sets)
        name = f"... of the {result['compared_problems']} with {COMPARED_ROWS}+ rows"
        lines.append(f"{name:<44}{'':>15}{means}")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return f"{value:.3f}" if value else "not measured"


def plot(result: dict[str, Any], sets: Sequence[str], path: str) -> None:
    """Write ``plot_figure`` of *result* to the PNG *path*, trimmed to what it draws."""
    import matplotlib.pyplot as plt

    fig = plot_figure(result, sets)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_figure(result: dict[str, Any], sets: Sequence[str]) -> Any:
    """Horizontal bar chart of each plugin set's fraction of the best time, one group of bars
    per problem (a matplotlib Figure). Problems read down the y axis, so their names never
    overlap; the figure grows with their number, and the legend sits outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    count = max(1, len(sets))
    bar = 0.8 / count  # one problem's group of bars spans 0.8 of its row
    per_row = 0.16 * count + 0.12  # inches: readable bars and one label line per problem
    fig, ax = plt.subplots(figsize=(9.0, 1.4 + per_row * max(1, len(rows))))
    for i, name in enumerate(sets):
        ys = [j - 0.4 + bar * (i + 0.5) for j in range(len(rows))]
        values = [r[name]["of_best"] or 0.0 for r in rows]
        ax.barh(ys, values, bar, label=name)
        for y, r in zip(ys, rows, strict=True):
            if not r[name]["of_best"]:
                ax.text(0.01, y, "not measured", va="center", fontsize=6, color="dimgray")
    ax.set_yticks(range(len(rows)), [r["problem"] for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first problem on top, as in the table
    ax.axvline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("best time / the time of the heuristic's choice (1.0: the best measured)")
    ax.set_title(f"{result['device']}: heuristic quality against the tuning database")
    ax.legend(title="plugin set", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def diff(
    conn: sqlite3.Connection,
    problems: Sequence[TuneProblem],
    device: Device,
    a: str,
    b: str,
) -> dict[str, Any]:
    """Where plugin sets *a* and *b* decide differently, and the time of each from the
    database (speedup = a's time / b's time; None where a choice was not measured)."""
    pa, pb = manager(a), manager(b)
    rows: list[dict[str, Any]] = []
    for problem in problems:
        with tuning_db(database_file(conn)):
            choice_a, choice_b = choose(problem, device, a, pa), choose(problem, device, b, pb)
        ca, cb = (c[1] if c else None for c in (choice_a, choice_b))
        na, nb = (c.name if c else None for c in (ca, cb))
        key = db.device_key(device)
        ta, tb = (
            db.time_of(conn, problem.key, key, c[1].name, c[0]) if c else None
            for c in (choice_a, choice_b)
        )
        changed = [
            f
            for f in (ca.as_dict() if ca else {})
            if cb is None or getattr(ca, f) != getattr(cb, f)
        ]
        rows.append(
            {
                "problem": problem.key,
                "a": na,
                "b": nb,
                "changed": changed,
                "a_ms": ta,
                "b_ms": tb,
                "speedup": _ratio(ta, tb),
            }
        )
    moved = [r for r in rows if r["a"] != r["b"]]
    return {
        "device": db.device_key(device),
        "a": a,
        "b": b,
        "rows": rows,
        "changed": len(moved),
        "geomean_speedup": geomean([r["speedup"] for r in moved]),
    }


def format_diff(result: dict[str, Any]) -> str:
    """The changed decisions, one per line, then the count and the geometric-mean speedup."""
    lines = [f"a = {result['a']}, b = {result['b']} on {result['device']}"]
    for r in result["rows"]:
        if r["a"] == r["b"]:
            continue
        speed = f"{r['speedup']:.3f}x" if r["speedup"] else "time not measured"
        lines.append(
            f"{r['problem']}: {', '.join(r['changed']) or 'scheduler'} changed; "
            f"b is {speed} a\n  a: {r['a']}\n  b: {r['b']}"
        )
    mean = result["geomean_speedup"]
    lines.append(
        f"{result['changed']} of {len(result['rows'])} decisions changed; geometric "
        f"mean speedup of b over a: {f'{mean:.3f}x' if mean else 'not measured'}"
    )
    return "\n".join(lines)
