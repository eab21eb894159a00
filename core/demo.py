"""``mmaplug demo``: the main job end to end on one example fusion (linear + bias + GELU)."""

from __future__ import annotations

import copy
import os
from typing import TextIO

import numpy as np

from .dtypes import DType
from .evaluate import evaluate
from .frontend import FusionDefinition
from .fusion import Fusion
from .gpu import cuda_device_count


def example_fusion(m: int, n: int, k: int, dtype: DType = DType.float16) -> Fusion:
    """``cast(gelu(linear(x, w, bias)), dtype)``: x ``[m, k]``, w ``[n, k]``, bias ``[n]``."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w = fd.define_tensor([n, k], dtype=dtype)
        bias = fd.define_tensor([n], dtype=dtype)
        y = fd.ops.gelu(fd.ops.linear(x, w, bias))
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def float64_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The same computation written directly in numpy float64 (no mmaplug involved)."""
    from math import erf, sqrt

    y = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    return 0.5 * y * (1.0 + np.vectorize(erf)(y / sqrt(2.0)))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """``|out - ref| / |ref|`` in the Frobenius norm; NaN anywhere gives inf."""
    out64 = out.astype(np.float64)
    if not np.all(np.isfinite(out64)):
        return float("inf")
    return float(np.linalg.norm(out64 - ref) / np.linalg.norm(ref))


def run(out: TextIO, *, device: str | None = None, m: int = 0, n: int = 0, k: int = 0) -> int:
    """Build, analyse, plan, compile and run the example; 0 when every check passed."""
    from .analysis import analyze
    from .patterns import find_matmul_patterns
    from .plan import explain, plan_problem
    from .translate import translate_matmul_patterns

    gpu = cuda_device_count() > 0
    simulate = not gpu
    if simulate:
        # No GPU: run the real generated kernel in Numba's CUDA simulator, at a tiny shape.
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    m, n, k = m or (1024 if gpu else 32), n or (1024 if gpu else 32), k or (1024 if gpu else 32)
    fusion = example_fusion(m, n, k)
    print("== the fusion, as written", fusion, sep="\n", file=out)
    patterns = find_matmul_patterns(fusion)
    print(f"\n== patterns found: {[p.kind for p in patterns]}", file=out)
    translated = copy.deepcopy(fusion)
    translate_matmul_patterns(translated)
    print("\n== after translation to MmaOp (same for every architecture)", translated, sep="\n", file=out)
    analysis = analyze(fusion)
    print(f"\n== problem: {analysis.problem.describe()}", file=out)
    print(f"   epilogue: {' -> '.join(analysis.epilogue.op_names)}", file=out)

    rng = np.random.default_rng(0)
    half = DType.float16.numpy
    x = rng.standard_normal((m, k)).astype(half)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(half)
    bias = rng.standard_normal(n).astype(half)
    ref = float64_reference(x, w, bias)
    ok = True
    for label, fus in (("as written", fusion), ("translated", translated)):
        err = relative_error(evaluate(fus, [x, w, bias])[0], ref)
        ok &= err < 1e-2
        print(f"   mp.evaluate ({label}) vs numpy float64: rel. error {err:.2e}", file=out)

    target = device or ("h200" if simulate else None)
    spec = plan_problem(analysis.problem, _device(target))
    print("\n== plan", explain(spec), sep="\n", file=out)
    ok &= _run_kernel(out, fusion, target, (x, w, bias), ref, simulate)
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED", file=out)
    return 0 if ok else 1


def _device(name: str | None):  # noqa: ANN202 - Device, imported lazily
    from .device import get_device

    return get_device(name)


def _run_kernel(out: TextIO, fusion: Fusion, device: str | None, inputs, ref, simulate: bool) -> bool:  # noqa: ANN001
    from .compile import compile_fusion
    from .cuda.tensors import to_host

    where = "Numba's CUDA simulator (no GPU here)" if simulate else "the GPU"
    compiled = compile_fusion(fusion, device)
    print(f"\n== kernel {compiled.kernel_name} ({len(compiled.ptx.splitlines())} lines of PTX)", file=out)
    if simulate:
        args = list(inputs)
    else:
        from numba import cuda

        args = [cuda.to_device(a) for a in inputs]
    result = to_host(compiled.execute(args)[0])
    err = relative_error(result, ref)
    print(f"   ran on {where}: rel. error vs float64 {err:.2e} (fp16 tolerance 1e-2)", file=out)
    return err < 1e-2
