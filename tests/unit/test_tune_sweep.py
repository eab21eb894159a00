"""The sweep: one build per distinct kernel, timings in plan order, the estimate, --time-limit."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mmaplug.planning.device import get_device
from mmaplug.planning.scheduler_registry import schedulers
from mmaplug.tune import db, sweep, work
from mmaplug.tune.candidates import configurations
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.runner import run_jobs

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import tune_workers by name
import tune_workers  # noqa: E402

H200 = get_device("h200")
P1 = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
P2 = TuneProblem(m=4096, n=4096, k=8192, dtype="bfloat16")


class Lines:
    """A Progress that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def _job(tp: TuneProblem, name: str, ms: float = 1.0) -> dict[str, Any]:
    return {"problem": tp.as_dict(), "key": tp.key, "device": "h200", "params": {},
            "params_name": name, "build_key": f"class/{name}", "model_us": 10.0,
            "ms": ms}  # fmt: skip


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Five jobs of two problems over three kernels (one fails to build); no compiler, no GPU."""
    jobs = [_job(P1, "a"), _job(P1, "bad"), _job(P2, "a", 2.0), _job(P2, "bad"), _job(P2, "c")]
    monkeypatch.setattr(sweep, "plan_jobs", lambda *args, **kw: [dict(j) for j in jobs])
    monkeypatch.setitem(work.WORK, "build", tune_workers.fake_build)
    monkeypatch.setitem(work.WORK, "measure", tune_workers.fake_measure)
    return jobs


def test_one_build_per_kernel_and_timings_in_plan_order(fake: list, tmp_path: Path) -> None:
    """Three kernels are built for five jobs; the failed build is recorded for both jobs that
    share its kernel, the second naming the problem it was built for; timings run in plan
    order; a rerun skips everything."""
    conn = db.connect(tmp_path / "t.sqlite")
    lines = Lines()
    counts = sweep.sweep([P1, P2], conn, device=H200, build_workers=2, progress=lines)  # type: ignore[arg-type]
    assert counts == {"skipped": 0, "ok": 3, "error": 2}
    assert "5 candidates of 2 problems, 3 distinct kernels to build" in lines.lines[0]
    assert len([line for line in lines.lines if line.startswith("built ")]) == 3
    timed = [line.split(":")[0] for line in lines.lines if line.startswith("[")]
    assert timed == [f"[3/5] {P1.key} a", f"[4/5] {P2.key} a", f"[5/5] {P2.key} c"]
    errors = {r["problem_key"]: r["error"] for r in db.rows(conn, status="error")}
    assert errors[P1.key] == "ValueError: no such tile"
    assert errors[P2.key] == f"(its kernel, built for {P1.key}) ValueError: no such tile"
    assert db.time_of(conn, P2.key, "h200", "a") == 2.0
    assert sweep.sweep([P1, P2], conn, device=H200) == {"skipped": 5}


def test_time_limit_leaves_the_rest_for_the_next_run(fake: list, tmp_path: Path) -> None:
    """A limit that has passed before the first job starts records nothing and counts every
    job not_run; the next run without a limit measures them all."""
    conn = db.connect(tmp_path / "t.sqlite")
    assert sweep.sweep([P1, P2], conn, device=H200, time_limit=1e-9) == {
        "skipped": 0, "not_run": 5}  # fmt: skip
    assert db.rows(conn) == []
    assert sweep.sweep([P1, P2], conn, device=H200) == {"skipped": 0, "ok": 3, "error": 2}


def test_runner_starts_no_job_after_the_deadline() -> None:
    jobs = [{"id": i, "do": "ok"} for i in range(3)]
    assert run_jobs(jobs, tune_workers.behave, deadline=time.monotonic() - 1.0) == []
    late = time.monotonic() + 300.0
    assert len(run_jobs(jobs, tune_workers.behave, timeout=60.0, deadline=late)) == 3


def test_problems_alike_but_for_extents_share_kernels() -> None:
    """Jobs of the same params share a kernel across problems that differ only in extents, not
    across dtypes or vector widths; the estimate counts one build per kernel."""
    odd = TuneProblem(m=4095, n=4097, k=4096, dtype="bfloat16")
    half = TuneProblem(m=4096, n=4096, k=4096, dtype="float16")
    jobs = sweep.plan_jobs([P1, P2, odd, half], H200, limit=8)
    kernel = {(j["key"], j["params_name"]): j["build_key"] for j in jobs}
    shared = [name for key, name in kernel if key == P1.key and (P2.key, name) in kernel]
    assert shared, "the two square-ish problems share no candidate"
    for name in shared:
        assert kernel[(P1.key, name)] == kernel[(P2.key, name)]
        for other in (odd, half):
            assert kernel.get((other.key, name)) != kernel[(P1.key, name)]
    guess = sweep.estimate(jobs, build_workers=3)
    kernels = len(set(kernel.values()))
    assert guess["candidates"] == len(jobs) == 32 and guess["kernels"] == kernels < 32
    assert guess["build_s"] == sweep.WORKER_START_S + math.ceil(kernels / 3) * sweep.BUILD_S
    assert guess["total_s"] == pytest.approx(guess["build_s"] + guess["timing_s"], abs=0.11)
    assert sweep.estimate([], build_workers=3)["total_s"] == 0.0


def test_ampere_jobs_come_after_the_hopper_ones_and_resume_apart() -> None:
    """--ampere N adds N ampere-scheduler jobs per problem (the ampere default first), whose
    kernels and database keys are their own."""
    jobs = sweep.plan_jobs([P1], H200, limit=3, ampere=2)
    assert [j["scheduler"] for j in jobs] == ["hopper"] * 3 + ["ampere"] * 2
    assert all(j["build_key"].startswith(j["scheduler"] + "/") for j in jobs)
    pm = sweep.work.tuning_manager("ampere")
    assert jobs[3]["params_name"] == sweep.heuristic_choice(P1, H200, pm, "ampere").name  # type: ignore[union-attr]
    assert sweep.heuristic_choice(P1, H200, pm) is None  # not a hopper decision


def test_pending_tells_schedulers_apart(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "t.sqlite")
    db.record(conn, tune_workers.row("p", params_name="c", scheduler="ampere"))
    jobs = [{"key": "p", "params_name": "c", "scheduler": s} for s in ("ampere", "hopper")]
    assert sweep.pending(jobs, conn, "h200") == jobs[1:]


def test_decode_jobs_only_where_the_decode_scheduler_takes_the_problem() -> None:
    """A decode step gets the decode scheduler's whole space (its default first) beside the
    hopper candidates; a problem past its 16 rows gets none, and ``decode=0`` none anywhere. An
    FP8 problem asked for ampere candidates gets none (ampere declines FP8), not a crash."""
    step = TuneProblem(m=4, n=4096, k=4096, dtype="bfloat16")
    pm = work.tuning_manager("decode")
    space = list(configurations(schedulers(pm)["decode"][1], step.problem(), H200))
    assert len(space) == 32  # 1 or 2 row tiles x 4 warp counts x 4 chunks in flight, all legal
    jobs = sweep.plan_jobs([step, P1], H200, limit=2)
    counts: dict[tuple[str, str], int] = {}
    for job in jobs:
        counts[job["key"], job["scheduler"]] = counts.get((job["key"], job["scheduler"]), 0) + 1
    assert counts == {
        (step.key, "hopper"): 2,
        (step.key, "decode"): len(space),
        (P1.key, "hopper"): 2,
    }
    first = next(j for j in jobs if j["scheduler"] == "decode")
    assert first["params_name"] == sweep.heuristic_choice(step, H200, pm, "decode").name  # type: ignore[union-attr]
    assert {j["scheduler"] for j in sweep.plan_jobs([step], H200, limit=2, decode=0)} == {"hopper"}
    fp8 = TuneProblem(m=256, n=256, k=256, dtype="float8_e4m3fn", scale="tensor")
    assert {j["scheduler"] for j in sweep.plan_jobs([fp8], H200, limit=2, ampere=2)} == {"hopper"}


def test_candidates_walk_their_tiles_in_the_defaults_order() -> None:
    """Where the default groups its tile order (8192^3: a wave would spill L2), every hopper
    candidate walks its tiles in the same order, so the sweep compares tiles, not orders;
    where it does not (2048x14336x5120: A fits in L2), they keep the plain order too."""
    pm = sweep.work.tuning_manager("hopper")
    for problem, group in (
        (TuneProblem(m=8192, n=8192, k=8192, dtype="bfloat16"), 8),
        (TuneProblem(m=2048, n=14336, k=5120, dtype="bfloat16"), 1),
    ):
        own = sweep.heuristic_choice(problem, H200, pm)
        assert own is not None and own.grid_swizzle_factor == group
        jobs = sweep.plan_jobs([problem], H200, limit=6, decode=0)
        walks = {(j["params"]["cta_order"], j["params"]["grid_swizzle_factor"]) for j in jobs}
        assert len(jobs) == 6 and walks == {(own.cta_order.value, group)}, walks
