"""The tuning runner: a candidate that crashes, segfaults, hangs or raises costs its own job."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mmaplug.tune import db, sweep
from mmaplug.tune.runner import gpu_slots, run_jobs

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import tune_workers by name
import tune_workers  # noqa: E402


def test_failures_are_recorded_and_the_sweep_goes_on() -> None:
    """Each failure gets its status; the jobs after it still run, in fresh workers."""
    jobs = [{"id": i, "do": do} for i, do in
            enumerate(["ok", "exit", "ok", "segfault", "hang", "raise", "ok"])]  # fmt: skip
    pairs = run_jobs(jobs, tune_workers.behave, timeout=3.0)
    status = {job["id"]: result for job, result in pairs}
    assert [status[i]["status"] for i in range(7)] == [
        "ok", "crash", "ok", "crash", "timeout", "error", "ok"]  # fmt: skip
    assert "exit code 3" in status[1]["error"]
    assert "exit code -11" in status[3]["error"]
    assert "no answer within 3 s" in status[4]["error"]
    assert "ValueError: candidate refused" in status[5]["error"]
    # a crash replaces the worker; an error raised in the job does not
    assert status[0]["pid"] != status[2]["pid"] != status[6]["pid"]


def test_one_worker_per_gpu_sees_its_gpu() -> None:
    """gpu_slots gives each slot's worker CUDA_VISIBLE_DEVICES=i; the parent's is untouched."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    jobs = [{"id": i, "do": "ok"} for i in range(8)]
    pairs = run_jobs(jobs, tune_workers.behave, slots=gpu_slots(2), timeout=60.0)
    assert len(pairs) == 8
    assert {r["gpu"] for _, r in pairs} == {"0", "1"}
    assert len({r["pid"] for _, r in pairs}) == 2
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


def test_sweep_resumes_after_a_killed_worker(tmp_path: Path) -> None:
    """The sweep is killed when its third worker dies: the rows recorded before stay, and the
    rerun plans only the jobs without a row."""
    conn = db.connect(tmp_path / "t.sqlite")
    jobs = [{"key": f"p{i}", "params_name": "c", "do": do}
            for i, do in enumerate(["ok", "ok", "exit", "ok"])]  # fmt: skip

    def record(job: dict, result: dict) -> None:
        if job["do"] == "exit":  # the sweep itself is killed here: later jobs are never recorded
            raise KeyboardInterrupt
        db.record(conn, tune_workers.row(job["key"], params_name="c"))

    with pytest.raises(KeyboardInterrupt):
        for job in jobs:
            record(job, run_jobs([job], tune_workers.behave, timeout=30.0)[0][1])
    left = sweep.pending(jobs, conn, "h200")
    assert [j["key"] for j in left] == ["p2", "p3"]
    assert sweep.pending(jobs, conn, "a100") == jobs  # another device measured nothing
