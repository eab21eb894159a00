"""``mmaplug tune``: plan candidates per problem, skip what the database has, build them in
parallel processes, then time them in one supervised worker per GPU (or as Ray tasks)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..device import Device, get_device
from ..errors import MatmulError
from ..params import MatmulParams
from ..plan import plan_problem
from ..progress import Progress
from ..records import plugins_record
from . import db, work
from .candidates import candidates
from .corpus import TuneProblem
from .runner import gpu_slots, run_jobs

WORK: Final[dict[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "build": work.build,
    "measure": work.measure,
}


def heuristic_choice(problem: TuneProblem, device: Device, pm: Any) -> MatmulParams | None:
    """What *pm*'s heuristics choose for *problem*, when the hopper scheduler takes it."""
    try:
        spec = plan_problem(problem.problem(), device, pm=pm)
    except MatmulError:
        return None
    return spec.params if spec.scheduler == "hopper" else None


def plan_jobs(
    problems: Sequence[TuneProblem],
    device: Device,
    *,
    limit: int = 50,
    managers: Sequence[Any] = (),
) -> list[dict[str, Any]]:
    """The candidate jobs of every problem; the choices of *managers* (plugin managers whose
    heuristics the report compares) are always among them."""
    pm = work.tuning_manager()
    jobs = []
    for problem in problems:
        chosen = [heuristic_choice(problem, device, other) for other in (pm, *managers)]
        found = candidates(
            problem.problem(), device, pm, limit=limit, include=[c for c in chosen if c is not None]
        )
        for params in found:
            jobs.append(
                {
                    "problem": problem.as_dict(),
                    "key": problem.key,
                    "device": db.device_key(device),
                    "params": params.as_dict(),
                    "params_name": params.name,
                }
            )
    return jobs


def pending(
    jobs: Sequence[dict[str, Any]], conn: sqlite3.Connection, device: str
) -> list[dict[str, Any]]:
    """The jobs the database has no row for on *device* (any status: a crash is not retried;
    delete its row to retry it). This is how an interrupted sweep resumes."""
    done = db.measured(conn, device)
    return [j for j in jobs if (j["key"], "hopper", j["params_name"]) not in done]


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
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Run *jobs* with ``WORK[kind]`` in local supervised workers, or as Ray tasks."""
    if ray_address:
        from .ray_tasks import run_on_ray

        return run_on_ray(
            jobs,
            kind,
            address=ray_address,
            gpus=kind == "measure",
            timeout=timeout,
            on_result=on_result,
        )
    return run_jobs(jobs, WORK[kind], slots=slots, timeout=timeout, on_result=on_result)


def row(job: dict[str, Any], result: dict[str, Any], device: str, plugins: Any) -> dict[str, Any]:
    """The database row of one timed (or failed) candidate."""
    return {
        **job["problem"],
        "problem_key": job["key"],
        "device": device,
        "scheduler": "hopper",
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
) -> dict[str, int]:
    """Tune *problems* on the local GPU(s), or the Ray cluster's, into *conn*; returns the
    count of each status (and ``skipped``: already in the database).

    :param device: What the timing GPUs are (default: the local GPU); planning is for it.
    """
    progress = progress or Progress(False)
    device = device or get_device(None)
    jobs = plan_jobs(problems, device, limit=limit, managers=managers)
    todo = pending(jobs, conn, db.device_key(device))
    counts = {"skipped": len(jobs) - len(todo)}
    progress.say(
        f"{len(jobs)} candidates for {len(problems)} problems on {db.device_key(device)}; "
        f"{counts['skipped']} already in the database"
    )
    plugins = plugin_set(work.tuning_manager())
    built: list[dict[str, Any]] = []
    for job, result in run(
        # locally the builds also launch once, so timing loads cached cubins; Ray's build
        # tasks have no GPU, and the timing tasks build from the PTX cache
        [{**j, "launch": not ray_address} for j in todo],
        "build",
        slots=[{}] * build_workers,
        timeout=timeout,
        ray_address=ray_address,
        on_result=lambda j, r: progress.say(f"built {j['key']} {j['params_name']}: {r['status']}"),
    ):
        if result["status"] == "ok":
            built.append(job)
        else:
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            db.record(conn, row(job, result, db.device_key(device), plugins))
    total = len(built)

    def record(job: dict[str, Any], result: dict[str, Any]) -> None:
        db.record(conn, row(job, result, db.device_key(device), plugins))
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        timing = (
            f"{result['time_ms']:.4f} ms, {result['tflops']:.1f} TFLOP/s"
            if (result["status"] == "ok")
            else result.get("error", "")[:200]
        )
        measured = sum(v for k, v in counts.items() if k != "skipped")
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
    )
    return counts
