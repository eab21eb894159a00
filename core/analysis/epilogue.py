"""EpilogueProgram: the element-wise work a kernel does after the main loop, as a flat list.

A :class:`Prologue` reuses it for the element-wise work on an operand before the mma.

Schedulers never walk the fusion IR to generate an epilogue; core lowers the IR between the
MmaOp and the fusion outputs into this small SSA program, and a code generator turns each
instruction into one line of kernel code. Every value is computed in float32 (the accumulator
type); ``cast`` rounds to a narrower type and back, exactly where the fusion rounds.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from mmaplug.errors import UsageError
from mmaplug.ir.dtypes import DType

UNARY_OPS = (
    "neg", "relu", "gelu", "silu", "sigmoid", "sin",
    "cos", "exp", "log", "tanh", "abs", "reciprocal", "sqrt", "rsqrt", "erf",
)  # fmt: skip
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")


class Axis(enum.StrEnum):
    """Output axes an epilogue tensor can vary along."""

    BATCH = "batch"
    M = "m"
    N = "n"


def _axis(value: Any) -> Axis:
    try:
        return Axis(value)
    except ValueError:
        names = ", ".join(repr(a.value) for a in Axis)
        raise UsageError(f"EpilogueInput.axes: {value!r} is not an axis; use {names}") from None


@attrs.frozen(kw_only=True)
class EpilogueInput:
    """A fusion input read by the epilogue: a bias (``axes=("n",)``), a C matrix, ...

    At launch it is passed as a 3-D array ``[batch or 1, m or 1, n or 1]``: a size-1 dim is
    one the tensor does not vary along (index it with 0).
    """

    name: str
    dtype: DType
    axes: tuple[Axis, ...] = attrs.field(converter=lambda v: tuple(_axis(a) for a in v))


@attrs.frozen(kw_only=True)
class Instr:
    """One SSA instruction; its result is referred to by its index in ``EpilogueProgram.instrs``.

    ``op`` is one of:
      - ``"acc"``: the float32 accumulator element; ``arg`` j > 0 (None or 0: the first) is
        accumulator j of a horizontal fusion (the product with ``MatmulAnalysis.bs[j]``);
      - ``"input"``: element of ``inputs[arg]`` (``arg`` is the input index);
      - ``"scalar"``: the float32 scalar argument number ``arg``;
      - ``"const"``: the float constant ``arg``;
      - ``"cast"``: round ``srcs[0]`` to ``arg`` (a DType) and back to float32;
      - a name from ``UNARY_OPS`` (one src) or ``BINARY_OPS`` (two srcs).
    """

    op: str
    srcs: tuple[int, ...] = ()
    arg: Any = None  # per op above: an int index, a float constant or a DType


@attrs.frozen(kw_only=True)
class EpilogueOutput:
    """A fusion output ``[batch, m, n]`` (n innermost) holding instruction ``src`` as ``dtype``.

    With ``amax`` it is instead the float32 scalar ``max(|src|)`` over every element of the
    output (a NaN gives NaN), delayed scaling's amax: kernels keep a running maximum as they
    compute the elements and fold it into the scalar, which launches zero first.
    """

    name: str
    src: int
    dtype: DType
    amax: bool = False


@attrs.frozen(kw_only=True)
class EpilogueProgram:
    """Inputs, scalars, instructions and outputs of a fused epilogue."""

    inputs: tuple[EpilogueInput, ...] = ()
    scalars: tuple[str, ...] = ()
    instrs: tuple[Instr, ...] = (Instr(op="acc"),)
    outputs: tuple[EpilogueOutput, ...] = ()

    @property
    def op_names(self) -> tuple[str, ...]:
        """The non-trivial operations, in order (``("add", "gelu", "cast")``), then ``"amax"``
        for each amax output."""
        ops = tuple(i.op for i in self.instrs if i.op not in ("acc", "input", "scalar", "const"))
        return ops + tuple("amax" for o in self.outputs if o.amax)

    @property
    def stored(self) -> tuple[tuple[int, EpilogueOutput], ...]:
        """``(j, output j)`` of every output stored element by element (all but the amax
        outputs)."""
        return tuple((j, o) for j, o in enumerate(self.outputs) if not o.amax)

    @property
    def amaxes(self) -> tuple[tuple[int, EpilogueOutput], ...]:
        """``(j, output j)`` of every amax output."""
        return tuple((j, o) for j, o in enumerate(self.outputs) if o.amax)


@attrs.frozen(kw_only=True)
class Prologue:
    """Element-wise work on one operand between its load and the mma (``sin(A)``, a cast).

    In ``program``, ``acc`` is the loaded element of the fusion input (stored as ``source``)
    widened to float32; its one output is the mma operand, rounded to that output's dtype.
    ``scalar`` instructions index the kernel's scalar table: the epilogue program's
    ``scalars``, which analysis extends with the prologues' ones.
    """

    source: DType
    program: EpilogueProgram

    @property
    def dtype(self) -> DType:
        """The mma operand's dtype (float16 or bfloat16)."""
        return self.program.outputs[0].dtype

    @property
    def op_names(self) -> tuple[str, ...]:
        """The operations, in order (``("sin", "mul")``); ``("cast",)`` for a bare cast (the
        rounding to ``dtype`` every prologue ends with is not listed otherwise)."""
        return self.program.op_names or ("cast",)

    @property
    def uses_scalars(self) -> bool:
        """Whether a ``scalar`` instruction reads the kernel's scalar table."""
        return any(i.op == "scalar" for i in self.program.instrs)
