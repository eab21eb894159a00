"""Every runnable example runs to completion (planning only on a machine without a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    """The example exits 0 and prints the problem it planned."""
    env = dict(os.environ, MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "precision=HSH" in done.stdout and "kernel" in done.stdout
