"""GPU time of small problems as servers run them: CUDA-graph replays, ours beside cuBLAS.

A per-call CUDA-event pair around one ``execute`` of a problem under ~0.1 ms measures the host's
call path, not the kernel. Here each side's call is captured ``--calls`` times into one CUDA graph
(after one eager call binds the launch and a check against float64), the graph replayed
``--reps`` times, and the median replay divided by ``--calls``: GPU time per call. TB/s counts
the bytes a call must move at least (A, B and the output once each).

    python scripts/graph_decode.py                      # the default decode / skinny / deep-K set
    python scripts/graph_decode.py --shape 1x8192x8192 --dtype float16
"""

from __future__ import annotations

import argparse
import statistics

import torch

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion

SHAPES = ("1x4096x4096", "1x8192x8192", "1x4096x14336", "16x8192x8192", "64x8192x8192",
          "256x256x16384")  # fmt: skip


def graph_us(call, calls: int, reps: int) -> float:  # noqa: ANN001
    """Median GPU microseconds of one *call*, from replays of a graph holding *calls* of it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # binds the launch outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def row(shape: str, dtype_name: str, calls: int, reps: int) -> str:
    """One problem's line: checked against float64, then both sides timed as graph replays."""
    m, n, k = (int(v) for v in shape.split("x"))
    dtype = getattr(torch, dtype_name)
    compiled = mp.compile(linear_fusion(m, n, k, getattr(mp, dtype_name), epilogue=False))
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    (out,) = compiled.execute([x, w])
    ref = x.double() @ w.double().T
    err = float((out.double() - ref).norm() / ref.norm())
    ours = graph_us(lambda: compiled.execute([x, w]), calls, reps)
    theirs = graph_us(lambda: torch.matmul(x, w.T), calls, reps)
    moved = (m * k + n * k + m * n) * x.element_size()
    return (
        f"{shape:>16} {ours:9.1f} {theirs:10.1f} {moved / ours / 1e6:10.2f} "
        f"{moved / theirs / 1e6:11.2f} {theirs / ours:6.2f}  {err:.1e}  {compiled.kernel_name}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="MxNxK (repeatable)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    print(f"{'problem':>16} {'ours us':>9} {'cuBLAS us':>10} {'ours TB/s':>10} "
          f"{'cuBLAS TB/s':>11} {'ratio':>6}  rel.err  kernel")  # fmt: skip
    for shape in args.shape or SHAPES:
        print(row(shape, args.dtype, args.calls, args.reps), flush=True)


if __name__ == "__main__":
    main()
