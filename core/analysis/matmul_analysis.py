"""Fusion analysis: the MatmulProblem, the tensor bindings and the epilogue program of a fusion.

Every rejection here is an :class:`UnsupportedFusionError` that names the tensor, says what was
found, what is accepted and what to change (nvFuser's compile-time reject reasons, in our words).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import attrs

from mmaplug.analysis.amax import amax_outputs
from mmaplug.analysis.bindings import SCALE_DIMS, MatmulAnalysis, TensorBinding
from mmaplug.analysis.epilogue import EpilogueOutput, EpilogueProgram
from mmaplug.analysis.horizontal import check_no_prologues, horizontal_operands
from mmaplug.analysis.lower_epilogue import lower_epilogue, lower_prologue
from mmaplug.analysis.patterns import (
    DimGraph,
    DimRole,
    TensorRole,
    all_dim_roles,
    tensor_roles,
    unrelated_dims,
)
from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.analysis.translate import skip_intermediates, translate_matmul_patterns
from mmaplug.errors import UnsupportedFusionError
from mmaplug.ir.arguments import MAX_EXTENT
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion, IterDomain, IterType, Scalar, TensorView, Val, as_fusion
from mmaplug.ir.ops import METADATA_OPS, CastOp, LinearOp, MatmulOp, ScaledMmaOp
from mmaplug.ir.symbolic import require_concrete
from mmaplug.ir.view_ops import ReshapeOp, SliceOp

if TYPE_CHECKING:
    import pluggy


def matmul_problem(fusion: Fusion, *, pm: pluggy.PluginManager | None = None) -> MatmulProblem:
    """The MatmulProblem of *fusion* or a FusionDefinition (translated or not; left unchanged)."""
    return analyze(as_fusion(fusion, "matmul_problem"), pm=pm).problem


def analyze(fusion: Fusion, *, pm: pluggy.PluginManager | None = None) -> MatmulAnalysis:
    """Translate a copy of *fusion* (or a FusionDefinition's) and derive its problem, bindings
    and epilogue program. Messages name the user's tensors, not the copy's new ones."""
    fusion = as_fusion(fusion, "analyze")
    require_concrete(fusion, "matmul analysis")
    _check_view_ops(fusion)
    work = copy.deepcopy(fusion)
    _unit_dims_are_real(work)
    name = _UserNames(work)
    patterns = translate_matmul_patterns(work, pm=pm)
    name.settle(work)
    if not patterns:
        raise UnsupportedFusionError(
            "no matmul pattern found: the fusion needs a matmul, linear, fused_multiply_sum or "
            "a sum over a mul of two broadcast operands"
        )
    check_no_prologues(patterns, name)
    scale_tvs = _block_scales(work, patterns, name)
    graph = DimGraph(work)
    roles = all_dim_roles(patterns, graph)
    troles = tensor_roles(work, roles, graph)
    amax_of = amax_outputs(work, roles, graph, name)
    _check_roles(work, patterns, roles, troles, graph, name, scale_tvs, amax_of)
    a_tv, b_tv = troles[TensorRole.OPERAND_A][0], troles[TensorRole.OPERAND_B][0]
    b_tvs, accs = [b_tv], None  # the B operand of each accumulator, and each MmaOp's
    if len(patterns) > 1:
        ordered, found = horizontal_operands(patterns, troles[TensorRole.OPERAND_B])
        if not found:  # their dims would multiply into one meaningless problem
            raise UnsupportedFusionError(
                f"the fusion's {len(patterns)} matmuls are not one horizontal "
                "fusion: a kernel computes one matmul, or several that read one A and B inputs "
                "of one shape, dtype and layout (x @ W1, x @ W3); mp.compile computes each in a "
                "segment of its own"
            )
        b_tvs, accs = found, {id(p.output): j for j, p in enumerate(ordered)}
    _check_operand_dtypes(patterns[0].a, patterns[0].b, name)
    _check_float64(work, name)
    for tv in (*troles[TensorRole.OPERAND_A], *troles[TensorRole.OPERAND_B]):
        skip_intermediates(tv)

    def bind(tv: TensorView, role: TensorRole) -> TensorBinding:
        dim_roles = tuple(
            None if d.is_broadcast else roles[graph.group(d)] for d in tv.no_reduction_domain
        )
        index = (work.outputs if role is TensorRole.OUTPUT else work.inputs).index(tv)
        value_dims = [i for i, d in enumerate(tv.domain) if not d.is_reduction]
        alloc = tuple(value_dims.index(i) for i in tv.alloc_order)
        return TensorBinding(
            index=index,
            name=name(tv),
            role=role,
            dtype=tv.dtype,
            shape=tv.shape,
            dim_roles=dim_roles,
            alloc_order=alloc,
        )

    a = bind(a_tv, TensorRole.OPERAND_A)
    bs = tuple(bind(t, TensorRole.OPERAND_B) for t in b_tvs)
    b = bs[0]
    epi_inputs = tuple(
        bind(t, TensorRole.EPILOGUE_INPUT) for t in troles[TensorRole.EPILOGUE_INPUT]
    )
    outputs = tuple(bind(t, TensorRole.OUTPUT) for t in work.outputs)
    scales = tuple(
        TensorBinding(
            index=work.inputs.index(tv),
            name=name(tv),
            role=TensorRole.SCALE,
            dtype=tv.dtype,
            shape=tv.shape,
            dim_roles=dim_roles,
            alloc_order=tuple(tv.alloc_order),
        )
        for tv, dim_roles in zip(scale_tvs, SCALE_DIMS, strict=False)
    )
    for binding, tv in ((a, a_tv), *zip(bs, b_tvs, strict=True)):
        _check_blocks(binding)
        _check_memory_blocks(binding)
        _check_operand_inner(binding, tv, roles, graph)
    for binding in epi_inputs:
        _check_memory_blocks(binding)
    for binding in outputs:
        _check_output_order(binding, work.outputs[binding.index])
    _check_role_orders(
        [a_tv, *b_tvs, *troles[TensorRole.EPILOGUE_INPUT], *work.outputs], roles, graph, name
    )
    program = lower_epilogue(work, patterns, epi_inputs, name, accs, amax_of)
    _check_float8_epilogue(program)
    scalar_table = list(program.scalars)
    prologue_a = prologue_b = None
    if len(patterns) == 1:  # several: check_no_prologues saw plain operands
        prologue_a = lower_prologue(patterns[0].a, a_tv, scalar_table, name)
        prologue_b = lower_prologue(patterns[0].b, b_tv, scalar_table, name)
        program = attrs.evolve(program, scalars=tuple(scalar_table))
    extent = {r: 1 for r in DimRole}
    for g, role in roles.items():
        extent[role] *= graph.extent(g)
    _check_extents(extent, {DimRole.M: a, DimRole.K: a, DimRole.N: b, DimRole.BATCH: outputs[0]})
    a_k_inner = _inner_role(a_tv, roles, graph) is DimRole.K
    b_k_inner = _inner_role(b_tv, roles, graph) is DimRole.K
    problem = MatmulProblem(
        m=extent[DimRole.M],
        n=extent[DimRole.N],
        k=extent[DimRole.K],
        batch=extent[DimRole.BATCH],
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        operand_dtype=patterns[0].a.dtype,
        output_dtype=work.outputs[outputs[0].index].dtype,
        vector_widths=_vector_widths(work, a_tv, b_tv, troles, roles, graph),
        num_patterns=len(patterns),
        horizontal=len(bs),
        epilogue_ops=program.op_names,
        epilogue_input_dtypes=tuple(t.dtype for t in program.inputs),
        a_prologue_ops=prologue_a.op_names if prologue_a else (),
        b_prologue_ops=prologue_b.op_names if prologue_b else (),
        block_scaled=bool(scales),
    )
    scalar_inputs = tuple(i for i, v in enumerate(work.inputs) if isinstance(v, Scalar))
    return MatmulAnalysis(
        fusion=work,
        patterns=tuple(patterns),
        problem=problem,
        a=a,
        b=b,
        epilogue_inputs=epi_inputs,
        outputs=outputs,
        scalar_inputs=scalar_inputs,
        epilogue=program,
        prologue_a=prologue_a,
        prologue_b=prologue_b,
        bs=bs,
        scales=scales,
    )


def _unit_dims_are_real(fusion: Fusion) -> None:
    """Make an M, N or K of extent 1 written into a matmul or linear a dim of that role.

    A declared extent of 1 is a broadcast dim (nvFuser), so ``x[1, K] @ W`` would have no M
    and its output no M dim. By torch's semantics (``scaled_mm``'s block-scaled ``ScaledMmaOp``
    states them too) A's row dim is M, B's column dim N and the
    summed dim K whatever their extent: when that dim's class holds only extent-1 dims, its
    broadcast members become iteration dims (the same values, so the same fusion).
    """
    dims: list[IterDomain] = []
    others: set[int] = set()  # the other operand's broadcast of a role: it stays one
    for expr in fusion.exprs():
        if not isinstance(expr, MatmulOp | LinearOp | ScaledMmaOp):
            continue
        a, b = (t.no_reduction_domain for t in expr.inputs[:2])  # type: ignore[attr-defined]
        if isinstance(expr, ScaledMmaOp):  # scaled_mm's: A [M, 1, K], B [1, N, K]
            dims += [a[0], b[1], a[2]]
            others |= {id(a[1]), id(b[0])}
        elif isinstance(expr, MatmulOp):
            dims += a[-2:] if len(a) > 1 else a
            dims += [b[-2], b[-1]] if len(b) > 1 else b
        else:
            dims += [*a, *b]  # input [*M, K], weight [N, K] or [K]
    if not any(d.is_broadcast for d in dims):
        return
    graph = DimGraph(fusion)
    members: dict[int, list[IterDomain]] = {}
    for tv in fusion.tensors():
        for d in tv.domain:
            members.setdefault(graph.group(d), []).append(d)
    for d in dims:
        group = members[graph.group(d)]
        if all(m.extent == 1 for m in group):
            for m in group:
                if m.is_broadcast and id(m) not in others:
                    m.iter_type = IterType.ITERATION


# -- the user's names ---------------------------------------------------------------------------


class _UserNames:
    """The user's name of each tensor of the translated copy.

    Translation replaces tensors (an output becomes a cast of the new MmaOp's result) and puts
    broadcasts and permutes in front of operands; messages must still name what the user wrote.
    """

    def __init__(self, work: Fusion) -> None:
        self._tensors = work.tensors()  # kept alive: their ids are the keys below
        self._known = {id(t): t.name for t in self._tensors}
        self._uses = [(e, list(e.inputs)) for e in work.exprs()]
        self._outputs = [t.name for t in work.outputs]

    def settle(self, work: Fusion) -> None:
        """Learn the tensors translation put in place of the user's ones."""
        for expr, before in self._uses:
            for old, new in zip(before, expr.inputs, strict=False):
                if new is not old and id(old) in self._known:
                    self._known.setdefault(id(new), self._known[id(old)])
        for tv, user in zip(work.outputs, self._outputs, strict=False):
            self._known.setdefault(id(tv), user)
        self._tensors += work.tensors()

    def __call__(self, tv: TensorView) -> str:
        """*tv*'s user name, looking through the metadata ops and casts translation added."""
        val: Val = tv
        while id(val) not in self._known:
            expr = val.definition
            if expr is None or not isinstance(expr, (*METADATA_OPS, CastOp)):
                break
            val = expr.inputs[0]
        return self._known.get(id(val), tv.name)


# -- checks --------------------------------------------------------------------------------------


def _block_scales(work: Fusion, patterns: list, name: _UserNames) -> list[TensorView]:  # noqa: ANN001
    """The scale inputs of a block-scaled matmul (``ScaledMmaOp``), A's then B's; none for
    other matmuls. A block-scaled matmul is fused alone, with its scales fusion inputs."""
    ops = [p.output.definition for p in patterns]
    scaled = [op for op in ops if isinstance(op, ScaledMmaOp)]
    if not scaled:
        return []
    if len(ops) > 1:
        raise UnsupportedFusionError(
            f"the fusion holds {len(ops)} matmuls and one is block-scaled "
            f"({name(scaled[0].output)}); a block-scaled matmul is fused alone (one matmul, "
            "its epilogue after it)"
        )
    found = [tv for tv in scaled[0].inputs[2:] if isinstance(tv, TensorView)]
    for tv in found:
        if tv not in work.inputs or tv.dtype is not DType.float32:
            raise UnsupportedFusionError(
                f"block scale {name(tv)} ({tv.dtype.label}{list(tv.shape)}) is computed in the "
                "fusion; kernels read block scales as float32 fusion inputs (compute them "
                "before the fusion)"
            )
    return found


def _check_roles(fusion, patterns, roles, troles, graph, name, scales, amax_of) -> None:  # noqa: ANN001, E501
    for tv in fusion.inputs:
        if tv in scales:
            continue
        if isinstance(tv, TensorView) and not any(tv in v for v in troles.values()):
            dims = list(unrelated_dims(tv, roles, graph))
            raise UnsupportedFusionError(
                f"input {tv.name} has dim {dims[0] if dims else '?'} (shape {list(tv.shape)}) "
                "that is not an M, N, K or batch dim of the matmul; every input must be an "
                "operand or an epilogue input indexed by batch/M/N (drop or reduce that dim)"
            )
    for tv in fusion.outputs:
        if tv not in troles[TensorRole.OUTPUT] and id(tv) not in amax_of:
            found = {
                roles.get(graph.group(d)) for d in tv.no_reduction_domain if not d.is_broadcast
            }
            what = "still holds the K dim" if DimRole.K in found else "does not hold both M and N"
            raise UnsupportedFusionError(
                f"output {name(tv)} (shape {list(tv.shape)}) {what}; matmul fusion outputs must "
                "be [batch..., M..., N...] (sum over K, and keep both M and N), or an amax "
                "over all of them (fd.ops.amax)"
            )
    for role, name in ((TensorRole.OPERAND_A, "A"), (TensorRole.OPERAND_B, "B")):
        if not troles[role]:
            raise UnsupportedFusionError(
                f"no fusion input can be operand {name}; operands must be fusion inputs "
                "(only metadata ops and casts may stand between them and the matmul)"
            )
        if len(troles[role]) > len(patterns):
            names = ", ".join(t.name for t in troles[role])
            raise UnsupportedFusionError(
                f"more than one input can be operand {name} ({names}); fuse one matmul per "
                "operand pair"
            )


def _check_view_ops(fusion: Fusion) -> None:
    """Slices and reshapes make new loops a matmul kernel cannot index (mp.evaluate runs them)."""
    for expr in fusion.exprs():
        if isinstance(expr, SliceOp | ReshapeOp):
            raise UnsupportedFusionError(
                f"{expr.output.name} = {expr.kind}({expr.inputs[0].name}): a matmul kernel "
                f"cannot take a {expr.kind} (its dims are new loops, not batch, M, N or K); "
                f"mp.compile runs the {expr.kind} in a segment of its own"
            )


def _check_operand_dtypes(a: TensorView, b: TensorView, name: _UserNames) -> None:
    """The MmaOp's operands (after any prologue) share one 16-bit or FP8 dtype."""
    if a.dtype is not b.dtype:
        raise UnsupportedFusionError(
            f"operands {name(a)} ({a.dtype.label}) and {name(b)} ({b.dtype.label}) differ; "
            "both operands must have one dtype"
        )
    if not a.dtype.is_narrow:
        raise UnsupportedFusionError(
            f"operand {name(a)} is {a.dtype.label}; tensor-core operands must be float16, "
            "bfloat16, float8_e4m3fn or float8_e5m2 (cast the inputs before the fusion)"
        )


def _check_float8_epilogue(program: EpilogueProgram) -> None:
    """Epilogues read FP8 inputs (widened to float32), write FP8 and round to it (saturating,
    as mp.evaluate); the first output must be FP8 when any FP8 is written or rounded to: the
    problem's output dtype is what schedulers decide on (only hopper builds the conversions;
    FP8 inputs are in ``MatmulProblem.epilogue_input_dtypes``, which they decline on)."""
    writes: list[EpilogueOutput] = [t for t in program.outputs if t.dtype.is_float8]
    found = [f"{t.name} ({t.dtype.label})" for t in writes]
    found += [
        f"a cast to {i.arg.label}" for i in program.instrs if i.op == "cast" and i.arg.is_float8
    ]
    first = program.outputs[0] if program.outputs else None
    if found and not (first and first.dtype.is_float8):
        what = f"{first.name} is {first.dtype.label}" if first else "is missing"
        raise UnsupportedFusionError(
            f"the epilogue has {', '.join(found)} but its first output {what}; FP8 epilogues "
            "are built by the hopper scheduler for fusions whose first output is FP8 (schedulers "
            "choose by the first output's dtype): add the FP8 output first"
        )


def _check_float64(fusion: Fusion, name: _UserNames) -> None:
    for tv in fusion.tensors():
        if tv.dtype is DType.float64:
            raise UnsupportedFusionError(
                f"{name(tv)} is float64; matmul kernels compute epilogues in float32 and read and "
                "write float16, bfloat16 or float32 tensors only (cast to float32 instead; "
                "mp.evaluate still runs float64 fusions)"
            )


def _check_extents(extent: dict[DimRole, int], tensor_of: dict[DimRole, TensorBinding]) -> None:
    for role, value in extent.items():
        if value >= MAX_EXTENT:
            tv = tensor_of[role]
            raise UnsupportedFusionError(
                f"{role.value.upper()} of this matmul is {value} (the product of the "
                f"{role.value.upper()} dims of {tv.name}, shape {list(tv.shape)}); kernels take "
                "M, N, K and batch below 2**31 (split the problem into several fusions)"
            )


def _check_blocks(binding: TensorBinding) -> None:
    """Each role's dims must be adjacent, so each merges into one strided dim (any role order:
    a ``[M, B, K]`` operand is addressed by its batch stride)."""
    seq = [r for r in binding.dim_roles if r is not None]
    runs = [r for i, r in enumerate(seq) if i == 0 or seq[i - 1] is not r]
    if len(runs) != len(set(runs)):
        raise UnsupportedFusionError(
            f"{binding.role.value} tensor {binding.name} has dims ordered "
            f"{[r.value for r in seq]}; the dims of one role must be adjacent (non-consecutive "
            "batch, M, N or K dims cannot be addressed with one stride; permute or reshape "
            "before the fusion)"
        )


def _check_memory_blocks(binding: TensorBinding) -> None:
    """Each role's dims adjacent in memory too, outer before inner, or they never merge into
    one stride (an input's layout: outputs are row-major, ``_check_output_order``)."""
    seq = {r for r in binding.dim_roles if r is not None}
    real = [i for i in binding.alloc_order if binding.dim_roles[i] and binding.shape[i] > 1]
    for role in seq:
        at = [k for k, i in enumerate(real) if binding.dim_roles[i] is role]
        dims = [real[k] for k in at]
        if at and (at[-1] - at[0] + 1 != len(at) or dims != sorted(dims)):
            raise UnsupportedFusionError(
                f"{binding.role.value} tensor {binding.name} (shape {list(binding.shape)}) is "
                f"laid out with its {role.value.upper()} dims apart in memory (stride_order "
                "makes them no single stride); declare a stride_order that keeps the dims of "
                "each role next to each other and in their order, e.g. row-major"
            )


def _check_operand_inner(binding: TensorBinding, tv: TensorView, roles, graph) -> None:  # noqa: ANN001
    """Kernels read operands along K or along M (A) / N (B), never along a batch dim."""
    if _inner_role(tv, roles, graph) is DimRole.BATCH:
        rows = "M" if binding.role is TensorRole.OPERAND_A else "N"
        raise UnsupportedFusionError(
            f"operand {binding.name} (shape {list(binding.shape)}, stride_order "
            f"{tv.stride_order}) is contiguous along a batch dim; kernels load operands "
            f"contiguous along K or {rows} (declare a stride_order with K or {rows} innermost)"
        )


def _check_role_orders(tensors: list[TensorView], roles, graph, name) -> None:  # noqa: ANN001
    """A role of several dims (``linear``'s leading dims of M) merges into one strided index,
    numbered in the order of the first tensor that holds them: every tensor must hold the ones it
    has in that order in memory (a ``[B, S, K]`` input's M of ``b * S + s`` stored at an
    ``[S, B, N]`` output's row ``b * S + s`` would be a wrong result)."""
    first: dict[DimRole, tuple[list[int], TensorView]] = {}
    for tv in tensors:
        order: dict[DimRole, list[int]] = {}
        for d in _strided(tv):
            group = graph.group(d)
            if (role := roles.get(group)) is not None:
                order.setdefault(role, []).append(group)
        for role, groups in order.items():
            if role not in first:
                first[role] = (groups, tv)
                continue
            known, holder = first[role]
            common = [g for g in groups if g in known]
            if common != [g for g in known if g in common]:
                raise UnsupportedFusionError(
                    f"{name(tv)} holds its {role.value.upper()} dims in another order than "
                    f"{name(holder)} (shapes {list(tv.shape)} and {list(holder.shape)}); a "
                    f"kernel indexes the {role.value.upper()} dims as one, in one order: keep "
                    "them in the same order in every tensor (permute after the fusion)"
                )


def _check_output_order(binding: TensorBinding, tv: TensorView) -> None:
    """Kernels store N contiguous, batch and M by strides: N last, each role adjacent."""
    _check_blocks(binding)
    seq = [r for r in binding.dim_roles if r is not None]
    if seq and seq[-1] is not DimRole.N:
        raise UnsupportedFusionError(
            f"output {binding.name} has dims ordered {[r.value for r in seq]}; kernels store "
            "outputs with N innermost: the N dims last, batch and M dims in any order before "
            "them (permute after the fusion instead, or keep N last)"
        )
    if list(binding.alloc_order) != sorted(binding.alloc_order):
        raise UnsupportedFusionError(
            f"output {binding.name} asks stride_order {tv.stride_order}; compiled fusions "
            "return outputs laid out in their logical order (row-major), so this layout is not "
            "produced (drop stride_order on the output, or copy after the fusion; mp.evaluate "
            "runs it)"
        )


def _strided(tv: TensorView) -> list[IterDomain]:
    """*tv*'s dims in memory order that have a stride to speak of (not of extent 1)."""
    return [d for d in tv.allocation if not d.is_broadcast and d.extent > 1]


def _inner_role(tv: TensorView, roles, graph) -> DimRole | None:  # noqa: ANN001
    """The role of *tv*'s innermost dim; a dim of extent 1 (M = 1) has no say in the layout."""
    inner = _strided(tv)
    return roles.get(graph.group(inner[-1])) if inner else None


def _vector_widths(fusion, a, b, troles, roles, graph) -> VectorWidths:  # noqa: ANN001
    """Widest vector per side from the static shapes (pointers are checked again at launch)."""

    def width(tv: TensorView) -> int:
        inner = _strided(tv)
        extent = inner[-1].extent if inner else 1
        limit = 16 // tv.dtype.itemsize
        w = 1
        while w < limit and extent % (w * 2) == 0:
            w *= 2
        return w

    epi = [
        width(t)
        for t in (*troles[TensorRole.OUTPUT], *troles[TensorRole.EPILOGUE_INPUT])
        if _inner_role(t, roles, graph) is DimRole.N
    ]
    return VectorWidths(a=width(a), b=width(b), epilogue=min(epi, default=1))
