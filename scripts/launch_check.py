"""The fast launch path on a GPU: hopper kernels launched through the ``CUfunction`` of the
stream's context, checked against float64 on several streams and threads, then timed.

    python scripts/launch_check.py            # exits 1 when any line says FAIL

For the default hopper kernel of a 512x512x256 fp16 ``x @ w.T`` and the same with CTA pairs
(``overrides={"cluster_dims": (2, 1)}``), each case poisons the output first (a NaN-filled block
of the output's size is freed on the stream just before, so torch's caching allocator hands it
to ``execute``), runs the bound (driver) launch and compares with torch in float64: on the
default stream, inside ``torch.cuda.stream(s)`` for a new stream, with ``stream=s``, and from
two threads at once (one on its own stream, one on the default stream). Then it says which
handle each stream launched (a ``CUfunction`` of the stream's context, or the ``CUkernel``
fallback) and the host microseconds per ``execute`` over 2,000 calls on the default stream and
on the new stream.
"""

from __future__ import annotations

import statistics
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion
from mmaplug.tune.measure import host_call_us, rel_error

M, N, K = 512, 512, 256
TOLERANCE = 2e-3  # relative Frobenius error against float64 (fp32 accumulation of fp16)
VARIANTS = {"default": None, "pairs": {"cluster_dims": (2, 1)}}
failures: list[str] = []


class Problem(NamedTuple):
    """The inputs, the float64 reference and an earlier output (the poison's shape and dtype)."""

    inputs: list[torch.Tensor]
    ref: torch.Tensor
    like: torch.Tensor


def report(ok: bool, what: str) -> None:
    print(f"{'OK  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def checked(
    compiled: Any, problem: Problem, stream: torch.cuda.Stream | None = None, explicit: bool = False
) -> str:
    """One execute on poisoned output memory, on *stream* made current (or passed as
    ``stream=`` when *explicit*); '' when right, else what is wrong."""
    inputs, ref, like = problem
    stream = stream or torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        poison = torch.full_like(like, float("nan"))
        poisoned = poison.data_ptr()
        del poison  # freed on this stream: the next allocation of its size gets the block
    if explicit:  # the current stream is another one: execute allocates on the one passed
        out = compiled.execute(inputs, stream=stream)[0]
    else:
        with torch.cuda.stream(stream):
            out = compiled.execute(inputs)[0]
    stream.synchronize()
    err = rel_error(out, ref)
    if not err <= TOLERANCE:  # NaN (the poison) fails too
        return f"rel.err {err:.2e} (> {TOLERANCE:g}), {int(out.isnan().sum())} NaN"
    return "" if out.data_ptr() == poisoned else "right, but the poisoned block was not reused"


def handles(compiled: Any) -> list[str]:
    """Which handle each kept stream / context launched: 'function' or 'kernel (fallback)'."""
    found = []
    for bound in compiled._bound.values():
        for launch in getattr(bound.launch, "launches", ()):
            launches = getattr(launch.run, "launches", None)
            if launches is None:
                continue
            kernel = int(launches.kernel)
            tables = [("stream", launches.by_stream)]
            tables += [(f"default {i}", table) for i, table in enumerate(launches.by_default)]
            for label, table in tables:
                for key, (_, function) in table.items():
                    kind = "kernel (fallback)" if int(function) == kernel else "function"
                    found.append(f"{label} {int(key):#x}: {kind}")
    return found


def in_threads(compiled: Any, problem: Problem) -> list[str]:
    """Two threads at once, 200 checked calls each: one on its own stream, one on the default
    stream (its first launch in that thread looks the context's function up)."""
    errors: list[str] = []
    start = threading.Barrier(2)

    def body(own_stream: bool) -> None:
        stream = torch.cuda.Stream() if own_stream else None
        start.wait()
        for i in range(200):
            what = checked(compiled, problem, stream)
            if what and "not reused" not in what:
                where = "own stream" if own_stream else "default stream"
                errors.append(f"thread on its {where}, call {i}: {what}")
                return

    threads = [threading.Thread(target=body, args=(own,)) for own in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def check(label: str, overrides: dict[str, Any] | None) -> None:
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16) / 16
    inputs, ref = [x, w], x.double() @ w.double().T
    try:
        compiled = mp.compile(linear_fusion(M, N, K, mp.float16, False), overrides=overrides)
    except mp.MatmulError as error:
        report(False, f"{label}: compile refused: {error}")
        return
    name = compiled.kernel_name
    report(compiled.spec.scheduler == "hopper", f"{label}: {name} is a hopper kernel")
    if overrides:
        report(tuple(compiled.params.cluster_dims) == (2, 1), f"{label}: cluster_dims (2, 1)")
    like = compiled.execute(inputs)[0]  # binds the launch (builds or loads the kernel)
    torch.cuda.synchronize()
    problem = Problem(inputs, ref, like)
    side = torch.cuda.Stream()
    cases: dict[str, Callable[[], str]] = {
        "default stream": lambda: checked(compiled, problem),
        "torch.cuda.stream(new stream)": lambda: checked(compiled, problem, side),
        "stream=<new stream>": lambda: checked(compiled, problem, side, explicit=True),
    }
    for case, run in cases.items():
        what = run()
        report(not what or "not reused" in what, f"{label}, {case}: {what or 'matches float64'}")
    errors = in_threads(compiled, problem)
    report(not errors, f"{label}, two threads: {errors[0] if errors else '400 calls match'}")
    kept = handles(compiled)
    report(bool(kept) and all(k.endswith("function") for k in kept), f"{label}: {kept}")
    us = statistics.median(host_call_us(lambda: compiled.execute(inputs), 2000, block=100))
    with torch.cuda.stream(side):
        us_side = statistics.median(host_call_us(lambda: compiled.execute(inputs), 2000, block=100))
    print(f"     {label}: execute {us:.1f} us (default stream), {us_side:.1f} us (new stream), "
          "median of 2,000 calls", flush=True)  # fmt: skip


def main() -> int:
    for label, overrides in VARIANTS.items():
        check(label, overrides)
    print(f"{'FAIL' if failures else 'OK'}: {len(failures)} check(s) failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
