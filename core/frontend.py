"""FusionDefinition: the nvFuser-style builder users write fusions with."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import TypeVar

from . import arguments, shapes
from .dtypes import DType
from .errors import FusionError
from .fusion import (
    SYMBOLIC,
    BinaryOp,
    BroadcastOp,
    CastOp,
    Fusion,
    IterDomain,
    IterType,
    LinearOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    Scalar,
    SetOp,
    SqueezeOp,
    TensorView,
    UnaryOp,
    Val,
    result_dtype,
)

Operand = TensorView | Scalar | float | int

_DEFINITIONS = itertools.count(1)
_V = TypeVar("_V", bound=Val)


def _dim(extent: int) -> IterDomain:
    """A fresh dim; a declared extent of 1 is a broadcast dim, -1 a symbolic one (nvFuser)."""
    return IterDomain(extent, IterType.BROADCAST if extent == 1 else IterType.ITERATION)


def _agree(*dims: IterDomain) -> bool:
    """Whether *dims* may be one dim: equal static extents; a symbolic one fits any."""
    return len({d.extent for d in dims if not d.is_symbolic}) <= 1


def _extent(*dims: IterDomain) -> int:
    """The static extent among *dims* (which agree), else SYMBOLIC."""
    return next((d.extent for d in dims if not d.is_symbolic), SYMBOLIC)


def _copy_dim(d: IterDomain) -> IterDomain:
    return IterDomain(d.extent, d.iter_type)


_ints = arguments.ints


def _merge_dims(name: str, dims: Sequence[IterDomain], where: str = "") -> IterDomain:
    """Output dim of an element-wise op: concrete wins over broadcast; extents must agree
    (a symbolic extent agrees with any: the call's inputs must then make them equal)."""
    concrete = [d for d in dims if not d.is_broadcast]
    if not _agree(*concrete):
        raise FusionError(
            f"{name}: {where or 'dims'} have extents {sorted({d.extent for d in concrete})}, "
            "which cannot be combined; extents must match or be 1 (broadcast)"
        )
    if concrete:
        return IterDomain(_extent(*concrete), IterType.ITERATION)
    return IterDomain(max(d.extent for d in dims), IterType.BROADCAST)


def _axis(t: TensorView, dim: int, what: str) -> int:
    rank = len(t.shape)
    if not -rank <= dim < rank:
        raise FusionError(f"{what}: dim {dim} is out of range for {t.name} of rank {rank}")
    return dim % rank


class Ops:
    """``fd.ops``: every operation a fusion may contain."""

    def __init__(self, fd: FusionDefinition) -> None:
        self._fd = fd

    # -- helpers ----------------------------------------------------------------------------
    @property
    def _fusion(self) -> Fusion:
        return self._fd.fusion

    def _tensor(self, t: object, what: str) -> TensorView:
        self._fd._check_open(f"{what} of {t.name}" if isinstance(t, Val) else what)
        if not isinstance(t, TensorView):
            raise FusionError(f"{what} takes a tensor from this definition; got {t!r}")
        return self._fd._own(t, what)

    def _value(self, v: Operand, what: str) -> Val:
        self._fd._check_open(f"{what} of {v.name}" if isinstance(v, Val) else what)
        if isinstance(v, TensorView | Scalar):
            return self._fd._own(v, what)
        return self._fusion.new_scalar(DType.float32, arguments.scalar(v, what))

    def _emit(self, expr_cls: type, out: TensorView, *args: object) -> TensorView:
        self._fusion.attach(expr_cls(out, *args))
        return out

    def _new(self, dtype: DType, domain: Sequence[IterDomain]) -> TensorView:
        return self._fusion.new_tensor(dtype, domain)

    # -- matmul family ------------------------------------------------------------------------
    def matmul(self, a: TensorView, b: TensorView) -> TensorView:
        """``torch.matmul``: A ``[*, M, K]`` or ``[K]`` times B ``[*, K, N]`` or ``[K]``."""
        a, b = self._tensor(a, "matmul"), self._tensor(b, "matmul")
        self._same_dtype("matmul", a, b)
        ad, bd = a.no_reduction_domain, b.no_reduction_domain
        if not ad or not bd:
            raise FusionError("matmul: operands must have at least one dim; got a 0-d tensor")
        k_a = ad[-1]
        k_b = bd[0] if len(bd) == 1 else bd[-2]
        if not _agree(k_a, k_b):
            raise FusionError(
                f"matmul: K of {a.name} is {k_a.extent} but K of {b.name} is {k_b.extent}; "
                "A's last dim must equal B's second-to-last dim (its only dim when 1-D)"
            )
        a_batch = ad[:-2] if len(ad) > 1 else []
        b_batch = bd[:-2] if len(bd) > 1 else []
        batch = self._broadcast_batch("matmul", a_batch, b_batch)
        body = list(batch)
        if len(ad) > 1:
            body.append(_copy_dim(ad[-2]))
        if len(bd) > 1:
            body.append(_copy_dim(bd[-1]))
        body.append(IterDomain(_extent(k_a, k_b), IterType.REDUCTION))
        out = self._new(a.dtype, body)
        self._fusion.attach(MatmulOp([out], [a, b]))
        return out

    def linear(self, a: TensorView, w: TensorView, bias: TensorView | None = None) -> TensorView:
        """``F.linear``: input ``[*, K]``, weight ``[N, K]`` (or ``[K]``), optional bias ``[N]``."""
        a, w = self._tensor(a, "linear"), self._tensor(w, "linear")
        operands = [a, w] + ([self._tensor(bias, "linear bias")] if bias is not None else [])
        self._same_dtype("linear", *operands)
        ad, wd = a.no_reduction_domain, w.no_reduction_domain
        if not ad:
            raise FusionError(f"linear: input {a.name} must have at least one dim")
        if len(wd) not in (1, 2):
            raise FusionError(
                f"linear: weight {w.name} has rank {len(wd)}; F.linear takes [N, K] or [K]"
            )
        if not _agree(ad[-1], wd[-1]):
            raise FusionError(
                f"linear: K of input {a.name} is {ad[-1].extent} but K of weight {w.name} is "
                f"{wd[-1].extent}; both must have K as their last dim"
            )
        body = [_copy_dim(d) for d in ad[:-1]]
        if len(wd) == 2:
            body.append(_copy_dim(wd[0]))
            if bias is not None:
                bias_t = operands[2]
                bd = bias_t.no_reduction_domain
                if len(bd) != 1 or not _agree(bd[0], wd[0]):
                    raise FusionError(
                        f"linear: bias {bias_t.name} has shape {list(bias_t.shape)}; "
                        f"it must be [N] = [{wd[0].extent}]"
                    )
        elif bias is not None:
            raise FusionError("linear: a bias needs a 2-D weight [N, K]")
        body.append(IterDomain(_extent(ad[-1], wd[-1]), IterType.REDUCTION))
        out = self._new(a.dtype, body)
        self._fusion.attach(LinearOp([out], operands))
        return out

    def fused_multiply_sum(
        self, a: TensorView, b: TensorView, dims: Sequence[int] = (-1,)
    ) -> TensorView:
        """nvFuser's ``fusedMultiplySum``: an MmaOp on same-rank half operands, float32 out."""
        a, b = self._tensor(a, "fused_multiply_sum"), self._tensor(b, "fused_multiply_sum")
        self._same_dtype("fused_multiply_sum", a, b)
        if not a.dtype.is_half:
            raise FusionError(
                f"fused_multiply_sum: operands are {a.dtype.label}; MmaOp takes float16 or "
                "bfloat16 operands (cast them first)"
            )
        if len(a.shape) != len(b.shape):
            raise FusionError(
                f"fused_multiply_sum: {a.name} has rank {len(a.shape)} and {b.name} rank "
                f"{len(b.shape)}; MmaOp operands must have the same rank (broadcast first)"
            )
        dims = _ints(dims, "fused_multiply_sum: dims", scalar_ok=True)
        if len(dims) != 1:
            raise FusionError(f"fused_multiply_sum: exactly one reduction dim; got {list(dims)}")
        axis = _axis(a, dims[0], "fused_multiply_sum")
        ad, bd = a.no_reduction_domain, b.no_reduction_domain
        if ad[axis].is_broadcast and bd[axis].is_broadcast:
            raise FusionError(
                f"fused_multiply_sum: the reduction dim {axis} is a broadcast (size 1) in both "
                f"{a.name} and {b.name}; K must be a real dim of both operands"
            )
        domain = []
        for i, (da, db) in enumerate(zip(ad, bd, strict=True)):
            where = f"dim {i} of {a.name} and {b.name}"
            merged = _merge_dims("fused_multiply_sum", [da, db], where)
            if i == axis:
                merged = IterDomain(merged.extent, IterType.REDUCTION)
            domain.append(merged)
        return self._emit(MmaOp, self._new(DType.float32, domain), a, b, [axis])

    # -- element-wise ---------------------------------------------------------------------------
    def add(self, x: Operand, y: Operand) -> TensorView:
        """``x + y`` with broadcasting; either side may be a Python number or a scalar."""
        return self._binary("add", x, y)

    def sub(self, x: Operand, y: Operand) -> TensorView:
        """``x - y`` with broadcasting."""
        return self._binary("sub", x, y)

    def mul(self, x: Operand, y: Operand) -> TensorView:
        """``x * y`` with broadcasting."""
        return self._binary("mul", x, y)

    def neg(self, x: TensorView) -> TensorView:
        """``-x``."""
        return self._unary("neg", x)

    def relu(self, x: TensorView) -> TensorView:
        """``max(x, 0)``."""
        return self._unary("relu", x)

    def gelu(self, x: TensorView) -> TensorView:
        """GELU, exact (erf) form."""
        return self._unary("gelu", x)

    def silu(self, x: TensorView) -> TensorView:
        """``x * sigmoid(x)``."""
        return self._unary("silu", x)

    def sigmoid(self, x: TensorView) -> TensorView:
        """``1 / (1 + exp(-x))``."""
        return self._unary("sigmoid", x)

    def sin(self, x: TensorView) -> TensorView:
        """``sin(x)``."""
        return self._unary("sin", x)

    def cast(self, x: TensorView, dtype: DType) -> TensorView:
        """Convert to *dtype*, rounding to nearest even."""
        x = self._tensor(x, "cast")
        dtype = arguments.dtype(dtype, f"cast of {x.name}: dtype")
        out = self._new(dtype, [_copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(CastOp([out], [x]))
        return out

    def set(self, x: TensorView) -> TensorView:
        """A copy of *x*."""
        x = self._tensor(x, "set")
        out = self._new(x.dtype, [_copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(SetOp([out], [x]))
        return out

    def sum(self, x: TensorView, dims: Sequence[int], dtype: DType | None = None) -> TensorView:
        """Sum over *dims*; half inputs accumulate and return in float32."""
        x = self._tensor(x, "sum")
        if dtype is not None:
            dtype = arguments.dtype(dtype, f"sum of {x.name}: dtype")
        dims = _ints(dims, f"sum of {x.name}: dims", scalar_ok=True)
        axes = sorted({_axis(x, d, "sum") for d in dims})
        if not axes:
            raise FusionError(f"sum of {x.name}: give at least one dim to reduce; got {dims}")
        domain = [
            IterDomain(d.extent, IterType.REDUCTION if i in axes else d.iter_type)
            for i, d in enumerate(x.no_reduction_domain)
        ]
        x = self._promoted(x)  # type: ignore[assignment]
        return self._emit(ReductionOp, self._new(dtype or x.dtype, domain), x, axes)

    # -- metadata ---------------------------------------------------------------------------------
    def broadcast_in_dim(
        self, x: TensorView, shape: Sequence[int], broadcast_dims: Sequence[int]
    ) -> TensorView:
        """Place dim ``i`` of *x* at output position ``broadcast_dims[i]``; others are new."""
        x = self._tensor(x, "broadcast_in_dim")
        xd = x.no_reduction_domain
        shape = shapes.extents(shape, f"broadcast_in_dim of {x.name}: shape")
        bdims = _ints(broadcast_dims, "broadcast_in_dim: broadcast_dims")
        if len(bdims) != len(xd):
            raise FusionError(
                f"broadcast_in_dim: {x.name} has rank {len(xd)} but broadcast_dims has "
                f"{len(bdims)} entries; give one output position per input dim"
            )
        if sorted(set(bdims)) != bdims or any(not 0 <= p < len(shape) for p in bdims):
            raise FusionError(
                f"broadcast_in_dim: broadcast_dims {bdims} must be increasing positions "
                f"in the output shape {shape}"
            )
        domain: list[IterDomain] = []
        for pos, extent in enumerate(shape):
            if pos in bdims:
                src = xd[bdims.index(pos)]
                if extent == SYMBOLIC:  # -1: the input dim's extent, as it is
                    domain.append(_copy_dim(src))
                    continue
                if not (src.is_broadcast or src.is_symbolic or src.extent == extent):
                    raise FusionError(
                        f"broadcast_in_dim: dim {bdims.index(pos)} of {x.name} has extent "
                        f"{src.extent} but the output shape asks {extent} at position {pos}"
                    )
                domain.append(IterDomain(extent, src.iter_type))
            elif extent == SYMBOLIC:
                raise FusionError(
                    f"broadcast_in_dim of {x.name}: the new dim at position {pos} has extent -1; "
                    "-1 keeps an input dim's extent, a new dim needs one (give 1: it broadcasts "
                    "to whatever it meets)"
                )
            else:
                domain.append(IterDomain(extent, IterType.BROADCAST))
        flags = [p not in bdims for p in range(len(shape))]
        return self._emit(BroadcastOp, self._new(x.dtype, domain), x, flags)

    def permute(self, x: TensorView, dims: Sequence[int]) -> TensorView:
        """Output dim ``j`` is input dim ``dims[j]``."""
        x = self._tensor(x, "permute")
        xd = x.no_reduction_domain
        dims = _ints(dims, f"permute of {x.name}: dims")
        perm = [d % len(xd) if -len(xd) <= d < len(xd) else d for d in dims]
        if sorted(perm) != list(range(len(xd))):
            raise FusionError(
                f"permute: dims {list(dims)} is not a permutation of the {len(xd)} dims of {x.name}"
            )
        out = self._new(x.dtype, [_copy_dim(xd[p]) for p in perm])
        return self._emit(PermuteOp, out, x, perm)

    def squeeze(self, x: TensorView, dims: Sequence[int]) -> TensorView:
        """Remove size-1 (broadcast) dims."""
        x = self._tensor(x, "squeeze")
        xd = x.no_reduction_domain
        axes = sorted(
            {
                _axis(x, d, "squeeze")
                for d in _ints(dims, f"squeeze of {x.name}: dims", scalar_ok=True)
            }
        )
        for a in axes:
            if not xd[a].is_broadcast:
                what = "a symbolic extent (-1)" if xd[a].is_symbolic else f"extent {xd[a].extent}"
                raise FusionError(
                    f"squeeze: dim {a} of {x.name} has {what}; only size-1 dims can be squeezed"
                )
        out = self._new(x.dtype, [_copy_dim(d) for i, d in enumerate(xd) if i not in axes])
        return self._emit(SqueezeOp, out, x, axes)

    # -- internals --------------------------------------------------------------------------------
    def _promoted(self, x: Val) -> Val:
        """Half tensors enter arithmetic through an explicit cast to float32, as in nvFuser."""
        if isinstance(x, TensorView) and x.dtype.is_half:
            return self.cast(x, DType.float32)
        return x

    def _same_dtype(self, what: str, *tensors: TensorView) -> None:
        if len({t.dtype for t in tensors}) > 1:
            found = ", ".join(f"{t.name}: {t.dtype.label}" for t in tensors)
            raise FusionError(f"{what}: operands must share one dtype; found {found}")

    def _broadcast_batch(
        self, what: str, a: Sequence[IterDomain], b: Sequence[IterDomain]
    ) -> list[IterDomain]:
        n = max(len(a), len(b))
        pa = [None] * (n - len(a)) + list(a)
        pb = [None] * (n - len(b)) + list(b)
        out = []
        for i, (da, db) in enumerate(zip(pa, pb, strict=True)):
            dims = [d for d in (da, db) if d is not None]
            try:
                out.append(_merge_dims(what, dims))
            except FusionError:
                raise FusionError(
                    f"{what}: batch dim {i} has extents {[d.extent for d in dims]}; batch dims "
                    "must match or be 1"
                ) from None
        return out

    def _align(self, what: str, x: TensorView, rank: int) -> TensorView:
        if len(x.shape) == rank:
            return x
        extra = rank - len(x.shape)
        shape = [1] * extra + list(x.shape)
        return self.broadcast_in_dim(x, shape, list(range(extra, rank)))

    def _binary(self, op: str, x: Operand, y: Operand) -> TensorView:
        xv, yv = self._value(x, op), self._value(y, op)
        tensors = [v for v in (xv, yv) if isinstance(v, TensorView)]
        if not tensors:
            raise FusionError(f"{op}: at least one operand must be a tensor")
        tensors = [self._tensor(t, op) for t in tensors]
        rank = max(len(t.shape) for t in tensors)
        if isinstance(xv, TensorView):
            xv = self._align(op, self._tensor(xv, op), rank)
        if isinstance(yv, TensorView):
            yv = self._align(op, self._tensor(yv, op), rank)
        names = " and ".join(t.name for t in tensors)
        xv, yv = self._promoted(xv), self._promoted(yv)
        aligned = [v for v in (xv, yv) if isinstance(v, TensorView)]
        domain = [
            _merge_dims(op, [t.no_reduction_domain[i] for t in aligned], f"dim {i} of {names}")
            for i in range(rank)
        ]
        out = self._new(result_dtype(xv, yv), domain)
        self._fusion.attach(BinaryOp(out, xv, yv, op))
        return out

    def _unary(self, op: str, x: TensorView) -> TensorView:
        x = self._promoted(self._tensor(x, op))  # type: ignore[assignment]
        out = self._new(result_dtype(x), [_copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(UnaryOp(out, x, op))
        return out


class FusionDefinition:
    """Build a fusion inside a ``with`` block; ``fd.fusion`` holds the result.

    ::

        with mp.FusionDefinition() as fd:
            x = fd.define_tensor([M, K], dtype=mp.float16)
            w = fd.define_tensor([N, K], dtype=mp.float16)
            fd.add_output(fd.ops.linear(x, w))
    """

    def __init__(self) -> None:
        caller = sys._getframe(1)
        where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
        self.fusion = Fusion(f"fusion definition #{next(_DEFINITIONS)} (created at {where})")
        self.ops = Ops(self)
        self._finished = False

    def __enter__(self) -> FusionDefinition:
        self._check_open("with")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finished = True
        if exc is None and not self.fusion.outputs:
            raise FusionError("the fusion has no outputs; call fd.add_output(tensor)")

    @property
    def is_finished(self) -> bool:
        """True once the ``with`` block has ended: the definition can no longer change."""
        return self._finished

    def _check_open(self, what: str) -> None:
        if self._finished:
            raise FusionError(
                f"{what}: {self.fusion.origin} is finished (its with block has ended) and "
                "cannot change; add tensors, ops and outputs inside the block, or start a new "
                "mp.FusionDefinition()"
            )

    def _own(self, val: _V, what: str) -> _V:
        """*val* if this definition made it, else a FusionError naming both definitions."""
        if val.owner is not self.fusion:
            source = val.owner.origin if val.owner is not None else "no fusion definition"
            raise FusionError(
                f"{what}: {val.name} comes from {source}, not from this one, "
                f"{self.fusion.origin}; a definition only takes values it defined (define "
                f"{val.name} again here, or build both parts in one definition)"
            )
        return val

    def define_tensor(
        self,
        shape: Sequence[int],
        dtype: DType = DType.float32,
        stride_order: Sequence[int] | None = None,
    ) -> TensorView:
        """A fusion input of *shape*: static extents (1 is a broadcast dim) or -1, a symbolic
        extent each call's inputs decide (nvFuser's convention).

        :param stride_order: nvFuser's meaning: ``stride_order[i]`` is the rank of dim i's stride,
            0 the innermost. Row-major (the default) is ``[rank-1, ..., 0]``.
        """
        self._check_open("define_tensor")
        if not isinstance(dtype, DType):
            raise FusionError(f"define_tensor: dtype must be e.g. mp.float16; got {dtype!r}")
        shape = shapes.extents(shape, "define_tensor: shape")
        arguments.check_bytes([e for e in shape if e != SYMBOLIC], dtype, "define_tensor: shape")
        rank = len(shape)
        if stride_order is None:
            alloc = list(range(rank))
        else:
            order = _ints(stride_order, "define_tensor: stride_order")
            if sorted(order) != list(range(rank)):
                raise FusionError(
                    f"define_tensor: stride_order {order} must be a permutation of 0..{rank - 1}"
                )
            alloc = sorted(range(rank), key=lambda i: -order[i])
        tv = self.fusion.new_tensor(dtype, [_dim(e) for e in shape], alloc)
        self.fusion.add_input(tv)
        return tv

    def define_scalar(self, value: float | None = None, dtype: DType = DType.float32) -> Scalar:
        """A scalar: a constant when *value* is given, else a fusion input (alpha, beta).

        A scalar takes the type of the tensor it meets (it never promotes a tensor).
        """
        self._check_open("define_scalar")
        dtype = arguments.dtype(dtype, "define_scalar: dtype")
        number = None if value is None else arguments.scalar(value, "define_scalar")
        scalar = self.fusion.new_scalar(dtype, number)
        if value is None:
            self.fusion.add_input(scalar)
        return scalar

    def add_output(self, tensor: TensorView) -> None:
        """Mark *tensor* as a fusion output (row-major, in the order added)."""
        self._check_open(f"add_output of {getattr(tensor, 'name', repr(tensor))}")
        if isinstance(tensor, TensorView | Scalar):
            self._own(tensor, "add_output")
        self.fusion.add_output(tensor)

    def __repr__(self) -> str:
        return repr(self.fusion)
