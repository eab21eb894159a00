"""Lowering of the element-wise IR around the MmaOp: the epilogue program and operand prologues."""

from __future__ import annotations

from mmaplug.analysis.amax import ACCEPTED
from mmaplug.analysis.epilogue import (
    Axis,
    EpilogueInput,
    EpilogueOutput,
    EpilogueProgram,
    Instr,
    Prologue,
)
from mmaplug.analysis.patterns import DimRole
from mmaplug.errors import UnsupportedFusionError
from mmaplug.ir.fusion import Scalar, TensorView, Val
from mmaplug.ir.ops import (
    METADATA_OPS,
    BinaryOp,
    BroadcastOp,
    CastOp,
    MaxReductionOp,
    MmaOp,
    PermuteOp,
    SetOp,
    SqueezeOp,
    UnaryOp,
)
from mmaplug.ir.view_ops import ExpandOp

_AXIS_OF = {DimRole.BATCH: Axis.BATCH, DimRole.M: Axis.M, DimRole.N: Axis.N}


def lower_epilogue(
    fusion,
    patterns,
    epi_inputs,
    name,
    accs=None,
    amax_of=None,  # noqa: ANN001
) -> EpilogueProgram:
    """The epilogue program of a translated *fusion*: of its one matmul, or of a horizontal
    fusion's, where *accs* maps each MmaOp result's id to its accumulator index (``acc``
    with that ``arg``); empty for several matmuls otherwise.

    *amax_of* maps an amax output's id to the value it is the amax of (``analysis.amax``):
    that output is an ``amax`` output of that value's instruction. *name* gives a tensor's
    user name for messages.
    """
    amax_of = amax_of or {}
    if len(patterns) != 1 and not accs:
        return EpilogueProgram()  # several matmuls that no kernel computes together
    instrs: list[Instr] = [Instr(op="acc")]
    memo: dict[int, int] = {}
    inputs: list[EpilogueInput] = []
    scalars: list[str] = []
    input_tvs = {fusion.inputs[b.index]: b for b in epi_inputs}

    def emit(instr: Instr) -> int:
        instrs.append(instr)
        return len(instrs) - 1

    def lower(val: Val) -> int:
        if id(val) in memo:
            return memo[id(val)]
        memo[id(val)] = result = _lower_one(val)
        return result

    def _lower_one(val: Val) -> int:
        if isinstance(val, Scalar):
            if val.is_constant:
                return emit(Instr(op="const", arg=float(val.value)))  # type: ignore[arg-type]
            scalars.append(val.name)
            return emit(Instr(op="scalar", arg=len(scalars) - 1))
        assert isinstance(val, TensorView)
        if val in input_tvs:
            binding = input_tvs[val]
            axes = tuple(_AXIS_OF[r] for r in dict.fromkeys(r for r in binding.dim_roles if r))
            inputs.append(EpilogueInput(name=val.name, dtype=val.dtype, axes=axes))
            return emit(Instr(op="input", arg=len(inputs) - 1))
        expr = val.definition
        if isinstance(expr, MmaOp):
            j = accs[id(val)] if accs else 0
            return emit(Instr(op="acc", arg=j)) if j else 0
        if isinstance(expr, BroadcastOp | ExpandOp | PermuteOp | SetOp | SqueezeOp):
            return lower(expr.inputs[0])  # per element, these only rename the dims
        if isinstance(expr, CastOp):
            return _cast(expr, lower(expr.inputs[0]), emit)
        if isinstance(expr, UnaryOp):
            return emit(Instr(op=expr.op, srcs=(lower(expr.inputs[0]),)))
        if isinstance(expr, BinaryOp):
            srcs = (lower(expr.inputs[0]), lower(expr.inputs[1]))
            return emit(Instr(op=expr.op, srcs=srcs))
        if isinstance(expr, MaxReductionOp):
            raise UnsupportedFusionError(
                f"{name(val)} = max(...) is read inside the epilogue; {ACCEPTED} (its value is "
                "complete only when every tile is done, so nothing in the kernel reads it)"
            )
        what = expr.kind if expr is not None else "an input that is not an epilogue input"
        raise UnsupportedFusionError(
            f"{name(val)} is computed by {what}, which a matmul epilogue cannot do; epilogues "
            "take element-wise ops, casts and broadcasts of epilogue inputs"
        )

    outputs = []
    for tv in fusion.outputs:
        if id(tv) in amax_of:
            src = lower(amax_of[id(tv)])
            outputs.append(EpilogueOutput(name=name(tv), src=src, dtype=tv.dtype, amax=True))
            continue
        src = lower(tv)
        outputs.append(EpilogueOutput(name=name(tv), src=src, dtype=tv.dtype))
    return EpilogueProgram(
        inputs=tuple(inputs), scalars=tuple(scalars), instrs=tuple(instrs), outputs=tuple(outputs)
    )


def _cast(expr: CastOp, src: int, emit) -> int:  # noqa: ANN001
    """A cast rounds unless every value of its source fits its dtype (float16 -> float32);
    float16 <-> bfloat16 rounds both ways (each has values the other lacks)."""
    source, target = expr.inputs[0].dtype, expr.output.dtype  # type: ignore[attr-defined]
    exact = source is target or target.itemsize > source.itemsize
    return src if exact else emit(Instr(op="cast", srcs=(src,), arg=target))


def lower_prologue(
    operand: TensorView,
    source: TensorView,
    scalars: list[str],
    name,  # noqa: ANN001
) -> Prologue | None:
    """The element-wise ops from fusion input *source* to MmaOp operand *operand* as a Prologue
    (None when only metadata ops stand between them).

    *scalars* is the kernel's scalar table: a runtime scalar the prologue reads is appended
    unless already there. *name* gives a tensor's user name for messages.
    """
    instrs: list[Instr] = [Instr(op="acc")]
    memo: dict[int, int] = {}

    def emit(instr: Instr) -> int:
        instrs.append(instr)
        return len(instrs) - 1

    def lower(val: Val) -> int:
        if id(val) not in memo:
            memo[id(val)] = _lower_one(val)
        return memo[id(val)]

    def _lower_one(val: Val) -> int:
        if isinstance(val, Scalar):
            if val.is_constant:
                return emit(Instr(op="const", arg=float(val.value)))  # type: ignore[arg-type]
            if val.name not in scalars:
                scalars.append(val.name)
            return emit(Instr(op="scalar", arg=scalars.index(val.name)))
        assert isinstance(val, TensorView)
        if val is source:
            return 0
        expr = val.definition
        if expr is None:
            raise UnsupportedFusionError(
                f"matmul operand {name(operand)} is computed from inputs {source.name} and "
                f"{val.name}; an operand prologue reads one input (compute "
                f"{name(operand)} before the fusion, or let segmentation cut it off)"
            )
        if isinstance(expr, (*METADATA_OPS, ExpandOp)):
            return lower(expr.inputs[0])  # per element, these only rename the dims
        if isinstance(expr, CastOp):
            return _cast(expr, lower(expr.inputs[0]), emit)
        if isinstance(expr, UnaryOp):
            return emit(Instr(op=expr.op, srcs=(lower(expr.inputs[0]),)))
        if isinstance(expr, BinaryOp):
            return emit(Instr(op=expr.op, srcs=(lower(expr.inputs[0]), lower(expr.inputs[1]))))
        raise UnsupportedFusionError(
            f"matmul operand {name(operand)} is computed by {expr.kind} ({name(val)}); an "
            "operand prologue takes element-wise ops, casts and scalars only (compute it "
            "before the fusion)"
        )

    src = lower(operand)
    if src == len(instrs) - 1 and instrs[src].op == "cast" and instrs[src].arg is operand.dtype:
        src = instrs.pop().srcs[0]  # the mma operand is rounded to that dtype anyway
    if src == 0 and source.dtype is operand.dtype:
        return None
    if not source.dtype.is_half:
        raise UnsupportedFusionError(
            f"matmul operand {name(operand)} is computed from input {source.name}, which is "
            f"{source.dtype.label}; kernels load operands as float16 or bfloat16, also under a "
            "prologue (cast the input before the fusion)"
        )
    out = EpilogueOutput(name=name(operand), src=src, dtype=operand.dtype)
    program = EpilogueProgram(instrs=tuple(instrs), outputs=(out,))
    return Prologue(source=source.dtype, program=program)
