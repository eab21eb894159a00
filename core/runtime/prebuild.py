"""Kernels built before their first launch, in parallel worker processes (``mp.prebuild``)."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final

import attrs

from mmaplug.cuda import cubin
from mmaplug.errors import KernelBuildError, MatmulError, UsageError

__all__ = ["Prebuilt", "prebuild"]

_DIED: Final = (
    "A spawned worker runs the calling script's main module first: a script calling "
    'mp.prebuild needs its work under `if __name__ == "__main__":`, and cannot come from '
    "standard input"
)


@attrs.frozen
class Prebuilt:
    """What :func:`prebuild` did: the kernels it built and those that needed no build, each
    as ``"<module>.<kernel> (<cache key>)"``, and the wall time it took."""

    built: tuple[str, ...]
    cached: tuple[str, ...]
    seconds: float


def prebuild(
    compiled: Iterable[object | tuple[object, Sequence[object]]], *, workers: int | None = None
) -> Prebuilt:
    """Build the kernels of compiled fusions now, in *workers* processes side by side.

    A kernel otherwise builds at its fusion's first ``execute`` (1-3 s each, one at a time:
    Numba's compiler lock serialises builds in a process). After this, that first call loads
    the cubin through the driver in milliseconds, without importing Numba; so does any later
    process while the disk cache (``MMAPLUG_CACHE_DIR``) holds it. Each cubin is listed in the
    cache's manifest, so a copy of the directory (0700, the user's own) carries what it needs
    to be loaded (docs/threat-model.md). No GPU is needed: kernels
    build for each plan's device (``mp.compile(..., device="h200")`` prepares a cache for a
    GPU machine elsewhere). The workers are spawned: a script calling this runs its work
    under ``if __name__ == "__main__":``.

    :param compiled: What ``mp.compile`` returned, or ``(compiled, shapes)`` for a fusion with
        symbolic extents (one shape per fusion input: a tuple or an array; anything for a
        scalar input), whose kernel depends on the shapes it runs. Kernels chosen at launch
        for particular tensors (operands too misaligned for the planned vector width, a
        fallback to another scheduler) still build at their first launch.
    :param workers: Processes to build in; default one per CPU, at most one per kernel. The
        calling process never builds, so it does not import Numba.
    :raises KernelBuildError: a kernel failed to build (the others still ran).
    """
    if workers is not None and workers < 1:
        raise UsageError(f"prebuild takes workers >= 1 (or None: one per CPU); got {workers}")
    start = time.perf_counter()
    jobs: dict[str, Any] = {}
    for item in compiled:
        for job in _jobs(item):
            jobs.setdefault(job.key, job)
    todo = {key: job for key, job in jobs.items() if not cubin.stored(key)}
    cached = tuple(_name(key, job) for key, job in jobs.items() if key not in todo)
    count = min(len(todo), workers or os.cpu_count() or 1)
    failures = []
    for key, job, outcome in _run(list(todo.items()), count):
        if isinstance(outcome, BaseException):
            failures.append(f"{_name(key, job)}: {type(outcome).__name__}: {outcome}")
        else:
            cubin.keep(key, outcome)
    if failures:
        raise KernelBuildError("prebuild could not build " + "; ".join(failures))
    built = tuple(_name(key, job) for key, job in todo.items())
    return Prebuilt(built=built, cached=cached, seconds=time.perf_counter() - start)


def _jobs(item: object) -> list[Any]:
    """The kernel jobs of one item of :func:`prebuild`'s *compiled*."""
    target, shapes = item if isinstance(item, tuple) else (item, None)
    specialize = getattr(target, "specialize", None)
    if shapes is not None:
        if specialize is None:
            raise UsageError(
                f"prebuild got shapes for {type(target).__name__}, which has no symbolic "
                "extents: pass it alone"
            )
        target = specialize(shapes)
    elif specialize is not None:
        raise UsageError(
            "prebuild needs the shapes a fusion with symbolic extents will run: pass "
            "(compiled, shapes), one shape per fusion input"
        )
    jobs = getattr(target, "kernel_jobs", None)
    if jobs is None:
        raise UsageError(
            f"prebuild takes what mp.compile returns (or (compiled, shapes)); got "
            f"{type(target).__name__}"
        )
    return list(jobs())


def _run(
    todo: list[tuple[str, Any]], count: int
) -> Iterable[tuple[str, Any, cubin.Binary | BaseException]]:
    """Each (key, job, its Binary or the exception it raised), built in *count* processes."""
    if not todo:
        return
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=spawn) as pool:
        futures = [(key, job, pool.submit(_attempt, job)) for key, job in todo]
        for key, job, future in futures:
            try:
                yield key, job, future.result()
            except BrokenProcessPool as error:
                yield key, job, KernelBuildError(f"{error} {_DIED}")
            except Exception as error:  # its answer did not pickle
                yield key, job, error


def _attempt(job: Any) -> cubin.Binary | MatmulError:
    """*job*'s Binary, or the error that stopped it (returned: it crosses processes)."""
    try:
        return job()
    except MatmulError as error:
        return error
    except Exception as error:
        return KernelBuildError(f"{type(error).__name__}: {error}")


def _name(key: str, job: Any) -> str:
    """``<module>.<kernel> (<cache key>)``: configs differing only in their epilogue share a
    module name; the key is the cubin's file name in the cache."""
    return f"{job.module}.{job.name} ({key})"
