"""Horizontal fusion: several matmuls sharing operand A whose results meet in the epilogue."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mmaplug.analysis.patterns import MatmulPattern
from mmaplug.errors import UnsupportedFusionError
from mmaplug.ir.fusion import TensorView
from mmaplug.ir.ops import METADATA_OPS


def horizontal_operands(
    patterns: Sequence[MatmulPattern], b_inputs: Sequence[TensorView]
) -> tuple[list[MatmulPattern], list[TensorView]]:
    """*patterns* (translated) and their B fusion inputs in accumulator order (the order of
    *b_inputs*, so the first is ``analysis.b``) when they form a horizontal fusion, else two
    empty lists (docs/decisions.md, "Horizontal fusion").

    Horizontal: every MmaOp reads the same operand A (translation shares its broadcast, whose
    broadcast N dim makes the products' N dims one loop), each reads a B input of its own
    through metadata ops only, and the B inputs have one shape, dtype and memory layout.
    """
    if any(p.a is not patterns[0].a for p in patterns):
        return [], []
    sources = [_source(p.b) for p in patterns]
    bs = [s for s in sources if s is not None and any(s is b for b in b_inputs)]
    if len(bs) < len(patterns) or len(set(map(id, bs))) < len(bs):
        return [], []
    if len({(tuple(b.shape), b.dtype, tuple(b.alloc_order)) for b in bs}) > 1:
        return [], []
    order = sorted(range(len(bs)), key=lambda j: b_inputs.index(bs[j]))
    return [patterns[j] for j in order], [bs[j] for j in order]


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
