"""IR nodes for slice, reshape and expand: ops that evaluate runs and matmul kernels refuse."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mmaplug.ir.fusion import Expr, IterDomain, TensorView


def _source(expr: Expr) -> TensorView:
    inp = expr.inputs[0]
    if not isinstance(inp, TensorView):  # the frontend only builds these on tensors
        raise TypeError(f"{expr.kind} reads a tensor; got {inp!r}")
    return inp


class SliceOp(Expr):
    """``x[start:stop:step, ...]`` per dim (nvFuser ``slice``); a sliced dim is a new loop."""

    kind = "slice"

    def __init__(
        self, out: TensorView, inp: TensorView, ranges: Sequence[tuple[int, int, int]]
    ) -> None:
        super().__init__([out], [inp])
        self.ranges = tuple(ranges)

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        dims = _source(self).no_reduction_domain
        for d, out, (start, stop, step) in zip(dims, self.output.domain, self.ranges, strict=True):
            if (start, stop, step) == (0, d.extent, 1):  # untouched: the same loop
                yield d, out

    def attrs_text(self) -> str:
        return "ranges=" + ", ".join(f"{a}:{b}:{c}" for a, b, c in self.ranges)


class ReshapeOp(Expr):
    """Row-major reshape (nvFuser ``reshape``); the dims are new loops, none paired."""

    kind = "reshape"

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        return iter(())

    def attrs_text(self) -> str:
        return f"shape={list(self.output.shape)}"


class ExpandOp(Expr):
    """Broadcast dims take the extents of ``output.shape`` (nvFuser ``expand``)."""

    kind = "expand"

    def attrs_text(self) -> str:
        return f"shape={list(self.output.shape)}"
