"""Simulator tier: fusions with symbolic extents and extent-1 problems through mp.compile → execute.

Each case compiles one fusion (small tiles as caller overrides keep the simulator fast), runs
it on several input shapes and compares every output with mp.evaluate (outputs arrive
NaN-poisoned from ``allocate``, so unwritten elements show). Cases run as parallel
subprocesses of this file with NUMBA_ENABLE_CUDASIM=1; each prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import pytest

pytestmark = pytest.mark.sim

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}
AMPERE_SMALL = {"cta_tile": (32, 32, 32), "warp_tile": (32, 32, 32), "stages": 2}
HOPPER_SMALL = {"cta_tile": (64, 64, 64), "warp_tile": (64, 64, 64),
                "instruction_tile": (64, 64, 16), "stages": 2,
                "tiling_strategy": "persistent"}  # fmt: skip


def _linear_gelu(fd: Any, mp: Any, m: int, n: int, k: int) -> None:
    x = fd.define_tensor([m, k], dtype=mp.float16)
    w = fd.define_tensor([n, k], dtype=mp.float16)
    b = fd.define_tensor([n], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))


def case_ampere_m_sweep(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Symbolic M through one fusion, M = 1 included, a shape class seen twice: one kernel."""
    _linear_gelu(fd, mp, -1, 24, 48)
    shapes = [[(m, 48), (24, 48), (24,)] for m in (1, 7, 40, 7)]
    return "a100", AMPERE_SMALL, shapes


def case_ampere_decode_splitk(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """x[1, K] @ W written with 1 (decode), split-K 2: partials and reduce at M = 1."""
    _linear_gelu(fd, mp, 1, 40, 128)
    return "a100", {**AMPERE_SMALL, "splitk_factor": 2}, [[(1, 128), (40, 128), (40,)]]


def case_ampere_gemv_and_tiny_k(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Symbolic N and K: GEMV (N = 1) and K = 1, 3, 16, batch 2 with a float32 residual. Three
    kernels: K = 16 reads 16-byte vectors, K = 3 single elements, and K = 1 has no K stride
    (the operands count as M- and N-major)."""
    a = fd.define_tensor([2, 9, -1], dtype=mp.float16)
    b = fd.define_tensor([2, -1, -1], dtype=mp.float16)
    r = fd.define_tensor([2, 9, -1], dtype=mp.float32)
    fd.add_output(fd.ops.add(fd.ops.matmul(a, b), r))
    shapes = [[(2, 9, k), (2, k, n), (2, 9, n)] for n, k in ((1, 16), (20, 1), (20, 3), (1, 16))]
    return "a100", AMPERE_SMALL, shapes


def case_hopper_m_sweep(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Hopper: symbolic M, decode M = 1 and M = 3 on one kernel (TMA boxes past M zero-fill)."""
    _linear_gelu(fd, mp, -1, 64, 128)
    return "h200", HOPPER_SMALL, [[(m, 128), (64, 128), (64,)] for m in (1, 3)]


def case_hopper_gemv_tiny_k(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Hopper takes N = 1 (a one-row B map) with K = 16 (one 64-wide box, zero-filled past
    K), and K = 1 with M, N multiples of 8: no K stride, so both operands are read M/N-major
    (an NT kernel, the second build)."""
    a = fd.define_tensor([-1, -1], dtype=mp.float16)
    b = fd.define_tensor([-1, -1], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.linear(a, b)), mp.float16))
    return "h200", HOPPER_SMALL, [[(70, 16), (1, 16)], [(128, 1), (64, 1)]]


def case_hopper_packed_then_n_one(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Hopper: symbolic N planned at N = 64 (packed 16-byte stores), then N = 1: its 2-byte
    output rows give it epilogue vector width 1, so it plans and builds its own (staged)
    kernel; nothing falls back to ampere."""
    a = fd.define_tensor([70, 64], dtype=mp.float16)
    b = fd.define_tensor([-1, 64], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.linear(a, b)), mp.float16))
    overrides = {**HOPPER_SMALL, "splitk_factor": 1}  # the same params for both classes
    return "h200", overrides, [[(70, 64), (64, 64)], [(70, 64), (1, 64)]]


def case_hopper_block_scaled_m_sweep(fd: Any, mp: Any) -> tuple[str, dict, list]:
    """Block-scaled FP8 (DeepSeek-V3's scales) with a symbolic M, its scale's rows bound with
    A's: decode M = 1 and M = 3 on one kernel; two K blocks, one block of B's scales."""
    x = fd.define_tensor([-1, 256], dtype=mp.float8_e4m3fn)
    w = fd.define_tensor([128, 256], dtype=mp.float8_e4m3fn)  # [N, K]: read K-major
    sx = fd.define_tensor([-1, 2], dtype=mp.float32)
    sw = fd.define_tensor([2, 1], dtype=mp.float32)
    y = fd.ops.scaled_mm(x, fd.ops.permute(w, [1, 0]), sx, sw, out_dtype=mp.bfloat16)
    fd.add_output(y)
    fp8 = {**HOPPER_SMALL, "cta_tile": (64, 64, 128), "warp_tile": (64, 64, 128),
           "instruction_tile": (64, 64, 32)}  # fmt: skip
    return "h200", fp8, [[(m, 256), (128, 256), (m, 2), (2, 1)] for m in (1, 3)]


CASES = sorted(name[5:] for name in dir() if name.startswith("case_"))
BUILDS = {"ampere_m_sweep": 1, "ampere_decode_splitk": 1, "ampere_gemv_and_tiny_k": 3,
          "hopper_m_sweep": 1, "hopper_gemv_tiny_k": 2, "hopper_block_scaled_m_sweep": 1,
          "hopper_packed_then_n_one": 2}  # fmt: skip


def run_case(name: str) -> dict[str, Any]:
    """Compile case *name* once and execute it on each of its shapes (in this simulating
    process); per run: scheduler, shape class and each output's error. Decode is blocked: the
    cases are ampere's and hopper's, and it would take their few-row TN shapes first."""
    import attrs
    import numpy as np

    import mmaplug as mp

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["decode"])
    with mp.FusionDefinition() as fd:
        device, overrides, shapes = globals()["case_" + name](fd, mp)
    target = mp.get_device(device)
    if device == "h200":  # 2 SMs with room for one CTA each: persistent CTAs walk units
        target = attrs.evolve(target, sm_count=2, smem_per_sm=48 * 1024)
    compiled = mp.compile(fd, target, pm=pm, overrides=overrides)
    rng = np.random.default_rng(3)
    runs = []
    for shape in shapes:
        inputs = [rng.standard_normal(s).astype(v.dtype.numpy)
                  for s, v in zip(shape, fd.fusion.inputs, strict=True)]  # fmt: skip
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = compiled.execute(inputs)
        outputs = []
        for tv, got, ref in zip(fd.fusion.outputs, results, mp.evaluate(fd, inputs), strict=True):
            got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
            outputs.append({
                "dtype": tv.dtype.label, "shape": list(got64.shape),
                "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
                "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
            })  # fmt: skip
        runs.append({"scheduler": compiled.spec.scheduler, "outputs": outputs,
                     "warnings": [type(w.message).__name__ for w in caught],
                     "shape_class": compiled.provenance.shape_class,
                     "problem": {f: getattr(compiled.spec.problem, f)
                                 for f in ("m", "n", "k", "batch")}})  # fmt: skip
    return {"runs": runs, "builds": getattr(compiled, "builds", 1)}


@pytest.fixture(scope="module")
def sim_results(simulate: Any) -> dict[str, dict[str, Any]]:
    runs = simulate({name: [__file__, name] for name in CASES})
    return {name: run.outcome for name, run in runs.items()}


@pytest.mark.parametrize("name", CASES)
def test_every_shape_matches_evaluate_on_the_expected_kernels(sim_results: dict, name: str):
    """Each shape ran on the intended scheduler, wrote every element within tolerance, and the
    fusion built only as many kernels as distinct configurations."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    scheduler = name.split("_")[0]
    for run in res["runs"]:
        assert run["scheduler"] == scheduler, run
        assert "FallbackWarning" not in run["warnings"], run
        if run["shape_class"]:  # a symbolic fusion names the class each call fell into
            assert run["shape_class"] == "m={m} n={n} k={k} batch={batch}".format(**run["problem"])
        for out in run["outputs"]:
            assert out["unwritten"] == 0, run
            assert out["error"] < max(TOLERANCE[out["dtype"]], TOLERANCE["float16"]), run
    assert res["builds"] == BUILDS[name], res


if __name__ == "__main__":
    print(json.dumps(run_case(sys.argv[1])))
