"""The README's main-job command runs end to end on a machine without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.sim, pytest.mark.ptx]


def test_mmaplug_demo_passes_every_check() -> None:
    """`mmaplug demo` translates, plans, emits PTX and runs the kernel in the simulator."""
    env = dict(os.environ, MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-m", "mmaplug.cli.main", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert "patterns found: ['linear']" in out
    assert "mma(" in out and "tensor-core instruction: wgmma.mma_async" in out  # hopper on h200
    assert "Numba's CUDA simulator" in out and "all checks passed" in out
