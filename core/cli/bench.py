"""``mmaplug bench``: our kernels against torch.matmul on the local GPU, in one run.

Times are CUDA-event medians after warm-up; every kernel's output is checked against a float64
reference before it is timed, so a fast wrong kernel cannot enter the table.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TextIO

import numpy as np

from mmaplug.ir.dtypes import DType
from mmaplug.ir.frontend import FusionDefinition
from mmaplug.ir.fusion import Fusion
from mmaplug.runtime.prebuild import Prebuilt, prebuild

EPILOGUE_SHAPES: Final = ((4096, 4096, 4096), (2048, 14336, 5120))
SHAPES: Final = (
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (128, 4096, 4096),
    (16384, 1024, 512),
    (2048, 14336, 5120),
)


def linear_fusion(m: int, n: int, k: int, dtype: DType, epilogue: bool) -> Fusion:
    """``x @ w.T`` (TN), optionally ``cast(gelu(x @ w.T + bias))``."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w = fd.define_tensor([n, k], dtype=dtype)
        if epilogue:
            bias = fd.define_tensor([n], dtype=dtype)
            fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, bias)), dtype))
        else:
            fd.add_output(fd.ops.linear(x, w))
    return fd.fusion


def _bench_fusions(shapes, dtypes) -> list[tuple[int, int, int, DType, bool]]:  # noqa: ANN001
    jobs = []
    for dtype in dtypes:
        for m, n, k in shapes:
            jobs.append((m, n, k, dtype, False))
            if (m, n, k) in EPILOGUE_SHAPES:
                jobs.append((m, n, k, dtype, True))
    return jobs


def scheduler_managers() -> dict[str, Any]:
    """One plugin manager per scheduler the local GPU offers, each with the others blocked.

    The environment's options apply (``MMAPLUG_DISABLE=ampere`` times hopper alone).
    """
    import os

    from mmaplug.planning.device import get_device
    from mmaplug.planning.manager import make_plugin_manager, options_from_environ

    options: dict[str, Any] = dict(options_from_environ(os.environ))
    blocked = [name for name in options.pop("block", ()) if name]
    names = ["hopper", "ampere"] if tuple(get_device().cc) == (9, 0) else ["ampere"]
    return {
        name: make_plugin_manager(block=[*blocked, *(o for o in names if o != name)], **options)
        for name in names
        if name not in blocked
    }


def prewarm(
    shapes: Sequence[tuple[int, int, int]],
    dtypes: Sequence[DType],
    workers: int,
    overrides: dict[str, object] | None = None,
) -> Prebuilt:
    """Build the benchmark kernels of every scheduler in *workers* processes (``mp.prebuild``),
    so the timed run loads each in milliseconds; returns ``mp.prebuild``'s ``Prebuilt``."""
    from mmaplug.runtime.compile import compile as compile_fusion

    managers = scheduler_managers().values()
    compiled = [
        compile_fusion(linear_fusion(m, n, k, dtype, epilogue), pm=pm, overrides=overrides)
        for m, n, k, dtype, epilogue in _bench_fusions(shapes, dtypes)
        for pm in managers
    ]
    return prebuild(compiled, workers=workers)


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


def save_to_out(name: str, data: Any) -> None:
    """Write *data* as JSON to ``$OUT/name`` when ``$OUT`` is set (the folder a device run's
    files come back from); values JSON cannot hold are written as their ``str``."""
    import json
    import os

    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as fh:
            json.dump(data, fh, indent=1, default=str)


def probe_arguments(description: str, argv: Sequence[str] | None = None) -> Any:
    """The command line of the variant probes (``scripts/cluster_probe.py``,
    ``scripts/epilogue_probe.py``): ``--variant LABEL=JSON`` (repeatable; MatmulParams
    overrides, parsed into ``args.variants`` as (label, dict) pairs) and ``--only MxNxK``
    (repeatable; shape-name prefixes, see :func:`shape_wanted`)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON")
    parser.add_argument("--only", action="append", default=[], metavar="MxNxK")
    args = parser.parse_args(argv)
    args.variants = [
        (label, json.loads(text)) for label, text in (v.split("=", 1) for v in args.variant)
    ]
    return args


def shape_wanted(m: int, n: int, k: int, only: Sequence[str]) -> bool:
    """Whether ``MxNxK`` starts with one of the *only* prefixes (every shape without any)."""
    return not only or any(f"{m}x{n}x{k}".startswith(o) for o in only)


def probe_variants(
    m: int,
    n: int,
    k: int,
    name: str,
    fused: bool,
    variants: Sequence[tuple[str, dict[str, object] | None]],
    rounds: int = 2,
) -> dict[str, object]:
    """One :func:`linear_fusion` problem in dtype *name* for the probe scripts: each variant's
    plan (a label and MatmulParams overrides, None for the default) checked against torch in
    float64, then all timed in *rounds* interleaved rounds beside torch (``F.linear``, or
    ``F.gelu(F.linear(x, w, b))`` when *fused*). The row holds ``<label>_err``, ``_kernel``,
    ``_ms`` and ``_ratio`` (torch's time over ours) per variant, and ``torch_ms``."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from mmaplug.runtime.compile import compile as compile_fusion

    dtype, tdtype = DType[name], getattr(torch, name)
    x = torch.randn(m, k, device="cuda", dtype=tdtype)
    w = torch.randn(n, k, device="cuda", dtype=tdtype) / 64
    bias = torch.randn(n, device="cuda", dtype=tdtype)
    inputs = [x, w, bias] if fused else [x, w]

    def reference() -> Any:
        return F.gelu(F.linear(x, w, bias)) if fused else F.linear(x, w)

    ref = reference().double()
    row: dict[str, object] = {"shape": f"{m}x{n}x{k}", "dtype": name, "fused": fused}
    fns: dict[str, Callable[[], object]] = {"torch": reference}
    for label, overrides in variants:
        compiled = compile_fusion(linear_fusion(m, n, k, dtype, fused), overrides=overrides)
        row[f"{label}_err"] = rel_error(compiled.execute(inputs)[0], ref)
        row[f"{label}_kernel"] = compiled.kernel_name
        fns[label] = functools.partial(compiled.execute, inputs)
    times = interleaved_ms(fns, rounds, reps=20, inner=10)
    torch_ms = statistics.median(times["torch"])
    row["torch_ms"] = round(torch_ms, 4)
    for label, _ in variants:
        ms = statistics.median(times[label])
        row[f"{label}_ms"], row[f"{label}_ratio"] = round(ms, 4), round(torch_ms / ms, 3)
    return row


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


def run(
    out: TextIO,
    *,
    shapes: Sequence[tuple[int, int, int]] = SHAPES,
    dtypes: Sequence[DType] = (DType.float16, DType.bfloat16),
    reps: int = 30,
    overrides: dict[str, object] | None = None,
) -> list[dict]:
    """Benchmark every shape × dtype; print and return the rows.

    :param overrides: MatmulParams changes applied to every compile (caller overrides).
    """
    import torch
    import torch.nn.functional as F  # noqa: N812

    from mmaplug.runtime.compile import compile as compile_fusion

    torch_dtype = {DType.float16: torch.float16, DType.bfloat16: torch.bfloat16}
    rows: list[dict] = []
    managers = scheduler_managers()
    header = (
        f"{'kernel':<22}{'sched':<8}{'dtype':<10}{'M':>7}{'N':>7}{'K':>7}{'ours ms':>10}"
        f"{'torch ms':>10}{'ours TF/s':>11}{'torch TF/s':>11}{'ratio':>8}{'rel.err':>10}"
    )
    print(header, file=out, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in dtypes:
        tdt = torch_dtype[dtype]
        for m, n, k in shapes:
            x = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
            w = torch.randn(n, k, device="cuda", dtype=tdt, generator=gen) / k**0.5
            bias = torch.randn(n, device="cuda", dtype=tdt, generator=gen)
            ref = x.double() @ w.double().T
            flops = 2.0 * m * n * k
            for label, epilogue in (("linear", False), ("linear+bias+gelu", True)):
                if epilogue and (m, n, k) not in EPILOGUE_SHAPES:
                    continue
                inputs = [x, w, bias] if epilogue else [x, w]
                expected = F.gelu(ref + bias.double()) if epilogue else ref
                if epilogue:
                    theirs = cuda_median_ms(
                        lambda x=x, w=w, b=bias: F.gelu(F.linear(x, w, b)), reps=reps
                    )
                else:
                    theirs = cuda_median_ms(lambda x=x, w=w: torch.matmul(x, w.T), reps=reps)
                for sched, pm in managers.items():
                    compiled = compile_fusion(
                        linear_fusion(m, n, k, dtype, epilogue), pm=pm, overrides=overrides
                    )
                    result = compiled.execute(inputs)[0]
                    err = rel_error(result, expected)
                    ours = cuda_median_ms(lambda c=compiled, i=inputs: c.execute(i), reps=reps)
                    row = dict(
                        kernel=label,
                        scheduler=compiled.spec.scheduler,
                        dtype=dtype.label,
                        m=m,
                        n=n,
                        k=k,
                        ours_ms=ours,
                        torch_ms=theirs,
                        ours_tflops=flops / ours / 1e9,
                        torch_tflops=flops / theirs / 1e9,
                        ratio=theirs / ours,
                        rel_err=err,
                        params=compiled.params.name,
                    )
                    rows.append(row)
                    print(
                        f"{label:<22}{sched:<8}{dtype.label:<10}{m:>7}{n:>7}{k:>7}{ours:>10.3f}"
                        f"{theirs:>10.3f}{row['ours_tflops']:>11.1f}{row['torch_tflops']:>11.1f}"
                        f"{row['ratio']:>8.2f}{err:>10.1e}",
                        file=out,
                        flush=True,
                    )
    for fused in (r for r in rows if r["kernel"] != "linear"):
        bare = next(
            r
            for r in rows
            if r["kernel"] == "linear"
            and (r["scheduler"], r["dtype"], r["m"], r["n"], r["k"])
            == (fused["scheduler"], fused["dtype"], fused["m"], fused["n"], fused["k"])
        )
        print(
            f"fused bias+gelu epilogue, {fused['scheduler']} {fused['dtype']} "
            f"{fused['m']}x{fused['n']}x{fused['k']}: "
            f"{fused['ours_ms'] / bare['ours_ms']:.3f}x our bare matmul, "
            f"{fused['torch_ms'] / fused['ours_ms']:.2f}x as fast as torch eager",
            file=out,
        )
    return rows


def dispatch_overhead(out: TextIO) -> float:
    """Host time of a cached ``execute`` (compile hit → launch) on a small problem."""
    import torch

    from mmaplug.runtime.compile import compile as compile_fusion

    compiled = compile_fusion(linear_fusion(256, 256, 256, DType.float16, False))
    x = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    w = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    compiled.execute([x, w])
    torch.cuda.synchronize()
    us = host_dispatch_us(lambda: compiled.execute([x, w]))
    print(f"cached execute(): {us:.1f} us of host time per call (median of 200)", file=out)
    return us


def plot(rows: Sequence[dict], path: str) -> None:
    """Bar chart of TFLOP/s, ours next to torch, one pair per benchmark row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    short = {"linear": "mm", "linear+bias+gelu": "mm+gelu", "float16": "f16", "bfloat16": "bf16"}
    labels = [
        f"{r['scheduler']} {short[r['kernel']]} {short[r['dtype']]}\n{r['m']}x{r['n']}\nx{r['k']}"
        for r in rows
    ]
    pos = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    ax.bar(pos - 0.2, [r["ours_tflops"] for r in rows], 0.4, label="mmaplug")
    ax.bar(pos + 0.2, [r["torch_tflops"] for r in rows], 0.4, label="torch (cuBLAS)")
    ax.set_xticks(pos, labels, fontsize=7)
    ax.set_title("H200: mmaplug vs torch.matmul (CUDA-event medians)")
    ax.set_ylabel("TFLOP/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
