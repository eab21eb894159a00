"""``mmaplug tune``: plan candidates per problem, skip what the database has, build them in
parallel processes, then time them in one supervised worker per GPU (or as Ray tasks)."""

from __future__ import annotations

import hashlib
import math
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import MatmulError
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.records import plugins_record
from mmaplug.progress import Progress
from mmaplug.tune import db, work
from mmaplug.tune.candidates import candidates, estimate_us
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.runner import gpu_slots, run_jobs

BUILD_S: Final = 4.0  # one kernel's Numba build and first launch on one core (H200 host: 3-4 s)
TIMING_S: Final = 0.4  # a timing job's own cost: planning, cubin load, inputs, the check
TIMED_CALLS: Final = 37  # the checked call, 5 warm-up calls and 30 timed ones
BUILD_SHARE: Final = 0.5  # of --time-limit, the most the builds may take
WORKER_START_S: Final = 20.0  # a worker process importing numba and torch (estimate only)


def heuristic_choice(
    problem: TuneProblem, device: Device, pm: Any, scheduler: str = "hopper"
) -> MatmulParams | None:
    """What *pm*'s heuristics choose for *problem*, when *scheduler* takes it."""
    chosen = planned_choice(problem, device, pm)
    return chosen[1] if chosen and chosen[0] == scheduler else None


def planned_choice(
    problem: TuneProblem, device: Device, pm: Any
) -> tuple[str, MatmulParams] | None:
    """(scheduler, params) that planning *problem* with *pm* chooses; None when no scheduler
    takes it."""
    try:
        spec = plan_problem(problem.problem(), device, pm=pm)
    except MatmulError:
        return None
    return spec.scheduler, spec.params


def make_job(
    problem: TuneProblem,
    params: MatmulParams,
    device: Device,
    mp: MatmulProblem | None = None,
    scheduler: str = "hopper",
) -> dict[str, Any]:
    """The job of timing *params* on *problem* (*mp*: its ``MatmulProblem``, when known)."""
    mp = mp or problem.problem()
    # kernels take m, n, k and batch at launch: problems alike but for them share kernels
    shape_class = hashlib.sha256(repr(mp.without_extents()).encode()).hexdigest()[:16]
    return {
        "problem": problem.as_dict(),
        "key": problem.key,
        "device": db.device_key(device),
        "scheduler": scheduler,
        "params": params.as_dict(),
        "params_name": params.name,
        "build_key": f"{scheduler}/{shape_class}/{params.name}",  # one build per key
        "model_us": estimate_us(params, mp, device),
    }


def plan_jobs(
    problems: Sequence[TuneProblem],
    device: Device,
    *,
    limit: int = 50,
    managers: Sequence[Any] = (),
    ampere: int = 0,
    decode: int | None = None,
) -> list[dict[str, Any]]:
    """The candidate jobs of every problem: *limit* hopper configurations, *decode* decode ones
    (None: its whole space) where that scheduler takes the problem (M <= 16), then *ampere*
    ampere ones. The choices of
    the default heuristic (of each scheduler) and of *managers* (plugin managers whose
    heuristics the report compares) are always among them. A scheduler that refuses a problem
    gets no jobs for it."""
    counts = {
        "hopper": limit,
        "decode": sys.maxsize if decode is None else decode,
        "ampere": ampere,
    }
    pms = {name: work.tuning_manager(name) for name, count in counts.items() if count}
    jobs = []
    for problem in problems:
        mp = problem.problem()
        for scheduler, pm in pms.items():
            own = heuristic_choice(problem, device, pm, scheduler)
            if own is None:
                continue  # the scheduler refuses the problem
            others = managers if scheduler == "hopper" else ()
            chosen = [heuristic_choice(problem, device, o, scheduler) for o in others]
            include = [own, *(c for c in chosen if c is not None)]
            found = candidates(
                mp,
                device,
                pm,
                limit=counts[scheduler],
                include=include,
                scheduler=scheduler,
                order=own,  # tiles compared in the order the default walks its own
            )
            jobs += [make_job(problem, params, device, mp, scheduler) for params in found]
    return jobs


def estimate(
    jobs: Sequence[dict[str, Any]], *, build_workers: int, gpus: int = 1
) -> dict[str, Any]:
    """The sweep's expected wall time: one build per distinct kernel (not per job) spread over
    *build_workers*, then every job timed on *gpus* (its fixed cost plus ``TIMED_CALLS`` calls at
    twice the model's time: the model assumes peak throughput)."""
    kernels = len({j["build_key"] for j in jobs})
    build = (WORKER_START_S + math.ceil(kernels / build_workers) * BUILD_S) if jobs else 0.0
    calls = sum(TIMING_S + TIMED_CALLS * 2e-6 * j["model_us"] for j in jobs)
    timing = (WORKER_START_S + calls / gpus) if jobs else 0.0
    return {
        "candidates": len(jobs),
        "kernels": kernels,
        "build_s": round(build, 1),
        "timing_s": round(timing, 1),
        "total_s": round(build + timing, 1),
    }


def distinct_kernels(jobs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The first job of each distinct kernel, by kernel."""
    first: dict[str, dict[str, Any]] = {}
    for job in jobs:
        first.setdefault(job["build_key"], job)
    return first


def describe_estimate(guess: dict[str, Any], problems: int) -> str:
    """One line: what the sweep will build and time, and how long that should take."""

    def counted(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    return (
        f"{counted(guess['candidates'], 'candidate')} of {counted(problems, 'problem')}, "
        f"{counted(guess['kernels'], 'distinct kernel')} to build; estimated "
        f"{guess['build_s']:.0f} s of builds + {guess['timing_s']:.0f} s of timing = "
        f"{guess['total_s']:.0f} s"
    )


def pending(
    jobs: Sequence[dict[str, Any]], conn: sqlite3.Connection, device: str
) -> list[dict[str, Any]]:
    """The jobs the database has no row for on *device* (any status: a crash is not retried;
    delete its row to retry it). This is how an interrupted sweep resumes."""
    done = db.measured(conn, device)
    return [
        j for j in jobs if (j["key"], j.get("scheduler", "hopper"), j["params_name"]) not in done
    ]


def plugin_set(pm: Any) -> list[dict[str, str]]:
    """The registered plugins with their distributions and versions (a database field)."""
    return [
        {k: p[k] for k in ("name", "distribution", "version")}
        for p in plugins_record(pm)["plugins"]
    ]


def run(
    jobs: Sequence[dict[str, Any]],
    kind: str,
    *,
    slots: Sequence[dict[str, str]],
    timeout: float,
    ray_address: str = "",
    on_result: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    deadline: float | None = None,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Run *jobs* with ``work.WORK[kind]`` in local supervised workers, or as Ray tasks (no
    *deadline* there: Ray runs every task)."""
    if ray_address:
        from mmaplug.tune.ray_tasks import run_on_ray

        return run_on_ray(
            jobs,
            kind,
            address=ray_address,
            gpus=kind == "measure",
            timeout=timeout,
            on_result=on_result,
        )
    return run_jobs(
        jobs, work.WORK[kind], slots=slots, timeout=timeout, on_result=on_result, deadline=deadline
    )


def row(job: dict[str, Any], result: dict[str, Any], device: str, plugins: Any) -> dict[str, Any]:
    """The database row of one timed (or failed) candidate."""
    return {
        **job["problem"],
        "problem_key": job["key"],
        "device": device,
        "scheduler": job.get("scheduler", "hopper"),
        "params_name": job["params_name"],
        "params": job["params"],
        "plugins": plugins,
        "versions": result.get("versions") or work.versions(),
        "time_ms": result.get("time_ms"),
        "tflops": result.get("tflops"),
        "status": result["status"],
        "error": result.get("error", ""),
        "worker": result.get("worker", ""),
    }


def sweep(
    problems: Sequence[TuneProblem],
    conn: sqlite3.Connection,
    *,
    limit: int = 50,
    gpus: int = 1,
    build_workers: int = 1,
    timeout: float = 120.0,
    ray_address: str = "",
    managers: Sequence[Any] = (),
    progress: Progress | None = None,
    device: Device | None = None,
    time_limit: float | None = None,
    ampere: int = 0,
    decode: int | None = None,
) -> dict[str, int]:
    """Tune *problems* on the local GPU(s), or the Ray cluster's, into *conn*; returns the
    count of each status, ``skipped`` (already in the database) and ``not_run`` (left for the
    next run by *time_limit*).

    Each distinct kernel is built once (the first job that needs it); the timings then run in
    plan order, problem after problem, so a sweep cut short leaves whole problems measured.

    :param device: What the timing GPUs are (default: the local GPU); planning is for it.
    :param ampere: Candidates of the ampere scheduler per problem, besides *limit* hopper ones.
    :param decode: Candidates of the decode scheduler per problem it takes (None: all).
    :param time_limit: Seconds after which no job starts (local runs only); the builds may
        take ``BUILD_SHARE`` of them.
    """
    start = time.monotonic()
    progress = progress or Progress(False)
    device = device or get_device(None)
    key = db.device_key(device)
    jobs = plan_jobs(problems, device, limit=limit, managers=managers, ampere=ampere, decode=decode)
    todo = pending(jobs, conn, key)
    guess = estimate(todo, build_workers=build_workers, gpus=gpus)
    progress.say(
        f"{describe_estimate(guess, len(problems))} on {key}; "
        f"{len(jobs) - len(todo)} candidates already in the database"
    )
    counts = build_and_time(
        todo,
        conn,
        key,
        gpus=gpus,
        build_workers=build_workers,
        timeout=timeout,
        ray_address=ray_address,
        progress=progress,
        deadline=None if time_limit is None else start + time_limit,
    )
    return {"skipped": len(jobs) - len(todo), **counts}


def build_and_time(
    todo: Sequence[dict[str, Any]],
    conn: sqlite3.Connection,
    key: str,
    *,
    gpus: int = 1,
    build_workers: int = 1,
    timeout: float = 120.0,
    ray_address: str = "",
    progress: Progress | None = None,
    deadline: float | None = None,
) -> dict[str, int]:
    """Build each distinct kernel of *todo* once, then time the jobs in order on the device
    named *key*, recording every result; returns the count of each status (``not_run``: no
    time before *deadline*, a ``time.monotonic()``; the builds may take ``BUILD_SHARE`` of
    what is left of it)."""
    start = time.monotonic()
    progress = progress or Progress(False)
    counts: dict[str, int] = {}
    plugins = plugin_set(work.tuning_manager())
    first = distinct_kernels(todo)
    results: dict[str, dict[str, Any]] = {}
    for job, result in run(
        # locally the builds also launch once, so timing loads cached cubins; Ray's build
        # tasks have no GPU, and the timing tasks build from the PTX cache
        [{**j, "launch": not ray_address} for j in first.values()],
        "build",
        slots=[{}] * build_workers,
        timeout=timeout,
        ray_address=ray_address,
        on_result=lambda j, r: progress.say(f"built {j['key']} {j['params_name']}: {r['status']}"),
        deadline=None if deadline is None else start + BUILD_SHARE * (deadline - start),
    ):
        results[job["build_key"]] = result
    built: list[dict[str, Any]] = []
    for job in todo:
        if job["build_key"] not in results:
            continue  # not built in time: no row, so the next run takes it
        failed = results[job["build_key"]]
        if failed["status"] == "ok":
            built.append(job)
            continue
        if job is not first[job["build_key"]]:
            via = first[job["build_key"]]["key"]
            failed = {**failed, "error": f"(its kernel, built for {via}) {failed['error']}"}
        counts[failed["status"]] = counts.get(failed["status"], 0) + 1
        db.record(conn, row(job, failed, key, plugins))
    total = len(todo)

    def record(job: dict[str, Any], result: dict[str, Any]) -> None:
        db.record(conn, row(job, result, key, plugins))
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        timing = (
            f"{result['time_ms']:.4f} ms, {result['tflops']:.1f} TFLOP/s"
            if (result["status"] == "ok")
            else result.get("error", "")[:200]
        )
        measured = sum(counts.values())
        progress.say(
            f"[{measured}/{total}] {job['key']} {job['params_name']}: {result['status']} {timing}"
        )

    run(
        built,
        "measure",
        slots=gpu_slots(gpus),
        timeout=timeout,
        ray_address=ray_address,
        on_result=record,
        deadline=deadline,
    )
    left = len(todo) - sum(counts.values())
    if left:
        counts["not_run"] = left
    return counts
