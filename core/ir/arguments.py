"""Checks of values users pass: ints, extents, dtypes and scalars of a definition, attrs fields."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeGuard

import numpy as np

from mmaplug.errors import FusionError, UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import SYMBOLIC

#: Extents must be below this: CUDA grid x, TMA descriptors and int32 index math all stop here.
MAX_EXTENT: Final = 2**31
#: Bytes a tensor may span: offsets in the kernels are int64.
MAX_BYTES: Final = 2**63
FLOAT32_MAX: Final = float(np.finfo(np.float32).max)


def is_int(value: object) -> TypeGuard[numbers.Integral]:
    """True for Python and numpy integers (not bools)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def is_number(value: object) -> TypeGuard[numbers.Real]:
    """True for Python and numpy real numbers (not bools)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def ints(value: object, what: str, *, scalar_ok: bool = False) -> list[int]:
    """*value* as a list of ints, or a FusionError saying what was expected."""
    if scalar_ok and is_int(value):
        return [int(value)]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise FusionError(f"{what} must be a sequence of ints; got {value!r}")
    items = list(value)
    if not all(is_int(v) for v in items):
        raise FusionError(f"{what} {items!r} must hold ints")
    return [int(v) for v in items]


def check_bytes(shape: Sequence[int], dtype: DType, what: str) -> None:
    """Refuse a tensor too large for any kernel to address."""
    if math.prod(shape) * dtype.itemsize >= MAX_BYTES:
        raise FusionError(
            f"{what} {list(shape)} of {dtype.label} spans {math.prod(shape) * dtype.itemsize} "
            "bytes; no kernel can address 2**63 bytes or more"
        )


def dtype(value: object, what: str) -> DType:
    """*value* if it is an mmaplug dtype, else a FusionError naming the accepted ones."""
    if not isinstance(value, DType):
        names = ", ".join(f"mp.{d.label}" for d in DType)
        raise FusionError(f"{what} must be an mmaplug dtype ({names}); got {value!r}")
    return value


def scalar(value: object, what: str) -> float:
    """*value* as a float: a finite real number (numpy scalars too) that float32 can hold.

    Kernels compute in float32, so a constant beyond float32's range would become infinity.
    """
    if not is_number(value):
        raise FusionError(
            f"{what}: {value!r} is not a real number; scalars are ints, floats or numpy "
            "scalars (bools and strings are not)"
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
        shown = f"{value!r}" if len(repr(value)) < 40 else f"{repr(value)[:20]}..."
        raise FusionError(
            f"{what}: scalar {shown} is not a finite float32 value (|x| <= {FLOAT32_MAX:.4g}); "
            "kernels compute in float32 (pass a finite, smaller constant, or a scalar input)"
        )
    return number


# -- attrs fields of user-facing value objects (MatmulProblem, Device, ...) -------------------


def as_int(value: Any) -> Any:
    """Converter: numpy and Python integers become ``int``; the validator refuses the rest."""
    return int(value) if is_int(value) else value


def int_field(low: int, high: int | None = None) -> Callable[[Any, Any, Any], None]:
    """Validator: an int in ``[low, high)``, else a UsageError naming the class and field."""
    accepted = f"an int >= {low}" + (f" and < {high}" if high is not None else "")

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not is_int(value) or not low <= int(value) < (high if high is not None else math.inf):
            raise UsageError(
                f"{type(instance).__name__}.{attribute.name}={value!r} is not allowed; it must "
                f"be {accepted}"
            )

    return check


def of_type(kind: type | tuple[type, ...], accepted: str) -> Callable[[Any, Any, Any], None]:
    """Validator: an instance of *kind*, else a UsageError naming the class and field."""

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, kind):
            raise UsageError(
                f"{type(instance).__name__}.{attribute.name}={value!r} is not allowed; it must "
                f"be {accepted}"
            )

    return check


def tuple_of(kind: type, accepted: str) -> Callable[[Any, Any, Any], None]:
    """Validator: a tuple of *kind* instances, else a UsageError naming the class and field."""

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(v, kind) for v in value):
            raise UsageError(
                f"{type(instance).__name__}.{attribute.name}={value!r:.80} is not allowed; it "
                f"must be a tuple of {accepted}"
            )

    return check


def extents(value: object, what: str) -> list[int]:
    """*value* as extents: ints in ``[1, 2**31)``, or -1 for a symbolic extent."""
    items = ints(value, what)
    for e in items:
        if e != SYMBOLIC and not 1 <= e < MAX_EXTENT:
            raise FusionError(
                f"{what} {items!r} must hold positive ints below 2**31 or -1 (a symbolic "
                f"extent); {e} is not (kernels index and launch with 32-bit extents: split the "
                "dim or reshape the tensor)"
            )
    return items
