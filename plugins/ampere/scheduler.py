"""The ``ampere`` scheduler: one object owning what the mma.sync kernel takes, allows and builds."""

from __future__ import annotations

from typing import Final, final

from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import KernelBuildError
from mmaplug.planning.choices import Adjustment, KernelSpec
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.scheduler import Resources, Rule, Space

from . import limits, resources

__all__ = ["NAME", "PRIORITY", "SCHEDULER", "AmpereScheduler"]

NAME: Final = "ampere"
PRIORITY: Final = 10

STAGES_REASON: Final = (
    f"the ampere cp.async ring always has {resources.MIN_BUILT_STAGES} buffers; one stage would "
    "only save shared memory (which limits counts for 2)"
)
SMEM_EPILOGUE_REASON: Final = (
    "the ampere kernel always stages the epilogue tile through shared memory (its limits count "
    "that tile)"
)


@final
class AmpereScheduler:
    """mma.sync m16n8k16 with a cp.async pipeline, for half-precision operands on sm_80+
    (see ``mmaplug.planning.scheduler.Scheduler``)."""

    name: str = NAME
    priority: int = PRIORITY

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        """None for half-precision operands of one matmul, its output and epilogue inputs not
        FP8 and no amax output, on sm_80 and newer (the H200 too)."""
        if tuple(device.cc) < limits.MIN_CC:
            return (
                f"needs mma.sync m16n8k16 and cp.async (sm_80 or newer); {device.name} is "
                f"{device.target}"
            )
        if not problem.operand_dtype.is_half:
            return (
                f"mma.sync m16n8k16 takes float16 or bfloat16 operands, not "
                f"{problem.operand_dtype.label}; cast the operands in the fusion"
            )
        if problem.output_dtype.is_float8:
            return (
                f"the epilogue writes {problem.output_dtype.label}; the ampere kernel builds no "
                "FP8 conversions (the hopper scheduler does, on sm_90a)"
            )
        if fp8 := [d.label for d in problem.epilogue_input_dtypes if d.is_float8]:
            return (
                f"the epilogue reads FP8 inputs ({', '.join(fp8)}); the ampere kernel builds no "
                "FP8 conversions (the hopper scheduler does, on sm_90a)"
            )
        if "amax" in problem.epilogue_ops:
            return (
                "the epilogue computes an amax output (a max over the whole output); the ampere "
                "kernel builds no reductions (the hopper scheduler does, on sm_90a)"
            )
        if problem.horizontal > 1:
            return (
                f"a horizontal fusion of {problem.horizontal} matmuls sharing operand A is built "
                "by the hopper scheduler (sm_90a) and, for decode's few rows, the decode "
                "scheduler (docs/decisions.md, 'Horizontal fusion'); this kernel runs one MmaOp, "
                "so the fusion is otherwise segmented, one kernel per matmul"
            )
        if problem.num_patterns > 1:
            return (
                f"the fusion holds {problem.num_patterns} matmuls; this scheduler runs one MmaOp "
                "per kernel (split the fusion, one matmul each)"
            )
        return None

    def space(self, problem: MatmulProblem, device: Device) -> tuple[Space, ...]:
        """The legal values of each field (``limits.space``)."""
        return limits.space(problem, device)

    def rules(self, problem: MatmulProblem, device: Device) -> tuple[Rule, ...]:
        """Every constraint, in reporting order (``limits.rules``)."""
        return limits.rules(problem, device)

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        """Shared memory and threads of one CTA (``resources.resources``, stages as built)."""
        return resources.resources(params, problem)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> list[Adjustment]:
        """What the kernel builds differently: two stages at least, the epilogue through smem."""
        found = []
        if params.stages < resources.MIN_BUILT_STAGES:
            new = resources.MIN_BUILT_STAGES
            found.append(Adjustment("stages", params.stages, new, STAGES_REASON))
        if not params.use_smem_epilogue:
            found.append(Adjustment("use_smem_epilogue", False, True, SMEM_EPILOGUE_REASON))
        return found

    def build(self, spec: KernelSpec, analysis: MatmulAnalysis) -> object:
        """Generate the mma.sync kernel for *spec* (Numba is imported only here)."""
        from .artifact import AmpereArtifact, kernel_config

        try:
            config = kernel_config(spec, analysis)
        except ValueError as error:
            raise KernelBuildError(f"ampere kernel for {spec.params.name}: {error}") from error
        return AmpereArtifact(config, spec)


SCHEDULER: Final = AmpereScheduler()
