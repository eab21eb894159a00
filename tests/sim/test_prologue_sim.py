"""Simulator tier: operand prologues (issue 10 item 2) computed by the generated ampere kernel.

Runs tests/sim/prologue_sim_cases.py once per case, on the simulator's worker processes (simulator
on): prologue kinds (sin, cos + a runtime scalar, exp(-x), a constant scale, relu, a DAG
sin(x) * cos(x), a bare float16 -> bfloat16 cast) x every layout x ragged M, N, K x split-K
1, 2, 3 (one split with an empty K range) x batch x vector widths 1-8 x k tiles 16, 32, 48, 64,
against mp.evaluate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

RUNNER = Path(__file__).with_name("prologue_sim_cases.py")
# name: (A's prologue ops, B's, (a_k_inner, b_k_inner), split-K)
EXPECTED = {
    "kk_sin_a_ragged_k": ([["sin"], []], [True, True], 1),
    "mn_scalar_a_exp_b_splitk3": ([["cos", "add"], ["neg", "exp"]], [False, False], 3),
    "km_cast_f16_to_bf16": ([["cast"], []], [True, False], 1),
    "mk_relu_scale_batch2_vec1": ([["relu"], ["mul"]], [False, True], 1),
    "kk_dag_bf16_splitk2_bk16": ([["sin", "cos", "mul"], ["cos", "add"]], [True, True], 2),
    "kk_bk48_warps2x2_exp": ([["neg", "exp"], ["neg", "exp"]], [True, True], 1),
    "kk_bk64_exp_a_cos_b": ([["neg", "exp"], ["cos", "add"]], [True, True], 1),
    # split-K 3 over 4 k-tiles: 2, 2 and 0 (an empty K range)
    "kk_empty_split_range": ([["cos", "add"], ["neg", "exp"]], [True, True], 3),
    "mn_bk64_b_only": ([[], ["cos", "add"]], [False, False], 1),
}


@pytest.fixture(scope="module")
def runs(simulate: Any) -> dict:
    return simulate({name: [str(RUNNER), name] for name in EXPECTED})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_prologue_kernel_matches_evaluate(runs: dict, name: str) -> None:
    """One ampere kernel computes the prologue: every element written, within fp16 rounding."""
    code, result, err = runs[name]
    assert code == 0 and result is not None, err
    ops, layout, splitk = EXPECTED[name]
    assert (result["prologue_ops"], result["layout"], result["splitk"]) == (ops, layout, splitk)
    assert result["scheduler"] == "ampere"
    assert result["kernel"].endswith(("_pa", "_pb", "_pa_pb"))
    assert result["nonfinite"] == 0, result
    assert all(0 <= e < 1e-3 for e in result["errors"]), result
