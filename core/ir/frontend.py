"""FusionDefinition: the nvFuser-style builder users write fusions with."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import TypeVar

from mmaplug.errors import FusionError
from mmaplug.ir import arguments
from mmaplug.ir.dtypes import DType
from mmaplug.ir.frontend_ops import Ops
from mmaplug.ir.frontend_shape_ops import Operand
from mmaplug.ir.fusion import SYMBOLIC, Fusion, IterDomain, IterType, Scalar, TensorView, Val

__all__ = ["FusionDefinition", "Operand", "Ops"]

_DEFINITIONS = itertools.count(1)
_V = TypeVar("_V", bound=Val)


def _dim(extent: int) -> IterDomain:
    """A fresh dim; a declared extent of 1 is a broadcast dim, -1 a symbolic one (nvFuser)."""
    return IterDomain(extent, IterType.BROADCAST if extent == 1 else IterType.ITERATION)


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
        shape = arguments.extents(shape, "define_tensor: shape")
        arguments.check_bytes([e for e in shape if e != SYMBOLIC], dtype, "define_tensor: shape")
        rank = len(shape)
        if stride_order is None:
            alloc = list(range(rank))
        else:
            order = arguments.ints(stride_order, "define_tensor: stride_order")
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
