"""The tuning database: schema versions and migrations, concurrent writers, queries, export."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import sqlite3
import sys
from pathlib import Path

import pytest

from mmaplug.errors import UsageError
from mmaplug.tune import db

sys.path.insert(0, str(Path(__file__).parent))  # spawned writers import tune_workers by name
import tune_workers  # noqa: E402
from tune_workers import row  # noqa: E402


def test_new_database_has_the_current_schema_in_wal_mode(tmp_path: Path) -> None:
    """A new file gets every migration, WAL journaling and a busy timeout."""
    conn = db.connect(tmp_path / "t.sqlite")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION == 2
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 60000


def test_version_1_file_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    """A schema-1 database (no worker column) opens as schema 2 with its rows intact."""
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(db.MIGRATIONS[0] + "PRAGMA user_version = 1;")
    values = {k: v for k, v in row("p", time_ms=2.5).items()}
    values.update(params="{}", plugins="[]", versions="{}", error="", created=0.0)
    cols = [c for c in db.COLUMNS if c != "worker"]
    old.execute(f"INSERT INTO measurements ({', '.join(cols)}) VALUES "
                f"({', '.join('?' for _ in cols)})", [values[c] for c in cols])  # fmt: skip
    old.commit()
    old.close()
    conn = db.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    (only,) = db.rows(conn)
    assert (only["problem_key"], only["time_ms"], only["worker"]) == ("p", 2.5, "")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A file from a newer mmaplug is an error naming both versions, not a silent downgrade."""
    path = tmp_path / "new.sqlite"
    sqlite3.connect(path).execute("PRAGMA user_version = 9").connection.close()
    with pytest.raises(UsageError, match="has schema 9; this mmaplug reads up to 2"):
        db.connect(path)


def test_missing_or_foreign_files_are_usage_errors(tmp_path: Path) -> None:
    """Reading a database that does not exist, or a file that is not one, says so."""
    with pytest.raises(UsageError, match="does not exist; run 'mmaplug tune' first"):
        db.connect(tmp_path / "none.sqlite", create=False)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(UsageError, match="is not an mmaplug tuning database"):
        db.connect(junk)


def test_a_reader_changes_nothing_in_a_foreign_database(tmp_path: Path) -> None:
    """mmaplug db --db on another program's SQLite file (or an empty file) refuses it without
    adding a table, a schema number or WAL mode; a schema number without the table is refused
    too."""
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE bookmarks (url TEXT)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    with pytest.raises(UsageError, match="has no measurements table"):
        db.connect(other, create=False)
    assert other.read_bytes() == before
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(UsageError, match="has no measurements table"):
        db.connect(empty, create=False)
    assert empty.read_bytes() == b""
    numbered = tmp_path / "numbered.sqlite"
    sqlite3.connect(numbered).execute("PRAGMA user_version = 2").connection.close()
    with pytest.raises(UsageError, match="is not an mmaplug tuning database"):
        db.connect(numbered)


def test_a_new_database_is_the_users_own(tmp_path: Path) -> None:
    """Created 0600 in a directory created 0700, as the cache directory it usually sits in."""
    path = tmp_path / "new" / "t.sqlite"
    db.connect(path).close()
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)


def test_a_damaged_row_is_a_usage_error(tmp_path: Path) -> None:
    """A row whose JSON cannot be read names itself instead of a JSONDecodeError."""
    conn = db.connect(tmp_path / "t.sqlite")
    db.record(conn, row("p"))
    conn.execute("UPDATE measurements SET params = 'garbage'")
    with pytest.raises(UsageError, match=r"row \d+ has an unreadable params"):
        db.rows(conn)


def test_several_processes_write_at_once(tmp_path: Path) -> None:
    """Four writer processes recording 50 rows each all land (WAL + busy timeout)."""
    path = str(tmp_path / "shared.sqlite")
    db.connect(path).close()
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=tune_workers.write_rows, args=(path, w, 50)) for w in range(4)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(120)
    assert [p.exitcode for p in writers] == [0, 0, 0, 0]
    assert len(db.rows(db.connect(path))) == 200


def test_queries_best_and_rerecording(tmp_path: Path) -> None:
    """rows() filters and sorts fastest first; best keeps the fastest ok row per problem; a
    re-measurement replaces its row."""
    conn = db.connect(tmp_path / "t.sqlite")
    db.record(conn, row("p", params_name="slow", time_ms=3.0))
    db.record(conn, row("p", params_name="fast", time_ms=1.0))
    db.record(conn, row("p", params_name="dead", time_ms=None))
    db.record(conn, row("q", params_name="only", time_ms=5.0))
    assert [r["params_name"] for r in db.rows(conn, problem_key="p")] == ["fast", "slow", "dead"]
    assert [r["params_name"] for r in db.rows(conn, best=True)] == ["fast", "only"]
    assert [r["params_name"] for r in db.rows(conn, status="crash")] == ["dead"]
    assert db.time_of(conn, "p", "h200", "slow") == 3.0
    assert db.time_of(conn, "p", "h200", "dead") is None
    db.record(conn, row("p", params_name="slow", time_ms=0.5))
    assert db.rows(conn, best=True)[0]["params_name"] == "slow"
    assert len(db.rows(conn)) == 4
    assert db.measured(conn, "h200") == {("p", "hopper", n) for n in ("slow", "fast", "dead")} | {
        ("q", "hopper", "only")}  # fmt: skip


def test_unknown_status_is_refused(tmp_path: Path) -> None:
    """A row's status is one of STATUSES."""
    with pytest.raises(UsageError, match="status 'fine'; one of ok, wrong, error, crash"):
        db.record(db.connect(tmp_path / "t.sqlite"), row("p", status="fine"))


def test_export_csv_and_json(tmp_path: Path) -> None:
    """CSV has a header of the columns and JSON fields as text; JSON round-trips the rows."""
    conn = db.connect(tmp_path / "t.sqlite")
    db.record(conn, row("p", params={"stages": 4}))
    found = db.rows(conn)
    (line,) = csv.DictReader(io.StringIO(db.export(found, "csv")))
    assert line["problem_key"] == "p" and json.loads(line["params"]) == {"stages": 4}
    assert json.loads(db.export(found, "json"))[0]["params"] == {"stages": 4}


def test_default_path_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MMAPLUG_TUNING_DB names the file; else tuning.sqlite in the cache directory."""
    monkeypatch.setenv("MMAPLUG_TUNING_DB", str(tmp_path / "x.sqlite"))
    assert db.default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("MMAPLUG_TUNING_DB")
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path / "cache"))
    assert db.default_path() == tmp_path / "cache" / "tuning.sqlite"


def test_copy_without_one_problem(tmp_path: Path) -> None:
    """The copy holds every row but the problem's; the original keeps them all."""
    conn = db.connect(tmp_path / "t.sqlite")
    for key, name in (("p", "a"), ("p", "b"), ("q", "a")):
        db.record(conn, row(key, params_name=name, params={"stages": 4}))
    db.copy_without(conn, tmp_path / "copy.sqlite", "p")
    copy = db.rows(db.connect(tmp_path / "copy.sqlite", create=False))
    assert [(r["problem_key"], r["params"]) for r in copy] == [("q", {"stages": 4})]
    assert len(db.rows(conn)) == 3
