"""Operand prologues in Numba's CUDA simulator (run as a script: ``python prologue_sim_cases.py
NAME`` with NUMBA_ENABLE_CUDASIM=1, started by test_prologue_sim.py).

Each case builds ``prologue_a(A) @ prologue_b(B)`` (a batched matmul in the case's layout),
compiles it through ``mp.compile`` for the a100 preset with small tiles, runs it on random data
and prints one JSON line: the relative error against ``mp.evaluate`` per output, the count of
non-finite elements and the kernel name. Ragged K makes the zero-filled padding meet prologues
with ``op(0) != 0`` (cos, exp, + scalar), which the kernel must mask.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import mmaplug as mp

SMALL = {"cta_tile": (32, 32, 32), "warp_tile": (32, 32, 32), "stages": 2}


def _prologue(fd, x, kind: str, mma: mp.DType):  # noqa: ANN001, ANN202
    ops = fd.ops
    if kind == "none":
        return x
    if kind == "cast":
        return ops.cast(x, mma)
    value = {
        "sin": lambda: ops.sin(x),
        "cos_plus_s": lambda: ops.add(ops.cos(x), fd.define_scalar()),
        "exp_neg": lambda: ops.exp(ops.neg(x)),
        "scale": lambda: ops.mul(x, 0.25),
        "relu": lambda: ops.relu(x),
        "sin_times_cos": lambda: ops.mul(ops.sin(x), ops.cos(x)),
    }[kind]()
    return ops.cast(value, mma)


# name: (a dtype, b dtype, mma dtype, a_k_inner, b_k_inner, (m, n, k), batch, prologue a,
#        prologue b, parameter overrides)
CASES = {
    "kk_sin_a_ragged_k": ("float16", "float16", "float16", True, True, (40, 24, 45), 1,
                          "sin", "none", {}),
    "mn_scalar_a_exp_b_splitk3": ("float16", "float16", "float16", False, False, (33, 40, 77), 1,
                                  "cos_plus_s", "exp_neg", {"splitk_factor": 3}),
    "km_cast_f16_to_bf16": ("float16", "bfloat16", "bfloat16", True, False, (24, 40, 50), 1,
                            "cast", "none", {}),
    "mk_relu_scale_batch2_vec1": ("float16", "float16", "float16", False, True, (20, 18, 37), 2,
                                  "relu", "scale", {}),
    "kk_dag_bf16_splitk2_bk16": ("bfloat16", "bfloat16", "bfloat16", True, True, (24, 24, 100),
                                 1, "sin_times_cos", "cos_plus_s",
                                 {"splitk_factor": 2, "cta_tile": (32, 32, 16),
                                  "warp_tile": (32, 32, 16), "stages": 3}),
    "kk_bk48_warps2x2_exp": ("float16", "float16", "float16", True, True, (36, 30, 70), 1,
                             "exp_neg", "exp_neg",
                             {"cta_tile": (32, 32, 48), "warp_tile": (16, 16, 48)}),
    "kk_bk64_exp_a_cos_b": ("float16", "float16", "float16", True, True, (24, 40, 83), 1,
                            "exp_neg", "cos_plus_s",
                            {"cta_tile": (32, 32, 64), "warp_tile": (32, 32, 64)}),
    "kk_empty_split_range": ("float16", "float16", "float16", True, True, (40, 24, 100), 1,
                             "cos_plus_s", "exp_neg", {"splitk_factor": 3}),
    "mn_bk64_b_only": ("float16", "float16", "float16", False, False, (30, 34, 90), 1,
                       "none", "cos_plus_s", {"cta_tile": (32, 32, 64), "warp_tile": (32, 32, 64)}),
}  # fmt: skip


def build(name: str) -> tuple[mp.FusionDefinition, dict]:
    a_dt, b_dt, mma, a_k, b_k, (m, n, k), batch, pa, pb, overrides = CASES[name]
    lead = [batch] if batch > 1 else []
    inner = list(range(len(lead) + 1, -1, -1))  # row-major
    swap = [*inner[:-2], inner[-1], inner[-2]]  # the two innermost dims exchanged
    mma_dt = getattr(mp, mma)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], getattr(mp, a_dt), stride_order=inner if a_k else swap)
        b = fd.define_tensor([*lead, k, n], getattr(mp, b_dt), stride_order=swap if b_k else inner)
        y = fd.ops.matmul(_prologue(fd, a, pa, mma_dt), _prologue(fd, b, pb, mma_dt))
        fd.add_output(fd.ops.cast(y, mma_dt))
    return fd, {**SMALL, **overrides}


def run(name: str) -> dict:
    fd, overrides = build(name)
    compiled = mp.compile(fd, "a100", overrides=overrides)
    rng = np.random.default_rng(11)
    inputs = [
        rng.uniform(-2, 2, v.shape).astype(v.dtype.numpy)
        if isinstance(v, mp.TensorView)
        else float(rng.uniform(0.5, 1.5))
        for v in fd.fusion.inputs
    ]
    errors, nonfinite = [], 0
    for got, ref in zip(compiled.execute(inputs), mp.evaluate(fd, inputs), strict=True):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        nonfinite += int(np.count_nonzero(~np.isfinite(got64)))
        errors.append(float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)))
    problem = compiled.spec.problem
    return {
        "errors": errors,
        "nonfinite": nonfinite,
        "kernel": compiled.kernel_name,
        "scheduler": compiled.spec.scheduler,
        "prologue_ops": [list(problem.a_prologue_ops), list(problem.b_prologue_ops)],
        "layout": [problem.a_k_inner, problem.b_k_inner],
        "splitk": compiled.params.splitk_factor,
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])), flush=True)
