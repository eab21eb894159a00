"""SM clock and board power while a kernel runs as a server runs it: each spec's kernel (ours,
then cuBLAS) captured as 20 calls in one CUDA graph and replayed back to back for ``SECONDS``,
while ``nvidia-smi`` samples the GPU every 50 ms. One line per side: µs per call over the
whole phase, the median SM clock, power and clock-event (throttle) reasons sampled in its
second half, and a call's energy at that power (mJ). It tells a kernel that takes more cycles
from one that runs at a lower clock: at the 700 W cap of the H100 and the H200 a call's time
is its energy over the cap (BENCHMARKS.md runs 235 and 237).

On the device machine, after the README's install::

    python scripts/clock_probe.py 4096x4096x4096/float8_e4m3fn-tensor \\
        4096x4096x4096/float8_e4m3fn-tensor+bias_gelu

Specs are ``scripts/ncu_probe.py``'s (``[BATCHx]MxNxK[/dtype-scale[+epilogue]][@how]``);
every output is checked against float64 first. ``--alternate`` adds, before and after each
spec's two phases, a phase of the two graphs replayed in turn (one replay each, as ``mmaplug
targets`` times them), each side's µs from event pairs around its replays, the clock and
power of the phase on both lines: whether a side's time moves with what ran before it (the
per-row rows of runs 250 and 257, docs/decisions.md)::

    python scripts/clock_probe.py --alternate 4096x28672x4096/float8_e4m3fn-row \\
        4096x28672x4096/float8_e4m3fn-tensor
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ncu_probe import checked_sides, parse_spec

from mmaplug.tune.measure import captured

SECONDS = 3.0
CALLS = 20
FIELDS = "clocks.sm,power.draw,temperature.gpu"
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # new, old drivers


def _reasons_field() -> str:
    """The clock-event reasons' field this driver knows (renamed in newer drivers)."""
    for field in REASONS[:-1]:
        query = ["nvidia-smi", f"--query-gpu={field}", "--format=csv"]
        if subprocess.run(query, capture_output=True).returncode == 0:
            return field
    return REASONS[-1]


def sampler() -> subprocess.Popen:
    """``nvidia-smi`` printing ``FIELDS`` and the active clock-event reasons every 50 ms."""
    query = f"--query-gpu={FIELDS},{_reasons_field()}"
    command = ["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "50"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def replayed(call: Callable[[], Any], seconds: float) -> tuple[float, float, float]:
    """*call* as ``CALLS`` calls in one CUDA graph, replayed for *seconds*: (start, end, µs a
    call over the phase)."""
    import torch

    graph, calls = captured(call, CALLS)
    graph.replay()
    torch.cuda.synchronize()
    start = time.time()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    replays = 0
    while time.time() - start < seconds:
        for _ in range(20):
            graph.replay()
        replays += 20
        torch.cuda.synchronize()
    last.record()
    torch.cuda.synchronize()
    return start, time.time(), first.elapsed_time(last) * 1e3 / (replays * calls)


def alternated(calls: dict[str, Callable[[], Any]], seconds: float) -> tuple[float, float, dict]:
    """Each of *calls* as ``CALLS`` calls in one CUDA graph, the graphs replayed in turn, one
    replay each, for *seconds* (as ``mmaplug targets`` replays ours and cuBLAS's, runs 250 and
    257): (start, end, µs a call per side, from an event pair around each replay)."""
    import torch

    graphs = {side: captured(call, CALLS) for side, call in calls.items()}
    for graph, _ in graphs.values():
        graph.replay()
    torch.cuda.synchronize()
    timed: dict[str, list[tuple[Any, Any, int]]] = {side: [] for side in graphs}
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(10):
            for side, (graph, held) in graphs.items():
                first = torch.cuda.Event(enable_timing=True)
                last = torch.cuda.Event(enable_timing=True)
                first.record()
                graph.replay()
                last.record()
                timed[side].append((first, last, held))
        torch.cuda.synchronize()
    us = {side: sum(a.elapsed_time(b) for a, b, _ in runs) * 1e3 / sum(n for *_, n in runs)
          for side, runs in timed.items()}  # fmt: skip
    return start, time.time(), us


def summary(samples: list[tuple[float, list[str]]], start: float, end: float) -> dict:
    """Medians of the samples stamped in the phase's second half (the clock settled), and the
    throttle-reason masks seen there."""
    mid = start + (end - start) / 2
    rows = [row for stamp, row in samples if mid <= stamp <= end]
    if not rows:
        return {}
    return {
        "sm_mhz": statistics.median(float(r[0]) for r in rows),
        "watts": statistics.median(float(r[1]) for r in rows),
        "celsius": statistics.median(float(r[2]) for r in rows),
        "reasons": sorted({r[3] for r in rows}),
        "samples": len(rows),
    }


def main(specs: list[str], alternate: bool = False) -> None:
    checked = checked_sides([parse_spec(spec) for spec in specs])
    smi = sampler()
    samples: list[tuple[float, list[str]]] = []

    def read() -> None:
        for line in smi.stdout:
            samples.append((time.time(), [f.strip() for f in line.split(",")]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    phases = []
    for spec, (_, compiled, sides) in zip(specs, checked, strict=True):
        names = {"ours": compiled.kernel_name, "cublas": "cublas"}
        for in_turn in (True, False, True) if alternate else (False,):  # (then each alone)
            if in_turn:
                start, end, both = alternated(sides, SECONDS)
                phases += [(spec, f"{side} in turn", names[side], start, end, us)
                           for side, us in both.items()]  # fmt: skip
                continue
            for side, call in sides.items():
                start, end, us = replayed(call, SECONDS)
                phases.append((spec, side, names[side], start, end, us))
    time.sleep(0.2)
    smi.terminate()
    for spec, side, name, start, end, us in phases:
        row = {"spec": spec, "side": side, "kernel": name, "us": round(us, 2)}
        settled = summary(samples, start, end)
        if settled:  # the energy of a call at the phase's median power
            settled["mj"] = round(us * settled["watts"] / 1e3, 2)
        print(json.dumps({**row, **settled}), flush=True)


if __name__ == "__main__":  # mp.prebuild's workers import this module
    args = sys.argv[1:]
    main([a for a in args if a != "--alternate"], alternate="--alternate" in args)
