"""The ``ampere`` scheduler plugin: mma.sync m16n8k16 with a cp.async pipeline, sm_80 and newer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mmaplug.analysis import MatmulAnalysis
from mmaplug.choices import Adjustment, KernelSpec, Rejection, SchedulerChoice
from mmaplug.device import Device
from mmaplug.errors import KernelBuildError
from mmaplug.markers import hookimpl
from mmaplug.params import MatmulParams, Violation
from mmaplug.problem import MatmulProblem

from . import limits

NAME: Final = "ampere"
PRIORITY: Final = 10
MIN_CC: Final = (8, 0)


@hookimpl
def mmaplug_scheduler_candidates(
    problem: MatmulProblem, device: Device
) -> SchedulerChoice | Rejection:
    """Accept half-precision operands on sm_80 and newer (the H200 included)."""
    if tuple(device.cc) < MIN_CC:
        return Rejection(
            NAME,
            f"needs mma.sync m16n8k16 and cp.async (sm_80 or newer); {device.name} is "
            f"{device.target}",
        )
    if not problem.operand_dtype.is_half:
        return Rejection(
            NAME,
            f"mma.sync m16n8k16 takes float16 or bfloat16 operands, not "
            f"{problem.operand_dtype.label}; cast the operands in the fusion",
        )
    if problem.horizontal > 1:
        return Rejection(
            NAME,
            f"a horizontal fusion of {problem.horizontal} matmuls sharing operand A is built by "
            "the hopper scheduler only (sm_90a; docs/decisions.md, 'Horizontal fusion'); "
            "this kernel runs one MmaOp, so the fusion is segmented, one kernel per matmul",
        )
    if problem.num_patterns > 1:
        return Rejection(
            NAME,
            f"the fusion holds {problem.num_patterns} matmuls; this scheduler runs one MmaOp "
            "per kernel (split the fusion, one matmul each)",
        )
    return SchedulerChoice(NAME, PRIORITY)


@hookimpl
def mmaplug_validate_params(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Sequence[Violation]:
    """What ``limits`` says about *params*, when ``ampere`` is the chosen scheduler."""
    if scheduler != NAME:
        return []
    return limits.violations(params, problem, device)


SMEM_EPILOGUE_REASON: Final = (
    "the ampere kernel always stages the epilogue tile through shared memory (its limits count "
    "that tile)"
)


@hookimpl
def mmaplug_adjust_params(params: MatmulParams, scheduler: str) -> Sequence[Adjustment]:
    """The changes the kernel forces on *params*: ``limits.adjustments`` and an smem epilogue."""
    if scheduler != NAME:
        return []
    found = limits.adjustments(params)
    if not params.use_smem_epilogue:
        found.append(Adjustment("use_smem_epilogue", False, True, SMEM_EPILOGUE_REASON))
    return found


@hookimpl
def mmaplug_build_kernel(spec: KernelSpec, analysis: MatmulAnalysis) -> object | None:
    """Generate the mma.sync kernel for *spec* (Numba is imported only here)."""
    if spec.scheduler != NAME:
        return None
    from .artifact import AmpereArtifact, kernel_config

    try:
        config = kernel_config(spec, analysis)
    except ValueError as error:
        raise KernelBuildError(f"ampere kernel for {spec.params.name}: {error}") from error
    return AmpereArtifact(config, spec)
