"""The shape ops of ``fd.ops``: broadcasts, permutes, slices, reshapes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from mmaplug.errors import FusionError
from mmaplug.ir import arguments
from mmaplug.ir import frontend_dims as fdims
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import SYMBOLIC, Fusion, IterDomain, IterType, Scalar, TensorView, Val
from mmaplug.ir.ops import BroadcastOp, PermuteOp, SetOp, SqueezeOp
from mmaplug.ir.view_ops import ExpandOp, ReshapeOp, SliceOp

_V = TypeVar("_V", bound=Val)


class Definition(Protocol):
    """What the op builders use of a FusionDefinition."""

    fusion: Fusion

    def _check_open(self, what: str) -> None: ...

    def _own(self, val: _V, what: str) -> _V: ...


Operand = TensorView | Scalar | float | int


class OpsBase:
    """What every op builder needs: the definition, its checks, and a way to add an op."""

    def __init__(self, fd: Definition) -> None:
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

    def _attach(self, expr_cls: type, out: TensorView, *inputs: Val) -> TensorView:
        """Add an op of the plain ``Expr(outputs, inputs)`` form."""
        self._fusion.attach(expr_cls([out], list(inputs)))
        return out

    def _new(self, dtype: DType, domain: Sequence[IterDomain]) -> TensorView:
        return self._fusion.new_tensor(dtype, domain)


class ShapeOps(OpsBase):
    """The metadata ops of ``fd.ops``: they move, add, drop or select dims, never compute."""

    # -- metadata ---------------------------------------------------------------------------------
    def broadcast_in_dim(
        self, x: TensorView, shape: Sequence[int], broadcast_dims: Sequence[int]
    ) -> TensorView:
        """Place dim ``i`` of *x* at output position ``broadcast_dims[i]``; others are new."""
        x = self._tensor(x, "broadcast_in_dim")
        xd = x.no_reduction_domain
        shape = arguments.extents(shape, f"broadcast_in_dim of {x.name}: shape")
        bdims = arguments.ints(broadcast_dims, "broadcast_in_dim: broadcast_dims")
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
                    domain.append(fdims.copy_dim(src))
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
        dims = arguments.ints(dims, f"permute of {x.name}: dims")
        perm = [d % len(xd) if -len(xd) <= d < len(xd) else d for d in dims]
        if sorted(perm) != list(range(len(xd))):
            raise FusionError(
                f"permute: dims {list(dims)} is not a permutation of the {len(xd)} dims of {x.name}"
            )
        out = self._new(x.dtype, [fdims.copy_dim(xd[p]) for p in perm])
        return self._emit(PermuteOp, out, x, perm)

    def squeeze(self, x: TensorView, dims: Sequence[int]) -> TensorView:
        """Remove size-1 (broadcast) dims."""
        x = self._tensor(x, "squeeze")
        xd = x.no_reduction_domain
        axes = sorted(
            {
                fdims.axis(x, d, "squeeze")
                for d in arguments.ints(dims, f"squeeze of {x.name}: dims", scalar_ok=True)
            }
        )
        for a in axes:
            if not xd[a].is_broadcast:
                what = "a symbolic extent (-1)" if xd[a].is_symbolic else f"extent {xd[a].extent}"
                raise FusionError(
                    f"squeeze: dim {a} of {x.name} has {what}; only size-1 dims can be squeezed"
                )
        out = self._new(x.dtype, [fdims.copy_dim(d) for i, d in enumerate(xd) if i not in axes])
        return self._emit(SqueezeOp, out, x, axes)

    def broadcast(self, x: TensorView, is_broadcast_dim: Sequence[bool]) -> TensorView:
        """nvFuser's ``broadcast``: a new size-1 dim wherever *is_broadcast_dim* is True."""
        x = self._tensor(x, "broadcast")
        flags = list(is_broadcast_dim)
        if any(not isinstance(f, bool) for f in flags) or flags.count(False) != len(x.shape):
            raise FusionError(
                f"broadcast of {x.name}: is_broadcast_dim {flags} must be booleans with one "
                f"False per dim of {x.name} (rank {len(x.shape)}) and True for each new dim"
            )
        shape = [1 if new else SYMBOLIC for new in flags]
        return self.broadcast_in_dim(x, shape, [i for i, new in enumerate(flags) if not new])

    def expand(self, x: TensorView, shape: Sequence[int]) -> TensorView:
        """Broadcast (size-1) dims of *x* take the extents of *shape*; -1 keeps a dim as is."""
        x = self._tensor(x, "expand")
        xd = x.no_reduction_domain
        shape = arguments.extents(shape, f"expand of {x.name}: shape")
        if len(shape) != len(xd):
            raise FusionError(
                f"expand of {x.name}: shape {shape} has {len(shape)} entries but {x.name} has "
                f"rank {len(xd)}; give one extent per dim (-1 keeps it)"
            )
        domain = []
        for i, (d, extent) in enumerate(zip(xd, shape, strict=True)):
            if extent == SYMBOLIC or extent == d.extent:
                domain.append(fdims.copy_dim(d))
            elif d.is_broadcast:
                domain.append(IterDomain(extent, IterType.BROADCAST))
            else:
                raise FusionError(
                    f"expand of {x.name}: dim {i} has extent {d.extent} and cannot become "
                    f"{extent}; only size-1 (broadcast) dims expand (-1 keeps a dim)"
                )
        return self._attach(ExpandOp, self._new(x.dtype, domain), x)

    def slice(
        self,
        x: TensorView,
        start_indices: Sequence[int],
        end_indices: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> TensorView:
        """``x[start:end:stride, ...]`` per dim (nvFuser's ``slice``): 0 <= start <= end,
        an end past the extent stops at it, strides are positive (default 1)."""
        x = self._tensor(x, "slice")
        xd = x.no_reduction_domain
        starts = arguments.ints(start_indices, f"slice of {x.name}: start_indices")
        ends = arguments.ints(end_indices, f"slice of {x.name}: end_indices")
        steps = (
            [1] * len(xd)
            if strides is None
            else arguments.ints(strides, f"slice of {x.name}: strides")
        )
        if not len(starts) == len(ends) == len(steps) == len(xd):
            raise FusionError(
                f"slice of {x.name}: start_indices {starts}, end_indices {ends} and strides "
                f"{steps} must each have one entry per dim of {x.name} (rank {len(xd)})"
            )
        ranges, domain = [], []
        for i, (d, start, end, step) in enumerate(zip(xd, starts, ends, steps, strict=True)):
            if start < 0 or end < start or step < 1:
                raise FusionError(
                    f"slice of {x.name}: dim {i} asks start {start}, end {end}, stride {step}; "
                    "slice takes 0 <= start <= end and a stride >= 1 (no negative indices)"
                )
            if d.is_symbolic:
                raise FusionError(
                    f"slice of {x.name}: dim {i} has a symbolic extent (-1); slice takes "
                    "static extents (declare the extent)"
                )
            end = min(end, d.extent)
            start = min(start, end)
            ranges.append((start, end, step))
            extent = len(range(start, end, step))
            if (start, end, step) == (0, d.extent, 1):
                domain.append(fdims.copy_dim(d))
            else:
                kind = IterType.BROADCAST if extent == 1 else IterType.ITERATION
                domain.append(IterDomain(extent, kind))
        return self._emit(SliceOp, self._new(x.dtype, domain), x, ranges)

    def reshape(self, x: TensorView, new_shape: Sequence[int]) -> TensorView:
        """Row-major reshape to *new_shape* (one entry may be -1: inferred); size-1 entries
        are broadcast dims, as in ``define_tensor``."""
        x = self._tensor(x, "reshape")
        shape = arguments.extents(new_shape, f"reshape of {x.name}: new_shape")
        if any(d.is_symbolic for d in x.no_reduction_domain):
            raise FusionError(
                f"reshape of {x.name}: shape {list(x.shape)} has a symbolic extent (-1); "
                "reshape takes static extents (declare them)"
            )
        total, known = math.prod(x.shape), math.prod(e for e in shape if e != SYMBOLIC)
        if shape.count(SYMBOLIC) > 1 or (SYMBOLIC in shape and (known == 0 or total % known)):
            raise FusionError(
                f"reshape of {x.name}: new_shape {shape} cannot hold the {total} elements of "
                f"shape {list(x.shape)}; give at most one -1, which must divide evenly"
            )
        shape = [total // known if e == SYMBOLIC else e for e in shape]
        if math.prod(shape) != total:
            raise FusionError(
                f"reshape of {x.name}: new_shape {shape} has {math.prod(shape)} elements but "
                f"{x.name} (shape {list(x.shape)}) has {total}; the counts must match"
            )
        domain = [
            IterDomain(e, IterType.BROADCAST if e == 1 else IterType.ITERATION) for e in shape
        ]
        return self._attach(ReshapeOp, self._new(x.dtype, domain), x)

    def stride_order(self, x: TensorView, stride_order: Sequence[int]) -> TensorView:
        """A copy of *x* laid out by *stride_order* (``define_tensor``'s meaning: entry i is
        the rank of dim i's stride, 0 innermost); as an output, it is returned so strided."""
        x = self._tensor(x, "stride_order")
        rank = len(x.shape)
        order = arguments.ints(stride_order, f"stride_order of {x.name}")
        if not order:
            order = list(range(rank - 1, -1, -1))
        if sorted(order) != list(range(rank)):
            raise FusionError(
                f"stride_order of {x.name}: {order} must be a permutation of 0..{rank - 1}, "
                f"one entry per dim of {x.name}"
            )
        out = self._fusion.new_tensor(
            x.dtype,
            [fdims.copy_dim(d) for d in x.no_reduction_domain],
            sorted(range(rank), key=lambda i: -order[i]),
        )
        return self._attach(SetOp, out, x)
