"""The ``hopper`` scheduler as one object: the problems it takes, its fields' legal values and
rules, its resource model and its build step (``mmaplug.planning.scheduler.Scheduler``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, final

from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import KernelBuildError
from mmaplug.planning.choices import KernelSpec
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.scheduler import Resources, Rule, Space

from . import limits, space
from .config_rules import dtype_problems

if TYPE_CHECKING:
    from mmaplug.planning.choices import Adjustment

__all__ = ["NAME", "PRIORITY", "SCHEDULER", "HopperScheduler"]

NAME: Final = "hopper"
PRIORITY: Final = 20  # above ampere's: on sm_90a wgmma is the faster instruction
TMA_PITCH: Final = 16  # bytes: TMA needs 16-byte aligned row pitches
# horizontal products per wgmma (N <= 256): 8-row groups of a K-major B, 64-column swizzle
# rows of an N-major one
MAX_HORIZONTAL: Final = {True: 32, False: 4}


@final
class HopperScheduler:
    """TMA + mbarrier + wgmma, warp-specialized, for sm_90a: 16-bit and FP8 single matmuls
    and horizontal fusions whose operands TMA can load."""

    __slots__ = ()
    name: str = NAME
    priority: int = PRIORITY
    block_scales: bool = True  # the kernel applies FP8 block scales in its main loop

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        """None when the hopper kernel can take *problem* on *device*, else why not."""
        if tuple(device.cc) != (9, 0) or device.arch_suffix != "a":
            return f"needs wgmma and TMA (sm_90a); {device.name} is {device.target}"
        if why := dtype_problems(problem.operand_dtype, problem.a_k_inner, problem.b_k_inner):
            return why[0] + (
                " (store the operand K-major, e.g. a weight [N, K] row-major)"
                if problem.operand_dtype.is_float8
                else "; cast the operands in the fusion"
            )
        if problem.num_patterns > problem.horizontal:
            return (
                f"the fusion holds {problem.num_patterns} matmuls that are not a horizontal "
                "fusion (one shared operand A, B operands of one shape, dtype and layout, "
                "products combined element-wise into the outputs); this scheduler runs one "
                "MmaOp or a horizontal group"
            )
        if problem.horizontal > MAX_HORIZONTAL[problem.b_k_inner]:
            return (
                f"a horizontal fusion of {problem.horizontal} matmuls: one wgmma of N <= 256 "
                f"covers all products, so at most {MAX_HORIZONTAL[problem.b_k_inner]} fit with "
                f"a {'K' if problem.b_k_inner else 'N'}-major B"
            )
        ops = [*problem.a_prologue_ops, *problem.b_prologue_ops]
        if ops:
            return (
                f"an operand prologue ({', '.join(ops)}) must run between an operand's load and "
                "the mma; this kernel's TMA loads land in the shared memory wgmma reads with no "
                "step between them (docs/decisions.md, 'Operand prologues'); the ampere "
                "scheduler takes it"
            )
        vec, size = problem.vector_widths, problem.operand_dtype.itemsize
        if min(vec.a, vec.b) * size < TMA_PITCH:
            return (
                f"TMA needs {TMA_PITCH}-byte aligned row pitches (a multiple of "
                f"{TMA_PITCH // size} elements) for A and B; this problem's operand rows allow "
                f"{vec.a}- and {vec.b}-element vectors (m={problem.m}, n={problem.n}, "
                f"k={problem.k})"
                + ("; the ampere scheduler takes it" if problem.operand_dtype.is_half else "")
            )
        return None

    def space(self, problem: MatmulProblem, device: Device) -> Sequence[Space]:
        """The legal values of each field the kernel reads (``space.space``)."""
        return space.space(problem, device)

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        """Every rule between fields and with *problem* and *device* (``limits.rules``)."""
        return limits.rules(problem, device)

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        """Shared memory, threads and consumer registers of one CTA (``limits.resources``)."""
        return limits.resources(params, problem)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> Sequence[Adjustment]:
        """None: the kernel builds every value its rules allow as asked."""
        return ()

    def build(self, spec: KernelSpec, analysis: MatmulAnalysis) -> object:
        """The wgmma kernel for *spec* (Numba is imported only here).

        :raises KernelBuildError: the generator cannot emit *spec*'s params (planning bypassed).
        """
        from .artifact import HopperArtifact, kernel_config

        try:
            config = kernel_config(spec, analysis)
        except ValueError as error:
            raise KernelBuildError(f"hopper kernel for {spec.params.name}: {error}") from error
        return HopperArtifact(config, spec)


SCHEDULER: Final = HopperScheduler()
