"""The tuned-table heuristic: ``mmaplug_matmul_params`` answered from the tuning database.

For a problem on a device and scheduler the database has measured, the fastest ``ok`` row of
the same problem answers (exact match). Otherwise the nearest measured problem of the same
dtype, layout, epilogue and batch answers, by log-space distance over m, n and k, when its
params are legal for this problem (the scheduler's limits decide) and it lies within
``MAX_DISTANCE``. Otherwise the plugin returns None and the default heuristic answers.
The database is ``$MMAPLUG_TUNING_DB``, else ``tuning.sqlite`` in mmaplug's cache directory.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from typing import Any, Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.markers import hookimpl
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams
from mmaplug.tune import db

__all__ = ["MAX_DISTANCE", "Table", "epilogue_of", "mmaplug_matmul_params", "table"]

MAX_DISTANCE: Final = math.log(4.0)  # e.g. one extent 4x off, or three about 2.2x off each
_EPILOGUES: Final = {
    (): "none",
    ("cast",): "none",
    ("add", "gelu"): "bias_gelu",
    ("add", "gelu", "cast"): "bias_gelu",
}


def epilogue_of(problem: MatmulProblem) -> str | None:
    """The corpus epilogue name of *problem*'s epilogue ops (None: not one the corpus has)."""
    return _EPILOGUES.get(tuple(problem.epilogue_ops))


class Table:
    """The best ``ok`` row of every measured problem, device and scheduler in one database
    file, read once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        best: dict[tuple[str, str, str], dict[str, Any]] = {}
        if path.is_file():
            conn = db.connect(path, create=False)
            try:
                for r in db.rows(conn, status="ok"):  # fastest first per problem and device
                    best.setdefault((r["problem_key"], r["device"], r["scheduler"]), r)
            finally:
                conn.close()
        self.best = list(best.values())

    def lookup(self, problem: MatmulProblem, device: Device, scheduler: str) -> MatmulParams | None:
        """The exact match's params, else the nearest legal one's, else None."""
        epilogue = epilogue_of(problem)
        same = [
            r
            for r in self.best
            if (r["device"], r["scheduler"], r["dtype"], r["layout"], r["epilogue"], r["batch"])
            == (
                db.device_key(device),
                scheduler,
                problem.operand_dtype.name,
                problem.layout.value,
                epilogue,
                problem.batch,
            )
        ]
        if epilogue is None or not same:
            return None
        for r in same:
            if (r["m"], r["n"], r["k"]) == (problem.m, problem.n, problem.k):
                return MatmulParams(**r["params"])

        def distance(r: dict[str, Any]) -> float:
            return math.dist(
                [math.log(problem.m), math.log(problem.n), math.log(problem.k)],
                [math.log(r["m"]), math.log(r["n"]), math.log(r["k"])],
            )

        for r in sorted(same, key=lambda r: (distance(r), r["problem_key"])):
            if distance(r) > MAX_DISTANCE:
                return None
            params = MatmulParams(**r["params"])
            if not _violations(params, problem, device, scheduler):
                return params
        return None


def _violations(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Any:
    """The scheduler's own limits on *params* (a scheduler without a limits module: refuse)."""
    try:
        limits = importlib.import_module(f"mmaplug.plugins.{scheduler}.limits")
    except ImportError:
        return ["no limits module"]
    return limits.violations(params, problem, device)


_tables: dict[tuple[str, float], Table] = {}


def table() -> Table:
    """The database's table, re-read when the file changes."""
    path = db.default_path()
    stamp = path.stat().st_mtime if path.is_file() else 0.0
    wal = Path(f"{path}-wal")
    stamp += wal.stat().st_mtime if wal.is_file() else 0.0
    key = (os.fspath(path), stamp)
    if key not in _tables:
        _tables.clear()
        _tables[key] = Table(path)
    return _tables[key]


@hookimpl
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """The tuned params of *problem* (exact, else nearest measured); None defers to the default."""
    return table().lookup(problem, device, scheduler)
