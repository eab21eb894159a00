"""Epilogue lowering: the IR between the MmaOp and the fusion outputs as an EpilogueProgram."""

from __future__ import annotations

from .epilogue import Axis, EpilogueInput, EpilogueOutput, EpilogueProgram, Instr
from .errors import UnsupportedFusionError
from .fusion import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    MmaOp,
    PermuteOp,
    Scalar,
    SetOp,
    SqueezeOp,
    TensorView,
    UnaryOp,
    Val,
)
from .patterns import DimRole
from .view_ops import ExpandOp

_AXIS_OF = {DimRole.BATCH: Axis.BATCH, DimRole.M: Axis.M, DimRole.N: Axis.N}


def lower_epilogue(fusion, patterns, epi_inputs, name) -> EpilogueProgram:  # noqa: ANN001
    """The epilogue program of a translated single-matmul *fusion* (empty for several).

    *name* gives a tensor's user name for messages.
    """
    if len(patterns) != 1:
        return EpilogueProgram()  # horizontal fusions: analysed, but no single-MmaOp epilogue
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
            return 0
        if isinstance(expr, BroadcastOp | ExpandOp | PermuteOp | SetOp | SqueezeOp):
            return lower(expr.inputs[0])  # per element, these only rename the dims
        if isinstance(expr, CastOp):
            src = lower(expr.inputs[0])
            source_dtype = expr.inputs[0].dtype  # type: ignore[attr-defined]
            widening = val.dtype.itemsize >= source_dtype.itemsize
            return src if widening else emit(Instr(op="cast", srcs=(src,), arg=val.dtype))
        if isinstance(expr, UnaryOp):
            return emit(Instr(op=expr.op, srcs=(lower(expr.inputs[0]),)))
        if isinstance(expr, BinaryOp):
            srcs = (lower(expr.inputs[0]), lower(expr.inputs[1]))
            return emit(Instr(op=expr.op, srcs=srcs))
        what = expr.kind if expr is not None else "an input that is not an epilogue input"
        raise UnsupportedFusionError(
            f"{name(val)} is computed by {what}, which a matmul epilogue cannot do; epilogues "
            "take element-wise ops, casts and broadcasts of epilogue inputs"
        )

    outputs = []
    for tv in fusion.outputs:
        src = lower(tv)
        outputs.append(EpilogueOutput(name=name(tv), src=src, dtype=tv.dtype))
    return EpilogueProgram(
        inputs=tuple(inputs), scalars=tuple(scalars), instrs=tuple(instrs), outputs=tuple(outputs)
    )
