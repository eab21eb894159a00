"""The reference executor: runs a fusion in numpy, float64 inside, rounding where kernels round."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from mmaplug.errors import FusionError
from mmaplug.ir.arguments import is_number
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Expr, Fusion, Scalar, TensorView, Val, as_fusion
from mmaplug.ir.ops import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    LinearOp,
    MatmulOp,
    MaxReductionOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    ScaledMmaOp,
    SetOp,
    SqueezeOp,
    UnaryOp,
)
from mmaplug.ir.symbolic import concretize, shape_of, symbolic_dims
from mmaplug.ir.view_ops import ExpandOp, ReshapeOp, SliceOp

_erf: Final = np.vectorize(math.erf, otypes=[np.float64])
_erfc: Final = np.vectorize(math.erfc, otypes=[np.float64])

UNARY: Final[dict[str, Callable[[np.ndarray], np.ndarray]]] = {
    "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0.0),
    # x * Phi(x) through erfc: 1 + erf(x / sqrt 2) cancels for negative x, even in float64
    "gelu": lambda x: 0.5 * x * _erfc(-x / math.sqrt(2.0)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sin": np.sin,
    "cos": np.cos,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "abs": np.abs,
    "reciprocal": np.reciprocal,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": _erf,
}
BINARY: Final[dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def round_to(x: np.ndarray | float, dtype: DType) -> np.ndarray:
    """*x* rounded to *dtype* (nearest even) and widened back to float64.

    FP8 saturates as ``cvt.rn.satfinite`` does: beyond the largest finite value (infinities
    included) the result is that value with the sign kept, and NaN stays NaN.
    """
    if dtype is DType.float64:
        return np.asarray(x, dtype=np.float64)
    if dtype.is_float8:
        x = np.clip(np.asarray(x, dtype=np.float64), -dtype.finite_max, dtype.finite_max)
    return np.asarray(x).astype(dtype.numpy).astype(np.float64)


def evaluate(fusion: Fusion, inputs: Sequence[object]) -> list[np.ndarray]:
    """Run *fusion* (or a FusionDefinition) on *inputs* (arrays and numbers, in input order).

    Every op computes in float64; each op's result is rounded to its declared dtype, as a
    kernel storing or converting that value would (but a kernel reads the float32 sum where a
    half matmul result is cast straight back to float32: docs/decisions.md, "Half arithmetic
    computes in float32 through explicit casts"), and a scalar meeting a tensor is first
    converted to the op's type (a float32 op sees ``float32(0.1)``, as in nvFuser and torch).
    Symbolic extents (-1) take the extents of *inputs*. Returns the outputs in their declared
    dtypes, each strided as its ``stride_order`` asks (row-major unless ``fd.ops.stride_order``).
    """
    fusion = as_fusion(fusion, "evaluate")
    if not isinstance(inputs, list | tuple):
        raise FusionError(
            f"evaluate: inputs must be a list or tuple with one value per fusion input "
            f"({', '.join(v.name for v in fusion.inputs)}); got {type(inputs).__name__}"
        )
    if len(inputs) != len(fusion.inputs):
        raise FusionError(
            f"evaluate: the fusion takes {len(fusion.inputs)} inputs "
            f"({', '.join(v.name for v in fusion.inputs)}); got {len(inputs)}"
        )
    if symbolic_dims(fusion):  # this call's inputs decide the symbolic extents
        shapes = [
            shape_of(x) if isinstance(v, TensorView) else None
            for v, x in zip(fusion.inputs, inputs, strict=True)
        ]
        fusion = concretize(fusion, shapes, where="evaluate")
    env: dict[int, np.ndarray | float] = {}
    for val, given in zip(fusion.inputs, inputs, strict=True):
        env[id(val)] = _bind_input(val, given)
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not faults
        for expr in fusion.exprs():
            args = [_get(env, v) for v in expr.inputs]
            if isinstance(expr, BinaryOp):  # a scalar takes the op's type; it never promotes
                args = [
                    round_to(a, expr.output.dtype) if isinstance(v, Scalar) else a
                    for a, v in zip(args, expr.inputs, strict=True)
                ]
            value = _run(expr, args)
            out = expr.output
            env[id(out)] = round_to(np.broadcast_to(value, out.shape), out.dtype)
    return [_laid_out(np.asarray(env[id(tv)]).astype(tv.dtype.numpy), tv) for tv in fusion.outputs]


def _laid_out(array: np.ndarray, tv: TensorView) -> np.ndarray:
    """*array* with *tv*'s memory order (``stride_order``): the same values, strided as asked."""
    order = [tv.no_reduction_domain.index(tv.domain[i]) for i in tv.alloc_order]
    if order == sorted(order):
        return array
    return np.ascontiguousarray(array.transpose(order)).transpose(np.argsort(order))


def _bind_input(val: Val, given: object) -> np.ndarray | float:
    if isinstance(val, Scalar):
        if not is_number(given):
            raise FusionError(
                f"evaluate: scalar input {val.name} needs a number (int, float or numpy "
                f"scalar); got {given!r}"
            )
        try:
            return float(given)  # type: ignore[arg-type]
        except OverflowError:
            raise FusionError(
                f"evaluate: scalar input {val.name} = {given!r:.30} does not fit a float"
            ) from None
    assert isinstance(val, TensorView)
    if isinstance(given, np.ma.MaskedArray) and np.ma.getmask(given) is not np.ma.nomask:
        raise FusionError(
            f"evaluate: input {val.name} is a masked array; a fusion reads every element, so "
            "pass plain values (masked.filled(value) says which stand in for the masked ones)"
        )
    try:
        array = np.asarray(given)
    except Exception as error:  # noqa: BLE001 - anything numpy cannot read is the caller's error
        raise FusionError(f"evaluate: input {val.name} is not an array: {error}") from None
    if array.shape != val.shape:
        raise FusionError(
            f"evaluate: input {val.name} was declared with shape {list(val.shape)}; "
            f"got an array of shape {list(array.shape)}"
        )
    if array.dtype.kind not in "fiub" and array.dtype not in {d.numpy for d in DType}:
        raise FusionError(f"evaluate: input {val.name} has non-numeric dtype {array.dtype}")
    if array.dtype == val.dtype.numpy:  # its values exactly: an e5m2 infinity stays infinite
        return array.astype(np.float64)
    return round_to(array.astype(np.float64), val.dtype)  # converted as a cast would


def _get(env: dict[int, np.ndarray | float], val: Val) -> np.ndarray | float:
    if isinstance(val, Scalar) and val.is_constant:
        return float(val.value)  # type: ignore[arg-type]
    if id(val) not in env:
        raise FusionError(
            f"evaluate: {val.name} is read by the fusion but is neither one of its inputs nor "
            "computed in it (a value of another fusion?); add it with add_input"
        )
    return env[id(val)]


def _run(expr: Expr, args: list) -> np.ndarray | float:
    if isinstance(expr, UnaryOp):
        return UNARY[expr.op](args[0])
    if isinstance(expr, BinaryOp):
        return BINARY[expr.op](args[0], args[1])
    if isinstance(expr, CastOp | SetOp):
        return args[0]
    if isinstance(expr, BroadcastOp):
        x = args[0]
        for pos, new in enumerate(expr.flags):
            if new:
                x = np.expand_dims(x, pos)
        return x
    if isinstance(expr, SqueezeOp):
        return np.squeeze(args[0], axis=expr.dims) if expr.dims else args[0]
    if isinstance(expr, PermuteOp):
        return np.transpose(args[0], expr.perm)
    if isinstance(expr, SliceOp):
        return args[0][tuple(slice(*r) for r in expr.ranges)]
    if isinstance(expr, ReshapeOp):
        return np.reshape(args[0], expr.output.shape)
    if isinstance(expr, ExpandOp):
        return args[0]  # broadcast to the output's shape below
    if isinstance(expr, ReductionOp):
        return np.sum(args[0], axis=expr.axes)
    if isinstance(expr, MaxReductionOp):
        return np.max(args[0], axis=expr.axes)  # NaN anywhere gives NaN
    if isinstance(expr, ScaledMmaOp):
        return block_scaled_sum(*args, block=expr.block)
    if isinstance(expr, MmaOp):
        return _multiply_sum(args[0], args[1], expr.axes[0])
    if isinstance(expr, MatmulOp):
        return np.matmul(args[0], args[1])
    if isinstance(expr, LinearOp):
        a, w = args[0], args[1]
        y = np.matmul(a, w.T if w.ndim == 2 else w)
        return y + args[2] if len(args) > 2 else y
    own = getattr(expr, "evaluate", None)  # plugin-defined ops bring their own reference
    if own is not None:
        return own(args)
    raise FusionError(f"evaluate: no reference for op {expr.kind!r}")


def _multiply_sum(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    """``sum(a * b, axis)`` with broadcasting, without materialising the full product."""
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    return np.matmul(a[..., None, :], b[..., :, None])[..., 0, 0]


def block_scaled_sum(
    a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray, *, block: int
) -> np.ndarray:
    """``ScaledMmaOp``: A ``[M, 1, K]``, B ``[1, N, K]``; each K block's sums scaled by
    ``scale_a[m, j] * scale_b[j, n // block]`` before they are added."""
    k, n = a.shape[-1], b.shape[1]
    out = np.zeros((a.shape[0], n))
    columns = np.arange(n) // block
    for j, k0 in enumerate(range(0, k, block)):
        part = _multiply_sum(a[..., k0 : k0 + block], b[..., k0 : k0 + block], 2)
        out += part * scale_a[:, j : j + 1] * scale_b[j, columns][None, :]
    return out
