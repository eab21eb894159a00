"""GPU tier: a real sweep of one problem, its resume, the report and the tuned-table answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmaplug.cli.main import main
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune import db

torch = pytest.importorskip("torch") if cuda_device_count() else None
pytestmark = pytest.mark.sm90


def test_sweep_resume_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Six candidates of 1024x2048x4096 are all checked and timed; a rerun skips them all; the
    report puts the default within (0, 1] of the best; the database rows name the worker."""
    path = str(tmp_path / "t.sqlite")
    argv = ["tune", "--shape", "1024x2048x4096", "--candidates", "6", "--workers", "6",
            "--db", path, "--json"]  # fmt: skip
    assert main(argv) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts == {"skipped": 0, "ok": 6}, counts
    rows = db.rows(db.connect(path))
    assert len(rows) == 6 and all(r["tflops"] > 1.0 and "/gpu" in r["worker"] for r in rows)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"skipped": 6}
    assert main(["report", "--shape", "1024x2048x4096", "--db", path, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["geomean_of_best"]["default"]
    assert 0.0 < default <= 1.0


def test_ampere_candidates_and_the_leave_one_out_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two hopper and two ampere candidates of two problems are timed (rows carry their
    scheduler); report --leave-one-out --measure times the tuned table's left-out choices and
    reports them with default@ampere."""
    path = str(tmp_path / "t.sqlite")
    shapes = ["--shape", "1024x2048x4096", "--shape", "1024x2048x2048"]
    argv = ["tune", *shapes, "--candidates", "2", "--ampere", "2", "--workers", "8",
            "--db", path, "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"skipped": 0, "ok": 8}
    assert sorted(r["scheduler"] for r in db.rows(db.connect(path))) == ["ampere"] * 4 + [
        "hopper"] * 4  # fmt: skip
    table = str(
        Path(__file__).parents[2] / "examples/tuned_table/src/mmaplug_tuned_table/__init__.py"
    )
    argv = ["report", *shapes, "--db", path, "--heuristic", table, "--heuristic",
            "default@ampere", "--leave-one-out", "--measure", "--json"]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    for column in ("default", "mmaplug_tuned_table", "mmaplug_tuned_table/loo", "default@ampere"):
        assert 0.0 < result["geomean_of_best"][column] <= 1.0, column


def test_small_problems_are_timed_as_graph_replays() -> None:
    """A decode step (about 7 us of kernel on the H200) is timed as CUDA-graph replays: well
    under the 20-50 us that an event pair around one call measures of the host's call path."""
    from mmaplug.planning.device import get_device
    from mmaplug.planning.plan import plan_problem
    from mmaplug.tune import sweep, work
    from mmaplug.tune.corpus import TuneProblem

    problem = TuneProblem(m=1, n=4096, k=4096, dtype="bfloat16")
    device = get_device(None)
    spec = plan_problem(problem.problem(), device)
    job = sweep.make_job(problem, spec.params, device, scheduler=spec.scheduler)
    result = work.measure(job)
    assert result["status"] == "ok", result
    assert result["time_ms"] < 0.015, result


def test_decode_candidates_are_swept_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decode step's sweep times two decode candidates beside one hopper one; the report's
    default column is the decode kernel that a call plans, timed from its own row."""
    path = str(tmp_path / "t.sqlite")
    argv = ["tune", "--shape", "4x4096x4096", "--candidates", "1", "--decode", "2",
            "--workers", "3", "--db", path, "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"skipped": 0, "ok": 3}
    rows = db.rows(db.connect(path))
    assert sorted(r["scheduler"] for r in rows) == ["decode", "decode", "hopper"]
    assert main(["report", "--shape", "4x4096x4096", "--db", path, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["rows"]
    assert entry["default"]["scheduler"] == "decode", entry
    assert 0.0 < entry["default"]["of_best"] <= 1.0, entry
