"""Shared pytest setup: skip tiers whose tools this machine lacks (probed once per session), the
simulator tier's pool of worker processes (``simulate``) and its depth (``sim_tier``)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, NamedTuple, TypeVar

import pytest

WORKER: Path = Path(__file__).with_name("sim_worker.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full-sim",
        action="store_true",
        help="run every simulator case and property example; without it the simulator tier "
        "runs the cases each module names QUICK (README, Tests)",
    )


Cases = TypeVar("Cases", Sequence[str], Mapping[str, list[str]])
_FULL_ONLY = "in the full simulator tier: python -m pytest --full-sim"
_QUICK_ONLY = "the quick tier's own shard: python -m pytest without --full-sim runs it"


class SimTier(NamedTuple):
    """How deep this run goes in the simulator tier: every case (``--full-sim``) or each
    module's QUICK ones."""

    full: bool

    def pick(self, every: Cases, quick: Cases) -> Cases:
        """The cases (or shards) of *every* this run simulates: all of them, or the *quick*
        ones."""
        return every if self.full else quick

    def require(self, name: str, results: Mapping[str, object]) -> None:
        """Skip the test of case *name* where this run did not simulate it (a full run skips
        the quick tier's own shards)."""
        if name not in results:
            pytest.skip(_QUICK_ONLY if self.full else _FULL_ONLY)

    def require_full(self) -> None:
        """Skip a test that needs every case where this run simulated the quick ones."""
        if not self.full:
            pytest.skip(_FULL_ONLY)


@pytest.fixture(scope="session")
def sim_tier(request: pytest.FixtureRequest) -> SimTier:
    """This run's depth in the simulator tier (``--full-sim`` or the quick cases)."""
    return SimTier(bool(request.config.getoption("--full-sim")))


@functools.cache
def nvvm_missing() -> str | None:
    """Return why `cuda.compile_ptx` cannot run here, or None when NVVM works."""
    try:
        from numba import cuda
        from numba.cuda import types

        def probe(out):
            out[0] = 1

        cuda.compile_ptx(probe, (types.int32[::1],), cc=(8, 0))
    except Exception as exc:  # any failure means the PTX tier cannot run
        return f"NVVM unavailable: {type(exc).__name__}: {exc}"
    return None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): no workers on a machine with a CUDA GPU.

    The GPU tier shares the one device and asserts on launch and first-result times, so there
    the suite runs in one process, as it always did (``-n 4`` still asks for workers). Elsewhere
    pytest-xdist decides (``PYTEST_XDIST_AUTO_NUM_WORKERS``, else one worker per CPU).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from mmaplug.cuda import presence

    return 0 if presence.cuda_device_count() else None


def _shard(text: str) -> tuple[int, int]:
    """``PYTEST_SHARD``'s (index, count), or a usage error that says what it takes."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise pytest.UsageError(
            f"PYTEST_SHARD={text!r}: expected i/n with 0 <= i < n (shards count from 0: "
            f"PYTEST_SHARD=0/4 ... 3/4 run every test once)"
        )
    return int(index), int(count)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # PYTEST_SHARD=i/n keeps every n-th test from the i-th, i from 0 (parallel GPU runs on one
    # machine); an i past n - 1 would keep none and pass in silence
    shard = os.environ.get("PYTEST_SHARD", "")
    if shard:
        index, count = _shard(shard)
        kept = [item for pos, item in enumerate(items) if pos % count == index]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    ptx_items = [item for item in items if item.get_closest_marker("ptx")]
    if ptx_items and (reason := nvvm_missing()):
        for item in ptx_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def pm():  # noqa: ANN201 - mmaplug.PluginManager
    """A hermetic plugin manager: built-in plugins only, no entry points, strict policy."""
    import mmaplug

    return mmaplug.make_plugin_manager(load_entrypoints=False, strict=True)


class SimRun(NamedTuple):
    """One simulator job: its exit status, its last JSON line (None without one), its error."""

    returncode: int
    result: dict | None
    stderr: str

    @property
    def outcome(self) -> dict:
        """The script's result, or ``{"failed": stderr}`` when it printed none."""
        return self.result or {"failed": self.stderr}


class _Worker:
    """A ``sim_worker.py`` process: jobs go to its stdin, one reply line each comes back."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.log: IO[str] = tempfile.TemporaryFile("w+")  # never a pipe nobody drains
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)], env=env, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )  # fmt: skip

    def run(self, job: list[str], timeout: float) -> SimRun:
        """Run *job*; a worker that dies or overruns *timeout* fails the job and is killed."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return self._failed("the worker process had died")
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            return self._failed(f"no reply within {timeout:.0f} s" if not ready else "it died")
        reply = json.loads(line)
        results = [ln for ln in reply["stdout"].splitlines() if ln.startswith("{")]
        return SimRun(reply["code"], json.loads(results[-1]) if results else None, reply["error"])

    def _failed(self, why: str) -> SimRun:
        self.proc.kill()
        self.log.seek(0)
        stderr = self.log.read()[-4000:]
        self.close()
        return SimRun(1, None, f"simulator worker: {why}\n{stderr}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Stop the process (its stdin closed ends its loop) and close every file it had."""
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()


_IDLE: list[_Worker] = []  # this pytest process's workers between two simulate calls
_IDLE_LOCK = threading.Lock()


def _worker(env: dict[str, str]) -> _Worker:
    """An idle worker started with *env*, or a new one."""
    with _IDLE_LOCK:
        for worker in _IDLE:
            if worker.env == env and worker.alive:
                _IDLE.remove(worker)
                return worker
    return _Worker(env)


def _simulate(jobs: dict[str, list[str]], timeout: float = 600) -> dict[str, SimRun]:
    """Run *jobs* (name -> ``[script, *args]``) on worker processes, this pytest process's
    share of the CPUs (``_pool_size``), each job taken from a shared queue as soon as a worker
    is free. A worker runs its jobs one after another (the simulator's threads hold the GIL,
    so more processes only thrash and slow the timing-sensitive tests beside them); a job that
    kills or hangs its worker fails alone and the next job gets a fresh worker. Workers outlive
    the call: the next call of this pytest process takes them again, so Numba and mmaplug are
    imported once per worker, not once per test file (3-4 s each: 14 files of the suite
    simulate)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    todo: queue.Queue[tuple[str, list[str]]] = queue.Queue()
    for item in jobs.items():
        todo.put(item)
    done: dict[str, SimRun] = {}

    def serve() -> None:
        worker = _worker(env)
        try:
            while True:
                try:
                    name, job = todo.get_nowait()
                except queue.Empty:
                    return
                if not worker.alive:
                    worker = _Worker(env)
                done[name] = worker.run(job, timeout)
        finally:
            if worker.alive:
                with _IDLE_LOCK:
                    _IDLE.append(worker)
            else:
                worker.close()

    threads = [threading.Thread(target=serve) for _ in range(min(len(jobs), _pool_size()))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {name: done[name] for name in jobs}


def _pool_size() -> int:
    """Worker processes a pytest process runs jobs on: its share of the CPUs. Each xdist
    worker has a pool; one per CPU each put 4 GIL-bound processes on 2 CPUs, which thrashed
    (the hopper kernel module took 1,087 s beside the limits property test, against 390 s
    alone with 2, and a property shard ran past its 900 s timeout)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, workers))


@pytest.fixture(scope="session")
def simulate() -> Iterator[Callable[..., dict[str, SimRun]]]:
    """``simulate({name: [script, *args]}, timeout=600)``: run every job in the simulator
    (a pool of worker processes, this process's share of the CPUs, kept for the session) and
    return each one's :class:`SimRun`."""
    yield _simulate
    with _IDLE_LOCK:
        while _IDLE:
            _IDLE.pop().close()
