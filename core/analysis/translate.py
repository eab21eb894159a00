"""Translation of every matmul pattern to one MmaOp (the same for every architecture),
and the skip-intermediates analysis that lets schedulers load operands straight from inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs

from mmaplug.analysis.patterns import MatmulPattern
from mmaplug.errors import PluginResultError, UnsupportedFusionError
from mmaplug.hooks.guard import Guard, wrong
from mmaplug.hooks.manager import get_plugin_manager
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion, IterDomain, IterType, TensorView, as_fusion
from mmaplug.ir.ops import (
    METADATA_OPS,
    BinaryOp,
    BroadcastOp,
    CastOp,
    LinearOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    SqueezeOp,
)

if TYPE_CHECKING:
    import pluggy


def find_matmul_patterns(
    fusion: Fusion, *, pm: pluggy.PluginManager | None = None
) -> list[MatmulPattern]:
    """Every matmul pattern in *fusion* (or a FusionDefinition's), in fusion order.

    Each recogniser (``mmaplug_matmul_patterns``) is asked; an answer that is not a list of
    patterns of this fusion's tensors is a plugin fault (``mmaplug.hooks.guard``).
    """
    fusion = as_fusion(fusion, "find_matmul_patterns")
    return _find(Guard(pm or get_plugin_manager()), fusion)


def translate_matmul_patterns(
    fusion: Fusion, *, pm: pluggy.PluginManager | None = None
) -> list[MatmulPattern]:
    """Rewrite every pattern of *fusion* in place as an MmaOp; returns the patterns, all "mma".

    MatmulOp and LinearOp get explicit broadcasts and a transpose in front of the MmaOp;
    mul+sum becomes an MmaOp on the pre-cast operands. Shared operands (``A@B1``, ``A@B2``) reuse
    one broadcast. The float32 result is cast back to the old dtype only where a half value is
    really needed: consumers that cast it straight back to float32 read the float32 result.
    """
    fusion = as_fusion(fusion, "translate_matmul_patterns")  # a FusionDefinition is accepted
    guard = Guard(pm or get_plugin_manager())
    earlier: dict[int, MatmulPattern] = {}  # translated by a pass cut short, by new output
    while True:  # each pass but the last drops a recogniser (warning mode), so this ends
        found = _found(guard, fusion)
        as_found = [earlier.get(id(p.output), attrs.evolve(p)) for p, _ in found]
        try:
            for (pattern, finder), copy in zip(found, as_found, strict=True):
                if pattern.kind == "mma":
                    continue
                if pattern.kind in _TRANSLATORS:
                    translate_as(fusion, pattern, pattern.kind)
                else:
                    _translate_by_plugin(guard, fusion, pattern, finder)
                pattern.kind = "mma"
                earlier[id(pattern.output)] = copy
        except _FinderDropped:
            continue
        break
    guard.notify("mmaplug_fusion_translated", fusion=fusion, patterns=as_found)
    return [pattern for pattern, _ in found]


class _FinderDropped(Exception):
    """A recogniser's pattern had no translator and warning mode dropped it: find again."""


_DEFINED_BY: Final = {"matmul": MatmulOp, "linear": LinearOp, "mma": MmaOp, "mul_sum": ReductionOp}


def _find(guard: Guard, fusion: Fusion) -> list[MatmulPattern]:
    return [pattern for pattern, _ in _found(guard, fusion)]


def _found(guard: Guard, fusion: Fusion) -> list[tuple[MatmulPattern, str]]:
    """Every pattern in fusion order, with the plugin that recognised it (the first to)."""
    hook = "mmaplug_matmul_patterns"
    tensors = {id(tv) for tv in fusion.tensors()}
    seen: dict[int, tuple[MatmulPattern, str]] = {}
    for plugin, answer in guard.call(hook, fusion=fusion):
        if not isinstance(answer, list | tuple):
            expected = "a list of MatmulPattern or None"
            guard.fault(plugin, hook, wrong(answer, expected), cls=PluginResultError)
            continue
        faults = [f for p in answer if (f := _pattern_fault(p, tensors))]
        if faults:
            guard.fault(plugin, hook, f"returned {faults[0]}", cls=PluginResultError)
            continue
        for pattern in answer:
            seen.setdefault(id(pattern.output), (pattern, plugin))
    order = {id(e.output): i for i, e in enumerate(fusion.exprs())}
    return sorted(seen.values(), key=lambda item: order.get(id(item[0].output), len(order)))


def _pattern_fault(pattern: object, tensors: set[int]) -> str:
    """What is wrong with a recogniser's *pattern* ("" if nothing)."""
    if not isinstance(pattern, MatmulPattern):
        return wrong(pattern, "MatmulPattern items").removeprefix("returned ")
    for role in ("a", "b", "output"):
        tv = getattr(pattern, role)
        if not isinstance(tv, TensorView) or id(tv) not in tensors:
            return f"a pattern whose {role} ({tv!r:.60}) is not a tensor of this fusion"
    if not isinstance(pattern.kind, str) or not pattern.kind:
        return f"a pattern whose kind is {pattern.kind!r:.60}; expected a non-empty str"
    op, expr = _DEFINED_BY.get(pattern.kind), pattern.output.definition
    if op is not None and not isinstance(expr, op):
        return (
            f"a {pattern.kind!r} pattern whose output {pattern.output.name} is not defined by a "
            f"{op.__name__}; give your own op a kind of your own and translate it"
        )
    if op not in (None, ReductionOp) and not _reads(expr, pattern.a, pattern.b):
        return (
            f"a {pattern.kind!r} pattern whose a and b ({pattern.a.name}, {pattern.b.name}) are "
            f"not the first two inputs of the {op.__name__} defining {pattern.output.name}"
        )
    return ""


def _reads(expr: object, a: TensorView, b: TensorView) -> bool:
    inputs = getattr(expr, "inputs", [])
    return len(inputs) >= 2 and inputs[0] is a and inputs[1] is b


def _translate_by_plugin(guard: Guard, fusion: Fusion, pattern: MatmulPattern, finder: str) -> None:
    """Ask the ``mmaplug_translate_pattern`` plugins; the first True must leave an MmaOp. None
    answering True is the fault of *finder*, the recogniser of a kind nothing translates."""
    hook = "mmaplug_translate_pattern"
    for plugin, answer in guard.call(hook, fusion=fusion, pattern=pattern):
        if answer is False:
            continue
        if answer is not True:
            guard.fault(plugin, hook, wrong(answer, "True or None"), cls=PluginResultError)
        expr = pattern.output.definition
        if not isinstance(expr, MmaOp) or not _reads(expr, pattern.a, pattern.b):
            guard.fault(
                plugin,
                hook,
                f"returned True, but pattern {pattern.kind!r} is not an MmaOp afterwards "
                f"(pattern.output must be the MmaOp's result, pattern.a and pattern.b its "
                "operands; mmaplug.analysis.translate.translate_as does this)",
                cls=PluginResultError,
            )
        return
    guard.fault(
        finder,
        "mmaplug_matmul_patterns",
        f"recognised pattern kind {pattern.kind!r} (output {pattern.output.name}), which no "
        "plugin translates: implement mmaplug_translate_pattern for it (translate_as reuses "
        "a built-in translation), or leave the op to the built-in kinds",
        cls=PluginResultError,
    )
    raise _FinderDropped


def translate_as(fusion: Fusion, pattern: MatmulPattern, kind: str) -> None:
    """Translate *pattern* in place as the built-in *kind* (``matmul``, ``linear``, ``mul_sum``).

    For plugins: an op whose operands and output follow ``torch.matmul``/``F.linear`` semantics
    can reuse the built-in translation (the op's first two inputs are A and B; for ``linear`` a
    third is the bias).
    """
    if kind not in _TRANSLATORS:
        raise UnsupportedFusionError(
            f"translate_as: {kind!r} is not a built-in kind; use one of {sorted(_TRANSLATORS)}"
        )
    _TRANSLATORS[kind](fusion, pattern)
    pattern.kind = "mma"


# -- operand preparation (with reuse for horizontal fusions) ------------------------------------


def _broadcast(fusion: Fusion, tv: TensorView, flags: Sequence[bool]) -> TensorView:
    flags = tuple(flags)
    if not any(flags):
        return tv
    for use in tv.uses:
        if isinstance(use, BroadcastOp) and use.flags == flags:
            return use.output
    src = iter(tv.no_reduction_domain)
    domain = [IterDomain(1, IterType.BROADCAST) if new else _copy(next(src)) for new in flags]
    out = fusion.new_tensor(tv.dtype, domain)
    fusion.attach(BroadcastOp(out, tv, flags))
    return out


def _permute(fusion: Fusion, tv: TensorView, perm: Sequence[int]) -> TensorView:
    perm = tuple(perm)
    for use in tv.uses:
        if isinstance(use, PermuteOp) and use.perm == perm:
            return use.output
    dims = tv.no_reduction_domain
    out = fusion.new_tensor(tv.dtype, [_copy(dims[p]) for p in perm])
    fusion.attach(PermuteOp(out, tv, perm))
    return out


def _copy(d: IterDomain) -> IterDomain:
    return IterDomain(d.extent, d.iter_type)


def _leading(fusion: Fusion, tv: TensorView, rank: int) -> TensorView:
    extra = rank - len(tv.shape)
    return _broadcast(fusion, tv, [True] * extra + [False] * len(tv.shape))


def _mma(fusion: Fusion, a: TensorView, b: TensorView) -> TensorView:
    domain = []
    for i, (da, db) in enumerate(zip(a.domain, b.domain, strict=True)):
        extent = db.extent if da.is_broadcast else da.extent
        if i == len(a.domain) - 1:
            kind = IterType.REDUCTION
        elif da.is_broadcast and db.is_broadcast:
            kind = IterType.BROADCAST
        else:
            kind = IterType.ITERATION
        domain.append(IterDomain(extent, kind))
    out = fusion.new_tensor(DType.float32, domain)
    fusion.attach(MmaOp(out, a, b, [len(domain) - 1]))
    return out


def _refuse_vector(pattern: MatmulPattern) -> None:
    for tv in (pattern.a, pattern.b):
        if len(tv.shape) < 2:
            raise UnsupportedFusionError(
                f"{pattern.kind} into {pattern.output.name}: operand {tv.name} is 1-D; "
                "matrix-vector products are not tensor-core work (give both operands 2+ dims)"
            )


# -- per-kind translation ----------------------------------------------------------------------


def _translate_matmul(fusion: Fusion, pattern: MatmulPattern) -> None:
    _refuse_vector(pattern)
    a, b = pattern.a, pattern.b
    rank = max(len(a.shape), len(b.shape)) + 1
    bt = _permute(fusion, b, [*range(len(b.shape) - 2), len(b.shape) - 1, len(b.shape) - 2])
    a3 = _broadcast(fusion, a, [False] * (len(a.shape) - 1) + [True, False])
    b3 = _broadcast(fusion, bt, [False] * (len(bt.shape) - 2) + [True, False, False])
    a3, b3 = _leading(fusion, a3, rank), _leading(fusion, b3, rank)
    _finalize(fusion, pattern, a3, b3, _mma(fusion, a3, b3))


def _translate_linear(fusion: Fusion, pattern: MatmulPattern) -> None:
    _refuse_vector(pattern)
    a, w = pattern.a, pattern.b
    a3 = _broadcast(fusion, a, [False] * (len(a.shape) - 1) + [True, False])
    w3 = _leading(fusion, w, len(a3.shape))
    result = mma = _mma(fusion, a3, w3)
    expr = pattern.output.definition
    assert expr is not None
    if len(expr.inputs) > 2:
        bias = expr.inputs[2]
        assert isinstance(bias, TensorView)
        bias_f = _cast(fusion, bias, DType.float32) if bias.dtype is not DType.float32 else bias
        bias_b = _leading(fusion, bias_f, len(result.shape))
        summed = fusion.new_tensor(DType.float32, [_copy(d) for d in result.no_reduction_domain])
        fusion.attach(BinaryOp(summed, result, bias_b, "add"))
        result = summed
    _finalize(fusion, pattern, a3, w3, result)
    pattern.output = mma


def _translate_mul_sum(fusion: Fusion, pattern: MatmulPattern) -> None:
    out = pattern.output
    expr = out.definition
    assert isinstance(expr, ReductionOp)
    fusion.detach(expr)
    fusion.attach(MmaOp(out, pattern.a, pattern.b, expr.axes))


def _cast(fusion: Fusion, tv: TensorView, dtype: DType) -> TensorView:
    out = fusion.new_tensor(dtype, [_copy(d) for d in tv.no_reduction_domain])
    fusion.attach(CastOp([out], [tv]))
    return out


def _finalize(
    fusion: Fusion, pattern: MatmulPattern, a: TensorView, b: TensorView, fms: TensorView
) -> None:
    """Hook the float32 result *fms* up in place of the old output (nvFuser's cast placement)."""
    old = pattern.output
    old_def = old.definition
    assert old_def is not None
    fusion.detach(old_def)
    if old.dtype is fms.dtype:
        fusion.replace_uses(old, fms)
    else:
        round_trips = [u for u in old.uses if isinstance(u, CastOp) and u.output.dtype is fms.dtype]
        others = [u for u in old.uses if u not in round_trips]
        if others or old in fusion.outputs:
            half = _cast(fusion, fms, old.dtype)
            for use in others:
                use.inputs = [half if v is old else v for v in use.inputs]
                old.uses.remove(use)
                half.uses.append(use)
            if old in fusion.outputs:
                fusion.outputs[fusion.outputs.index(old)] = half
                half.memory_type = old.memory_type
        for cast in round_trips:
            fusion.detach(cast)
            fusion.replace_uses(cast.output, fms)
    pattern.a, pattern.b, pattern.output = a, b, fms


_TRANSLATORS = {
    "matmul": _translate_matmul,
    "linear": _translate_linear,
    "mul_sum": _translate_mul_sum,
}


# -- skip intermediates ------------------------------------------------------------------------


def skip_intermediates(tv: TensorView) -> TensorView:
    """Alias the single-use metadata ops below fusion input *tv* to it; return the last one.

    Each op's output gets global memory, ``alias_of`` = *tv* and the allocation order of its
    producer carried through the op (new broadcast dims outermost), so a scheduler can load the
    returned tensor straight from *tv*'s memory with the right strides (nvFuser PR #4072).
    """
    current = tv
    while len(current.uses) == 1 and isinstance(current.uses[0], METADATA_OPS):
        expr = current.uses[0]
        out = expr.output
        out.alloc_order = _carry_allocation(expr, current)
        out.alias_of = tv
        out.memory_type = tv.memory_type
        current = out
    return current


def _carry_allocation(expr: object, src: TensorView) -> list[int]:
    """The consumer's allocation order: the producer's order mapped through *expr*."""
    src_order = [src.domain[i] for i in src.alloc_order]
    pos_of = {}
    out = expr.output  # type: ignore[attr-defined]
    for s, d in expr.dim_pairs():  # type: ignore[attr-defined]
        pos_of[id(s)] = out.domain.index(d)
    mapped = [pos_of[id(d)] for d in src_order if id(d) in pos_of]
    rest = [i for i in range(len(out.domain)) if i not in mapped and not out.domain[i].is_reduction]
    if isinstance(expr, SqueezeOp):
        rest = []
    return rest + mapped
