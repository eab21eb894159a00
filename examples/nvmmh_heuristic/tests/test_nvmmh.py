"""Tests of the nvMatmulHeuristics plugin against the real library (skipped when absent)."""

from __future__ import annotations

import pytest

nvMatmulHeuristics = pytest.importorskip(
    "nvMatmulHeuristics", reason="pip install './examples/nvmmh_heuristic[nvmmh]'"
)

import mmaplug_nvmmh as nvmmh  # noqa: E402

from mmaplug.analysis.problem import MatmulProblem, VectorWidths  # noqa: E402
from mmaplug.ir.dtypes import DType  # noqa: E402
from mmaplug.planning.device import get_device  # noqa: E402
from mmaplug.planning.plan import plan_problem  # noqa: E402
from mmaplug.plugins.ampere.limits import violations  # noqa: E402
from mmaplug.testing import registered  # noqa: E402

H200 = get_device("h200")


def problem(
    m: int = 4096,
    n: int = 4096,
    k: int = 4096,
    *,
    batch: int = 1,
    a_k_inner: bool = True,
    b_k_inner: bool = True,
    dtype: DType = DType.float16,
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        operand_dtype=dtype,
        output_dtype=dtype,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
    )


def test_4096_cube_fp16_tn_on_h200(mmaplug_pm):
    """The library's answer passes the ampere limits and is the plan's base."""
    prob = problem()
    params = nvmmh.mmaplug_matmul_params(problem=prob, device=H200, scheduler="ampere")
    assert params is not None
    assert violations(params, prob, H200) == []
    with registered(mmaplug_pm, nvmmh):
        spec = plan_problem(prob, H200, pm=mmaplug_pm)
    assert spec.provenance.base == "nvmmh"
    assert spec.params.cta_tile == params.cta_tile
    assert spec.params.instruction_tile.as_tuple() == (16, 8, 16)


def test_library_is_asked_with_our_layout():
    """Our TN (both operands K-innermost) is the library's NT, row major."""
    configs = nvmmh.query_configs(problem(), H200)
    assert configs
    assert {config.layout for config in configs} == {"NT_ROW"}


@pytest.mark.parametrize("device_name", ["a100", "h100", "h200"])
@pytest.mark.parametrize(
    "prob",
    [
        problem(),
        problem(dtype=DType.bfloat16),
        problem(a_k_inner=False),
        problem(b_k_inner=False),
        problem(128, 256, 8192),
        problem(1000, 1000, 1000, batch=8),
        problem(64, 64, 64),
    ],
    ids=["tn", "bf16", "nn", "tt", "splitk", "batch", "tiny"],
)
def test_every_answer_is_runnable(mmaplug_pm, device_name, prob):
    """Whatever the library says, the plan is valid, and ours whenever a config converts."""
    device = get_device(device_name)
    params = nvmmh.mmaplug_matmul_params(problem=prob, device=device, scheduler="ampere")
    with registered(mmaplug_pm, nvmmh):
        spec = plan_problem(prob, device, pm=mmaplug_pm)
    if params is None:
        assert spec.provenance.base == "default"
    else:
        assert violations(params, prob, device) == []
        assert spec.provenance.base == "nvmmh"


def test_other_schedulers_are_left_alone():
    assert nvmmh.mmaplug_matmul_params(problem=problem(), device=H200, scheduler="hopper") is None
