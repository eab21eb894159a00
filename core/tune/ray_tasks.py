"""The tuning jobs as Ray tasks (``mmaplug tune --ray ADDRESS``, the ``mmaplug[ray]`` extra).

Ray schedules; each task runs one problem's jobs through the same supervised worker as a local
sweep (``runner.run_jobs``), so a crashing or hanging candidate costs its job, not the task.
Timing tasks ask Ray for one GPU each; Ray sets ``CUDA_VISIBLE_DEVICES`` for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mmaplug.errors import UsageError

Pair = tuple[dict[str, Any], dict[str, Any]]


def _task(jobs: list[dict[str, Any]], kind: str, timeout: float) -> list[Pair]:
    from mmaplug.tune.runner import run_jobs
    from mmaplug.tune.work import WORK

    return run_jobs(jobs, WORK[kind], timeout=timeout)


def run_on_ray(
    jobs: Sequence[dict[str, Any]],
    kind: str,
    *,
    address: str,
    gpus: bool,
    timeout: float,
    on_result: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> list[Pair]:
    """Run *jobs* (grouped by problem, one task each) on the Ray cluster at *address*
    (``local``: start a local instance); results as tasks finish.

    :raises UsageError: Ray is not installed, or timing on a cluster without GPUs.
    """
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--ray needs ray, which is not installed: pip install 'mmaplug[ray]'"
        ) from None
    if not ray.is_initialized():
        ray.init(
            address=None if address == "local" else address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    if gpus and not ray.cluster_resources().get("GPU"):
        raise UsageError(
            f"the Ray cluster at {address!r} has no GPUs, and timing tasks need one each; "
            "use --build-only, or a cluster with GPU workers"
        )
    remote = ray.remote(num_cpus=1, num_gpus=1 if gpus else 0)(_task)
    groups: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        groups.setdefault(job["key"], []).append(dict(job))
    waiting = [remote.remote(group, kind, timeout) for group in groups.values()]
    done: list[Pair] = []
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1)
        for job, result in ray.get(ready[0]):
            done.append((job, result))
            if on_result is not None:
                on_result(job, result)
    return done
