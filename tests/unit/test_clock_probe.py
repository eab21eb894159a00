"""scripts/clock_probe.py (BENCHMARKS.md run 235): the nvidia-smi samples of a replay phase read
without a GPU: only the phase's settled second half counts, and each field is its median."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("clock_probe")


def sample(stamp: float, mhz: int, watts: float, reasons: str = "0x0") -> tuple[float, list[str]]:
    return stamp, [str(mhz), str(watts), "60", reasons]


def test_a_phase_is_read_from_its_second_half_by_median(script: ModuleType) -> None:
    samples = [
        sample(9.9, 345, 90.0),  # before the phase
        sample(10.2, 1980, 400.0),  # first half: the clock still settling
        sample(11.1, 1515, 690.0, "0x4"),
        sample(11.5, 1500, 692.0, "0x4"),
        sample(11.9, 1410, 691.0, "0x0"),
        sample(12.4, 1980, 100.0),  # after the phase
    ]
    summary = script.summary(samples, start=10.0, end=12.0)
    assert summary["sm_mhz"] == 1500
    assert summary["watts"] == 691.0
    assert summary["reasons"] == ["0x0", "0x4"]
    assert summary["samples"] == 3


def test_a_phase_without_samples_reports_none(script: ModuleType) -> None:
    assert script.summary([sample(1.0, 1500, 690.0)], start=10.0, end=12.0) == {}
