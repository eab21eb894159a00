"""Fixtures of the simulator tier: scripts that run generated kernels in Numba's CUDA simulator,
started as parallel subprocesses (the simulator must be on before numba.cuda is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
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
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    procs = {
        name: subprocess.Popen([sys.executable, *args], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for name, args in jobs.items()
    }  # fmt: skip
    runs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=timeout)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        runs[name] = SimRun(proc.returncode, json.loads(lines[-1]) if lines else None, err[-4000:])
    return runs


@pytest.fixture(scope="session")
def simulate() -> Callable[..., dict[str, SimRun]]:
    """``simulate({name: [script, *args]}, timeout=600)``: run every job at once in the
    simulator (one process each) and return each one's :class:`SimRun`."""
    return _simulate
