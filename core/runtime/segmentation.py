"""Segmentation: a fusion no kernel takes whole, cut into a matmul segment and the rest."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import attrs

from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.analysis.patterns import DimRole, MatmulPattern, all_dim_roles
from mmaplug.analysis.translate import find_matmul_patterns
from mmaplug.errors import MatmulError, UnsupportedFusionError
from mmaplug.ir.dim_graph import DimGraph
from mmaplug.ir.frontend_dims import copy_dim
from mmaplug.ir.fusion import Expr, Fusion, MemoryType, Scalar, TensorView, Val, as_fusion
from mmaplug.ir.ops import METADATA_OPS, BinaryOp, CastOp, SetOp, UnaryOp
from mmaplug.ir.symbolic import require_concrete
from mmaplug.ir.view_ops import ExpandOp

if TYPE_CHECKING:
    import pluggy

#: Ops a matmul kernel's epilogue computes (besides the MmaOp's own result).
EPILOGUE_OPS: tuple[type[Expr], ...] = (UnaryOp, BinaryOp, CastOp, ExpandOp, *METADATA_OPS)


@attrs.frozen(kw_only=True)
class Segment:
    """One part of a segmented fusion.

    ``kind``: ``"matmul"`` (a matmul kernel of ours), ``"pointwise"`` (ops around it) or
    ``"framework"`` (a matmul the caller's framework computes). ``inputs`` and ``outputs`` name
    tensors and scalars of the original fusion; ``reason`` says why this segment is cut off
    (empty for a matmul segment).
    """

    kind: str
    fusion: Fusion = attrs.field(eq=False, repr=False)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    reason: str = ""


def segment(
    fusion: Fusion,
    *,
    pm: pluggy.PluginManager | None = None,
    refused: MatmulError | None = None,
) -> tuple[Segment, ...]:
    """The segments of *fusion* (or a FusionDefinition's), in execution order.

    A fusion of one matmul a kernel takes whole is one ``"matmul"`` segment; several matmuls
    are cut, one kernel each (``mp.compile`` calls this only when no scheduler takes them
    together: a horizontal fusion on hopper is one kernel). Otherwise computed
    operands and epilogue inputs are cut off before it, the first ops its epilogue cannot take
    and all that follows after it, and a matmul no kernel takes becomes a ``"framework"``
    segment (docs/decisions.md, "Segmentation"). *refused*: why no scheduler planned the
    fusion whole; a matmul with an operand prologue is then cut, the prologue computed first.
    """
    fusion = as_fusion(fusion, "segment")
    require_concrete(fusion, "segmentation")
    try:
        analysis = analyze(fusion, pm=pm)
    except MatmulError as whole:
        return _cut(fusion, str(whole), pm)
    matmuls = analysis.problem.num_patterns
    prologue = analysis.problem.a_prologue_ops or analysis.problem.b_prologue_ops
    if matmuls == 1 and prologue and refused is not None:
        return _cut(fusion, f"no scheduler takes it with its operand prologue: {refused}", pm)
    if matmuls == 1:
        names = _names(fusion.inputs)
        return (
            Segment(kind="matmul", fusion=fusion, inputs=names, outputs=_names(fusion.outputs)),
        )
    why = (  # (several matmuls that are no horizontal fusion have no analysis: cut above)
        f"{matmuls} matmuls sharing operand A: one kernel takes them only where a scheduler "
        "builds horizontal fusions (hopper, sm_90a); otherwise a kernel computes one"
    )
    return _cut(fusion, why, pm)


def k_major_segments(
    fusion: Fusion,
    operands: list[TensorView],
    reason: str,
    pm: pluggy.PluginManager | None = None,
) -> tuple[Segment, ...]:
    """*fusion* (its one matmul reading *operands*, fusion inputs that are not K-major) as a
    pointwise segment copying each operand K-major, then the matmul segment reading the copies:
    for a kernel that takes only K-major operands (FP8 wgmma). *reason*: why the layout as
    declared is not taken. *fusion* is changed in place (a copy ``segmented`` owns)."""
    pattern = _patterns(fusion, pm)[0]  # the pattern hooks of the compile that asked
    copies = []
    for operand in operands:
        k_axis = _k_axis(fusion, pattern, operand)
        # stride_order: K innermost (rank 0), the other dims keep their order outside it
        outer = [i for i in operand.alloc_order if i != k_axis]
        alloc = [*outer, k_axis]
        copy_tv = fusion.new_tensor(
            operand.dtype, [copy_dim(d) for d in operand.no_reduction_domain], alloc
        )
        for use in list(operand.uses):
            use.inputs = [copy_tv if v is operand else v for v in use.inputs]
            operand.uses.remove(use)
            copy_tv.uses.append(use)
        fusion.attach(SetOp([copy_tv], [operand]))
        copies.append(copy_tv)
    names = ", ".join(o.name for o in operands)
    one = len(operands) == 1
    why = (
        f"{names} {'is' if one else 'are'} copied K-major first: as laid out no kernel takes "
        f"{'it' if one else 'them'} ({reason})"
    )
    first = _segment("pointwise", _sub(fusion, copies, set()), fusion, why)
    kernel = _sub(fusion, fusion.outputs, {id(c) for c in copies})
    return first, _segment("matmul", kernel, fusion, "")


def _k_axis(fusion: Fusion, pattern: MatmulPattern, operand: TensorView) -> int:
    """The position of *operand*'s K dim (the one the matmul sums over)."""
    graph = DimGraph(fusion)
    roles = all_dim_roles([pattern], graph)
    dims = operand.no_reduction_domain
    return next(i for i, d in enumerate(dims) if roles.get(graph.group(d)) is DimRole.K)


def explain_segments(segments: tuple[Segment, ...]) -> str:
    """One paragraph per segment: kind, inputs → outputs, ops, and why it was cut."""
    lines = []
    for i, seg in enumerate(segments, 1):
        lines.append(
            f"segment {i} ({seg.kind}): {', '.join(seg.inputs)} -> {', '.join(seg.outputs)}"
        )
        lines += [f"    {expr!r}" for expr in seg.fusion.exprs()]
        if seg.reason:
            lines.append(f"    cut: {seg.reason}")
    return "\n".join(lines)


def _names(vals: list[TensorView] | list[Val]) -> tuple[str, ...]:
    return tuple(v.name for v in vals)


def _cut(fusion: Fusion, why: str, pm: pluggy.PluginManager | None) -> tuple[Segment, ...]:
    patterns = _patterns(fusion, pm)
    if not patterns:
        reason = f"no matmul to build a kernel around ({why})"
        return (_segment("pointwise", _sub(fusion, fusion.outputs, set()), fusion, reason),)
    pat = patterns[0]  # the others land in the segments before or after it, cut in turn
    exprs = fusion.exprs()
    inside = _pattern_tensors(exprs, pat)
    after: set[int] = {id(pat.output)}  # depends on the matmul's result
    computed: set[int] = set()  # computed from inputs alone, outside the matmul
    for expr in exprs:
        ins = [v for v in expr.inputs if isinstance(v, TensorView)]
        for out in expr.outputs:
            if id(out) in inside or out is pat.output:
                continue
            if any(id(v) in after for v in ins):
                after.add(id(out))
            elif not isinstance(expr, METADATA_OPS) or any(id(v) in computed for v in ins):
                computed.add(id(out))
    tensors = {id(t): t for t in fusion.tensors()}
    used_by = _users(exprs)
    pre_out = sorted(
        [
            tensors[t]
            for t in computed
            if tensors[t] in fusion.outputs
            or any(id(o) not in computed for o in used_by.get(t, []))
        ]  # and a mul-sum's mul asked for as an output: computed apart, the kernel fuses its own
        + [tensors[t] for t in inside if tensors[t] in fusion.outputs],
        key=_order(fusion),
    )
    segments = []
    if pre_out:
        verb = "is" if len(pre_out) == 1 else "are"
        reason = (
            f"{', '.join(t.name for t in pre_out)} {verb} computed from fusion inputs apart from "
            f"the matmul, whose kernel reads fusion inputs as they are ({why})"
        )
        segments.append(_segment("pointwise", _sub(fusion, pre_out, set()), fusion, reason))
    excluded: set[int] = set()
    while True:  # shrink the kernel's epilogue until a kernel takes it (each round drops one+)
        in_kernel = _epilogue(exprs, pat.output, after, excluded)
        frontier = sorted(
            (
                tensors[t]
                for t in in_kernel
                if tensors[t] in fusion.outputs
                or any(id(o) in after and id(o) not in in_kernel for o in used_by.get(t, []))
            ),
            key=_order(fusion),
        )
        kernel = _sub(fusion, frontier, {id(t) for t in pre_out} - inside)
        try:
            analyze(kernel, pm=pm)
            segments.append(_segment("matmul", kernel, fusion, ""))
            break
        except MatmulError as refused:
            drop = {id(t) for t in frontier} - {id(pat.output)}
            if not drop:
                segments.append(_segment("framework", kernel, fusion, str(refused)))
                break
            excluded |= drop
    post_out = [t for t in fusion.outputs if id(t) in after and id(t) not in in_kernel]
    if post_out:
        cut = {id(t) for t in (*pre_out, *frontier)}
        reason = f"the matmul kernel's epilogue cannot take what follows ({why})"
        segments.append(_segment("pointwise", _sub(fusion, post_out, cut), fusion, reason))
    return tuple(_split_matmuls(segments, pm))


def _split_matmuls(segments: list[Segment], pm: pluggy.PluginManager | None) -> list[Segment]:
    """Segment again each pointwise segment that holds another matmul (it holds fewer than
    its parent did, so this ends); names carry over, so the parts chain as they are."""
    out: list[Segment] = []
    for seg in segments:
        if seg.kind == "pointwise" and _patterns(seg.fusion, pm):
            out += segment(seg.fusion, pm=pm)
        else:
            out.append(seg)
    return out


def _patterns(fusion: Fusion, pm: pluggy.PluginManager | None) -> list[MatmulPattern]:
    """The matmul patterns of *fusion*; none where the pattern hooks refuse one (a mul+sum over
    two dims): the framework computes it like the ops around it."""
    try:
        return find_matmul_patterns(fusion, pm=pm)
    except UnsupportedFusionError:
        return []


def _epilogue(
    exprs: list[Expr], result: TensorView, after: set[int], excluded: set[int]
) -> set[int]:
    """The tensors a kernel's epilogue computes from the matmul *result* (minus *excluded*)."""
    in_kernel = {id(result)}
    for expr in exprs:
        ins = [v for v in expr.inputs if isinstance(v, TensorView)]
        if not isinstance(expr, EPILOGUE_OPS) or not any(id(v) in in_kernel for v in ins):
            continue
        if all(id(v) in in_kernel or id(v) not in after for v in ins):
            in_kernel.update(id(o) for o in expr.outputs if id(o) not in excluded)
    return in_kernel


def _segment(kind: str, sub: Fusion, fusion: Fusion, reason: str) -> Segment:
    return Segment(
        kind=kind, fusion=sub, inputs=_names(sub.inputs), outputs=_names(sub.outputs), reason=reason
    )


def _pattern_tensors(exprs: list[Expr], pat: MatmulPattern) -> set[int]:
    """Tensors strictly between the pattern's operands and its result (a mul-sum's mul)."""
    from_ops = {id(pat.a), id(pat.b)}
    for expr in exprs:
        if any(id(v) in from_ops for v in expr.inputs):
            from_ops.update(id(o) for o in expr.outputs)
    feeds = {id(pat.output)}
    for expr in reversed(exprs):
        if any(id(o) in feeds for o in expr.outputs):
            feeds.update(id(v) for v in expr.inputs)
    return (from_ops & feeds) - {id(pat.a), id(pat.b), id(pat.output)}


def _users(exprs: list[Expr]) -> dict[int, list[TensorView]]:
    users: dict[int, list[TensorView]] = {}
    for expr in exprs:
        for v in expr.inputs:
            users.setdefault(id(v), []).extend(expr.outputs)
    return users


def _order(fusion: Fusion):  # noqa: ANN202 - a sort key
    position = {id(t): i for i, t in enumerate(fusion.tensors())}
    return lambda t: position[id(t)]


def _sub(fusion: Fusion, outputs: list[TensorView], cut: set[int]) -> Fusion:
    """The part of *fusion* computing *outputs*, the tensors in *cut* read as inputs."""
    memo: dict[int, object] = {}
    work = copy.deepcopy(fusion, memo)
    mine = {id(memo[t]) for t in cut if t in memo}
    for key in cut:
        if key in memo:
            memo[key].definition = None  # type: ignore[attr-defined]
    work.outputs = [memo[id(t)] for t in outputs]  # type: ignore[misc]
    exprs = work.exprs()
    live = {id(e) for e in exprs}
    read: dict[int, Val] = {}
    for expr in exprs:
        for v in expr.inputs:
            if v.definition is None and not (isinstance(v, Scalar) and v.is_constant):
                read.setdefault(id(v), v)
    for out in work.outputs:
        if out.definition is None:
            read.setdefault(id(out), out)
    originals = [v for v in work.inputs if id(v) in read]
    work.inputs = []
    for v in originals + [v for k, v in read.items() if k in mine]:
        work.add_input(v)
    for v in [*work.inputs, *(o for e in exprs for o in e.outputs)]:
        v.uses = [u for u in v.uses if id(u) in live]
    for out in work.outputs:
        out.memory_type = MemoryType.GLOBAL
    return work


def evaluate_segments(
    segments: tuple[Segment, ...], fusion: Fusion, inputs: list[object]
) -> list[object]:
    """Run *segments* of *fusion* in order with ``mp.evaluate``, passing values by name: the
    reference for a segmented execution (it must equal ``mp.evaluate(fusion, inputs)``)."""
    from mmaplug.ir.evaluate import evaluate

    env = {v.name: x for v, x in zip(fusion.inputs, inputs, strict=True)}
    for seg in segments:
        outs = evaluate(seg.fusion, [env[name] for name in seg.inputs])
        env.update(zip(seg.outputs, outs, strict=True))
    return [env[t.name] for t in fusion.outputs]
