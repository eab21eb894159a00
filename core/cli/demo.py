"""``mmaplug demo``: the main job end to end on one example fusion (linear + bias + GELU)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import TextIO

import numpy as np

from mmaplug.cuda.presence import cuda_device_count
from mmaplug.ir.dtypes import DType
from mmaplug.ir.evaluate import evaluate
from mmaplug.ir.frontend import FusionDefinition
from mmaplug.ir.fusion import Fusion
from mmaplug.tune.measure import rel_error


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


def run(out: TextIO, *, device: str | None = None, m: int = 0, n: int = 0, k: int = 0) -> int:
    """Build, analyse, plan, compile and run the example; 0 when every check passed."""
    from mmaplug.analysis.matmul_analysis import analyze
    from mmaplug.analysis.translate import find_matmul_patterns, translate_matmul_patterns
    from mmaplug.planning.plan import explain

    gpu = cuda_device_count() > 0
    m, n, k = m or (1024 if gpu else 32), n or (1024 if gpu else 32), k or (1024 if gpu else 64)
    fusion = example_fusion(m, n, k)
    print("== the fusion, as written", fusion, sep="\n", file=out)
    patterns = find_matmul_patterns(fusion)
    print(f"\n== patterns found: {[p.kind for p in patterns]}", file=out)
    translated = copy.deepcopy(fusion)
    translate_matmul_patterns(translated)
    print(
        "\n== after translation to MmaOp (the same for every GPU)", translated, sep="\n", file=out
    )
    analysis = analyze(fusion)
    print(f"\n== problem: {analysis.problem.describe()}", file=out)
    print(f"   epilogue: {' -> '.join(analysis.epilogue.op_names)}", file=out)

    x, w, bias = example_inputs(m, n, k)
    ref = float64_reference(x, w, bias)
    ok = True
    for label, fus in (("as written", fusion), ("translated", translated)):
        err = rel_error(evaluate(fus, [x, w, bias])[0], ref)
        ok &= err < TOLERANCE
        print(f"   mp.evaluate ({label}) vs numpy float64: rel. error {err:.2e}", file=out)

    from mmaplug.runtime.compile import compile as compile_fusion

    compiled = compile_fusion(fusion, device or (None if gpu else "h200"))
    print("\n== plan", explain(compiled.spec), sep="\n", file=out)
    ptx = compiled.ptx
    found = [i for i in ("wgmma.mma_async", "mma.sync.aligned") if i in ptx]
    print(
        f"\n== kernel {compiled.kernel_name}: {len(ptx.splitlines())} lines of PTX for "
        f"{compiled.spec.device.target}; tensor-core instruction: {found[0] if found else None}",
        file=out,
    )
    if gpu:
        err = _run_on_gpu(compiled, (x, w, bias), ref)
        where = "the GPU"
    else:
        err = _run_in_simulator(m, n, k)
        where = "Numba's CUDA simulator (no GPU here; the same generated kernel)"
    ok &= err < TOLERANCE
    print(
        f"   ran on {where}: rel. error vs float64 {err:.2e} (fp16 tolerance {TOLERANCE})", file=out
    )
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED", file=out)
    return 0 if ok else 1


TOLERANCE = 1e-2


def example_inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random fp16 inputs for :func:`example_fusion` (seeded: the demo is reproducible)."""
    rng = np.random.default_rng(0)
    half = DType.float16.numpy
    x = rng.standard_normal((m, k)).astype(half)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(half)
    return x, w, rng.standard_normal(n).astype(half)


def _run_on_gpu(compiled, inputs, ref) -> float:  # noqa: ANN001
    from numba import cuda

    from mmaplug.cuda.kernel_views import to_host

    result = compiled.execute([cuda.to_device(a) for a in inputs])[0]
    return rel_error(to_host(result), ref)


def _run_in_simulator(m: int, n: int, k: int) -> float:
    """Run the example's kernel in a child process with NUMBA_ENABLE_CUDASIM=1."""
    code = f"from mmaplug.cli.demo import simulate; print(simulate({m}, {n}, {k}))"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the simulator run failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def simulate(m: int, n: int, k: int) -> float:
    """Compile and run the example in the current (simulator) process; its relative error."""
    from mmaplug.cuda.kernel_views import to_host
    from mmaplug.runtime.compile import compile as compile_fusion

    x, w, bias = example_inputs(m, n, k)
    compiled = compile_fusion(example_fusion(m, n, k), "h200")
    result = compiled.execute([x, w, bias])[0]
    return rel_error(to_host(result), float64_reference(x, w, bias))
