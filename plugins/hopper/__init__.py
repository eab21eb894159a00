"""The ``hopper`` scheduler plugin: TMA + mbarrier + wgmma, warp-specialized, for sm_90a."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mmaplug.analysis import MatmulAnalysis
from mmaplug.choices import KernelSpec, Rejection, SchedulerChoice
from mmaplug.device import Device
from mmaplug.errors import KernelBuildError
from mmaplug.markers import hookimpl
from mmaplug.params import MatmulParams, Violation
from mmaplug.problem import MatmulProblem

from . import limits

NAME: Final = "hopper"
PRIORITY: Final = 20  # above ampere's: on sm_90a wgmma is the faster instruction
TMA_VECTOR: Final = 8  # TMA needs 16-byte row pitches: 8 half-precision elements
# horizontal products per wgmma (N <= 256): 8-row groups of a K-major B, 64-column swizzle
# rows of an N-major one
MAX_HORIZONTAL: Final = {True: 32, False: 4}


def rejection(problem: MatmulProblem, device: Device) -> str | None:
    """Why the hopper kernel cannot take *problem* on *device* (None when it can)."""
    if tuple(device.cc) != (9, 0) or device.arch_suffix != "a":
        return f"needs wgmma and TMA (sm_90a); {device.name} is {device.target}"
    if not problem.operand_dtype.is_half:
        return (
            f"wgmma here takes float16 or bfloat16 operands, not {problem.operand_dtype.label}; "
            "cast the operands in the fusion"
        )
    if problem.num_patterns > problem.horizontal:
        return (
            f"the fusion holds {problem.num_patterns} matmuls that are not a horizontal fusion "
            "(one shared operand A, B operands of one shape, dtype and layout, products "
            "combined element-wise into the outputs); this scheduler runs one MmaOp or a "
            "horizontal group"
        )
    if problem.horizontal > MAX_HORIZONTAL[problem.b_k_inner]:
        return (
            f"a horizontal fusion of {problem.horizontal} matmuls: one wgmma of N <= 256 covers "
            f"all products, so at most {MAX_HORIZONTAL[problem.b_k_inner]} fit with a "
            f"{'K' if problem.b_k_inner else 'N'}-major B"
        )
    ops = [*problem.a_prologue_ops, *problem.b_prologue_ops]
    if ops:
        return (
            f"an operand prologue ({', '.join(ops)}) must run between an operand's load and "
            "the mma; this kernel's TMA loads land in the shared memory wgmma reads with no "
            "step between them (docs/decisions.md, 'Operand prologues'); the ampere scheduler "
            "takes it"
        )
    vec = problem.vector_widths
    if min(vec.a, vec.b) < TMA_VECTOR:
        return (
            "TMA needs 16-byte aligned row pitches (a multiple of 8 elements) for A and B; "
            f"this problem's operand rows allow {vec.a}- and {vec.b}-element vectors "
            f"(m={problem.m}, n={problem.n}, k={problem.k}); the ampere scheduler takes it"
        )
    return None


@hookimpl
def mmaplug_scheduler_candidates(
    problem: MatmulProblem, device: Device
) -> SchedulerChoice | Rejection:
    """Accept 16-bit single-matmul or horizontal problems with TMA-loadable operands on sm_90a."""
    reason = rejection(problem, device)
    return Rejection(NAME, reason) if reason else SchedulerChoice(NAME, PRIORITY)


@hookimpl
def mmaplug_validate_params(
    params: MatmulParams, problem: MatmulProblem, device: Device, scheduler: str
) -> Sequence[Violation]:
    """What ``limits`` says about *params*, when ``hopper`` is the chosen scheduler."""
    if scheduler != NAME:
        return []
    return limits.violations(params, problem, device)


@hookimpl
def mmaplug_build_kernel(spec: KernelSpec, analysis: MatmulAnalysis) -> object | None:
    """Generate the wgmma kernel for *spec* (Numba is imported only here)."""
    if spec.scheduler != NAME:
        return None
    from .artifact import HopperArtifact, kernel_config

    try:
        config = kernel_config(spec, analysis)
    except ValueError as error:
        raise KernelBuildError(f"hopper kernel for {spec.params.name}: {error}") from error
    return HopperArtifact(config, spec)
