"""Simulator tier: the real generated Ampere GEMM kernels, run in Numba's CUDA simulator.

Every case runs in a simulator worker process (the ``simulate`` fixture: NUMBA_ENABLE_CUDASIM=1,
while this pytest process stays on the real CUDA target), on its share of the CPUs. The cases
(tests/sim/ampere_sim_cases.py) cover all four layouts, bf16, split-K 2 with alpha/beta, bias +
GELU with BK=16 and 3 stages, an odd shape with vec 1 loads and an fp32 aux output, BK=64 with
padded strides and a shared B.
Each compares against a NumPy float64 reference with the output poisoned by NaN beforehand.
Without ``--full-sim`` the cases named ``QUICK`` run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

RUNNER = Path(__file__).with_name("ampere_sim_cases.py")
# The quick tier (README, Tests): the four layouts, split-K with alpha and beta, bias + GELU
# with BK=16, vec 1 loads, padded strides: about 11 of the 24 s the cases take alone
QUICK = (
    "tn_f16",
    "tt_f16",
    "nn_f16",
    "nt_bf16",
    "splitk2_alpha_beta",
    "bias_gelu_bk16_s3",
    "odd_vec1_relu_aux",
    "bk64_w32_pad_vec4",
)
CASES = [
    *QUICK,
    "odd_k_stages3",
    "splitk2_nt",
    "splitk3_odd_total_batch2",
    "splitk3_vector_reduce_batch2",
    "odd_n_bias_gelu_aux",
    "n44_bias_gelu_aux_batch2",
]


@pytest.fixture(scope="module")
def sim_results(simulate: Any, sim_tier: Any) -> dict[str, dict]:
    cases = sim_tier.pick(CASES, QUICK)
    runs = simulate({name: [str(RUNNER), name] for name in cases}, timeout=900)
    return {name: run.result or {"ok": False, "stderr": run.stderr} for name, run in runs.items()}


@pytest.mark.parametrize("name", CASES)
def test_generated_kernel_matches_float64_reference(
    sim_results: dict, sim_tier: Any, name: str
) -> None:
    sim_tier.require(name, sim_results)
    res = sim_results[name]
    assert res["ok"], res
    assert res["nan"] == 0
    assert res["tol_ratio"] <= 1.0
