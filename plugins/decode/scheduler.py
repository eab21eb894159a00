"""The ``decode`` scheduler: one object owning what the memory-bound decode kernel takes,
allows and builds (``mmaplug.planning.scheduler.Scheduler``)."""

from __future__ import annotations

from typing import Final, final

from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import KernelBuildError
from mmaplug.planning.choices import Adjustment, KernelSpec
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.scheduler import Resources, Rule, Space, active

from . import limits
from .config import vector

__all__ = ["NAME", "PRIORITY", "SCHEDULER", "DecodeScheduler"]

NAME: Final = "decode"
PRIORITY: Final = 30  # above hopper's and ampere's: for the few rows it takes, it streams faster
HOPPER: Final = "hopper"  # the scheduler it hands 9-16 rows of long weight rows and some batches


@final
class DecodeScheduler:
    """A few activation rows against a weight read once at the HBM limit: mma.sync m16n8k16
    (m16n8k32 for FP8, sm_89+) with the weight as its A operand, 16-byte loads straight to
    registers (sm_80+)."""

    name: str = NAME
    priority: int = PRIORITY

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        """None for one TN matmul (or a batch of them, or a horizontal fusion of up to
        ``limits.MAX_PRODUCTS`` sharing A) of 16-bit or FP8 operands with M <= 16 and K a
        multiple of one 16-byte load, on sm_80 or newer (FP8 operands and outputs: sm_89 or
        newer; FP8 epilogue inputs too), with any epilogue; else why not."""
        if tuple(device.cc) < limits.MIN_CC:
            return f"needs mma.sync m16n8k16 (sm_80 or newer); {device.name} is {device.target}"
        if problem.m > limits.MAX_M:
            return (
                f"takes at most {limits.MAX_M} activation rows (decode and small batches), not "
                f"m={problem.m}; the tensor-core GEMMs take more"
            )
        dtype = problem.operand_dtype
        if not (dtype.is_half or dtype.is_float8):
            return (
                f"takes float16, bfloat16, float8_e4m3fn or float8_e5m2 operands, not {dtype.label}"
            )
        if dtype.is_float8 and tuple(device.cc) < limits.FP8_CC:
            return (
                f"multiplies {dtype.label} with mma.sync m16n8k32, which needs sm_89 or newer; "
                f"{device.name} is {device.target}"
            )
        if problem.output_dtype.is_float8 and tuple(device.cc) < limits.FP8_CC:
            return (
                f"writes {problem.output_dtype.label} with cvt.rn.satfinite, which needs sm_89 "
                f"or newer; {device.name} is {device.target}"
            )
        fp8 = [d.label for d in problem.epilogue_input_dtypes if d.is_float8]
        if fp8 and tuple(device.cc) < limits.FP8_CC:
            return (
                f"widens FP8 epilogue inputs ({', '.join(fp8)}) with cvt.rn.f16x2, which needs "
                f"sm_89 or newer; {device.name} is {device.target}"
            )
        if problem.k % vector(dtype):  # (first: K = 1 has no K stride, so no TN layout)
            return (
                f"loads 16-byte vectors: K must be a multiple of {vector(dtype)} "
                f"({dtype.label}), not {problem.k}"
            )
        if not (problem.a_k_inner and problem.b_k_inner):
            return (
                "streams K-contiguous operands only (layout TN: x[M, K] and w[N, K] row-major), "
                f"not layout {problem.layout}"
            )
        if problem.num_patterns > problem.horizontal:
            return (
                "runs one matmul per kernel, or a horizontal fusion (matmuls sharing A), not "
                f"{problem.num_patterns} matmuls of other operands"
            )
        if problem.horizontal > limits.MAX_PRODUCTS:
            return (
                f"takes horizontal fusions of up to {limits.MAX_PRODUCTS} matmuls (a CTA holds "
                f"warps for each), not {problem.horizontal}"
            )
        if problem.a_prologue_ops or problem.b_prologue_ops:
            return "loads operands straight into mma registers: no operand prologue"
        return _handed_to_hopper(problem, device)

    def space(self, problem: MatmulProblem, device: Device) -> tuple[Space, ...]:
        """The legal values of each field (``limits.space``)."""
        return limits.space(problem, device)

    def rules(self, problem: MatmulProblem, device: Device) -> tuple[Rule, ...]:
        """Every constraint, in reporting order (``limits.rules``)."""
        return limits.rules(problem, device)

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        """Shared memory and threads of one CTA (``limits.resources``)."""
        return limits.resources(params, problem)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> list[Adjustment]:
        """None: every value the rules allow is built as given."""
        return []

    def build(self, spec: KernelSpec, analysis: MatmulAnalysis) -> object:
        """Generate the decode kernel for *spec* (Numba is imported only here)."""
        from .artifact import DecodeArtifact, kernel_config

        try:
            config = kernel_config(spec, analysis)
        except ValueError as error:
            raise KernelBuildError(f"decode kernel for {spec.params.name}: {error}") from error
        return DecodeArtifact(config, spec)


def _handed_to_hopper(problem: MatmulProblem, device: Device) -> str | None:
    """Why *problem* goes to the hopper scheduler, where the plan being made has one that takes
    it (outside planning, or with hopper blocked: None): a batch of products of more than
    ``limits.HANDOFF_M`` rows, or of 16-bit weight rows of at most
    ``limits.BATCH_SHORT_ROW_BYTES`` on more hopper tiles than ``limits.BATCH_SWAP_WAVES``
    waves of the SMs; one FP8 product of more, but a weight of at most
    ``limits.FP8_KEEP_WEIGHT_BYTES`` on hopper's swapped tiles of at most 1 /
    ``limits.FP8_KEEP_TILE_SHARE`` of the SMs; one 16-bit product of more and weight
    rows of ``limits.HANDOFF_ROW_BYTES`` or more, but where hopper's swapped tiles are more
    than one a SM and the decode CTAs of ``limits.HANDOFF_KEEP_PLAN`` run in one wave. A
    horizontal fusion stays: the transposed product that won those rows is not built for one
    (docs/decisions.md, "Horizontal fusion")."""
    if problem.horizontal > 1:
        return None
    dtype = problem.operand_dtype
    row_bytes = problem.k * dtype.itemsize
    rows = f"{problem.m} row{'s' * (problem.m != 1)} of {row_bytes:,}-byte weight rows"
    if problem.batch > 1:
        tiles = problem.batch * -(-problem.n // limits.BATCH_SWAP_ROWS)
        waves = limits.BATCH_SWAP_WAVES
        short = row_bytes <= limits.BATCH_SHORT_ROW_BYTES and tiles > waves * device.sm_count
        if problem.m > limits.HANDOFF_M:
            which = f"batches of over {limits.HANDOFF_M} rows"
        elif short and dtype.is_half:
            which = (
                f"batches of 16-bit weight rows of at most {limits.BATCH_SHORT_ROW_BYTES} bytes "
                f"on more {limits.BATCH_SWAP_ROWS}-row tiles than {waves} waves of the SMs"
            )
        else:
            return None
        why = (
            f"hands a batch of {rows} to the hopper scheduler, whose tiles run it faster "
            f"({which}; docs/decisions.md, 'Batches of decode-sized products')"
        )
    elif problem.m <= limits.HANDOFF_M:
        return None
    else:
        tiles = -(-problem.n // limits.HOPPER_SWAP_ROWS)  # hopper's swapped tiles
        if not dtype.is_half:
            weight = problem.n * row_bytes
            share = limits.FP8_KEEP_TILE_SHARE
            if weight <= limits.FP8_KEEP_WEIGHT_BYTES and share * tiles <= device.sm_count:
                return None
            which = (
                f"FP8 products of over {limits.HANDOFF_M} rows, but weights of at most "
                f"{limits.FP8_KEEP_WEIGHT_BYTES >> 20} MiB whose {limits.HOPPER_SWAP_ROWS}-row "
                f"tiles fill at most 1/{share} of the SMs; this one is "
                f"{weight / (1 << 20):.1f} MiB on {tiles} tiles"
            )
        elif row_bytes < limits.HANDOFF_ROW_BYTES:
            return None
        elif tiles > device.sm_count and limits.one_wave(
            problem, device, *limits.HANDOFF_KEEP_PLAN
        ):
            return None
        else:
            which = (
                f"over {limits.HANDOFF_M} rows of {dtype.label}, weight rows of "
                f"{limits.HANDOFF_ROW_BYTES:,} bytes or more"
            )
        why = (
            f"hands {rows} to the hopper scheduler, whose transposed product streams them "
            f"faster ({which}; docs/decisions.md, 'The operand swap')"
        )
    hopper = active(HOPPER)
    return why if hopper is not None and hopper.accepts(problem, device) is None else None


SCHEDULER: Final = DecodeScheduler()
