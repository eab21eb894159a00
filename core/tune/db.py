"""The tuning database: one SQLite file (WAL, busy timeout) that many workers write at once.

Every measurement is a row: the problem, the device, the scheduler, the full params (JSON), the
plugin set and library versions that built it, the median time, TFLOP/s and a status (``ok``,
``wrong``, ``error``, ``crash``, ``timeout``) with the error text. ``PRAGMA user_version`` holds
the schema version; opening an older file runs the missing ``MIGRATIONS`` in order.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from mmaplug import env
from mmaplug.cuda.cache import cache_dir
from mmaplug.errors import UsageError
from mmaplug.planning.device import PRESET_NAMES, Device

STATUSES: Final = ("ok", "wrong", "error", "crash", "timeout")
MIGRATIONS: Final = (
    # 1: the measurements
    """
    CREATE TABLE measurements (
        id INTEGER PRIMARY KEY,
        problem_key TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
        batch INTEGER NOT NULL, dtype TEXT NOT NULL, layout TEXT NOT NULL, epilogue TEXT NOT NULL,
        device TEXT NOT NULL, scheduler TEXT NOT NULL, params_name TEXT NOT NULL,
        params TEXT NOT NULL, plugins TEXT NOT NULL, versions TEXT NOT NULL,
        time_ms REAL, tflops REAL, status TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL
    );
    CREATE UNIQUE INDEX measured ON measurements (problem_key, device, scheduler, params_name);
    """,
    # 2: which host and worker measured a row (several GPUs, several hosts)
    """
    ALTER TABLE measurements ADD COLUMN worker TEXT NOT NULL DEFAULT '';
    CREATE INDEX by_problem ON measurements (device, dtype, layout, epilogue, status);
    """,
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
COLUMNS: Final = (
    "problem_key",
    "m",
    "n",
    "k",
    "batch",
    "dtype",
    "layout",
    "epilogue",
    "device",
    "scheduler",
    "params_name",
    "params",
    "plugins",
    "versions",
    "time_ms",
    "tflops",
    "status",
    "error",
    "created",
    "worker",
)


def device_key(device: Device) -> str:
    """The database's device name: the preset a GPU's name contains (``NVIDIA H200`` is
    ``h200``, as is the preset), else the name in lower case with dashes for spaces."""
    name = device.name.lower()
    found = [p for p in PRESET_NAMES if p in name]
    return found[0] if found else "-".join(name.split())


def default_path() -> Path:
    """``MMAPLUG_TUNING_DB``, else ``tuning.sqlite`` in the kernel cache directory."""
    return env.path("MMAPLUG_TUNING_DB") or cache_dir() / "tuning.sqlite"


def connect(path: str | Path, *, create: bool = True) -> sqlite3.Connection:
    """Open (and create or migrate) the database at *path*; rows come back as ``sqlite3.Row``.

    :raises UsageError: the file is missing (without *create*), not a database, or newer than
        this mmaplug.
    """
    path = Path(path)
    if not create and not path.is_file():
        raise UsageError(f"tuning database {str(path)!r} does not exist; run 'mmaplug tune' first")
    if not create:  # a reader changes nothing in a file that is no tuning database
        _check_ours(path)
    elif not path.exists():  # the user's own, as the cache directory it usually sits in
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    # check_same_thread: the runner's supervisor threads record through one connection,
    # one at a time (under the runner's lock)
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        _migrate(conn, path)
        conn.execute("SELECT * FROM measurements LIMIT 0")  # a schema number without the table
    except sqlite3.DatabaseError as error:
        conn.close()
        raise UsageError(f"{str(path)!r} is not an mmaplug tuning database: {error}") from None
    return conn


def _check_ours(path: Path) -> None:
    """Raise UsageError unless *path* is an mmaplug tuning database (looked at read-only)."""
    try:
        peek = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            found = peek.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'measurements'"
            ).fetchone()
        finally:
            peek.close()
    except sqlite3.DatabaseError as error:
        raise UsageError(f"{str(path)!r} is not an mmaplug tuning database: {error}") from None
    if found is None:
        raise UsageError(
            f"{str(path)!r} is not an mmaplug tuning database (it has no measurements table); "
            "'mmaplug tune --db' creates one"
        )


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others then see the version
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UsageError(
                f"tuning database {str(path)!r} has schema {version}; this mmaplug reads up to "
                f"{SCHEMA_VERSION}. Upgrade mmaplug or use another --db."
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def record(conn: sqlite3.Connection, row: Mapping[str, Any]) -> None:
    """Insert (or replace: a re-measurement) one measurement row of ``COLUMNS``."""
    values = {"error": "", "worker": "", "created": time.time(), "time_ms": None, "tflops": None}
    values.update(row)
    for key in ("params", "plugins", "versions"):
        if not isinstance(values[key], str):
            values[key] = json.dumps(values[key], sort_keys=True)
    if values["status"] not in STATUSES:
        raise UsageError(f"status {values['status']!r}; one of {', '.join(STATUSES)}")
    names = ", ".join(COLUMNS)
    marks = ", ".join(f":{c}" for c in COLUMNS)
    conn.execute(
        f"INSERT OR REPLACE INTO measurements ({names}) VALUES ({marks})",
        {c: values[c] for c in COLUMNS},
    )


def measured(conn: sqlite3.Connection, device: str) -> set[tuple[str, str, str]]:
    """(problem key, scheduler, params name) of every row on *device*, whatever its status."""
    rows = conn.execute(
        "SELECT problem_key, scheduler, params_name FROM measurements WHERE device = ?", (device,)
    )
    return {tuple(r) for r in rows}  # type: ignore[misc]


def rows(
    conn: sqlite3.Connection,
    *,
    problem_key: str | None = None,
    device: str | None = None,
    status: str | None = None,
    best: bool = False,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Rows matching every given filter, fastest first; *best*: the fastest ok row per problem
    and device."""
    where, args = [], []
    for column, value in (("problem_key", problem_key), ("device", device), ("status", status)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if best:
        where.append("status = 'ok'")
    sql = "SELECT * FROM measurements"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY problem_key, device, time_ms IS NULL, time_ms, params_name"
    found = [_plain(r) for r in conn.execute(sql, args)]
    if best:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for row in found:
            seen.setdefault((row["problem_key"], row["device"]), row)
        found = list(seen.values())
    return found[:limit] if limit is not None else found


def _plain(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("params", "plugins", "versions"):
        try:
            out[key] = json.loads(out[key])
        except (TypeError, ValueError, RecursionError) as error:
            raise UsageError(
                f"tuning database row {out.get('id')} has an unreadable {key} ({error}); it "
                "was not written by mmaplug tune, or is damaged (remove the row or the file)"
            ) from None
    return out


def time_of(
    conn: sqlite3.Connection,
    problem_key: str,
    device: str,
    params_name: str,
    scheduler: str | None = None,
) -> Any:
    """The ok time (ms) of *params_name* (of *scheduler*, when given) on the problem, or None
    when not measured ok."""
    found = conn.execute(
        "SELECT time_ms FROM measurements WHERE problem_key = ? AND device = ? AND "
        "params_name = ? AND scheduler = coalesce(?, scheduler) AND status = 'ok' "
        "ORDER BY time_ms LIMIT 1",
        (problem_key, device, params_name, scheduler),
    ).fetchone()
    return None if found is None else found[0]


def copy_without(conn: sqlite3.Connection, path: Path, problem_key: str) -> None:
    """Write a new database at *path* holding every row of *conn*'s but *problem_key*'s."""
    connect(path).close()
    conn.execute("ATTACH DATABASE ? AS copy", (str(path),))
    try:
        conn.execute(
            "INSERT INTO copy.measurements SELECT * FROM main.measurements WHERE problem_key != ?",
            (problem_key,),
        )
    finally:
        conn.execute("DETACH DATABASE copy")


def export(found: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """*found* rows as ``csv`` (JSON fields as text) or ``json``."""
    if fmt == "json":
        return json.dumps(list(found), indent=2)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["id", *COLUMNS], extrasaction="ignore")
    writer.writeheader()
    for row in found:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in row.items()}
        )
    return out.getvalue()
