"""The frontend ops nvFuser's matmul users reach for: slice, reshape, expand, broadcast,
stride_order, the extra unary and binary ops; their reference semantics in mp.evaluate and what
analysis (mp.compile) does with them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.matmul_analysis import analyze

RNG = np.random.default_rng(11)


def _run(build, *shapes, dtype=np.float32):  # noqa: ANN001, ANN202
    with mp.FusionDefinition() as fd:
        ins = [fd.define_tensor(list(s)) for s in shapes]
        fd.add_output(build(fd, *ins))
    arrays = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    return fd, arrays, mp.evaluate(fd, arrays)[0]


@pytest.mark.parametrize(
    ("start", "end", "strides", "expect"),
    [
        ([1, 0, 3], [2, 6, 8], None, np.s_[1:2, 0:6, 3:8]),
        ([0, 2, 0], [5, 7, 8], [2, 1, 3], np.s_[0:5:2, 2:7, 0:8:3]),
        ([0, 0, 6], [9, 99, 8], None, np.s_[0:9, 0:99, 6:8]),  # an end past the extent stops
    ],
)
def test_slice_takes_nvfusers_start_end_and_strides(start, end, strides, expect) -> None:  # noqa: ANN001
    _, (x,), got = _run(lambda fd, t: fd.ops.slice(t, start, end, strides), (5, 7, 8))
    np.testing.assert_array_equal(got, x[expect])


@pytest.mark.parametrize(
    ("start", "end", "strides", "match"),
    [
        ([-1, 0], [5, 5], None, r"start -1, end 5.*0 <= start <= end"),
        ([3, 4], [1, 2], None, r"start 3, end 1"),
        ([0, 0], [5, 5], [1, 0], r"stride 0.*stride >= 1"),
        ([0, 0, 0], [4, 4, 4], None, r"one entry per dim of T0 \(rank 2\)"),
        ([0, 0], [4, 4, 4], None, r"end_indices \[4, 4, 4\]"),
    ],
)
def test_slice_refuses_what_nvfuser_refuses(start, end, strides, match) -> None:  # noqa: ANN001
    with pytest.raises(mp.FusionError, match=match), mp.FusionDefinition() as fd:
        fd.ops.slice(fd.define_tensor([10, 10]), start, end, strides)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((1, 19, 1, 12, 7, 1, 99), (1, 19, 1, 3, 2772)),  # the opinfo reshape cases
        ((3, 17, 80, 1), (51, 1, 2, 4, 10)),
        ((2, 3, 4, 5), (1, 6, 1, 2, 2, 5)),
        ((22, 22, 2), (22, 11, 1, 1, 4)),
        ((1, 333), (1, 1, 1, 111, 1, 3)),
        ((3, 14), (7, -1)),
    ],
)
def test_reshape_is_row_major_with_one_inferred_extent(before, after) -> None:  # noqa: ANN001
    _, (x,), got = _run(lambda fd, t: fd.ops.reshape(t, list(after)), before)
    np.testing.assert_array_equal(got, x.reshape(after))


@pytest.mark.parametrize(
    ("new", "match"),
    [((3, -1, -1), "at most one -1"), ((3, 2, 8), "48 elements but T0.*has 42"),
     ((5, -1), "at most one -1, which must divide")],
)  # fmt: skip
def test_reshape_refuses_a_wrong_element_count(new, match) -> None:  # noqa: ANN001
    with pytest.raises(mp.FusionError, match=match), mp.FusionDefinition() as fd:
        fd.ops.reshape(fd.define_tensor([3, 14]), list(new))


def test_reshape_and_slice_need_static_extents() -> None:
    with (
        pytest.raises(mp.FusionError, match="reshape of T0.*symbolic"),
        mp.FusionDefinition() as fd,
    ):
        fd.ops.reshape(fd.define_tensor([-1, 4]), [4, -1])
    with pytest.raises(mp.FusionError, match="slice of T0: dim 0 has a symbolic"):
        with mp.FusionDefinition() as fd:
            fd.ops.slice(fd.define_tensor([-1, 4]), [0, 0], [2, 4])


def test_expand_and_broadcast_place_and_grow_size_1_dims() -> None:
    def build(fd, t):  # noqa: ANN001, ANN202
        return fd.ops.expand(fd.ops.broadcast(t, [True, False, True]), [6, -1, 5])

    _, (x,), got = _run(build, (4,))
    np.testing.assert_array_equal(got, np.broadcast_to(x[None, :, None], (6, 4, 5)))
    with pytest.raises(mp.FusionError, match="dim 0 has extent 4 and cannot become 6"):
        with mp.FusionDefinition() as fd:
            fd.ops.expand(fd.define_tensor([4]), [6])
    with pytest.raises(mp.FusionError, match="one False per dim of T0"):
        with mp.FusionDefinition() as fd:
            fd.ops.broadcast(fd.define_tensor([4]), [True, True])


def test_stride_order_keeps_the_values_and_lays_the_output_out() -> None:
    fd, (x,), got = _run(lambda fd, t: fd.ops.stride_order(t, [0, 2, 1]), (2, 3, 4))
    np.testing.assert_array_equal(got, x)
    assert fd.fusion.outputs[0].stride_order == [0, 2, 1]
    assert np.argsort(got.strides).tolist() == [0, 2, 1]  # dim 0 innermost, then 2, then 1
    with pytest.raises(mp.FusionError, match=r"\[0, 0, 1\] must be a permutation of 0..2"):
        with mp.FusionDefinition() as fd:
            fd.ops.stride_order(fd.define_tensor([2, 3, 4]), [0, 0, 1])


UNARY = {
    "cos": np.cos, "exp": np.exp, "tanh": np.tanh, "abs": np.abs, "erf": np.vectorize(math.erf),
    "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
}  # fmt: skip
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}  # evaluated on |x| + 1


def _positive(x: np.ndarray) -> np.ndarray:
    """|x| + 1 as the fusion computes it: rounded to float32 (log near 1 would otherwise see
    that rounding as a relative error of up to ~1e-4)."""
    return (np.abs(x) + np.float32(1.0)).astype(np.float32)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_ops_match_numpy(op: str) -> None:
    def build(fd, t):  # noqa: ANN001, ANN202
        if op in POSITIVE:
            t = fd.ops.add(fd.ops.abs(t), 1.0)
        return getattr(fd.ops, op)(t)

    _, (x,), got = _run(build, (6, 5))
    arg = _positive(x) if op in POSITIVE else x
    np.testing.assert_allclose(got, UNARY[op](arg.astype(np.float64)), rtol=2e-6)  # float32 steps


@pytest.mark.parametrize(
    ("op", "ref"),
    [("div", np.divide), ("truediv", np.divide), ("maximum", np.maximum),
     ("minimum", np.minimum)],
)  # fmt: skip
def test_binary_ops_match_numpy_and_take_scalars(op: str, ref) -> None:  # noqa: ANN001
    _, (x, y), got = _run(lambda fd, a, b: getattr(fd.ops, op)(a, b), (6, 5), (6, 5))
    np.testing.assert_allclose(got, ref(x.astype(np.float64), y), rtol=2e-7)
    _, (x,), got = _run(lambda fd, a: getattr(fd.ops, op)(2.0, a), (6, 5))
    np.testing.assert_allclose(got, ref(2.0, x.astype(np.float64)), rtol=2e-7)


def _linear_fusion(tail):  # noqa: ANN001, ANN202
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(tail(fd, fd.ops.linear(x, w)))
    return fd


@pytest.mark.parametrize(
    ("tail", "match"),
    [
        (lambda fd, y: fd.ops.slice(y, [0, 0], [32, 48]), r"T\d+ = slice\(T2\): a matmul kernel"),
        (lambda fd, y: fd.ops.reshape(y, [32, 96]), r"reshape\(T2\).*a segment of its own"),
        (lambda fd, y: fd.ops.stride_order(y, [0, 1]), r"asks stride_order \[0, 1\]"),
    ],
)
def test_analysis_refuses_ops_a_kernel_cannot_take_naming_them(tail, match) -> None:  # noqa: ANN001
    fd = _linear_fusion(tail)
    with pytest.raises(mp.UnsupportedFusionError, match=match):
        analyze(fd.fusion)
    x, w = RNG.standard_normal((64, 32)), RNG.standard_normal((48, 32))
    assert mp.evaluate(fd, [x.astype(np.float16), w.astype(np.float16)])[0].size > 0


def test_new_element_wise_ops_and_expand_lower_into_the_epilogue() -> None:
    def tail(fd, y):  # noqa: ANN001, ANN202
        gate = fd.ops.mul(y, fd.ops.reciprocal(fd.ops.add(1.0, fd.ops.exp(fd.ops.neg(y)))))
        bound = fd.ops.minimum(fd.ops.maximum(gate, -4.0), fd.ops.tanh(fd.ops.div(y, 3.0)))
        return fd.ops.cast(fd.ops.add(bound, fd.ops.expand(fd.ops.abs(y), [-1, -1])), mp.float16)

    analysis = analyze(_linear_fusion(tail).fusion)
    assert {"exp", "reciprocal", "maximum", "minimum", "tanh", "div", "abs"} <= set(
        analysis.problem.epilogue_ops
    )
