"""The simulator tier's worker pool (``simulate``, tests/conftest.py): each job's result comes
back under its name, and a job that raises, exits or kills its worker fails alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

SCRIPT = """
import json, os, sys
how = sys.argv[1]
if how == "raise":
    raise ValueError("planted")
if how == "exit":
    sys.exit(3)
if how == "kill":
    os._exit(9)
print("noise")
print(json.dumps({"how": how, "sim": os.environ["NUMBA_ENABLE_CUDASIM"], "argv0": sys.argv[0]}))
"""


def test_jobs_report_alone_and_a_dead_worker_is_replaced(simulate: Any, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    names = ["ok1", "raise", "ok2", "exit", "kill", "ok3", "ok4"]
    runs = simulate({name: [str(script), name.rstrip("1234")] for name in names}, timeout=60)
    assert list(runs) == names
    for name in ("ok1", "ok2", "ok3", "ok4"):
        assert runs[name].returncode == 0, runs[name]
        assert runs[name].result == {"how": "ok", "sim": "1", "argv0": str(script)}
    assert runs["raise"].returncode == 1 and "ValueError: planted" in runs["raise"].stderr
    assert runs["raise"].outcome == {"failed": runs["raise"].stderr}
    assert runs["exit"].returncode == 3 and runs["exit"].result is None
    assert runs["kill"].returncode == 1 and "simulator worker: it died" in runs["kill"].stderr


def test_a_job_past_its_timeout_fails_with_the_reason(simulate: Any, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time, sys\ntime.sleep(float(sys.argv[1]))\nprint('{}')\n")
    runs = simulate({"slow": [str(script), "30"], "fast": [str(script), "0"]}, timeout=2)
    assert "no reply within 2 s" in runs["slow"].stderr
    assert runs["fast"].result == {}


def test_a_pytest_process_runs_jobs_on_its_share_of_the_cpus(simulate: Any, tmp_path: Path) -> None:
    """Jobs run on at most the CPUs over the xdist workers, never fewer than one process: a
    pool per CPU in every pytest worker put 4 GIL-bound processes on 2 CPUs (tests/conftest.py,
    ``_pool_size``)."""
    script = tmp_path / "pid.py"
    script.write_text("import json, os, time\ntime.sleep(0.3)\nprint(json.dumps(os.getpid()))\n")
    runs = simulate({f"job{i}": [str(script)] for i in range(8)}, timeout=60)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = max(1, (os.cpu_count() or 1) // workers)
    assert 1 <= len({run.result for run in runs.values()}) <= share, runs


def test_a_quick_run_picks_the_quick_cases(sim_tier: Any, request: pytest.FixtureRequest) -> None:
    """Without --full-sim a module simulates its QUICK cases and skips the others' tests."""
    assert sim_tier.full == request.config.getoption("--full-sim")
    every, quick = ["a", "b", "c"], ["b"]
    assert sim_tier.pick(every, quick) == (every if sim_tier.full else quick)
    # a case this run did not simulate is skipped, saying which run simulates it
    why = "without --full-sim" if sim_tier.full else "the full simulator tier"
    with pytest.raises(pytest.skip.Exception, match=why):
        sim_tier.require("a", {"b": {}})
