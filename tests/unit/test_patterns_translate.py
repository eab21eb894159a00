"""Pattern detection, translation to MmaOp and matmul analysis at the IR level (reference §7).

Numerical checks use inputs that are multiples of 1/2 in [-1, 1] with K <= 16, so every product
and every partial sum is exact in float16 and bfloat16: then translation (which removes
half -> float32 round trips) must not change a single bit, and plain numpy is an exact reference.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.patterns import DimRole, TensorRole
from mmaplug.ir.ops import BroadcastOp, CastOp, MmaOp, PermuteOp, ReductionOp

H, T, S = mp.float16, mp.bfloat16, mp.float32
NP = {H: np.float16, T: ml_dtypes.bfloat16, S: np.float32}
M, N, K = 4, 6, 8
# stride orders: K innermost or not, for 2-D A [M, K] (matmul) and B [K, N] (matmul)
ROW, COL = [1, 0], [0, 1]


def _exact_inputs(fusion, seed=0):
    """Inputs in {-1, -0.5, 0, 0.5, 1} (exact in every dtype) and 0.5/2.0 for scalars."""
    rng = np.random.default_rng(seed)
    out = []
    for i, v in enumerate(fusion.inputs):
        if isinstance(v, mp.TensorView):
            out.append((rng.integers(-2, 3, v.shape) / 2).astype(NP[v.dtype]))
        else:
            out.append(0.5 if i % 2 else 2.0)
    return out


def _translate_and_check(fusion, pm, expected=None, seed=0):
    """Translate in place; evaluate before == after, and == *expected*(inputs) when given."""
    inputs = _exact_inputs(fusion, seed)
    before = mp.evaluate(fusion, inputs)
    problem = mp.matmul_problem(fusion, pm=pm) if expected is not False else None
    patterns = mp.translate_matmul_patterns(fusion, pm=pm)
    after = mp.evaluate(fusion, inputs)
    assert [o.dtype for o in before] == [o.dtype for o in after]
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    if expected:
        for got, want in zip(
            after, expected(*[np.asarray(x, np.float64) for x in inputs]), strict=True
        ):
            np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))
    assert all(p.kind == "mma" for p in patterns)
    # the returned patterns are exactly what detection finds in the translated fusion: each
    # output is an MmaOp output and a/b are that MmaOp's operands
    refound = mp.find_matmul_patterns(fusion, pm=pm)
    assert [(p.kind, p.a, p.b, p.output) for p in refound] == [
        (p.kind, p.a, p.b, p.output) for p in patterns
    ]
    assert all(isinstance(p.output.definition, MmaOp) for p in patterns)
    if problem is not None:
        assert mp.matmul_problem(fusion, pm=pm) == problem
    return patterns


def _mm_fusion(a_order=ROW, b_order=ROW, dtype=H, epilogue=None, out_dtype=None):
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([M, K], dtype, stride_order=a_order)
        b = fd.define_tensor([K, N], dtype, stride_order=b_order)
        out = fd.ops.matmul(a, b)
        if epilogue:
            out = getattr(fd.ops, epilogue)(out)
        if out_dtype is not None:
            out = fd.ops.cast(out, out_dtype)
        fd.add_output(out)
    return fd.fusion


LAYOUTS = [  # (layout, A K-inner, B K-inner)
    ("TN", True, True),
    ("TT", True, False),
    ("NT", False, False),
    ("NN", False, True),
]


# -- §7.1 / 7.2 / 7.3 mul+sum detection ------------------------------------------------------


def _mul_sum_fusion(a_k_inner, b_k_inner, dtype=H, swap=False, b_first=False):
    """sum(mul(A[M,1,K], B[1,N,K]), K) with the operands' memory order set by stride_order."""
    with mp.FusionDefinition() as fd:
        a_order = [2, 1, 0] if a_k_inner else [0, 1, 2]
        b_order = [2, 1, 0] if b_k_inner else [2, 0, 1]
        if b_first:
            b = fd.define_tensor([1, N, K], dtype, stride_order=b_order)
            a = fd.define_tensor([M, 1, K], dtype, stride_order=a_order)
        else:
            a = fd.define_tensor([M, 1, K], dtype, stride_order=a_order)
            b = fd.define_tensor([1, N, K], dtype, stride_order=b_order)
        prod = fd.ops.mul(b, a) if swap else fd.ops.mul(a, b)
        fd.add_output(fd.ops.sum(prod, [2]))
    return fd.fusion, a, b


@pytest.mark.parametrize(("layout", "a_k", "b_k"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_mul_sum_all_layouts(pm, layout, a_k, b_k):
    """mul+sum of pre-broadcast operands is one mul_sum pattern; the layout follows stride_order."""
    fusion, a, b = _mul_sum_fusion(a_k, b_k)
    patterns = mp.find_matmul_patterns(fusion, pm=pm)
    assert [(p.kind, p.a, p.b) for p in patterns] == [("mul_sum", a, b)]
    problem = mp.matmul_problem(fusion, pm=pm)
    assert (problem.layout.value, problem.a_k_inner, problem.b_k_inner) == (layout, a_k, b_k)
    assert (problem.m, problem.n, problem.k, problem.batch) == (M, N, K, 1)
    _translate_and_check(fusion, pm, lambda x, y: [np.einsum("mk,nk->mn", x[:, 0], y[0])])


def test_mul_sum_of_non_broadcast_tensors_is_no_pattern(pm):
    """sum(mul(x, y)) of two 3-D tensors without broadcasts is an ordinary reduction (§7.2)."""
    with mp.FusionDefinition() as fd:
        x, y = fd.define_tensor([2, M, K], H), fd.define_tensor([2, M, K], H)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, y), [2]))
    assert mp.find_matmul_patterns(fd.fusion, pm=pm) == []
    assert mp.translate_matmul_patterns(fd.fusion, pm=pm) == []


def test_mul_sum_multiple_broadcasts(pm):
    """Transposes plus broadcasts with an extra all-broadcast batch dim still match (§7.3)."""
    with mp.FusionDefinition() as fd:
        at = fd.define_tensor([K, M], H)
        b = fd.define_tensor([N, K], H)
        a4 = fd.ops.broadcast_in_dim(fd.ops.permute(at, [1, 0]), [1, M, 1, K], [1, 3])
        b4 = fd.ops.broadcast_in_dim(b, [1, 1, N, K], [2, 3])
        fd.add_output(fd.ops.sum(fd.ops.mul(a4, b4), [-1]))
    patterns = mp.find_matmul_patterns(fd.fusion, pm=pm)
    assert [(p.kind, p.a, p.b) for p in patterns] == [("mul_sum", a4, b4)]
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert (problem.m, problem.n, problem.k, problem.batch) == (M, N, K, 1)
    assert problem.layout.value == "NN"  # A [K, M] row-major has M inner; B [N, K] has K inner
    _translate_and_check(fd.fusion, pm, lambda x, y: [(x.T @ y.T)[None, :, None, :][:, :, 0]])


@pytest.mark.parametrize("b_first", [False, True], ids=["a_declared_first", "b_declared_first"])
@pytest.mark.parametrize("swap", [False, True], ids=["mul_a_b", "mul_b_a"])
@pytest.mark.parametrize("dtype", [H, T], ids=["f16", "bf16"])
def test_operand_roles_independent_of_order(pm, swap, b_first, dtype):
    """A/B roles follow the dims, not mul's argument order or input order (§7.4, §7.22)."""
    fusion, a, b = _mul_sum_fusion(True, True, dtype=dtype, swap=swap, b_first=b_first)
    out = fusion.outputs[0]
    (pattern,) = mp.find_matmul_patterns(fusion, pm=pm)
    assert (pattern.a, pattern.b, pattern.output) == (a, b, out)
    analysis = mp.analyze(fusion, pm=pm)
    assert analysis.a.name == a.name and analysis.b.name == b.name
    assert analysis.a.dim_roles == (DimRole.M, None, DimRole.K)
    assert analysis.b.dim_roles == (None, DimRole.N, DimRole.K)
    assert analysis.a.index == fusion.inputs.index(a)
    (translated,) = _translate_and_check(fusion, pm)
    # mul+sum translation rewires the sum output's definition; the pattern fields stay the same
    assert (translated.a, translated.b, translated.output) == (a, b, out)


# -- §7.5 casts after translation -------------------------------------------------------------

# Finalization rule (reference §3): the float32 MmaOp result `fms` replaces the half matmul output.
# - a consumer that casts the half result back to float32 (a "round trip") reads `fms` directly,
#   so that cast disappears;
# - a half value is only re-created (one cast fms -> half) when the old output is a fusion output
#   or has a consumer that is not a round trip.
# The frontend promotes half inputs of sin with a cast to float32, i.e. a round trip.
# Expected counts after translation, per case:
#   plain output (no epilogue)            : 1 (fms -> half for the output)
#   sin, float32 output                   : 0 (round trip removed, nothing needs the half value)
#   sin + raw half output                 : 1 (raw output needs fms -> half)
#   sin -> cast(half) output              : 1 (the user's final cast only)
#   sin -> cast(half) + raw half output   : 2 (final cast + raw output's cast)
CAST_CASES = [
    # (epilogue, raw, casts before, casts after, output dtypes after)
    ("none", False, 0, 1, [H]),
    ("sin", False, 1, 0, [S]),
    ("sin", True, 1, 1, [H, S]),
    ("sin_half", False, 2, 1, [H]),
    ("sin_half", True, 2, 2, [H, H]),
]


def _casts(fusion):
    return sum(isinstance(e, CastOp) for e in fusion.exprs())


@pytest.mark.parametrize("kind", ["matmul", "linear"])
@pytest.mark.parametrize(
    ("epilogue", "raw", "before", "after", "dtypes"),
    CAST_CASES,
    ids=[f"{c[0]}{'_raw' if c[1] else ''}" for c in CAST_CASES],
)
def test_cast_count_after_translation(pm, kind, epilogue, raw, before, after, dtypes):
    """Translation leaves exactly the casts the finalization rule asks for (§7.5)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([M, K], H)
        b = fd.define_tensor([K, N] if kind == "matmul" else [N, K], H)
        mm = getattr(fd.ops, kind)(a, b)
        if raw:
            fd.add_output(mm)
        if epilogue == "none":
            fd.add_output(mm)
        else:
            s = fd.ops.sin(mm)
            fd.add_output(fd.ops.cast(s, H) if epilogue == "sin_half" else s)
    fusion = fd.fusion
    assert _casts(fusion) == before
    (pattern,) = _translate_and_check(fusion, pm)
    assert _casts(fusion) == after
    assert [o.dtype for o in fusion.outputs] == dtypes
    # after translation A and B are the new broadcast TVs, not the fusion inputs
    assert pattern.a is not a and pattern.b is not b
    assert isinstance(pattern.a.definition, BroadcastOp)
    assert pattern.output.dtype is S
    # no half value feeds a cast back to float32 any more
    for e in fusion.exprs():
        if isinstance(e, CastOp) and e.output.dtype is S:
            assert not e.inputs[0].dtype.is_half or e.inputs[0] in fusion.inputs


# -- §7.6 MatmulOp node translation ----------------------------------------------------------

BATCH_OK = [  # (rank of A, rank of B, batch, m)
    (2, 2, 1, M),
    (3, 3, 3, M),
    (3, 2, 1, 3 * M),
    (4, 4, 6, M),
]


@pytest.mark.parametrize(
    ("ra", "rb", "batch", "m"), BATCH_OK, ids=[f"{x[0]}x{x[1]}" for x in BATCH_OK]
)
def test_matmul_ranks_accepted(pm, ra, rb, batch, m):
    """(2,2), (3,3), (3,2), (4,4) MatmulOps translate; A's extra dims fold into M for (3,2)."""
    lead = {2: [], 3: [3], 4: [2, 3]}
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead[ra], M, K], H)
        b = fd.define_tensor([*lead[rb], K, N], H)
        fd.add_output(fd.ops.sin(fd.ops.matmul(a, b)))
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert (problem.batch, problem.m, problem.n, problem.k) == (batch, m, N, K)
    assert problem.precision == "HSS"
    _translate_and_check(fd.fusion, pm, lambda x, y: [np.sin(x @ y)])


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [([M, K], [3, K, N]), ([3, M, K], [2, 3, K, N])],
    ids=["2x3", "3x4"],
)
def test_matmul_b_of_higher_rank_rejected(pm, a_shape, b_shape):
    """B of higher rank than A gives a non-consecutive N and is rejected naming B (§7.6)."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor(a_shape, H), fd.define_tensor(b_shape, H)
        fd.add_output(fd.ops.matmul(a, b))
    with pytest.raises(mp.UnsupportedFusionError, match=r"T1 .*'n', .*'k', 'n'"):
        mp.analyze(fd.fusion, pm=pm)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "vec"),
    [([K], [K, N], "T0"), ([M, K], [K], "T1")],
    ids=["vec_mat", "mat_vec"],
)
def test_matmul_1d_operand_rejected_at_translation(pm, a_shape, b_shape, vec):
    """A 1-D matmul operand is found as a pattern but refused by translation, naming it."""
    with mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.matmul(fd.define_tensor(a_shape, H), fd.define_tensor(b_shape, H)))
    assert [p.kind for p in mp.find_matmul_patterns(fd.fusion, pm=pm)] == ["matmul"]
    with pytest.raises(mp.UnsupportedFusionError, match=rf"operand {vec} is 1-D"):
        mp.translate_matmul_patterns(fd.fusion, pm=pm)


def test_broadcast_batch_matmul(pm):
    """[3, M, K] @ [1, K, N]: the batch dim is concrete only in A, so it folds into M."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([3, M, K], T), fd.define_tensor([1, K, N], T)
        fd.add_output(fd.ops.matmul(a, b))
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert (problem.batch, problem.m, problem.n, problem.k) == (1, 3 * M, N, K)
    assert problem.precision == "TST"
    _translate_and_check(fd.fusion, pm, lambda x, y: [x @ y])


# -- §7.7 linear -------------------------------------------------------------------------------


@pytest.mark.parametrize("a_col_major", [False, True], ids=["a_row", "a_col"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("lead", [[], [3]], ids=["2d", "3d"])
def test_linear_translates(pm, a_col_major, bias, lead):
    """linear ± bias ± transposed input translates; leading input dims fold into M (§7.7)."""
    with mp.FusionDefinition() as fd:
        rank = len(lead) + 2
        order = list(range(rank))[::-1]
        if a_col_major:
            order[-2:] = [0, 1]
        x = fd.define_tensor([*lead, M, K], H, stride_order=order)
        w = fd.define_tensor([N, K], H)
        bt = fd.define_tensor([N], H) if bias else None
        fd.add_output(fd.ops.gelu(fd.ops.linear(x, w, bt)))
    if lead and a_col_major:  # M = [3, M] folded, K between them in memory: no one M stride
        with pytest.raises(mp.UnsupportedFusionError, match="M dims apart in memory"):
            mp.matmul_problem(fd.fusion, pm=pm)
        _translate_and_check(fd.fusion, pm, expected=False)  # translation itself still holds
        return
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert (problem.m, problem.n, problem.k, problem.batch) == (M * (3 if lead else 1), N, K, 1)
    assert (problem.a_k_inner, problem.b_k_inner) == (not a_col_major, True)
    assert problem.epilogue_ops == (("add", "gelu") if bias else ("gelu",))
    _translate_and_check(fd.fusion, pm)


@pytest.mark.parametrize("where", ["output", "residual"])
def test_m_dims_in_another_order_than_the_input_are_refused(pm, where):
    """linear folds [B, S, K]'s B and S into one M, numbered b * S + s: an output or an
    epilogue input holding them as [S, B, N] cannot be indexed so (it was a wrong result,
    found by a decode audit); analysis refuses it and mp.compile segments the permute."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([3, 2, K], H)
        y = fd.ops.linear(x, fd.define_tensor([N, K], H))
        if where == "output":
            fd.add_output(fd.ops.permute(y, [1, 0, 2]))
        else:
            r = fd.ops.permute(fd.define_tensor([2, 3, N], H), [1, 0, 2])
            fd.add_output(fd.ops.add(y, r))
    with pytest.raises(mp.UnsupportedFusionError, match="holds its M dims in another order than"):
        mp.matmul_problem(fd.fusion, pm=pm)
    compiled = mp.compile(fd, "h200", pm=pm)
    assert type(compiled).__name__ == "SegmentedFusion"


def test_linear_1d_input_rejected(pm):
    """linear with a 1-D input is a mat-vec and translation refuses it naming the input."""
    with mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.linear(fd.define_tensor([K], H), fd.define_tensor([N, K], H)))
    with pytest.raises(mp.UnsupportedFusionError, match=r"operand T0 is 1-D"):
        mp.translate_matmul_patterns(fd.fusion, pm=pm)


# -- precision, layouts, vector widths (§7.9-7.11) -------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "out_dtype", "precision"),
    [(H, H, "HSH"), (H, S, "HSS"), (T, T, "TST"), (T, S, "TSS")],
    ids=["HSH", "HSS", "TST", "TSS"],
)
def test_precision_strings(pm, dtype, out_dtype, precision):
    """Operand letter, S accumulator, output letter: HSH/HSS/TST/TSS."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([M, K], dtype), fd.define_tensor([K, N], dtype)
        out = fd.ops.relu(fd.ops.matmul(a, b))
        fd.add_output(fd.ops.cast(out, dtype) if out_dtype is not S else out)
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert problem.precision == precision
    assert (problem.operand_dtype, problem.output_dtype) == (dtype, out_dtype)
    _translate_and_check(fd.fusion, pm, lambda x, y: [np.maximum(x @ y, 0)])


@pytest.mark.parametrize(("layout", "a_k", "b_k"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_matmul_layouts_from_stride_order(pm, layout, a_k, b_k):
    """A [M,K] and B [K,N] with K inner or not give TN/TT/NT/NN (nvFuser MmaLayout letters)."""
    fusion = _mm_fusion(ROW if a_k else COL, COL if b_k else ROW)
    problem = mp.matmul_problem(fusion, pm=pm)
    assert problem.layout.value == layout
    assert (problem.a_k_inner, problem.b_k_inner) == (a_k, b_k)
    assert problem.layout.a_k_inner == a_k and problem.layout.b_k_inner == b_k
    assert (problem.m, problem.n, problem.k) == (M, N, K)
    _translate_and_check(fusion, pm, lambda x, y: [x @ y])


def test_fused_multiply_sum_only_vector_widths(pm):
    """Pre-broadcast [M,1,K] x [1,N,K] fms with float32 output gives vec (8, 8, 4) (§7.10)."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([16, 1, 16], H), fd.define_tensor([1, 16, 16], H)
        fd.add_output(fd.ops.fused_multiply_sum(a, b, [-1]))
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    vw = problem.vector_widths
    assert (vw.a, vw.b, vw.epilogue) == (8, 8, 4)
    assert [p.kind for p in mp.find_matmul_patterns(fd.fusion, pm=pm)] == ["mma"]
    _translate_and_check(fd.fusion, pm, lambda x, y: [x[:, 0] @ y[0].T])


def test_b_declared_first_matmul(pm):
    """B declared before A: bindings name the right inputs with the right indices (§7.11)."""
    with mp.FusionDefinition() as fd:
        b = fd.define_tensor([K, N], H)
        a = fd.define_tensor([M, K], H)
        fd.add_output(fd.ops.matmul(a, b))
    analysis = mp.analyze(fd.fusion, pm=pm)
    assert (analysis.a.index, analysis.a.name) == (1, a.name)
    assert (analysis.b.index, analysis.b.name) == (0, b.name)
    assert analysis.b.dim_roles == (DimRole.K, DimRole.N)
    assert analysis.problem.layout.value == "TT"
    _translate_and_check(fd.fusion, pm, lambda y, x: [x @ y])


# -- §7.12 / 7.13 epilogues with scalars, C matrix, bias, strided batch -------------------------


def test_alpha_beta_epilogue(pm):
    """alpha * (A@B) + beta * C with scalar inputs: C is an epilogue input with roles (m, n)."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([M, K], H), fd.define_tensor([K, N], H)
        c = fd.define_tensor([M, N], H)
        alpha, beta = fd.define_scalar(), fd.define_scalar()
        acc = fd.ops.mul(alpha, fd.ops.matmul(a, b))
        fd.add_output(fd.ops.cast(fd.ops.add(acc, fd.ops.mul(beta, c)), H))
    analysis = mp.analyze(fd.fusion, pm=pm)
    assert analysis.scalar_inputs == (3, 4)
    (ci,) = analysis.epilogue_inputs
    assert (ci.name, ci.role, ci.dim_roles) == (
        c.name,
        TensorRole.EPILOGUE_INPUT,
        (DimRole.M, DimRole.N),
    )
    assert analysis.problem.precision == "HSH"
    assert analysis.problem.epilogue_ops == ("mul", "mul", "add", "cast")
    # inputs: alpha = 0.5 (index 3, odd), beta = 2.0 (index 4, even)
    _translate_and_check(fd.fusion, pm, lambda x, y, z, al, be: [al * (x @ y) + be * z])


@pytest.mark.parametrize(("layout", "a_k", "b_k"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
@pytest.mark.parametrize("bias", ["per_batch", "shared"])
def test_strided_batch_with_bias(pm, layout, a_k, b_k, bias):
    """Batched [2,M,K] @ [2,K,N] with a per-batch [2,1,N] or shared [N] bias, all layouts."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([2, M, K], H, stride_order=[2, 1, 0] if a_k else [2, 0, 1])
        b = fd.define_tensor([2, K, N], H, stride_order=[2, 0, 1] if b_k else [2, 1, 0])
        bt = fd.define_tensor([2, 1, N] if bias == "per_batch" else [N], H)
        fd.add_output(fd.ops.add(fd.ops.matmul(a, b), bt))
    analysis = mp.analyze(fd.fusion, pm=pm)
    p = analysis.problem
    assert (p.batch, p.m, p.n, p.k, p.layout.value) == (2, M, N, K, layout)
    (bi,) = analysis.epilogue_inputs
    expected = (DimRole.BATCH, None, DimRole.N) if bias == "per_batch" else (DimRole.N,)
    assert bi.dim_roles == expected
    _translate_and_check(fd.fusion, pm, lambda x, y, z: [x @ y + z])


# -- §7.20 horizontal fusion ----------------------------------------------------------------------


def test_llama_ffn_horizontal_fusion(pm):
    """silu(A@B1) * (A@B2): two patterns, one shared broadcast of A feeding both MmaOps."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([M, K], H)
        b1, b2 = fd.define_tensor([K, N], H), fd.define_tensor([K, N], H)
        fd.add_output(
            fd.ops.cast(fd.ops.mul(fd.ops.silu(fd.ops.matmul(a, b1)), fd.ops.matmul(a, b2)), H)
        )
    fusion = fd.fusion
    found = mp.find_matmul_patterns(fusion, pm=pm)
    assert sorted(p.kind for p in found) == ["matmul", "matmul"]
    problem = mp.matmul_problem(fusion, pm=pm)
    assert problem.num_patterns == 2 and (problem.m, problem.n, problem.k) == (M, N, K)
    analysis = mp.analyze(fusion, pm=pm)
    assert analysis.a.name == a.name
    patterns = _translate_and_check(fusion, pm)
    assert len(patterns) == 2
    mmas = [e for e in fusion.exprs() if isinstance(e, MmaOp)]
    assert len(mmas) == 2
    assert mmas[0].inputs[0] is mmas[1].inputs[0], "A's broadcast must be shared, not duplicated"
    assert patterns[0].a is patterns[1].a
    assert len([u for u in a.uses if isinstance(u, BroadcastOp)]) == 1
    assert patterns[0].b is not patterns[1].b


# -- §7.21 explicit fused_multiply_sum == matmul ----------------------------------------------


def _explicit_fms_fusion(a_k, b_k):
    """broadcast(A), broadcast(transpose(B)), fused_multiply_sum, cast to half."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([M, K], H, stride_order=ROW if a_k else COL)
        b = fd.define_tensor([K, N], H, stride_order=COL if b_k else ROW)
        a3 = fd.ops.broadcast_in_dim(a, [M, 1, K], [0, 2])
        b3 = fd.ops.broadcast_in_dim(fd.ops.permute(b, [1, 0]), [1, N, K], [1, 2])
        fd.add_output(fd.ops.cast(fd.ops.fused_multiply_sum(a3, b3, [-1]), H))
    return fd.fusion


@pytest.mark.parametrize(("layout", "a_k", "b_k"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_explicit_fms_equals_matmul_problem(pm, layout, a_k, b_k):
    """An explicit broadcast/permute + fused_multiply_sum fusion analyses like the matmul one."""
    fms = _explicit_fms_fusion(a_k, b_k)
    mm = _mm_fusion(ROW if a_k else COL, COL if b_k else ROW)
    x, y = mp.analyze(fms, pm=pm), mp.analyze(mm, pm=pm)
    key = lambda p: (p.m, p.n, p.k, p.batch, p.layout, p.precision)  # noqa: E731
    assert key(x.problem) == key(y.problem)
    assert x.problem.layout.value == layout
    assert x.problem == y.problem
    for bx, by in ((x.a, y.a), (x.b, y.b)):
        assert (bx.index, bx.name, bx.role, bx.shape, bx.dim_roles) == (
            by.index,
            by.name,
            by.role,
            by.shape,
            by.dim_roles,
        )
    assert [(o.shape, o.dim_roles, o.dtype) for o in x.outputs] == [
        (o.shape, o.dim_roles, o.dtype) for o in y.outputs
    ]
    _translate_and_check(fms, pm, lambda p, q: [p @ q])


@pytest.mark.parametrize(("layout", "a_k", "b_k"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_skip_intermediates_aliases_metadata_ops(pm, layout, a_k, b_k):
    """After analysis the broadcast/permute chain of each operand is aliased to its input."""
    analysis = mp.analyze(_explicit_fms_fusion(a_k, b_k), pm=pm)
    work = analysis.fusion
    a_in, b_in = work.inputs
    (mma,) = [e for e in work.exprs() if isinstance(e, MmaOp)]
    a_op, b_op = mma.inputs
    assert a_op.alias_of is a_in and b_op.alias_of is b_in
    permute = b_op.definition.inputs[0]
    assert isinstance(permute.definition, PermuteOp) and permute.alias_of is b_in
    assert a_in.alias_of is None and b_in.alias_of is None
    # the aliased operand's innermost non-broadcast allocated dim is its input's innermost dim
    for op, inp in ((a_op, a_in), (b_op, b_in)):
        inner = [d for d in op.allocation if not d.is_broadcast][-1]
        assert inner.extent == inp.allocation[-1].extent
    assert [d.extent for d in a_op.allocation if not d.is_broadcast] == [
        d.extent for d in a_in.allocation
    ]
    assert [d.extent for d in b_op.allocation if not d.is_broadcast] == [
        d.extent for d in b_in.allocation
    ]


def test_translation_of_mma_is_a_no_op(pm):
    """A fusion that already holds an MmaOp is left unchanged by translation."""
    fusion = _explicit_fms_fusion(True, True)
    before = [repr(e) for e in fusion.exprs()]
    (p,) = _translate_and_check(fusion, pm)
    assert [repr(e) for e in fusion.exprs()] == before
    assert p.kind == "mma"


def test_mul_sum_translation_drops_mul_and_casts(pm):
    """After mul+sum translation the Mul, the promoting Casts and the Reduction are gone."""
    fusion, a, b = _mul_sum_fusion(True, True)
    _translate_and_check(fusion, pm)
    kinds = [type(e) for e in fusion.exprs()]
    assert kinds == [MmaOp]
    assert not any(isinstance(e, ReductionOp | CastOp) for e in fusion.exprs())
