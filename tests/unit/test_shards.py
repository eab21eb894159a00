"""The test suite's own ``PYTEST_SHARD`` (tests/conftest.py): the device scripts run the GPU
tier as shards side by side, so a shard that selects nothing must fail, not pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/unit/test_shards.py::test_one_of_two"


def _collect(shard: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTEST_SHARD": shard}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
               "--collect-only", TARGET]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


def test_one_of_two() -> None:
    """The test the shards below collect."""


@pytest.mark.parametrize("shard", ["1/1", "4/4", "x/2", "2"])
def test_a_shard_past_the_last_is_a_usage_error(shard: str) -> None:
    run = _collect(shard)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "0 <= i < n" in run.stderr and "PYTEST_SHARD=0/4" in run.stderr, run.stderr


def test_shards_from_zero_cover_the_tests() -> None:
    runs = [_collect(f"{i}/2") for i in range(2)]
    assert [r.returncode for r in runs] == [0, 5], [r.stdout for r in runs]  # 5: none collected
    assert "test_one_of_two" in runs[0].stdout
