"""Amax outputs: a fusion output that is ``max(abs(v))`` of an epilogue value over the whole
output (delayed scaling's amax), which kernels reduce as they store."""

from __future__ import annotations

from collections.abc import Callable

from mmaplug.analysis.patterns import DimRole
from mmaplug.errors import UnsupportedFusionError
from mmaplug.ir.dim_graph import DimGraph
from mmaplug.ir.fusion import Fusion, TensorView
from mmaplug.ir.ops import MaxReductionOp, UnaryOp

ACCEPTED = (
    "kernels compute a max only as an amax output: fd.ops.amax(v, dims) (max(abs(v))) of an "
    "epilogue value v over every dim of the output (M and N, and batch when batched), a "
    "float32 [] tensor, after the fusion's first output"
)


def amax_outputs(
    fusion: Fusion,
    roles: dict[int, DimRole],
    graph: DimGraph,
    name: Callable[[TensorView], str],
) -> dict[int, TensorView]:
    """The amax outputs of translated *fusion*: each one's id mapped to the value ``v`` of
    its ``max(abs(v))``. Any other max-reduction output is refused with what is accepted.

    *roles* are the matmul's dim roles (by ``graph`` group); *name* gives a tensor's user name.
    """
    found: dict[int, TensorView] = {}
    whole = {r for r in roles.values() if r is not DimRole.K}  # batch (if any), M and N
    for pos, tv in enumerate(fusion.outputs):
        expr = tv.definition
        if not isinstance(expr, MaxReductionOp):
            continue
        src = expr.inputs[0]
        assert isinstance(src, TensorView)
        what = f"output {name(tv)} = max({name(src)}, dims={list(expr.axes)})"
        if tv.shape:
            raise UnsupportedFusionError(f"{what} keeps dims of shape {list(tv.shape)}; {ACCEPTED}")
        absolute = src.definition
        if not (isinstance(absolute, UnaryOp) and absolute.op == "abs"):
            raise UnsupportedFusionError(f"{what} is a max of a value, not of its abs; {ACCEPTED}")
        value = absolute.inputs[0]
        assert isinstance(value, TensorView)
        spans = {roles.get(graph.group(d)) for d in value.no_reduction_domain if not d.is_broadcast}
        if not whole <= spans:
            have = sorted(r.value.upper() for r in spans if r is not None) or ["no"]
            raise UnsupportedFusionError(
                f"{what} reduces {name(value)}, which spans {'/'.join(have)} dims only; {ACCEPTED}"
            )
        if pos == 0:
            raise UnsupportedFusionError(
                f"{what} is the fusion's first output; {ACCEPTED} (schedulers decide on the "
                "first output: add the tensor output first)"
            )
        found[id(tv)] = value
    return found
