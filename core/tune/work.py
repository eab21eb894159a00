"""The tuning jobs' work, run in worker processes: build a candidate's kernel, or time it.

A job is a plain dict (it crosses process and Ray boundaries): ``problem`` (TuneProblem fields),
``params`` (MatmulParams fields), ``params_name``, ``scheduler`` (default hopper), ``device`` (a
preset for builds; timing uses the local GPU) and, for builds, ``launch`` (also launch once on
zeros so the cubin of the config launches pick lands in the disk cache).
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from mmaplug.errors import MatmulError
from mmaplug.ir.ops import SCALE_BLOCK
from mmaplug.tune.corpus import TuneProblem

TOLERANCE: Final = 2e-2  # relative Frobenius error against torch in float32 (FP8: float64)
#: Per-call times below this are re-timed as CUDA-graph replays: on the H200 a call's host
#: path costs 20-50 us, so an event pair around one call of a smaller problem times the host
#: (BENCHMARKS.md, "Decode kernel, the serving corpus"; issue 25)
GRAPH_BELOW_MS: Final = 0.2
_VERSIONED: Final = ("mmaplug", "numba", "numba-cuda", "cuda-bindings", "nvidia-nvjitlink", "torch")
#: The built-in scheduler plugins, each registering the scheduler of its name.
BUILTIN_SCHEDULERS: Final = ("ampere", "hopper", "decode")


def others(scheduler: str) -> list[str]:
    """The built-in scheduler plugins to block so that *scheduler* plans what it accepts (none
    of higher priority takes it first)."""
    return [name for name in BUILTIN_SCHEDULERS if name != scheduler]


def tuning_manager(scheduler: str = "hopper") -> Any:
    """The plugin manager tuning compiles with for *scheduler*: built-ins only, the other
    schedulers blocked, strict."""
    from mmaplug.hooks.manager import make_plugin_manager

    return make_plugin_manager(block=others(scheduler), load_entrypoints=False, strict=True)


def versions() -> dict[str, str]:
    """Installed versions of what builds and times a kernel (``none`` when absent)."""
    found = {}
    for dist in _VERSIONED:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "none"
    return found


def worker_name() -> str:
    """``host:pid`` (with ``/gpuN`` when the worker sees one GPU)."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"{socket.gethostname()}:{os.getpid()}" + (f"/gpu{gpu}" if gpu.isdigit() else "")


def _compiled(job: dict[str, Any], device: str | None) -> Any:
    from mmaplug.runtime.compile import compile as compile_fusion

    problem = TuneProblem(**job["problem"])
    pm = tuning_manager(job.get("scheduler", "hopper"))
    compiled = compile_fusion(problem.fusion(), device, pm=pm, overrides=job["params"])
    if compiled.params.name != job["params_name"]:
        raise MatmulError(f"planned {compiled.params.name}, not the candidate {job['params_name']}")
    return compiled


def build(job: dict[str, Any]) -> dict[str, Any]:
    """Generate the candidate's kernel and its PTX (no GPU needed); with ``launch``, also run
    it once on zeros so the timing worker loads a cached cubin."""
    start = time.perf_counter()
    compiled = _compiled(job, None if job.get("launch") else job["device"])
    ptx = compiled.ptx
    if job.get("launch"):
        inputs = problem_inputs(TuneProblem(**job["problem"]), zeros=True)
        compiled.execute(inputs)
    return {
        "status": "ok",
        "kernel": compiled.kernel_name,
        "ptx_bytes": len(ptx),
        "build_s": time.perf_counter() - start,
        "worker": worker_name(),
    }


def problem_inputs(problem: TuneProblem, *, zeros: bool = False) -> list[Any]:
    """Torch tensors of the problem's fusion, in its layout (strided views), on the GPU; in the
    fusion's order (an FP8 problem's: A, B, scale_a, scale_b, then the bias when fused, or B3
    and its scale_b for ``swiglu``; a 16-bit ``swiglu``'s: A, B1, B3)."""
    import torch

    from mmaplug.analysis.problem import Layout

    if problem.is_fp8:
        return _scaled_mm_inputs(problem, zeros=zeros)
    dtype = getattr(torch, problem.dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    batch = [problem.batch] if problem.batch > 1 else []
    layout = Layout(problem.layout)

    def tensor(rows: int, cols: int, inner_last: bool, scale: float) -> Any:
        shape = [*batch, rows, cols] if inner_last else [*batch, cols, rows]
        if zeros:
            t = torch.zeros(shape, device="cuda", dtype=dtype)
        else:
            t = torch.randn(shape, device="cuda", dtype=dtype, generator=gen) * scale
        return t if inner_last else t.transpose(-1, -2)

    a = tensor(problem.m, problem.k, layout.a_k_inner, 1.0)
    b = tensor(problem.k, problem.n, not layout.b_k_inner, problem.k**-0.5)
    inputs = [a, b]
    if problem.epilogue == "swiglu":
        inputs.append(tensor(problem.k, problem.n, not layout.b_k_inner, problem.k**-0.5))
    if problem.epilogue == "bias_gelu":
        make = torch.zeros if zeros else torch.randn
        inputs.append(make(problem.n, device="cuda", dtype=dtype))
    return inputs


def _scaled_mm_inputs(problem: TuneProblem, *, zeros: bool) -> list[Any]:
    """scaled_mm's operands: A ``[M, K]`` and a weight ``[N, K]`` as B ``[K, N]`` (its
    transpose: K-major), float32 scales of the problem's ``scale_shapes`` (per tensor, row or
    block), a bfloat16 bias ``[N]``. Scale_b carries ``K**-0.5`` so outputs stay near 1 (the FP8
    data itself is unit normal, well inside e4m3's normal range)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    m, n, k = problem.m, problem.n, problem.k

    def tensor(*shape: int, scale: bool = False) -> Any:  # float32; scales uniform in [0.5, 1.5)
        if zeros:
            return torch.zeros(shape, device="cuda")
        if scale:
            return torch.rand(shape, device="cuda", generator=gen) + 0.5
        return torch.randn(shape, device="cuda", generator=gen)

    fp8 = getattr(torch, problem.dtype)
    shape_a, shape_b = problem.scale_shapes
    inputs = [
        tensor(m, k).to(fp8),
        tensor(n, k).to(fp8).t(),
        tensor(*shape_a, scale=True),
        tensor(*shape_b, scale=True) * k**-0.5,
    ]
    if problem.epilogue == "bias_gelu":
        inputs.append(tensor(n).to(torch.bfloat16))
    if problem.epilogue == "swiglu":
        inputs += [tensor(n, k).to(fp8).t(), tensor(*shape_b, scale=True) * k**-0.5]
    return inputs


def reference(problem: TuneProblem, inputs: Sequence[Any], dtype: Any = None) -> Any:
    """The problem's exact result from *inputs* (``problem_inputs``), computed in *dtype*
    (default float64): the product, times the scales (FP8), plus the bias then GELU (fused);
    ``swiglu``: silu of the first product times the second."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    a, b, *rest = (t.to(dtype or torch.float64) for t in inputs)
    if problem.scale == "block":  # each K block's product scaled before the blocks are added
        scale_a, scale_b, *rest = rest
        out = sum(
            (a[:, k0 : k0 + SCALE_BLOCK] @ b[k0 : k0 + SCALE_BLOCK])
            * scale_a[:, j : j + 1]
            * scale_b[j].repeat_interleave(SCALE_BLOCK)[: problem.n]
            for j, k0 in enumerate(range(0, problem.k, SCALE_BLOCK))
        )
    elif problem.is_fp8:
        out = torch.matmul(a, b)
        scale_a, scale_b, *rest = rest
        out = out * scale_a * scale_b
        if problem.epilogue == "swiglu":
            b3, scale_b3 = rest
            return F.silu(out) * (torch.matmul(a, b3) * scale_a * scale_b3)
    else:
        out = torch.matmul(a, b)
    if problem.epilogue == "swiglu":
        return F.silu(out) * torch.matmul(a, rest[0])
    return F.gelu(out + rest[0]) if problem.epilogue == "bias_gelu" else out


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """Check the candidate's output against torch (float32; float64 for FP8), then time it: the
    median of ``reps`` CUDA event timings after warm-up, or, where one call takes under
    ``GRAPH_BELOW_MS``, the GPU time of a call replayed in a CUDA graph (there an event pair
    around one call times the host's call path, not the kernel). A wrong result is status
    ``wrong``, never timed."""
    import torch

    from mmaplug.tune.measure import cuda_median_ms, graph_us

    problem = TuneProblem(**job["problem"])
    compiled = _compiled(job, None)
    inputs = problem_inputs(problem)
    ref = reference(problem, inputs, torch.float64 if problem.is_fp8 else torch.float32)
    out = compiled.execute(inputs)[0].float()
    err = float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))
    result: dict[str, Any] = {"worker": worker_name(), "versions": versions()}
    if not err <= TOLERANCE:
        return {**result, "status": "wrong", "error": f"relative error {err:.3g} > {TOLERANCE}"}
    ms = cuda_median_ms(lambda: compiled.execute(inputs), reps=int(job.get("reps", 30)))
    if ms < GRAPH_BELOW_MS:
        ms = graph_us(lambda: compiled.execute(inputs)) / 1e3
    return {**result, "status": "ok", "time_ms": ms, "tflops": problem.flops / ms / 1e9}


#: The work of each kind of job, by the name jobs carry across process and Ray boundaries.
WORK: Final[dict[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "build": build,
    "measure": measure,
}
