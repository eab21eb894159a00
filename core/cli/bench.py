"""``mmaplug bench``: our kernels against torch.matmul on the local GPU, in one run.

Times are CUDA-event medians after warm-up; every kernel's output is checked against a float64
reference before it is timed, so a fast wrong kernel cannot enter the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import numpy as np

from mmaplug.ir.dtypes import DType
from mmaplug.ir.frontend import FusionDefinition
from mmaplug.ir.fusion import Fusion
from mmaplug.progress import Progress
from mmaplug.runtime.prebuild import Prebuilt, prebuild
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.measure import (
    cold_copies,
    cuda_median_ms,
    host_dispatch_us,
    interleaved_graph_us,
    rel_error,
)

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

    from mmaplug.hooks.manager import make_plugin_manager, options_from_environ
    from mmaplug.planning.device import get_device

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


def shape_problems(
    shapes: Sequence[tuple[int, int, int]], dtypes: Sequence[DType]
) -> list[TuneProblem]:
    """The benchmark's shapes as TN corpus problems (bias+GELU too where EPILOGUE_SHAPES says)."""
    return [
        TuneProblem(m=m, n=n, k=k, dtype=dtype.name, epilogue="bias_gelu" if fused else "none")
        for m, n, k, dtype, fused in _bench_fusions(shapes, dtypes)
    ]


def prewarm_problems(
    problems: Sequence[TuneProblem], workers: int, overrides: dict[str, object] | None = None
) -> Prebuilt:
    """``prewarm`` for corpus problems: their kernels built in *workers* processes."""
    from mmaplug.runtime.compile import compile as compile_fusion

    compiled = [compile_fusion(p.fusion(), overrides=overrides) for p in problems]
    return prebuild(compiled, workers=workers)


def corpus_rows(
    problems: Sequence[TuneProblem],
    progress: Progress,
    table: TextIO,
    *,
    workers: int,
    reps: int,
    graph: bool,
    overrides: dict[str, object] | None = None,
) -> list[dict]:
    """``run_corpus``'s rows of *problems* (its table to *table*), their kernels built first in
    *workers* processes where more than one (said through *progress*)."""
    if workers > 1:
        with progress.step(f"building the kernels in {workers} processes"):
            done = prewarm_problems(problems, workers, overrides)
        progress.say(f"built {len(done.built)} kernels in {done.seconds:.1f} s")
    return run_corpus(table, problems, reps=reps, graph=graph, overrides=overrides)


#: Relative Frobenius error above which a corpus row is wrong and is not timed (16-bit outputs).
CORPUS_TOLERANCE: Final = 1e-2


def min_bytes(problem: TuneProblem) -> int:
    """The bytes one call must move at least: A, B (each of ``swiglu``'s two), the output and a
    bias, once each (FP8: 1-byte operands, a bfloat16 output and bias, and the float32
    scales)."""
    m, n, k, batch = problem.m, problem.n, problem.k, problem.batch
    bias = n if problem.epilogue == "bias_gelu" else 0
    if problem.is_fp8:
        return m * k + problem.products * k * n + 2 * (m * n + bias) + 4 * problem.scale_count
    itemsize = DType[problem.dtype].itemsize
    return (batch * (m * k + problem.products * k * n + m * n) + bias) * itemsize


def torch_call(problem: TuneProblem, inputs: Sequence[Any]) -> Callable[[], Any]:
    """torch's best composition of *problem* on *inputs*: matmul (cuBLAS) or, FP8,
    ``torch._scaled_mm`` (cuBLASLt per tensor, CUTLASS per row) with ``use_fast_accum=True``
    (the tensor cores' FP8 accumulation, as ours: without it cuBLASLt promotes partial sums
    to float32, more accurate at deep K and slower), then GELU when fused (``swiglu``: two
    matmuls, silu and mul). Torch has no block-scaled kernel: a ``block`` problem runs cuBLASLt
    per tensor (unit scales) with ``use_fast_accum=False``, the same promotion of partial sums
    to float32 that block scaling needs (ours every 128 of K), the nearest thing torch runs.

    cuBLASLt multiplies no two e5m2 operands, so an e5m2 problem's B goes to torch re-encoded
    as e4m3 (same bytes, same tensor-core rate: e5m2 x e4m3 is what torch offers)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    fused = problem.epilogue == "bias_gelu"
    if problem.epilogue == "swiglu" and not problem.is_fp8:  # 2 matmuls, silu, mul

        def ffn(i: Sequence[Any] = inputs) -> Any:
            return F.silu(torch.matmul(i[0], i[1])) * torch.matmul(i[0], i[2])

        return ffn
    if not problem.is_fp8:

        def theirs(i: Sequence[Any] = inputs) -> Any:
            product = torch.matmul(i[0], i[1])
            return F.gelu(product + i[2]) if fused else product

        return theirs
    a, b, scale_a, scale_b = inputs[:4]
    block = problem.scale == "block"
    if block:
        scale_a = scale_b = torch.ones((), device="cuda")

    def operand(w: Any) -> Any:  # (still column-major, as _scaled_mm asks)
        e5m2 = problem.dtype == "float8_e5m2"
        return w.t().float().to(torch.float8_e4m3fn).t() if e5m2 else w

    def mm(w: Any, scale_w: Any, bias: Any = None) -> Any:
        return torch._scaled_mm(
            a,
            w,
            scale_a=scale_a,
            scale_b=scale_w,
            bias=bias,
            out_dtype=torch.bfloat16,
            use_fast_accum=not block,
        )

    b = operand(b)
    if problem.epilogue == "swiglu":  # two _scaled_mm, silu, mul
        b3, scale_b3 = operand(inputs[4]), inputs[5]
        return lambda: F.silu(mm(b, scale_b)) * mm(b3, scale_b3)
    bias = inputs[4] if fused else None

    def scaled() -> Any:
        product = mm(b, scale_b, bias)
        return F.gelu(product) if fused else product

    return scaled


def run_corpus(
    out: TextIO,
    problems: Sequence[TuneProblem],
    *,
    reps: int = 30,
    graph: bool = False,
    overrides: dict[str, object] | None = None,
) -> list[dict]:
    """Each problem of a tuning corpus (any layout, batch, epilogue) checked against float64, then
    timed per call (CUDA events) and, with *graph*, as CUDA-graph replays (GPU time only), ours
    beside torch (``torch_call``: cuBLAS, torch._scaled_mm for FP8, and torch's GELU when fused)
    in the same run; TF/s and TB/s (the least bytes a call moves). The replays run twice: on one
    set of operands (a weight under L2's size stays there from call to call) and, "cold", on
    copies read in turn (``cold_copies``: no call finds its operands in L2, as in a server's
    step). Prints and returns the rows; a wrong row is not timed."""
    from mmaplug.runtime.compile import compile as compile_fusion
    from mmaplug.tune.work import problem_inputs, reference

    width = max([36, *(len(p.key) + 1 for p in problems)])  # FP8 keys run to about 52
    head = f"{'problem':<{width}}{'sched':<7}{'ours ms':>9}{'torch ms':>9}{'ratio':>7}"
    if graph:
        head += f"{'ours us':>9}{'torch us':>9}{'ratio':>7}{'ours TB/s':>10}{'torch TB/s':>11}"
        head += f"{'cold us':>9}{'torch':>9}{'ratio':>7}"
    print(f"{head}{'TF/s':>8}{'rel.err':>9}  kernel", file=out, flush=True)
    rows: list[dict] = []
    for problem in problems:
        inputs = problem_inputs(problem)
        theirs = torch_call(problem, inputs)
        ref = reference(problem, inputs)
        compiled = compile_fusion(problem.fusion(), overrides=overrides)
        row: dict[str, Any] = {
            "problem": problem.key,
            **problem.as_dict(),
            "scheduler": compiled.spec.scheduler,
            "params": compiled.params.name,
            "kernel_name": compiled.kernel_name,
            "rel_err": rel_error(compiled.execute(inputs)[0], ref),
            "bytes": min_bytes(problem),
        }
        rows.append(row)
        if not row["rel_err"] <= CORPUS_TOLERANCE:
            print(f"{problem.key:<{width}}WRONG: relative error {row['rel_err']:.2e}", file=out)
            continue
        ours_call = lambda c=compiled, i=inputs: c.execute(i)  # noqa: E731
        row["ours_ms"] = cuda_median_ms(ours_call, reps=reps)
        row["torch_ms"] = cuda_median_ms(theirs, reps=reps)
        row["ratio"] = row["torch_ms"] / row["ours_ms"]
        line = (
            f"{problem.key:<{width}}{row['scheduler']:<7}{row['ours_ms']:>9.4f}"
            f"{row['torch_ms']:>9.4f}{row['ratio']:>7.2f}"
        )
        best_ms = row["ours_ms"]
        if graph:
            warm = interleaved_graph_us({"ours": ours_call, "torch": theirs})
            row["ours_graph_us"] = ours_us = warm["ours"]
            row["torch_graph_us"] = theirs_us = warm["torch"]
            row["graph_ratio"] = row["torch_graph_us"] / row["ours_graph_us"]
            row["ours_tbps"] = row["bytes"] / row["ours_graph_us"] / 1e6
            row["torch_tbps"] = row["bytes"] / row["torch_graph_us"] / 1e6
            best_ms = row["ours_graph_us"] / 1e3
            copies = operand_copies(inputs)
            row["cold_copies"] = len(copies)
            if len(copies) == 1:  # the operands span two L2 sizes: the replays above were cold
                row["ours_cold_us"], row["torch_cold_us"] = ours_us, theirs_us
            else:
                ours_calls = [lambda c=compiled, i=i: c.execute(i) for i in copies]
                cold = interleaved_graph_us(
                    {"ours": ours_calls, "torch": [torch_call(problem, i) for i in copies]}
                )
                row["ours_cold_us"], row["torch_cold_us"] = cold["ours"], cold["torch"]
            row["cold_ratio"] = row["torch_cold_us"] / row["ours_cold_us"]
            line += (
                f"{row['ours_graph_us']:>9.1f}{row['torch_graph_us']:>9.1f}"
                f"{row['graph_ratio']:>7.2f}{row['ours_tbps']:>10.2f}{row['torch_tbps']:>11.2f}"
                f"{row['ours_cold_us']:>9.1f}{row['torch_cold_us']:>9.1f}{row['cold_ratio']:>7.2f}"
            )
        row["ours_tflops"] = problem.flops / best_ms / 1e9
        print(
            f"{line}{row['ours_tflops']:>8.1f}{row['rel_err']:>9.1e}  {compiled.kernel_name}",
            file=out,
            flush=True,
        )
    return rows


def operand_copies(inputs: Sequence[Any]) -> list[Sequence[Any]]:
    """*inputs* and copies of them (same strides, same values), as many in all as
    ``cold_copies`` asks for this device's L2."""
    import torch

    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    count = cold_copies(sum(t.nbytes for t in tensors), l2_bytes)
    copies = [
        [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs] for _ in range(count - 1)
    ]
    return [inputs, *copies]


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
