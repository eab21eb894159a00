"""scripts/graph_timeline.py: a replayed graph's kernel records read without a GPU: only the
trace's GPU kernels count, and each kernel's gap runs from its end to the next one's start."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("graph_timeline")


def event(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


def test_only_the_gpu_kernels_of_a_trace_are_read_in_start_order(script: ModuleType) -> None:
    trace = {
        "traceEvents": [
            event("gemm", 30.0, 8.0),
            event("cudaGraphLaunch", 1.0, 4.0, cat="cuda_runtime"),
            event("gemm", 10.0, 9.0),
            {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5.0},  # an instant, no span
        ]
    }
    assert script.kernels(trace) == [("gemm", 10.0, 19.0), ("gemm", 30.0, 38.0)]


def test_durations_gaps_and_periods_per_kernel(script: ModuleType) -> None:
    # a graph of a split-K product: the gemm, then its reduce, three calls
    records = [
        ("gemm", 0.0, 10.0),
        ("reduce", 11.0, 14.0),
        ("gemm", 15.0, 26.0),
        ("reduce", 27.5, 30.5),
        ("gemm", 31.0, 40.0),
        ("reduce", 41.0, 44.0),
    ]
    found = script.summary(reversed(records))  # read in start order whatever the input's
    assert found["gemm"] == {
        "count": 3, "us": 10.0, "us_p10": 9.0, "us_p90": 11.0, "gap_us": 1.0, "period_us": 11.0,
    }  # fmt: skip
    assert found["reduce"]["count"] == 3 and found["reduce"]["us"] == 3.0
    assert found["reduce"]["gap_us"] == 0.75  # 1.0 and 0.5; the last reduce has no next kernel
    assert found["reduce"]["period_us"] == 3.75
