"""Horizontal fusion: several matmuls sharing operand A whose results meet in the epilogue."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .errors import UnsupportedFusionError
from .fusion import METADATA_OPS, TensorView
from .patterns import DimGraph, MatmulPattern


def horizontal_operands(
    patterns: Sequence[MatmulPattern], b_inputs: Sequence[TensorView], graph: DimGraph
) -> tuple[list[MatmulPattern], list[TensorView], str]:
    """*patterns* (translated) and their B fusion inputs in accumulator order (the order of
    *b_inputs*, so the first is ``analysis.b``) when they form a horizontal fusion, else two
    empty lists and why not (docs/decisions.md, "Horizontal fusion").

    Horizontal: every MmaOp reads the same operand A (translation shares its broadcast), each
    reads its own B input through metadata ops only, the B inputs have one shape, dtype and
    memory layout, and the products have the same dims (their N dims are one loop: the results
    meet in element-wise epilogue ops).
    """
    first = patterns[0]
    if any(p.a is not first.a for p in patterns):
        return [], [], "the matmuls read different A operands"
    sources = [_source(p.b) for p in patterns]
    if any(s is None or s not in b_inputs for s in sources) or len(set(map(id, sources))) < len(
        sources
    ):
        return [], [], "each matmul must read a B fusion input of its own"
    bs: list[TensorView] = sources  # type: ignore[assignment]
    alike = {(tuple(b.shape), b.dtype, tuple(b.alloc_order)) for b in bs}
    if len(alike) > 1:
        found = ", ".join(f"{b.name} {list(b.shape)} {b.dtype.label} {b.stride_order}" for b in bs)
        return [], [], f"the B operands differ in shape, dtype or stride_order ({found})"

    def dims(p: MatmulPattern) -> list[int]:
        return [graph.group(d) for d in p.output.domain if not d.is_broadcast]

    if any(dims(p) != dims(first) for p in patterns):
        return (
            [],
            [],
            (
                "the products have different N dims (separate outputs such as q, k, v: only "
                "results combined element-wise share one output tile)"
            ),
        )
    order = sorted(range(len(bs)), key=lambda j: b_inputs.index(bs[j]))
    return [patterns[j] for j in order], [bs[j] for j in order], ""


def _source(tv: TensorView) -> TensorView | None:
    """The fusion input *tv* is read from through metadata ops (None: computed)."""
    while tv.definition is not None:
        if not isinstance(tv.definition, METADATA_OPS):
            return None
        tv = tv.definition.inputs[0]  # type: ignore[assignment]
    return tv


def check_no_prologues(
    patterns: Sequence[MatmulPattern], name: Callable[[TensorView], str]
) -> None:
    """A fusion of several matmuls takes no operand prologue (the ampere kernel computes one
    prologue per operand of its one MmaOp; the hopper kernel, which fuses horizontal matmuls,
    takes none)."""
    if len(patterns) == 1:
        return
    for operand in (t for p in patterns for t in (p.a, p.b)):
        tv, computed = operand, []
        while tv.definition is not None:
            expr = tv.definition
            if not isinstance(expr, METADATA_OPS):
                computed.append(getattr(expr, "op", expr.kind))
            src = next((v for v in expr.inputs if isinstance(v, TensorView)), None)
            if src is None:
                break
            tv = src
        if computed:
            raise UnsupportedFusionError(
                f"matmul operand {name(operand)} is computed from input {tv.name} by "
                f"{', '.join(reversed(computed))} in a fusion of {len(patterns)} matmuls; "
                "operand prologues are taken for one matmul per fusion (compute the operand "
                "before the fusion)"
            )
