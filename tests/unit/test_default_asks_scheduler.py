"""The default heuristic asks the plan's scheduler object its rules instead of knowing them:
a scheduler called ``hopper`` with one more rule gets answers that keep it."""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.heuristics.default import hopper_params
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.scheduler import Rule, planning_with, violations
from mmaplug.plugins.hopper.scheduler import SCHEDULER

H200 = get_device("h200")


def square(size: int) -> MatmulProblem:
    return MatmulProblem(
        m=size,
        n=size,
        k=size,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
    )


def _no_pairs(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    return None if params.cluster_dims == (1, 1) else "this site runs no CTA pairs"


def _three_stages(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    return None if params.stages <= 3 else f"this site runs 3 stages at most, not {params.stages}"


class Stricter:
    """The hopper scheduler with one more rule (everything else is hopper's)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    def __getattr__(self, name: str) -> object:
        return getattr(SCHEDULER, name)

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        return [*SCHEDULER.rules(problem, device), self.rule]


def test_pairs_only_where_the_rules_allow_them() -> None:
    """8192^3 pairs CTAs on hopper, and does not when the scheduler's rules forbid pairs."""
    assert hopper_params(square(8192), H200).cluster_dims == (2, 1)
    strict = Stricter(Rule("cluster_dims", "(1, 1)", _no_pairs))
    with planning_with({"hopper": strict}):  # type: ignore[dict-item]
        params = hopper_params(square(8192), H200)
    assert params.cluster_dims == (1, 1)
    assert violations(strict, params, square(8192), H200) == []  # type: ignore[arg-type]


def test_stages_as_many_as_the_rules_allow() -> None:
    """Stages fill what the scheduler's rules about stages allow."""
    assert hopper_params(square(4096), H200).stages == 4
    strict = Stricter(Rule("stages", "<= 3", _three_stages))
    with planning_with({"hopper": strict}):  # type: ignore[dict-item]
        assert hopper_params(square(4096), H200).stages == 3
