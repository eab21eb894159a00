"""Run jobs in supervised worker processes: a crash or a hang costs one job, never the sweep.

Each slot (a GPU, or a CPU lane) owns one long-lived spawned worker process that runs *work*
on one job at a time. The supervisor thread of the slot sends a job and waits for the answer up
to *timeout* seconds: a worker that died is recorded as ``crash`` (with its exit code), one that
did not answer in time is killed and recorded as ``timeout``; either way a fresh worker takes
the next job. On a multi-GPU host each slot's worker sees one GPU (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, Final

Job = dict[str, Any]
Result = dict[str, Any]
STARTUP_S: Final = 300.0  # imports and a CUDA context before the first job
_env_lock: Final = threading.Lock()


def _serve(conn: Connection, work: Callable[[Job], Result]) -> None:
    """The worker process: answer each job with *work*'s result, or the error it raised."""
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            conn.send(work(job))
        except Exception as error:  # reported as the job's error; the worker lives on
            tail = traceback.format_exc(limit=3)[-1500:]
            conn.send({"status": "error", "error": f"{type(error).__name__}: {error}\n{tail}"})


class _Worker:
    """One worker process of a slot (its environment fixed at start)."""

    def __init__(self, work: Callable[[Job], Result], environ: Mapping[str, str]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, work), daemon=True)
        with _env_lock:  # a spawned child copies os.environ as it starts
            saved = {k: os.environ.get(k) for k in environ}
            os.environ.update(environ)
            try:
                self.process.start()
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        child.close()
        self.ready = self._answer(STARTUP_S) == "ready"

    def _answer(self, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            return TimeoutError
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return EOFError

    def run(self, job: Job, timeout: float) -> Result:
        try:
            self.conn.send(job)
        except (BrokenPipeError, OSError):
            return self._dead()
        answer = self._answer(timeout)
        if answer is TimeoutError:
            self.stop()
            return {"status": "timeout", "error": f"no answer within {timeout:g} s; worker killed"}
        if answer is EOFError:
            return self._dead()
        return dict(answer)

    def _dead(self) -> Result:
        self.process.join(5)
        code = self.process.exitcode
        return {"status": "crash", "error": f"worker process died (exit code {code})"}

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(5)
        self.stop()


def gpu_slots(count: int) -> list[dict[str, str]]:
    """One environment per GPU: ``CUDA_VISIBLE_DEVICES=i`` for i in 0..count-1."""
    return [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(count)]


def run_jobs(
    jobs: Iterable[Job],
    work: Callable[[Job], Result],
    *,
    slots: Sequence[Mapping[str, str]] = ({},),
    timeout: float = 120.0,
    on_result: Callable[[Job, Result], None] | None = None,
    deadline: float | None = None,
) -> list[tuple[Job, Result]]:
    """Run every job with *work* (a picklable module-level function) in one worker process per
    slot; returns (job, result) pairs in completion order.

    :param slots: The environment of each slot's worker (see :func:`gpu_slots`).
    :param timeout: Seconds one job may take before its worker is killed (``timeout``).
    :param on_result: Called under a lock as each job finishes (database writes, progress).
    :param deadline: A ``time.monotonic()`` after which no job starts; the jobs not started
        are left out of the result.
    """
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    done: list[tuple[Job, Result]] = []
    lock = threading.Lock()

    def finish(job: Job, result: Result) -> None:
        with lock:
            done.append((job, result))
            if on_result is not None:
                on_result(job, result)

    def supervise(environ: Mapping[str, str]) -> None:
        worker: _Worker | None = None
        try:
            while deadline is None or time.monotonic() < deadline:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                if worker is None:
                    worker = _Worker(work, environ)
                result = worker.run(job, timeout) if worker.ready else worker._dead()
                if result["status"] in ("crash", "timeout"):
                    worker.stop()
                    worker = None
                finish(job, result)
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=supervise, args=(env,), daemon=True) for env in slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done
