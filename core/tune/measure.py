"""Measuring kernels: CUDA-event medians, host call times, and the checks a timing needs first
(outputs poisoned before a call, the error against a float64 reference).

``mmaplug bench`` and the tuner's timing jobs use these; so do the device probes in scripts/.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np


def cuda_median_ms(
    fn: Callable[..., Any], *, warmup: int = 5, reps: int = 30, inner: int = 1
) -> float:
    """Median of *reps* CUDA-event timings of *fn* after *warmup* calls; each timing spans
    *inner* back-to-back calls and is divided by it (keeps launch gaps of tiny kernels out)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def interleaved_ms(
    fns: Mapping[str, Callable[[], Any]], rounds: int, **timing: int
) -> dict[str, list[float]]:
    """:func:`cuda_median_ms` of each of *fns* in turn, *rounds* times over: per name, its
    median of every round (interleaving spreads clock and temperature drift over all alike).

    :param timing: ``warmup``, ``reps`` and ``inner`` of each :func:`cuda_median_ms`.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(cuda_median_ms(fn, **timing))
    return times


def host_call_us(fn: Callable[[], Any], reps: int, block: int = 0) -> list[float]:
    """Host microseconds of each of *reps* calls of *fn* (none synchronised).

    :param block: With a *block*, ``torch.cuda.synchronize()`` before every *block* calls and
        after the last, so the launch queue never fills; with 0, torch is not imported (a
        stand-in torch may be in its place).
    """
    sync = None
    if block:
        import torch

        sync = torch.cuda.synchronize
    samples: list[float] = []
    clock = time.perf_counter
    while len(samples) < reps:
        if sync is not None:
            sync()
        for _ in range(block or reps):
            t0 = clock()
            fn()
            samples.append((clock() - t0) * 1e6)
    if sync is not None:
        sync()
    return samples


def sample_summary(samples: Sequence[float]) -> dict[str, float]:
    """The median, 10th and 90th percentile of *samples* (the nearest lower rank)."""
    ordered = sorted(samples)
    rank = lambda q: ordered[int(q * (len(ordered) - 1))]  # noqa: E731
    return {"median": statistics.median(ordered), "p10": rank(0.1), "p90": rank(0.9)}


def host_dispatch_us(fn: Callable[[], Any], reps: int = 200) -> float:
    """Median host time of one call of *fn* (no synchronisation), in microseconds."""
    return statistics.median(host_call_us(fn, reps, block=reps))


def poison_free_memory(nbytes: int = 64 << 20) -> None:
    """Fill *nbytes* of torch's caching allocator with NaN and free them: the next outputs are
    allocated there, so an element a kernel leaves unwritten reads NaN."""
    import torch

    torch.full((nbytes // 4,), float("nan"), device="cuda")


def _host_float64(x: Any) -> np.ndarray:
    """A torch tensor (any device or dtype) or an array-like as a float64 NumPy array."""
    return np.asarray(x.double().cpu() if hasattr(x, "double") else x, np.float64)


def rel_error(got: Any, ref: Any) -> float:
    """Relative Frobenius error of *got* against the reference *ref*, in float64; NaN when an
    element of *got* is not finite (unwritten, or poisoned by :func:`poison_free_memory`). An
    all-zero reference divides by 1e-30 (an exact zero result scores 0).

    Two torch tensors are compared on their device; otherwise (NumPy arrays, or a mix) on the
    host.
    """
    if hasattr(got, "double") and hasattr(ref, "double"):
        got, ref = got.double(), ref.double()
        if not bool(got.isfinite().all()):
            return float("nan")
        return float((got - ref).norm() / max(float(ref.norm()), 1e-30))
    got64, ref64 = _host_float64(got), _host_float64(ref)
    if not np.all(np.isfinite(got64)):
        return float("nan")
    return float(np.linalg.norm(got64 - ref64) / max(float(np.linalg.norm(ref64)), 1e-30))


# copies of a call's operands that graph_us reads in turn span this many L2 sizes, so that no
# call finds its operands in L2 (cold_copies)
COLD_L2_SPAN: Final = 2
COLD_MAX_COPIES: Final = 64


def cold_copies(operand_bytes: int, l2_bytes: int) -> int:
    """How many copies of a call's operands (*operand_bytes* in all), read in turn, leave each
    call's operands out of L2: enough to span ``COLD_L2_SPAN`` L2 sizes (the other copies read
    in between evict them), at most ``COLD_MAX_COPIES``; 1 where one copy already spans them or
    L2's size is unknown (0)."""
    if operand_bytes <= 0 or l2_bytes <= 0:
        return 1
    return max(1, min(COLD_MAX_COPIES, -(-COLD_L2_SPAN * l2_bytes // operand_bytes)))


def captured(fn: Callable[[], Any] | Sequence[Callable[[], Any]], calls: int) -> tuple[Any, int]:
    """*calls* calls of *fn* (a sequence: in turn, each at least once) captured in one CUDA
    graph, after one eager call of each on the capture stream binds the launches: the graph,
    not yet replayed, and the calls it holds (``graph_us``)."""
    import torch

    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    calls = max(calls, len(fns))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for each in fns:
            each()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    return graph, calls


def interleaved_graph_us(
    fns: Mapping[str, Callable[[], Any] | Sequence[Callable[[], Any]]],
    *,
    calls: int = 20,
    reps: int = 50,
    warmup: int = 3,
) -> dict[str, float]:
    """:func:`graph_us` of each of *fns*, their graphs replayed in turn: *warmup* times each,
    then *reps* rounds of one timed replay each, every round starting one name later. Per
    name, the median of its replays' time over the calls they hold.

    Ours timed before torch's, always, put every drift of clock and temperature on one side
    (at the 700 W cap a plan timed first in a round ran up to 8% slower, BENCHMARKS.md runs
    242-244); replays in turn share it out alike.
    """
    import torch

    graphs = {name: captured(fn, calls) for name, fn in fns.items()}
    names = list(graphs)
    for _ in range(warmup):
        for name in names:
            graphs[name][0].replay()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        first = r % len(names)
        for name in names[first:] + names[:first]:
            graph, held = graphs[name]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / held)
    return {name: statistics.median(each) for name, each in times.items()}


def graph_us(
    fn: Callable[[], Any] | Sequence[Callable[[], Any]],
    *,
    calls: int = 20,
    reps: int = 50,
    warmup: int = 3,
) -> float:
    """GPU microseconds of one call of *fn* as a server runs it: *calls* calls captured in one
    CUDA graph (after one eager call on the capture stream binds the launch), the graph replayed
    *warmup* times, then the median of *reps* replays divided by *calls*.

    A per-call event pair around a problem under ~0.1 ms measures the host's call path; a graph
    replay leaves only the GPU's time (and the launches' gaps the graph keeps). A sequence of
    callables (the same call on copies of its operands, ``cold_copies``) is captured in turn,
    at least once each: then a call does not read operands the previous calls left in L2, as a
    server's step reads each layer's weight once. Two sides compared: ``interleaved_graph_us``.
    """
    return interleaved_graph_us({"": fn}, calls=calls, reps=reps, warmup=warmup)[""]
