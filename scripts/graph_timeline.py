"""Where a replayed graph's time goes: each kernel's start and end on the GPU while a spec's
20-call CUDA graph replays, ours and then cuBLAS's, as CUPTI records them (``torch.profiler``,
one kernel record per graph node). Per side: the kernels' durations (median, 10th and 90th
percentiles), the idle gap from one kernel's end to the next one's start, and the period from
start to start. ncu times one kernel at a time and leaves the gaps out; graph replays (``mmaplug
targets``) count them (docs/decisions.md, "The producer's copies from one elected thread").

On the device machine, after the README's install::

    python scripts/graph_timeline.py 128x4096x4096/float8_e4m3fn-tensor 16x4096x4096

Specs are ``scripts/ncu_probe.py``'s; every output is checked against float64 first. One JSON
line per spec and side.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ncu_probe import checked_sides, parse_spec

from mmaplug.tune.measure import captured

CALLS = 20  # calls a graph holds
REPLAYS = 50  # replays recorded a side, after WARMUP unrecorded
WARMUP = 20


def kernels(trace: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """The GPU kernels of a Chrome trace (``torch.profiler``'s export): (name, start, end) in
    µs, by start."""
    found = [
        (event["name"], float(event["ts"]), float(event["ts"]) + float(event["dur"]))
        for event in trace.get("traceEvents", [])
        if event.get("cat") == "kernel" and event.get("ph") == "X"
    ]
    return sorted(found, key=lambda kernel: kernel[1])


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[round(share * (len(ordered) - 1))]


def summary(records: Iterable[tuple[str, float, float]]) -> dict[str, dict[str, float]]:
    """Per kernel name: how many ran, their duration (median, 10th and 90th percentiles), and
    the median gap from each one's end to the next kernel's start and period from start to
    start (the next kernel of any name: a graph of one spec runs one or two kernels a call)."""
    ordered = sorted(records, key=lambda kernel: kernel[1])
    by_name: dict[str, dict[str, list[float]]] = {}
    for (name, start, end), after in zip(ordered, [*ordered[1:], None], strict=True):
        seen = by_name.setdefault(name, {"durations": [], "gaps": [], "periods": []})
        seen["durations"].append(end - start)
        if after is not None:
            seen["gaps"].append(after[1] - end)
            seen["periods"].append(after[1] - start)
    found = {}
    for name, seen in by_name.items():
        durations, gaps, periods = seen["durations"], seen["gaps"], seen["periods"]
        found[name] = {
            "count": len(durations),
            "us": round(statistics.median(durations), 3),
            "us_p10": round(_percentile(durations, 0.1), 3),
            "us_p90": round(_percentile(durations, 0.9), 3),
            "gap_us": round(statistics.median(gaps), 3) if gaps else None,
            "period_us": round(statistics.median(periods), 3) if periods else None,
        }
    return found


def timeline(call: Callable[[], Any]) -> list[tuple[str, float, float]]:
    """The kernels of ``REPLAYS`` replays of *call*'s ``CALLS``-call graph."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    graph, _ = captured(call, CALLS)
    for _ in range(WARMUP):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as file:
            return kernels(json.load(file))


def main(specs: list[str]) -> None:
    checked = checked_sides([parse_spec(spec) for spec in specs])
    for spec, (_, _, sides) in zip(specs, checked, strict=True):
        for side, call in sides.items():
            row = {"spec": spec, "side": side, "kernels": summary(timeline(call))}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":  # mp.prebuild's workers import this module
    main(sys.argv[1:])
