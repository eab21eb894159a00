"""Matmul patterns: the built-in recognisers, dimension roles and tensor roles."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from mmaplug.errors import UnsupportedFusionError
from mmaplug.ir.dim_graph import DimGraph
from mmaplug.ir.fusion import Expr, Fusion, IterDomain, TensorView
from mmaplug.ir.ops import BinaryOp, CastOp, LinearOp, MatmulOp, MmaOp, ReductionOp
from mmaplug.markers import hookimpl


class DimRole(enum.StrEnum):
    """The role of a dimension in a matmul."""

    BATCH = "batch"
    M = "m"
    N = "n"
    K = "k"


class TensorRole(enum.StrEnum):
    """The role of a fusion input or output."""

    OPERAND_A = "a"
    OPERAND_B = "b"
    EPILOGUE_INPUT = "epilogue_input"
    SCALE = "scale"  # a block scale of a block-scaled matmul's sum (MatmulAnalysis.scales)
    OUTPUT = "output"


@attrs.define(eq=False)
class MatmulPattern:
    """One matmul in a fusion: its immediate operands, its result and how it was written.

    ``kind`` is ``"matmul"``, ``"linear"``, ``"mma"`` or ``"mul_sum"`` (or a plugin's own name);
    after translation every pattern is ``"mma"`` and ``a``/``b`` are the MmaOp's operands.
    """

    a: TensorView
    b: TensorView
    output: TensorView
    kind: str


# -- built-in recognisers (registered as the essential plugin "patterns") --------------------


@hookimpl
def mmaplug_matmul_patterns(fusion: Fusion) -> list[MatmulPattern]:
    """Recognise MatmulOp, LinearOp, MmaOp and mul+sum of broadcast operands."""
    found = []
    for expr in fusion.exprs():
        pattern = _recognise(expr)
        if pattern is not None:
            found.append(pattern)
    return found


def _recognise(expr: Expr) -> MatmulPattern | None:
    if isinstance(expr, MatmulOp | LinearOp | MmaOp):
        a, b = expr.inputs[0], expr.inputs[1]
        assert isinstance(a, TensorView) and isinstance(b, TensorView)
        kind = "mma" if isinstance(expr, MmaOp) else expr.kind  # a ScaledMmaOp is one too
        return MatmulPattern(a, b, expr.output, kind)
    if isinstance(expr, ReductionOp):
        return _recognise_mul_sum(expr)
    return None


def _through_casts(tv: TensorView) -> TensorView:
    while isinstance(tv.definition, CastOp):
        src = tv.definition.inputs[0]
        assert isinstance(src, TensorView)
        tv = src
    return tv


def _recognise_mul_sum(expr: ReductionOp) -> MatmulPattern | None:
    """A sum of a mul of two same-rank tensors where M and N are each broadcast in one operand."""
    src = expr.inputs[0]
    assert isinstance(src, TensorView)
    mul = _through_casts(src).definition
    if not isinstance(mul, BinaryOp) or mul.op != "mul":
        return None
    if not all(isinstance(v, TensorView) for v in mul.inputs):
        return None
    x, y = (_through_casts(v) for v in mul.inputs)  # type: ignore[arg-type]
    out = expr.output
    if len(expr.axes) != 1:
        raise UnsupportedFusionError(
            f"mul+sum into {out.name} sums over {len(expr.axes)} dims {list(expr.axes)}; a "
            "matmul has exactly one reduction (K) dim (merge them before, or sum in two steps)"
        )
    if not (len(x.domain) == len(y.domain) == len(out.domain)):
        raise UnsupportedFusionError(
            f"mul+sum into {out.name}: operands {x.name} (rank {len(x.domain)}) and {y.name} "
            f"(rank {len(y.domain)}) must have the rank of the sum ({len(out.domain)})"
        )
    b_operand: TensorView | None = None
    has_m = has_n = False
    for dx, dy, do in reversed(list(zip(x.domain, y.domain, out.domain, strict=True))):
        if do.is_reduction:
            if dx.is_broadcast or dy.is_broadcast:
                return None
            continue
        if do.is_broadcast or dx.is_broadcast == dy.is_broadcast:
            continue  # a batch dim, concrete or broadcast in both
        concrete = y if dx.is_broadcast else x
        if b_operand is None:
            b_operand, has_n = concrete, True
        elif concrete is b_operand:
            has_n = True
        else:
            has_m = True
    if b_operand is None or not (has_m and has_n):
        return None
    a_operand = y if b_operand is x else x
    return MatmulPattern(a_operand, b_operand, out, "mul_sum")


# -- roles --------------------------------------------------------------------------------------


def pattern_dim_roles(pattern: MatmulPattern, graph: DimGraph) -> dict[int, DimRole]:
    """Roles of the dim classes of one pattern (nvFuser ``getDimRoles``)."""
    out = pattern.output
    if pattern.kind in ("matmul", "linear"):
        expr = out.definition
        assert expr is not None
        from_a: dict[int, IterDomain] = {}
        from_b: dict[int, IterDomain] = {}
        a_dims = {id(d) for d in pattern.a.domain}
        b_dims = {id(d) for d in pattern.b.domain}
        for src, dst in expr.dim_pairs():
            if id(src) in a_dims:
                from_a[id(dst)] = src
            elif id(src) in b_dims:
                from_b[id(dst)] = src
        roles: dict[int, DimRole] = {}
        for d in out.domain:
            if d.is_reduction:
                role = DimRole.K
            else:
                has_a = id(d) in from_a and not from_a[id(d)].is_broadcast
                has_b = id(d) in from_b and not from_b[id(d)].is_broadcast
                role = (
                    DimRole.M
                    if has_a and not has_b
                    else DimRole.N
                    if has_b and not has_a
                    else DimRole.BATCH
                )
            roles[graph.group(d)] = role
        return roles
    concrete: dict[int, int] = {}
    for bit, tv in ((1, pattern.a), (2, pattern.b), (4, out)):
        for d in tv.domain:
            g = graph.group(d)
            concrete.setdefault(g, 0)
            if not d.is_broadcast and not d.is_reduction:
                concrete[g] |= bit
    roles = {}
    by_flags = {7: DimRole.BATCH, 0: DimRole.BATCH, 3: DimRole.K, 5: DimRole.M, 6: DimRole.N}
    for g, flags in concrete.items():
        if flags not in by_flags:
            raise UnsupportedFusionError(
                f"matmul into {out.name}: a dim of extent {graph.extent(g)} is concrete only in "
                f"{_flag_names(flags)}; each dim must be concrete in two of A, B and the output "
                "(M: A and output, N: B and output, K: A and B) or in all three (batch)"
            )
        roles[g] = by_flags[flags]
    return roles


def _flag_names(flags: int) -> str:
    return ", ".join(n for bit, n in ((1, "A"), (2, "B"), (4, "the output")) if flags & bit)


def all_dim_roles(patterns: Sequence[MatmulPattern], graph: DimGraph) -> dict[int, DimRole]:
    """Roles of every dim class over all patterns; a class with two roles is rejected."""
    merged: dict[int, DimRole] = {}
    for pattern in patterns:
        for g, role in pattern_dim_roles(pattern, graph).items():
            if merged.setdefault(g, role) is not role:
                raise UnsupportedFusionError(
                    f"a dim of extent {graph.extent(g)} is {merged[g].value.upper()} in one "
                    f"matmul and {role.value.upper()} in another ({pattern.output.name}); "
                    "fused matmuls must agree on every shared dim"
                )
    return merged


def tensor_roles(
    fusion: Fusion, roles: dict[int, DimRole], graph: DimGraph
) -> dict[TensorRole, list[TensorView]]:
    """Roles of the fusion's tensor inputs and outputs (nvFuser ``getTensorRoles``)."""
    result: dict[TensorRole, list[TensorView]] = {r: [] for r in TensorRole}
    for tv in fusion.inputs:
        if not isinstance(tv, TensorView):
            continue
        found = _roles_of(tv, roles, graph)
        if found is None:
            continue
        if DimRole.K in found:
            role = TensorRole.OPERAND_A if DimRole.M in found else TensorRole.OPERAND_B
        else:
            role = TensorRole.EPILOGUE_INPUT
        result[role].append(tv)
    for tv in fusion.outputs:
        found = _roles_of(tv, roles, graph)
        if found is None or DimRole.K in found:
            continue
        if DimRole.M in found and DimRole.N in found:
            result[TensorRole.OUTPUT].append(tv)
    for role in (TensorRole.OPERAND_A, TensorRole.OPERAND_B):
        result[role].sort(key=lambda t: (-len(t.uses), fusion.inputs.index(t)))
    return result


def _roles_of(tv: TensorView, roles: dict[int, DimRole], graph: DimGraph) -> set[DimRole] | None:
    """The roles of *tv*'s concrete dims, or None when one of them has no role."""
    found: set[DimRole] = set()
    for d in tv.domain:
        if d.is_broadcast or d.is_reduction:
            continue
        role = roles.get(graph.group(d))
        if role is None:
            return None
        found.add(role)
    return found


def unrelated_dims(tv: TensorView, roles: dict[int, DimRole], graph: DimGraph) -> Iterable[int]:
    """Positions of *tv*'s concrete dims that have no matmul role."""
    for i, d in enumerate(tv.domain):
        if not d.is_broadcast and not d.is_reduction and graph.group(d) not in roles:
            yield i
