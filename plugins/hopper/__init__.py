"""The ``hopper`` scheduler plugin: wgmma, TMA and mbarrier pipelines for sm_90a (planned)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mmaplug.choices import Rejection
from mmaplug.device import Device
from mmaplug.markers import hookimpl
from mmaplug.params import MatmulParams, Violation
from mmaplug.problem import MatmulProblem

from . import limits

NAME: Final = "hopper"
NOT_BUILT: Final = "the wgmma kernel is not built yet (planned); the ampere scheduler runs on sm_90"


@hookimpl
def mmaplug_scheduler_candidates(problem: MatmulProblem, device: Device) -> Rejection:
    """Decline every problem until the wgmma kernel exists; its limits and defaults are ready."""
    return Rejection(NAME, NOT_BUILT)


@hookimpl
def mmaplug_validate_params(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Sequence[Violation]:
    """What ``limits`` says about *params*, when ``hopper`` is the chosen scheduler."""
    if scheduler != NAME:
        return []
    return limits.violations(params, problem, device)
