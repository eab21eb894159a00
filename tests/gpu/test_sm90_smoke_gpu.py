"""GPU tier: the sm_90a smoke kernels of tests/sim/sm90_kernels.py (TMA, mbarrier, wgmma), which
the simulator tier runs unchanged, on the H200 — each in its own process, since a kernel fault
leaves the CUDA context unusable for the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "sim"))
from test_sm90_emulation import CASES, KERNELS  # noqa: E402

pytestmark = pytest.mark.sm90


@pytest.mark.parametrize("name", CASES)
def test_smoke_kernel_on_the_gpu(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    run = subprocess.run(
        [sys.executable, str(KERNELS), name], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    assert lines, run.stderr[-3000:]
    result = json.loads(lines[-1])
    assert result["ok"], result.get("error", "")[-3000:]
