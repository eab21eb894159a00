"""Running a fusion segment with the caller's framework ops (torch, CuPy; numpy as the model)."""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mmaplug.errors import UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion, Scalar
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
from mmaplug.ir.view_ops import ExpandOp, ReshapeOp, SliceOp


class Backend:
    """One framework's array ops; each op computes in its inputs' type, then the result is cast
    to the IR's dtype (the IR casts half values to float32 explicitly, so this matches kernels)."""

    def __init__(
        self,
        xp: Any,
        dtypes: dict[DType, Any],
        erf: Callable[[Any], Any],
        erfc: Callable[[Any], Any],
    ) -> None:
        self.xp, self.dtypes, self.erf, self.erfc = xp, dtypes, erf, erfc

    def cast(self, x: Any, dtype: DType) -> Any:
        """*x* in *dtype*; to FP8 saturating as the kernels' ``cvt.rn.satfinite`` (and
        ``mp.evaluate``), where a plain conversion gives NaN or an infinity."""
        if dtype.is_float8 and x.dtype != self.dtypes[dtype]:  # (FP8 widened to clamp)
            wide = self.convert(x, self.dtypes[DType.float32]) if x.dtype.itemsize == 1 else x
            x = self.clip(wide, -dtype.finite_max, dtype.finite_max)  # (NaN stays NaN)
        return self.convert(x, self.dtypes[dtype])

    def convert(self, x: Any, dtype: Any) -> Any:
        """*x* converted to the framework's *dtype* (no saturation: ``cast`` is the IR's)."""
        return self.xp.asarray(x.astype(dtype))  # (a 0-d array, not a scalar)

    def clip(self, x: Any, low: float, high: float) -> Any:
        return self.xp.clip(x, low, high)

    def scalar(self, value: float, like: Any, dtype: DType) -> Any:
        """*value* as a 0-d array of *dtype* where *like* lives."""
        return self.xp.asarray(value, dtype=self.dtypes[dtype])

    def permute(self, x: Any, perm: Sequence[int]) -> Any:
        return self.xp.transpose(x, tuple(perm))

    def layout(self, x: Any, order: Sequence[int]) -> Any:
        """A copy of *x* stored in memory order *order* (outermost first), viewed logically."""
        stored = self.xp.array(self.permute(x, order), copy=True, order="C")
        return self.permute(stored, [int(i) for i in np.argsort(order)])

    def sum(self, x: Any, axes: Sequence[int]) -> Any:
        return self.xp.sum(x, axis=tuple(axes))

    def max(self, x: Any, axes: Sequence[int]) -> Any:
        return self.xp.max(x, axis=tuple(axes))

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b``, 16-bit and FP8 operands accumulated in float32 (as torch and cuBLAS
        do; numpy would sum ml_dtypes' FP8 in FP8)."""
        if a.dtype.itemsize <= 2:
            a, b = a.astype(self.xp.float32), b.astype(self.xp.float32)
        return a @ b

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Any:
        return self.xp.broadcast_to(x, tuple(shape))

    def repeat(self, x: Any, times: int) -> Any:
        """Each element of the 1-d *x* *times* times in a row."""
        return self.xp.repeat(x, times)


class TorchBackend(Backend):
    """torch's spellings of the few ops whose names differ from numpy's."""

    def convert(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def clip(self, x: Any, low: float, high: float) -> Any:
        return x.clamp(low, high)  # (torch clamps no FP8 tensor: cast widens those first)

    def scalar(self, value: float, like: Any, dtype: DType) -> Any:
        return self.xp.tensor(value, dtype=self.dtypes[dtype], device=like.device)

    def permute(self, x: Any, perm: Sequence[int]) -> Any:
        return x.permute(*perm)

    def layout(self, x: Any, order: Sequence[int]) -> Any:
        stored = x.permute(*order).clone(memory_format=self.xp.contiguous_format)
        return stored.permute(*[int(i) for i in np.argsort(order)])

    def sum(self, x: Any, axes: Sequence[int]) -> Any:
        return x.sum(dim=tuple(axes))

    def max(self, x: Any, axes: Sequence[int]) -> Any:
        return x.amax(dim=tuple(axes))  # NaN anywhere gives NaN, as numpy's max

    def matmul(self, a: Any, b: Any) -> Any:
        if a.dtype.itemsize == 1:  # torch multiplies no FP8 tensors with @
            a, b = a.float(), b.float()
        return a @ b

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Any:
        return x.expand(*shape)

    def repeat(self, x: Any, times: int) -> Any:
        return x.repeat_interleave(times)


def backend_for(kind: str) -> Backend:
    """The backend of arrays of *kind* (``mmaplug.cuda.frameworks.kind_of``)."""
    if kind == "torch":
        torch = sys.modules["torch"]
        dtypes = {d: getattr(torch, d.label) for d in DType}  # torch names them alike
        return TorchBackend(torch, dtypes, torch.special.erf, torch.special.erfc)
    if kind == "cupy":
        special = importlib.import_module("cupyx.scipy.special")
        dtypes = {d: np.dtype(d.numpy) for d in DType if d.itemsize > 2 or d is DType.float16}
        return Backend(sys.modules["cupy"], dtypes, special.erf, special.erfc)
    if kind == "numpy":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        erfc = np.vectorize(math.erfc, otypes=[np.float64])
        return Backend(
            np,
            {d: np.dtype(d.numpy) for d in DType},
            lambda x: erf(x).astype(x.dtype),
            lambda x: erfc(x).astype(x.dtype),
        )
    raise UsageError(
        f"a segment that is not a matmul kernel runs with the framework's own ops: pass torch "
        f"tensors or CuPy arrays (got {kind} arrays, which have no array operations)"
    )


def run_ops(fusion: Fusion, args: Sequence[Any], be: Backend) -> list[Any]:
    """Compute *fusion*'s outputs from *args* (one per input) with backend *be*'s ops."""
    env: dict[int, Any] = {id(v): a for v, a in zip(fusion.inputs, args, strict=True)}
    for expr in fusion.exprs():
        vals = [
            float(v.value) if isinstance(v, Scalar) and v.is_constant else env[id(v)]  # type: ignore[arg-type]
            for v in expr.inputs
        ]
        out = expr.output
        value = be.cast(_one(expr, vals, be), out.dtype)
        same = tuple(value.shape) == tuple(out.shape)
        env[id(out)] = value if same else be.broadcast_to(value, out.shape)
    results = []
    for tv in fusion.outputs:
        order = [tv.no_reduction_domain.index(tv.domain[i]) for i in tv.alloc_order]
        value = env[id(tv)]  # a new, writable array laid out as declared (kernels may read it)
        results.append(be.layout(value, order) if order else value)
    return results


def _one(expr: Any, vals: list[Any], be: Backend) -> Any:
    xp = be.xp
    if isinstance(expr, UnaryOp):
        return _unary(expr.op, vals[0], be)
    if isinstance(expr, BinaryOp):
        scalar = [isinstance(v, Scalar) for v in expr.inputs]
        like = next(v for v, s in zip(vals, scalar, strict=True) if not s)
        x, y = (be.scalar(float(v), like, expr.output.dtype) if s else v
                for v, s in zip(vals, scalar, strict=True))  # fmt: skip
        ops = {"add": xp.add, "sub": xp.subtract, "mul": xp.multiply, "div": xp.divide,
               "maximum": xp.maximum, "minimum": xp.minimum}  # fmt: skip
        return ops[expr.op](x, y)
    if isinstance(expr, CastOp | SetOp | ExpandOp):
        return vals[0]
    if isinstance(expr, BroadcastOp):  # kept dims keep their extents, new ones are 1
        kept = iter(vals[0].shape)
        return vals[0].reshape(tuple(1 if new else next(kept) for new in expr.flags))
    if isinstance(expr, SqueezeOp | ReshapeOp):
        return vals[0].reshape(tuple(expr.output.shape))
    if isinstance(expr, PermuteOp):
        return be.permute(vals[0], expr.perm)
    if isinstance(expr, SliceOp):
        return vals[0][tuple(slice(*r) for r in expr.ranges)]
    if isinstance(expr, ReductionOp):  # in the sum's type where it is wider (torch's dtype=)
        x = vals[0]
        if expr.output.dtype.itemsize > x.dtype.itemsize:
            x = be.cast(x, expr.output.dtype)
        return be.sum(x, expr.axes)
    if isinstance(expr, MaxReductionOp):
        return be.max(vals[0], expr.axes)
    if isinstance(expr, ScaledMmaOp):  # (an MmaOp)
        return _block_scaled_sum(vals, expr.block, be)
    if isinstance(expr, MmaOp):
        axis, rank = expr.axes[0], len(vals[0].shape)
        order = [i for i in range(rank) if i != axis] + [axis]
        a, b = (be.permute(v, order) for v in vals)
        return be.matmul(a[..., None, :], b[..., :, None])[..., 0, 0]
    if isinstance(expr, MatmulOp):
        return be.matmul(vals[0], vals[1])
    if isinstance(expr, LinearOp):
        w = vals[1]
        y = be.matmul(vals[0], be.permute(w, [1, 0]) if len(w.shape) == 2 else w)
        return y + vals[2] if len(vals) > 2 else y
    raise UsageError(f"no framework op for {expr.kind!r} ({expr!r})")


def _block_scaled_sum(vals: Sequence[Any], block: int, be: Backend) -> Any:
    """``ScaledMmaOp`` (``mmaplug.ir.evaluate.block_scaled_sum`` in float32): A ``[M, 1, K]``,
    B ``[1, N, K]``, each K block's sums scaled by ``scale_a[m, j] * scale_b[j, n // block]``."""
    a, b, scale_a, scale_b = vals
    k, n = a.shape[-1], b.shape[1]
    out = None
    for j, k0 in enumerate(range(0, k, block)):
        part = be.matmul(a[:, 0, k0 : k0 + block], be.permute(b[0, :, k0 : k0 + block], [1, 0]))
        scaled = part * scale_a[:, j : j + 1] * be.repeat(scale_b[j], block)[None, :n]
        out = scaled if out is None else out + scaled
    return out


def _unary(op: str, x: Any, be: Backend) -> Any:
    xp = be.xp
    if op == "gelu":  # x * Phi(x) through erfc: 1 + erf(x / sqrt 2) cancels for negative x
        return x * 0.5 * be.erfc(x * (-1.0 / math.sqrt(2.0)))
    if op in ("silu", "sigmoid"):
        sig = 1.0 / (1.0 + xp.exp(-x))
        return x * sig if op == "silu" else sig
    if op == "relu":
        return xp.maximum(x, xp.zeros_like(x))
    if op in ("reciprocal", "rsqrt"):
        return 1.0 / (xp.sqrt(x) if op == "rsqrt" else x)
    if op == "erf":
        return be.erf(x)
    return {"neg": xp.negative, "sin": xp.sin, "cos": xp.cos, "exp": xp.exp, "log": xp.log,
            "tanh": xp.tanh, "abs": xp.abs, "sqrt": xp.sqrt}[op](x)  # fmt: skip
