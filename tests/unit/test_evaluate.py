"""mp.evaluate against plain numpy: every op, half-type rounding, scalar inputs, input errors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import mmaplug as mp

H, T, S = mp.float16, mp.bfloat16, mp.float32
NP = {H: np.float16, T: ml_dtypes.bfloat16, S: np.float32}
RNG_SEED = 1234


def _rand(shape, dtype, seed=0):
    """Random values exactly representable in *dtype* (so input rounding is a no-op)."""
    rng = np.random.default_rng(RNG_SEED + seed)
    return rng.standard_normal(shape).astype(NP[dtype])


def _one_output(build, inputs):
    with mp.FusionDefinition() as fd:
        fd.add_output(build(fd))
    return mp.evaluate(fd.fusion, inputs)


# -- element-wise ops --------------------------------------------------------------------------

_erf = np.vectorize(math.erf)
UNARY_REF = {
    "neg": lambda x: -x,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "gelu": lambda x: x * 0.5 * (1.0 + _erf(x / np.sqrt(2.0))),
    "silu": lambda x: x * (1.0 / (1.0 + np.exp(-x))),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sin": np.sin,
}


@pytest.mark.parametrize("op", sorted(UNARY_REF))
@pytest.mark.parametrize("dtype", [S, H, T], ids=["f32", "f16", "bf16"])
def test_unary_ops_match_numpy(op, dtype):
    """Each unary op equals numpy in float64 rounded once to float32 (half inputs promote)."""
    x = _rand((3, 5), dtype)
    (out,) = _one_output(lambda fd: getattr(fd.ops, op)(fd.define_tensor([3, 5], dtype)), [x])
    assert out.dtype == np.float32
    expected = UNARY_REF[op](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=2**-23, atol=0)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_binary_ops_with_broadcast_match_numpy(op):
    """add/sub/mul broadcast a [N] operand against [M, N] exactly as numpy does."""
    x, y = _rand((4, 6), S, 1), _rand((6,), S, 2)

    def build(fd):
        return getattr(fd.ops, op)(fd.define_tensor([4, 6], S), fd.define_tensor([6], S))

    (out,) = _one_output(build, [x, y])
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
    expected = ref(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


def test_python_scalars_on_either_side():
    """A Python number on the left or right of sub/mul is used as a constant."""
    x = _rand((4,), S)
    with mp.FusionDefinition() as fd:
        t = fd.define_tensor([4], S)
        fd.add_output(fd.ops.sub(1.5, t))
        fd.add_output(fd.ops.mul(t, -2))
    left, right = mp.evaluate(fd.fusion, [x])
    np.testing.assert_array_equal(left, (1.5 - x.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(right, x * np.float32(-2))


@pytest.mark.parametrize(
    ("alpha", "beta"),
    [(2.0, 0.5), (-1, 3), (np.float32(0.25), 0.0)],
    ids=["floats", "ints", "numpy_float32"],
)
def test_scalar_inputs_alpha_beta(alpha, beta):
    """alpha * (A @ B) + beta * C with scalar fusion inputs equals numpy."""
    a, b, c = _rand((4, 8), H, 1), _rand((8, 6), H, 2), _rand((4, 6), S, 3)
    with mp.FusionDefinition() as fd:
        ta, tb = fd.define_tensor([4, 8], H), fd.define_tensor([8, 6], H)
        tc = fd.define_tensor([4, 6], S)
        sa, sb = fd.define_scalar(), fd.define_scalar()
        acc = fd.ops.matmul(ta, tb)
        fd.add_output(fd.ops.add(fd.ops.mul(sa, acc), fd.ops.mul(tc, sb)))
    (out,) = mp.evaluate(fd.fusion, [a, b, c, alpha, beta])
    acc = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16).astype(np.float64)
    f32 = lambda v: np.asarray(v).astype(np.float32).astype(np.float64)  # noqa: E731
    expected = f32(f32(float(alpha) * acc) + f32(c.astype(np.float64) * float(beta)))
    np.testing.assert_array_equal(out, expected.astype(np.float32))


# -- matmul family -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ([4, 8], [8, 6]),
        ([2, 4, 8], [2, 8, 6]),
        ([3, 4, 8], [1, 8, 6]),
        ([3, 4, 8], [8, 6]),
        ([8], [8, 6]),
        ([4, 8], [8]),
    ],
    ids=["2x2", "batched", "broadcast_batch", "3x2", "vec_mat", "mat_vec"],
)
@pytest.mark.parametrize("dtype", [H, T], ids=["f16", "bf16"])
def test_matmul_matches_numpy(a_shape, b_shape, dtype):
    """matmul equals np.matmul in float64, rounded once to the operand dtype."""
    a, b = _rand(a_shape, dtype, 1), _rand(b_shape, dtype, 2)
    (out,) = _one_output(
        lambda fd: fd.ops.matmul(
            fd.define_tensor(a_shape, dtype), fd.define_tensor(b_shape, dtype)
        ),
        [a, b],
    )
    assert out.dtype == NP[dtype]
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(NP[dtype])
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_linear_matches_numpy(with_bias):
    """linear equals x @ w.T (+ bias) in float64, rounded once to float16."""
    x, w, bias = _rand((2, 4, 8), H, 1), _rand((6, 8), H, 2), _rand((6,), H, 3)

    def build(fd):
        tx, tw = fd.define_tensor([2, 4, 8], H), fd.define_tensor([6, 8], H)
        tb = fd.define_tensor([6], H) if with_bias else None
        return fd.ops.linear(tx, tw, tb)

    (out,) = _one_output(build, [x, w, bias] if with_bias else [x, w])
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    if with_bias:
        expected = expected + bias.astype(np.float64)
    np.testing.assert_array_equal(out, expected.astype(np.float16))


def test_fused_multiply_sum_matches_einsum():
    """fused_multiply_sum of [M,1,K] and [1,N,K] over K is a float32 matmul."""
    a, b = _rand((4, 1, 8), T, 1), _rand((1, 6, 8), T, 2)
    (out,) = _one_output(
        lambda fd: fd.ops.fused_multiply_sum(
            fd.define_tensor([4, 1, 8], T), fd.define_tensor([1, 6, 8], T), [-1]
        ),
        [a, b],
    )
    assert out.dtype == np.float32 and out.shape == (4, 6)
    expected = np.einsum("mk,nk->mn", a[:, 0].astype(np.float64), b[0].astype(np.float64))
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_fused_multiply_sum_non_innermost_axis():
    """fused_multiply_sum may reduce a non-innermost axis ([K, M, 1] x [K, 1, N] over 0)."""
    a, b = _rand((8, 4, 1), H, 1), _rand((8, 1, 6), H, 2)
    (out,) = _one_output(
        lambda fd: fd.ops.fused_multiply_sum(
            fd.define_tensor([8, 4, 1], H), fd.define_tensor([8, 1, 6], H), [0]
        ),
        [a, b],
    )
    expected = a[:, :, 0].astype(np.float64).T @ b[:, 0, :].astype(np.float64)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_mul_sum_matches_numpy():
    """sum(mul(x, y), K) of broadcast half operands equals the float32 matmul."""
    a, b = _rand((4, 1, 8), H, 1), _rand((1, 6, 8), H, 2)
    (out,) = _one_output(
        lambda fd: fd.ops.sum(
            fd.ops.mul(fd.define_tensor([4, 1, 8], H), fd.define_tensor([1, 6, 8], H)), [2]
        ),
        [a, b],
    )
    expected = (a.astype(np.float64) * b.astype(np.float64)).sum(axis=2)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_metadata_ops_match_numpy():
    """permute, squeeze, broadcast_in_dim, set and cast match numpy transposes and reshapes."""
    x = _rand((2, 1, 3), S)
    with mp.FusionDefinition() as fd:
        t = fd.define_tensor([2, 1, 3], S)
        fd.add_output(fd.ops.permute(t, [2, 0, 1]))
        sq = fd.ops.squeeze(t, [1])
        fd.add_output(fd.ops.broadcast_in_dim(sq, [2, 4, 3], [0, 2]))
        fd.add_output(fd.ops.set(t))
        fd.add_output(fd.ops.cast(t, H))
    perm, bcast, copy, half = mp.evaluate(fd.fusion, [x])
    np.testing.assert_array_equal(perm, np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(bcast, np.broadcast_to(x[:, 0][:, None, :], (2, 4, 3)))
    np.testing.assert_array_equal(copy, x)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, x.astype(np.float16))


def test_sum_over_two_dims():
    """sum over two dims of a float32 tensor equals numpy's sum."""
    x = _rand((3, 4, 5), S)
    (out,) = _one_output(lambda fd: fd.ops.sum(fd.define_tensor([3, 4, 5], S), [0, 2]), [x])
    np.testing.assert_allclose(
        out, x.astype(np.float64).sum(axis=(0, 2)).astype(np.float32), rtol=2**-23
    )


# -- rounding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        (H, 1 + 2**-11, 1.0),  # tie between 1 and 1+2^-10: even is 1
        (H, 1 + 3 * 2**-11, 1 + 2**-9),  # tie between 1+2^-10 and 1+2^-9: even is 1+2^-9
        (H, 2049.0, 2048.0),  # integers above 2048 lose the last bit
        (T, 1 + 2**-8, 1.0),  # bf16 has 7 fraction bits
        (T, 1 + 3 * 2**-8, 1 + 2**-6),
        (T, 257.0, 256.0),
    ],
    ids=["f16_tie_down", "f16_tie_up", "f16_2049", "bf16_tie_down", "bf16_tie_up", "bf16_257"],
)
def test_cast_rounds_to_nearest_even(dtype, value, expected):
    """cast float32 → half rounds to nearest, ties to even."""
    x = np.array([value], dtype=np.float32)
    (out,) = _one_output(lambda fd: fd.ops.cast(fd.define_tensor([1], S), dtype), [x])
    assert out.dtype == NP[dtype]
    assert float(out[0]) == expected


@pytest.mark.parametrize("dtype", [H, T], ids=["f16", "bf16"])
def test_inputs_are_rounded_to_declared_dtype(dtype):
    """A float64 array given for a half input is rounded to that type before use."""
    x = np.array([1 + 2**-12, 1 / 3, 1e-3], dtype=np.float64)
    (out,) = _one_output(lambda fd: fd.ops.cast(fd.define_tensor([3], dtype), S), [x])
    np.testing.assert_array_equal(out, x.astype(NP[dtype]).astype(np.float32))


def test_half_arithmetic_is_not_rounded_to_half():
    """1 + 2^-11 computed from two f16 inputs stays float32 (promotion), unlike a cast to f16."""
    one, tiny = np.array([1.0], np.float16), np.array([2**-11], np.float16)
    with mp.FusionDefinition() as fd:
        s = fd.ops.add(fd.define_tensor([1], H), fd.define_tensor([1], H))
        fd.add_output(s)
        fd.add_output(fd.ops.cast(s, H))
    wide, narrow = mp.evaluate(fd.fusion, [one, tiny])
    assert wide.dtype == np.float32 and float(wide[0]) == 1 + 2**-11
    assert narrow.dtype == np.float16 and float(narrow[0]) == 1.0


def test_matmul_half_output_rounds_once():
    """A float16 matmul result is the exact float64 product rounded once (not per partial sum)."""
    # 2048 + 1 + 1: rounding after every partial sum would give 2048, rounding once gives 2050.
    a = np.array([[2048.0, 1.0, 1.0]], np.float16)
    b = np.ones((3, 1), np.float16)
    (out,) = _one_output(
        lambda fd: fd.ops.matmul(fd.define_tensor([1, 3], H), fd.define_tensor([3, 1], H)), [a, b]
    )
    assert float(out[0, 0]) == 2050.0


# -- errors -------------------------------------------------------------------------------------


def _alpha_fusion():
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([4, 8], H), fd.define_tensor([8, 6], H)
        alpha = fd.define_scalar()
        fd.add_output(fd.ops.mul(fd.ops.matmul(a, b), alpha))
    return fd.fusion


A_OK, B_OK = np.ones((4, 8), np.float16), np.ones((8, 6), np.float16)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ([A_OK, B_OK], r"takes 3 inputs \(T0, T1, S2\); got 2"),
        ([A_OK, B_OK, 1.0, 2.0], r"takes 3 inputs .*got 4"),
        ([A_OK, B_OK.T, 1.0], r"input T1 was declared with shape \[8, 6\]; got .*\[6, 8\]"),
        ([A_OK[:, :4], B_OK, 1.0], r"input T0 .*\[4, 8\].*\[4, 4\]"),
        ([A_OK, B_OK, np.ones(2)], r"scalar input S2 needs a number"),
        ([A_OK, B_OK, True], r"scalar input S2 needs a number"),
        ([A_OK, B_OK, "2"], r"scalar input S2 needs a number"),
        ([np.full((4, 8), "a"), B_OK, 1.0], r"input T0 has non-numeric dtype"),
        ([A_OK.astype(object), B_OK, 1.0], r"input T0 has non-numeric dtype object"),
        ([[[1.0], [1.0, 2.0]], B_OK, 1.0], r"input T0 is not an array"),
    ],
    ids=[
        "too_few",
        "too_many",
        "transposed_b",
        "short_k",
        "array_for_scalar",
        "bool_for_scalar",
        "str_for_scalar",
        "string_array",
        "object_array",
        "ragged_list",
    ],
)
def test_evaluate_rejects_bad_inputs(inputs, match):
    """Wrong input counts, shapes and kinds raise FusionError naming the input."""
    with pytest.raises(mp.FusionError, match=match):
        mp.evaluate(_alpha_fusion(), inputs)


def test_evaluate_accepts_lists_and_ints():
    """Nested lists are read as arrays and an int is a valid scalar input."""
    a, b = np.ones((4, 8)).tolist(), np.ones((8, 6)).tolist()
    (out,) = mp.evaluate(_alpha_fusion(), [a, b, 3])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full((4, 6), 24.0, np.float32))
