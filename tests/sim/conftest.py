"""Fixtures of the simulator tier: scripts that run generated kernels in Numba's CUDA simulator,
started as parallel subprocesses (the simulator must be on before numba.cuda is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import pytest


class SimRun(NamedTuple):
    """One subprocess: its exit status, its last JSON line (None without one), its stderr tail."""

    returncode: int
    result: dict | None
    stderr: str

    @property
    def outcome(self) -> dict:
        """The script's result, or ``{"failed": stderr}`` when it printed none."""
        return self.result or {"failed": self.stderr}


def _simulate(jobs: dict[str, list[str]], timeout: float = 600) -> dict[str, SimRun]:
    """Run *jobs*, at most one per CPU at a time: each is a Python process of its own (the
    simulator's threads hold the GIL), so more at once only thrash, and slow down the
    timing-sensitive tests running beside them (test_sm90_emulation's 20-second bound)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")

    def run(args: list[str]) -> SimRun:
        done = subprocess.run(
            [sys.executable, *args], env=env, text=True, capture_output=True, timeout=timeout
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        return SimRun(
            done.returncode, json.loads(lines[-1]) if lines else None, done.stderr[-4000:]
        )

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        futures = {name: pool.submit(run, args) for name, args in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="session")
def simulate() -> Callable[..., dict[str, SimRun]]:
    """``simulate({name: [script, *args]}, timeout=600)``: run every job at once in the
    simulator (one process each) and return each one's :class:`SimRun`."""
    return _simulate
