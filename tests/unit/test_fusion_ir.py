"""Fusion IR built through FusionDefinition: shapes, dtypes, stride orders, printing, promotion."""

from __future__ import annotations

import pytest

import mmaplug as mp
from mmaplug.ir.fusion import IterType, Scalar
from mmaplug.ir.ops import (
    BinaryOp,
    BroadcastOp,
    CastOp,
    LinearOp,
    MatmulOp,
    MmaOp,
    PermuteOp,
    ReductionOp,
    SetOp,
    SqueezeOp,
    UnaryOp,
)

H, T, S = mp.float16, mp.bfloat16, mp.float32


def _kinds(fusion):
    return [type(e) for e in fusion.exprs()]


# -- define_tensor ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [([4, 8], H), ([2, 4, 8], T), ([16], S), ([3, 1, 5], H)],
    ids=["f16_4x8", "bf16_2x4x8", "f32_16", "f16_3x1x5"],
)
def test_define_tensor_shape_and_dtype(shape, dtype):
    """define_tensor records the declared shape and dtype and makes the tensor a global input."""
    fd = mp.FusionDefinition()
    t = fd.define_tensor(shape, dtype=dtype)
    assert t.shape == tuple(shape)
    assert t.dtype is dtype
    assert fd.fusion.inputs == [t]
    assert t.memory_type.value == "global"


def test_extent_one_is_broadcast():
    """A declared extent of 1 is a broadcast dim; other extents are iteration dims."""
    fd = mp.FusionDefinition()
    t = fd.define_tensor([4, 1, 8], dtype=H)
    assert [d.iter_type for d in t.domain] == [
        IterType.ITERATION,
        IterType.BROADCAST,
        IterType.ITERATION,
    ]


def test_default_stride_order_is_row_major():
    """Without stride_order a tensor is row-major: stride_order [rank-1, ..., 0]."""
    fd = mp.FusionDefinition()
    t = fd.define_tensor([2, 3, 4], dtype=H)
    assert t.stride_order == [2, 1, 0]
    assert t.alloc_order == [0, 1, 2]


@pytest.mark.parametrize(
    ("stride_order", "alloc_order"),
    [([1, 0], [0, 1]), ([0, 1], [1, 0]), ([2, 0, 1], [0, 2, 1]), ([0, 2, 1], [1, 2, 0])],
    ids=["row_major", "col_major", "3d_last_two_swapped", "3d_dim0_inner"],
)
def test_stride_order_round_trips(stride_order, alloc_order):
    """stride_order[i] is dim i's stride rank (0 innermost); alloc_order lists dims outer→inner."""
    fd = mp.FusionDefinition()
    t = fd.define_tensor([2, 3, 4][: len(stride_order)], dtype=H, stride_order=stride_order)
    assert t.stride_order == stride_order
    assert t.alloc_order == alloc_order


# -- op output shapes and dtypes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "out_shape"),
    [
        ([4, 8], [8, 6], (4, 6)),
        ([2, 4, 8], [8, 6], (2, 4, 6)),
        ([2, 4, 8], [2, 8, 6], (2, 4, 6)),
        ([3, 1, 4, 8], [2, 8, 6], (3, 2, 4, 6)),
        ([8], [8, 6], (6,)),
        ([4, 8], [8], (4,)),
    ],
    ids=["2x2", "3x2", "3x3", "4x3_broadcast_batch", "1x2", "2x1"],
)
def test_matmul_output_shape(a_shape, b_shape, out_shape):
    """matmul follows torch.matmul shapes, keeps A's dtype and ends in a reduction K dim."""
    fd = mp.FusionDefinition()
    a = fd.define_tensor(a_shape, dtype=T)
    b = fd.define_tensor(b_shape, dtype=T)
    out = fd.ops.matmul(a, b)
    assert out.shape == out_shape
    assert out.dtype is T
    assert out.domain[-1].is_reduction and out.domain[-1].extent == 8
    assert isinstance(out.definition, MatmulOp)


@pytest.mark.parametrize(
    ("a_shape", "w_shape", "bias", "out_shape"),
    [
        ([4, 8], [6, 8], False, (4, 6)),
        ([3, 4, 8], [6, 8], True, (3, 4, 6)),
        ([4, 8], [8], False, (4,)),
    ],
    ids=["2d", "3d_bias", "vector_weight"],
)
def test_linear_output_shape(a_shape, w_shape, bias, out_shape):
    """linear gives [*, N] (or [*] for a 1-D weight) with a trailing reduction K."""
    fd = mp.FusionDefinition()
    a = fd.define_tensor(a_shape, dtype=H)
    w = fd.define_tensor(w_shape, dtype=H)
    b = fd.define_tensor([w_shape[0]], dtype=H) if bias else None
    out = fd.ops.linear(a, w, b)
    assert out.shape == out_shape
    assert out.dtype is H
    assert out.domain[-1].is_reduction
    assert isinstance(out.definition, LinearOp)
    assert len(out.definition.inputs) == (3 if bias else 2)


@pytest.mark.parametrize("axis", [-1, 0], ids=["k_last", "k_first"])
def test_fused_multiply_sum_output(axis):
    """fused_multiply_sum gives a float32 MmaOp output with the summed axis as a reduction."""
    fd = mp.FusionDefinition()
    if axis == -1:
        a, b = fd.define_tensor([4, 1, 8], dtype=H), fd.define_tensor([1, 6, 8], dtype=H)
    else:
        a, b = fd.define_tensor([8, 4, 1], dtype=H), fd.define_tensor([8, 1, 6], dtype=H)
    out = fd.ops.fused_multiply_sum(a, b, [axis])
    assert out.dtype is S
    assert isinstance(out.definition, MmaOp)
    assert [d.is_reduction for d in out.domain] == [i == axis % 3 for i in range(3)]
    assert out.shape == (4, 6)


def test_metadata_op_shapes():
    """permute, squeeze, broadcast_in_dim and set produce the expected shapes and op kinds."""
    fd = mp.FusionDefinition()
    x = fd.define_tensor([2, 1, 3], dtype=H)
    p = fd.ops.permute(x, [2, 0, 1])
    s = fd.ops.squeeze(x, [1])
    b = fd.ops.broadcast_in_dim(s, [2, 5, 3], [0, 2])
    c = fd.ops.set(x)
    assert p.shape == (3, 2, 1) and isinstance(p.definition, PermuteOp)
    assert s.shape == (2, 3) and isinstance(s.definition, SqueezeOp)
    assert b.shape == (2, 5, 3) and isinstance(b.definition, BroadcastOp)
    assert b.definition.flags == (False, True, False)
    assert b.domain[1].is_broadcast
    assert c.shape == x.shape and c.dtype is H and isinstance(c.definition, SetOp)
    assert all(t.dtype is H for t in (p, s, b))


# -- promotion and casts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dx", "dy", "result", "casts"),
    [(H, H, S, 2), (T, T, S, 2), (H, S, S, 1), (S, S, S, 0), (T, S, S, 1)],
    ids=["f16+f16", "bf16+bf16", "f16+f32", "f32+f32", "bf16+f32"],
)
def test_binary_promotion_inserts_explicit_casts(dx, dy, result, casts):
    """Half tensors entering add get an explicit cast to float32; the sum is float32."""
    fd = mp.FusionDefinition()
    x, y = fd.define_tensor([4], dtype=dx), fd.define_tensor([4], dtype=dy)
    out = fd.ops.add(x, y)
    fd.add_output(out)
    assert out.dtype is result
    cast_ops = [e for e in fd.fusion.exprs() if isinstance(e, CastOp)]
    assert len(cast_ops) == casts
    assert all(c.output.dtype is S for c in cast_ops)
    assert all(v.dtype is S for v in out.definition.inputs)


@pytest.mark.parametrize("op", ["neg", "relu", "gelu", "silu", "sigmoid", "sin"])
def test_unary_on_half_promotes(op):
    """A unary op on a half tensor reads a float32 cast of it and returns float32."""
    fd = mp.FusionDefinition()
    x = fd.define_tensor([4], dtype=H)
    out = getattr(fd.ops, op)(x)
    fd.add_output(out)
    assert out.dtype is S
    assert _kinds(fd.fusion) == [CastOp, UnaryOp]
    assert out.definition.op == op


def test_python_scalar_becomes_constant_scalar():
    """mul(2.0, t) wraps the Python number as a float32 constant Scalar on the left side."""
    fd = mp.FusionDefinition()
    x = fd.define_tensor([4], dtype=S)
    out = fd.ops.mul(2.0, x)
    expr = out.definition
    assert isinstance(expr, BinaryOp) and expr.op == "mul"
    lhs = expr.inputs[0]
    assert isinstance(lhs, Scalar) and lhs.is_constant and lhs.value == 2.0 and lhs.dtype is S
    assert lhs not in fd.fusion.inputs


def test_define_scalar_input_vs_constant():
    """define_scalar() is a fusion input; define_scalar(value) is a constant and no input."""
    fd = mp.FusionDefinition()
    alpha = fd.define_scalar()
    two = fd.define_scalar(2.0)
    assert fd.fusion.inputs == [alpha]
    assert not alpha.is_constant and two.is_constant


def test_sum_of_half_is_float32():
    """sum of a half tensor casts to float32 first and keeps the summed dim as a reduction."""
    fd = mp.FusionDefinition()
    x = fd.define_tensor([4, 8], dtype=H)
    out = fd.ops.sum(x, [1])
    fd.add_output(out)
    assert out.dtype is S and out.shape == (4,)
    assert _kinds(fd.fusion) == [CastOp, ReductionOp]
    assert [d.is_reduction for d in out.domain] == [False, True]


def test_binary_aligns_lower_rank_operand():
    """add of a [N] bias to an [M, N] tensor broadcasts the bias to [1, N] explicitly."""
    fd = mp.FusionDefinition()
    x = fd.define_tensor([4, 6], dtype=S)
    bias = fd.define_tensor([6], dtype=S)
    out = fd.ops.add(x, bias)
    assert out.shape == (4, 6)
    rhs = out.definition.inputs[1]
    assert isinstance(rhs.definition, BroadcastOp) and rhs.shape == (1, 6)


# -- printing -------------------------------------------------------------------------------------


def test_repr_is_readable():
    """repr(fusion) lists inputs with dtype/shape/stride order, each op, and the outputs."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 8], dtype=H)
        b = fd.define_tensor([8, 6], dtype=H, stride_order=[0, 1])
        fd.add_output(fd.ops.matmul(a, b))
    text = repr(fd.fusion)
    assert text.splitlines()[0] == "Fusion:"
    assert "input  T0: float16[4, 8]" in text
    assert "input  T1: float16[8, 6] stride_order=[0, 1]" in text
    assert "T2 = matmul(T0, T1)" in text
    assert "T2: float16[4, 6, r8]" in text
    assert text.splitlines()[-1] == "  outputs: T2"
    assert repr(fd) == text


def test_repr_shows_broadcast_scalar_and_alias(pm):
    """Printing marks broadcast dims with b, scalar inputs, and aliases after analysis."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 8], dtype=H)
        b = fd.define_tensor([8, 6], dtype=H)
        alpha = fd.define_scalar()
        fd.add_output(fd.ops.mul(fd.ops.matmul(a, b), alpha))
    text = repr(fd.fusion)
    assert "input  S2: float32 scalar" in text
    assert "mul(T4, S2)" in text
    work = mp.analyze(fd.fusion, pm=pm).fusion
    translated = repr(work)
    assert "float16[4, b1, 8]" in translated
    assert "(alias of T0)" in translated and "(alias of T1)" in translated
    assert "mma(" in translated and "matmul(" not in translated


def test_exprs_are_in_producer_order():
    """Fusion.exprs lists every op reachable from the outputs, producers before consumers."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 8], dtype=H)
        b = fd.define_tensor([8, 6], dtype=H)
        fd.define_tensor([3], dtype=H)  # unused: no op depends on it
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))
    exprs = fd.fusion.exprs()
    assert [type(e) for e in exprs] == [MatmulOp, CastOp, UnaryOp]
    produced = set()
    for e in exprs:
        for v in e.inputs:
            assert v.definition is None or id(v) in produced
        produced.update(id(o) for o in e.outputs)
