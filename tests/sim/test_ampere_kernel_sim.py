"""Simulator tier: the real generated Ampere GEMM kernels, run in Numba's CUDA simulator.

Every case runs in its own subprocess started with NUMBA_ENABLE_CUDASIM=1 (this pytest process
stays on the real CUDA target); they run in parallel. The cases (tests/sim/ampere_sim_cases.py)
cover all four layouts, bf16, split-K 2 with alpha/beta, bias + GELU with BK=16 and 3 stages,
an odd shape with vec 1 loads and an fp32 aux output, BK=64 with padded strides and a shared B.
Each compares against a NumPy float64 reference with the output poisoned by NaN beforehand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim

RUNNER = Path(__file__).with_name("ampere_sim_cases.py")
CASES = [
    "tn_f16",
    "tt_f16",
    "nn_f16",
    "nt_bf16",
    "splitk2_alpha_beta",
    "bias_gelu_bk16_s3",
    "odd_vec1_relu_aux",
    "bk64_w32_pad_vec4",
    "odd_k_stages3",
    "splitk2_nt",
    "odd_n_bias_gelu_aux",
    "n44_bias_gelu_aux_batch2",
]


@pytest.fixture(scope="module")
def sim_results() -> dict[str, dict]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(RUNNER), name],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in CASES
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        results[name] = json.loads(lines[-1]) if lines else {"ok": False, "stderr": err[-3000:]}
    return results


@pytest.mark.parametrize("name", CASES)
def test_generated_kernel_matches_float64_reference(sim_results: dict, name: str) -> None:
    res = sim_results[name]
    assert res["ok"], res
    assert res["nan"] == 0
    assert res["tol_ratio"] <= 1.0
