"""Building blocks of the inline-PTX intrinsics (``intrinsics``, ``sm90``, ``mathfuncs``):
typing-time checks, inline asm calls, state-space addresses, and ``implements``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from llvmlite import ir
from numba.cuda import cgutils, types
from numba.cuda.core.errors import NumbaTypeError, RequireLiteralValue
from numba.cuda.extending import intrinsic

__all__ = [
    "CONSTRAINT_MAP",
    "GENERIC_ADDRSPACE",
    "GLOBAL_ADDRSPACE",
    "SHARED_ADDRSPACE",
    "as_tuple",
    "casts",
    "implements",
    "inline_asm",
    "item_address",
    "validate_array",
    "validate_float",
    "validate_integer",
    "validate_literal_count",
]

# Numba type -> inline-asm register constraint.
CONSTRAINT_MAP: Final = {
    types.uint16: "h",
    types.uint32: "r",
    types.uint64: "l",
    types.float32: "f",
}
# Shared state-space pointers are 32-bit; see "Generic Addressing" in the PTX ISA.
SHARED_ADDRSPACE: Final = 3
GLOBAL_ADDRSPACE: Final = 1
GENERIC_ADDRSPACE: Final = 0  # no cvta: the address as the kernel holds it


# --- Validation (typing time) --------------------------------------------------------------------


def validate_integer(instruction: str, name: str, ty: Any) -> None:
    """NumbaTypeError unless argument `name` of `instruction` is typed as an integer."""
    if not isinstance(ty, types.Integer):
        raise NumbaTypeError(f"{instruction}: {name} must be an integer, got {ty}")


def validate_float(instruction: str, name: str, ty: Any) -> None:
    """NumbaTypeError unless argument `name` of `instruction` is typed as a float."""
    if not isinstance(ty, types.Float):
        raise NumbaTypeError(f"{instruction}: {name} must be a float, got {ty}")


def validate_array(instruction: str, name: str, ty: Any) -> None:
    """NumbaTypeError unless argument `name` of `instruction` is a 1-D array."""
    if not isinstance(ty, types.Array) or ty.ndim != 1:
        raise NumbaTypeError(f"{instruction}: {name} must be a 1-D array, got {ty}")


def validate_literal_count(instruction: str, ty: Any) -> int:
    """The value of a literal group count >= 0 (RequireLiteralValue for a runtime value)."""
    if not isinstance(ty, types.IntegerLiteral):
        raise RequireLiteralValue(
            f"{instruction}: the group count must be a compile-time literal int, got {ty}; "
            "compute it in Python and close over it"
        )
    if ty.literal_value < 0:
        raise NumbaTypeError(f"{instruction}: the group count must be >= 0, got {ty.literal_value}")
    return int(ty.literal_value)


# --- Codegen helpers -----------------------------------------------------------------------------


def _ir_type(ty: Any) -> ir.Type:
    return ir.FloatType() if ty == types.float32 else ir.IntType(ty.bitwidth)


def inline_asm(
    builder, out: list[Any], text: str, ins: list[Any], values: list[Any], *, effect: bool
):
    """Call inline asm `text` with outputs of Numba types `out` and inputs `values` (of `ins`)."""
    outs = [_ir_type(ty) for ty in out]
    ret = ir.VoidType() if not outs else outs[0] if len(outs) == 1 else ir.LiteralStructType(outs)
    constraints = [f"={CONSTRAINT_MAP[ty]}" for ty in out] + [CONSTRAINT_MAP[ty] for ty in ins]
    if effect:
        constraints.append("~{memory}")
    fnty = ir.FunctionType(ret, [_ir_type(ty) for ty in ins])
    asm = ir.InlineAsm(fnty, text, ",".join(constraints), side_effect=effect)
    return builder.call(asm, values)


def casts(context, builder, sig, args, targets) -> list[Any]:
    """`args` (typed as in `sig`) cast to the Numba types `targets`."""
    return [
        context.cast(builder, v, t, to) for v, t, to in zip(args, sig.args, targets, strict=True)
    ]


def item_address(context, builder, aryty, ary, index, idxty, addrspace: int, bits: int):
    """Integer `bits`-wide address of `ary[index]` in state space `addrspace` (cvta.to.*;
    none for the generic space)."""
    array = context.make_array(aryty)(context, builder, value=ary)
    idx = context.cast(builder, index, idxty, types.intp)
    ptr = cgutils.get_item_pointer(context, builder, aryty, array, [idx], wraparound=False)
    if addrspace == GENERIC_ADDRSPACE:
        return builder.ptrtoint(ptr, ir.IntType(bits))
    spaced = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace=addrspace))
    return builder.ptrtoint(spaced, ir.IntType(bits))


def as_tuple(context, builder, retty, values):
    """An inline asm's struct result as the UniTuple `retty` (a scalar result unchanged)."""
    if not isinstance(retty, types.UniTuple):
        return values
    parts = [builder.extract_value(values, i) for i in range(retty.count)]
    return context.make_tuple(builder, retty, parts)


def implements(stub: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    """Make an intrinsic from `typer` that carries the name and docstring of `stub`."""

    def wrap(typer: Callable[..., Any]) -> Any:
        typer.__name__, typer.__qualname__, typer.__doc__ = (
            stub.__name__,
            stub.__name__,
            stub.__doc__,
        )
        return intrinsic(typer)

    return wrap
