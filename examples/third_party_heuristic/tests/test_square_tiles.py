"""Tests of the square-tiles heuristic through mmaplug's test harness."""

from __future__ import annotations

import mmaplug_square_tiles as square_tiles
import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import get_device
from mmaplug.planning.plan import plan_problem
from mmaplug.testing import override_matmul_params, registered


def problem(
    m: int = 4096,
    n: int = 4096,
    k: int = 4096,
    *,
    dtype: DType = DType.float16,
    a_k_inner: bool = True,
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        a_k_inner=a_k_inner,
        b_k_inner=True,
        operand_dtype=dtype,
        output_dtype=dtype,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
    )


def test_answers_for_large_fp16_tn(mmaplug_pm):
    """A 4096-cube fp16 TN problem gets square tiles and 3 stages from square_tiles."""
    with registered(mmaplug_pm, square_tiles):
        spec = plan_problem(problem(), get_device("a100"), pm=mmaplug_pm)
    assert spec.params.cta_tile.as_tuple() == (128, 128, 32)
    assert spec.params.stages == 3
    assert spec.provenance.base == "mmaplug_square_tiles"
    assert spec.params.use_smem_epilogue and spec.provenance.adjustments == ()


@pytest.mark.parametrize(
    "prob",
    [problem(512, 4096, 4096), problem(dtype=DType.bfloat16), problem(a_k_inner=False)],
    ids=["small_m", "bf16", "NN"],
)
def test_defers_otherwise(mmaplug_pm, prob):
    """Small, bf16 or non-TN problems are left to the default heuristic."""
    with registered(mmaplug_pm, square_tiles):
        spec = plan_problem(prob, get_device("a100"), pm=mmaplug_pm)
    assert spec.provenance.base == "default"


def test_defers_on_hopper(mmaplug_pm):
    """On h200 the hopper scheduler is chosen, so the ampere-only answer is not given."""
    with registered(mmaplug_pm, square_tiles):
        spec = plan_problem(problem(), get_device("h200"), pm=mmaplug_pm)
    assert (spec.scheduler, spec.provenance.base) == ("hopper", "default")


def test_square_params_pass_ampere_limits(mmaplug_pm, mmaplug_recorder):
    """The answer passes the ampere scheduler's rules (it is the plan's base) and is asked after
    the schedulers are collected."""
    with registered(mmaplug_pm, square_tiles):
        spec = plan_problem(problem(), get_device("a100"), pm=mmaplug_pm)
    assert (spec.scheduler, spec.provenance.base) == ("ampere", "mmaplug_square_tiles")
    mmaplug_recorder.assert_order(["mmaplug_schedulers", "mmaplug_matmul_params"])


def test_override_still_wins(mmaplug_pm):
    """override_matmul_params changes a field on top of the square-tiles answer."""
    with registered(mmaplug_pm, square_tiles), override_matmul_params(stages=2):
        spec = plan_problem(problem(), get_device("a100"), pm=mmaplug_pm)
    assert (spec.params.stages, spec.provenance.source("stages")) == (2, "override_matmul_params")
    assert spec.provenance.source("cta_tile") == "mmaplug_square_tiles"
