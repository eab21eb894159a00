"""A catalogue of bad inputs and unsupported fusions: each raises a named MatmulError subclass.

Every case asserts the error class, that the message names the tensor (or argument) and the
problem, and that no bare Python exception (TypeError, IndexError, ...) escapes instead.
"""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp

H, T, S = mp.float16, mp.bfloat16, mp.float32
M, N, K = 4, 6, 8


def _analyze(build):
    """Return a callable that builds a fusion with *build(fd)* and analyses it."""

    def run(pm):
        with mp.FusionDefinition() as fd:
            build(fd)
        mp.analyze(fd.fusion, pm=pm)

    run.build = build  # for test_compile_runs_what_analysis_refuses_as_segments
    return run


def _define(build):
    """Return a callable that only runs *build(fd)* inside a FusionDefinition block."""

    def run(pm):
        with mp.FusionDefinition() as fd:
            build(fd)

    return run


def _a(fd, dtype=H, shape=(M, K)):
    return fd.define_tensor(list(shape), dtype)


def _b(fd, dtype=H, shape=(K, N)):
    return fd.define_tensor(list(shape), dtype)


def _out(fd, t):
    fd.add_output(t)


# -- builders of individual cases ---------------------------------------------------------------


def _output_holds_k(fd):
    a, b = fd.define_tensor([M, 1, K], H), fd.define_tensor([1, N, K], H)
    prod = fd.ops.mul(a, b)
    fd.add_output(fd.ops.sum(prod, [2]))
    fd.add_output(prod)


def _unrelated_input(fd):
    mm = fd.ops.matmul(_a(fd), _b(fd))
    extra = fd.define_tensor([M, N, 5], S)
    fd.add_output(fd.ops.add(mm, fd.ops.sum(extra, [2])))


def _output_without_n(fd):
    fd.add_output(fd.ops.sum(fd.ops.matmul(_a(fd), _b(fd)), [1]))


def _float32_prologue(fd):
    a, b = _a(fd, S), _b(fd)  # a prologue runs on a loaded 16-bit operand only
    fd.add_output(fd.ops.matmul(fd.ops.cast(fd.ops.sin(a), H), b))


def _two_input_prologue(fd):
    a, b, row = _a(fd), _b(fd), fd.define_tensor([M, 1], H)
    fd.add_output(fd.ops.matmul(fd.ops.cast(fd.ops.mul(a, row), H), b))


def _mul_sum_two_k(fd):
    a, b = fd.define_tensor([M, 1, K, 3], H), fd.define_tensor([1, N, K, 3], H)
    fd.add_output(fd.ops.sum(fd.ops.mul(a, b), [2, 3]))


def _evaluate(inputs):
    def run(pm):
        with mp.FusionDefinition() as fd:
            fd.add_output(fd.ops.matmul(_a(fd), _b(fd)))
        mp.evaluate(fd.fusion, inputs)

    return run


ONES_A, ONES_B = np.ones((M, K), np.float16), np.ones((K, N), np.float16)

CASES = [
    # (id, action, error class, message regex)
    (
        "mismatched_k",
        _define(lambda fd: fd.ops.matmul(_a(fd), _b(fd, shape=(K + 1, N)))),
        mp.FusionError,
        r"K of T0 is 8 but K of T1 is 9",
    ),
    (
        "linear_mismatched_k",
        _define(lambda fd: fd.ops.linear(_a(fd), _b(fd, shape=(N, K + 1)))),
        mp.FusionError,
        r"K of input T0 is 8 but K of weight T1 is 9",
    ),
    (
        "mat_vec_1d_operand",
        _analyze(lambda fd: _out(fd, fd.ops.matmul(_a(fd), _b(fd, shape=(K,))))),
        mp.UnsupportedFusionError,
        r"operand T1 is 1-D",
    ),
    (
        "linear_1d_input",
        _analyze(lambda fd: _out(fd, fd.ops.linear(_a(fd, shape=(K,)), _b(fd, shape=(N, K))))),
        mp.UnsupportedFusionError,
        r"operand T0 is 1-D",
    ),
    (
        "float32_operands",
        _analyze(lambda fd: _out(fd, fd.ops.matmul(_a(fd, S), _b(fd, S)))),
        mp.UnsupportedFusionError,
        r"operand T0 is float32.*float16, bfloat16",
    ),
    (
        "matmul_differing_dtypes",
        _define(lambda fd: fd.ops.matmul(_a(fd, H), _b(fd, T))),
        mp.FusionError,
        r"T0: float16, T1: bfloat16",
    ),
    (
        "mul_sum_differing_dtypes",
        _analyze(
            lambda fd: _out(
                fd,
                fd.ops.sum(
                    fd.ops.mul(fd.define_tensor([M, 1, K], H), fd.define_tensor([1, N, K], T)), [2]
                ),
            )
        ),
        mp.UnsupportedFusionError,
        r"T0 \(float16\) and T1 \(bfloat16\) differ",
    ),
    (
        "non_consecutive_n_b_higher_rank",
        _analyze(lambda fd: _out(fd, fd.ops.matmul(_a(fd), _b(fd, shape=(3, K, N))))),
        mp.UnsupportedFusionError,
        r"T1 has dims ordered \['n', 'k', 'n'\].*non-consecutive",
    ),
    (
        "output_still_holds_k",
        _analyze(_output_holds_k),
        mp.UnsupportedFusionError,
        r"output T\d+ \(shape \[4, 6, 8\]\) still holds the K dim",
    ),
    (
        "output_without_n",
        _analyze(_output_without_n),
        mp.UnsupportedFusionError,
        r"output T\d+ \(shape \[4\]\) does not hold both M and N",
    ),
    (
        "input_with_unrelated_dim",
        _analyze(_unrelated_input),
        mp.UnsupportedFusionError,
        r"input T\d+ has dim 2 \(shape \[4, 6, 5\]\)",
    ),
    (
        "unused_input",
        _analyze(lambda fd: (fd.define_tensor([3], H), _out(fd, fd.ops.matmul(_a(fd), _b(fd))))),
        mp.UnsupportedFusionError,
        r"input T0 has dim 0 \(shape \[3\]\)",
    ),
    (
        "no_matmul_at_all",
        _analyze(lambda fd: _out(fd, fd.ops.relu(_a(fd)))),
        mp.UnsupportedFusionError,
        r"no matmul pattern found",
    ),
    (
        "sum_of_non_matmul",
        _analyze(lambda fd: _out(fd, fd.ops.sum(fd.ops.mul(_a(fd), _a(fd)), [1]))),
        mp.UnsupportedFusionError,
        r"no matmul pattern found",
    ),
    (
        "output_m_n_swapped_column_major",
        _analyze(lambda fd: _out(fd, fd.ops.permute(fd.ops.matmul(_a(fd), _b(fd)), [1, 0]))),
        mp.UnsupportedFusionError,
        r"output T\d+ has dims ordered \['n', 'm'\].*N innermost",
    ),
    (
        "fms_output_column_major",
        _analyze(
            lambda fd: _out(
                fd,
                fd.ops.fused_multiply_sum(
                    fd.define_tensor([1, M, K], H), fd.define_tensor([N, 1, K], H)
                ),
            )
        ),
        mp.UnsupportedFusionError,
        r"output T2 has dims ordered \['n', 'm'\]",
    ),
    (
        "prologue_of_a_float32_input",
        _analyze(_float32_prologue),
        mp.UnsupportedFusionError,
        r"from input T0, which is float32; .* also under a prologue",
    ),
    (
        "prologue_with_a_second_tensor_input",
        _analyze(_two_input_prologue),
        mp.UnsupportedFusionError,
        r"from inputs T0 and T2; an operand prologue reads one input",
    ),
    (
        "mul_sum_two_reduction_dims",
        _analyze(_mul_sum_two_k),
        mp.UnsupportedFusionError,
        r"T\d+.*(one reduction|one K|reduction \(K\))",
    ),
    (
        "stride_order_repeated",
        _define(lambda fd: fd.define_tensor([M, K], H, stride_order=[0, 0])),
        mp.FusionError,
        r"stride_order \[0, 0\] must be a permutation",
    ),
    (
        "stride_order_too_short",
        _define(lambda fd: fd.define_tensor([M, K], H, stride_order=[0])),
        mp.FusionError,
        r"stride_order \[0\] must be a permutation of 0..1",
    ),
    (
        "stride_order_not_a_sequence",
        _define(lambda fd: fd.define_tensor([M, K], H, stride_order=1)),
        mp.FusionError,
        r"stride_order",
    ),
    (
        "shape_zero",
        _define(lambda fd: fd.define_tensor([0, K], H)),
        mp.FusionError,
        r"shape \[0, 8\] must hold positive ints",
    ),
    (
        "shape_negative",
        _define(lambda fd: fd.define_tensor([-2, K], H)),
        mp.FusionError,
        r"shape \[-2, 8\] must hold positive ints below 2\*\*31 or -1",
    ),
    (
        "shape_non_int",
        _define(lambda fd: fd.define_tensor([2.5, K], H)),
        mp.FusionError,
        r"shape \[2.5, 8\] must hold ints",
    ),
    ("shape_not_a_sequence", _define(lambda fd: fd.define_tensor(4, H)), mp.FusionError, r"shape"),
    (
        "dtype_not_mmaplug",
        _define(lambda fd: fd.define_tensor([M, K], np.float16)),
        mp.FusionError,
        r"dtype must be e.g. mp.float16",
    ),
    (
        "add_incompatible_shapes",
        _define(lambda fd: fd.ops.add(_a(fd), _a(fd, shape=(M, K + 1)))),
        mp.FusionError,
        r"^(?=.*T0)(?=.*T1)(?=.*\b8\b)(?=.*\b9\b)",
    ),
    (
        "add_two_numbers",
        _define(lambda fd: fd.ops.add(1.0, 2.0)),
        mp.FusionError,
        r"add: at least one operand must be a tensor",
    ),
    (
        "permute_not_a_permutation",
        _define(lambda fd: fd.ops.permute(_a(fd), [0, 0])),
        mp.FusionError,
        r"dims \[0, 0\] is not a permutation of the 2 dims of T0",
    ),
    (
        "permute_non_int_dims",
        _define(lambda fd: fd.ops.permute(_a(fd), [0.0, 1.0])),
        mp.FusionError,
        r"T0",
    ),
    (
        "squeeze_non_1_dim",
        _define(lambda fd: fd.ops.squeeze(_a(fd), [0])),
        mp.FusionError,
        r"dim 0 of T0 has extent 4; only size-1",
    ),
    (
        "broadcast_in_dim_rank",
        _define(lambda fd: fd.ops.broadcast_in_dim(_a(fd), [M, 1, K], [0])),
        mp.FusionError,
        r"T0 has rank 2 but broadcast_dims has 1 entries",
    ),
    (
        "broadcast_in_dim_order",
        _define(lambda fd: fd.ops.broadcast_in_dim(_a(fd), [M, 1, K], [2, 0])),
        mp.FusionError,
        r"broadcast_dims \[2, 0\] must be increasing",
    ),
    (
        "broadcast_in_dim_extent",
        _define(lambda fd: fd.ops.broadcast_in_dim(_a(fd), [M, 1, K + 1], [0, 2])),
        mp.FusionError,
        r"dim 1 of T0 has extent 8 but the output shape asks 9",
    ),
    (
        "broadcast_in_dim_zero_extent",
        _define(lambda fd: _out(fd, fd.ops.broadcast_in_dim(_a(fd), [M, 0, K], [0, 2]))),
        mp.FusionError,
        r"broadcast_in_dim.*\[4, 0, 8\]",
    ),
    (
        "linear_bias_wrong_shape",
        _define(lambda fd: fd.ops.linear(_a(fd), _b(fd, shape=(N, K)), fd.define_tensor([M], H))),
        mp.FusionError,
        r"bias T2 has shape \[4\]; it must be \[N\] = \[6\]",
    ),
    (
        "linear_3d_weight",
        _define(lambda fd: fd.ops.linear(_a(fd), _b(fd, shape=(2, N, K)))),
        mp.FusionError,
        r"weight T1 has rank 3",
    ),
    (
        "fms_two_reduction_dims",
        _define(
            lambda fd: fd.ops.fused_multiply_sum(
                fd.define_tensor([M, 1, K], H), fd.define_tensor([1, N, K], H), [1, 2]
            )
        ),
        mp.FusionError,
        r"fused_multiply_sum: exactly one reduction dim; got \[1, 2\]",
    ),
    (
        "fms_float32",
        _define(
            lambda fd: fd.ops.fused_multiply_sum(
                fd.define_tensor([M, 1, K], S), fd.define_tensor([1, N, K], S)
            )
        ),
        mp.FusionError,
        r"operands are float32; MmaOp takes float16, bfloat16",
    ),
    (
        "fms_rank_mismatch",
        _define(
            lambda fd: fd.ops.fused_multiply_sum(
                fd.define_tensor([M, 1, K], H), fd.define_tensor([N, K], H)
            )
        ),
        mp.FusionError,
        r"T0 has rank 3 and T1 rank 2",
    ),
    (
        "fms_k_extent_mismatch",
        _define(
            lambda fd: fd.ops.fused_multiply_sum(
                fd.define_tensor([M, 1, K], H), fd.define_tensor([1, N, K + 1], H)
            )
        ),
        mp.FusionError,
        r"^(?=.*T0)(?=.*T1)(?=.*\b8\b)(?=.*\b9\b)",
    ),
    (
        "fms_broadcast_k",
        _analyze(
            lambda fd: _out(
                fd,
                fd.ops.fused_multiply_sum(
                    fd.define_tensor([M, 1, 1], H), fd.define_tensor([1, N, 1], H)
                ),
            )
        ),
        mp.MatmulError,
        r"T[01].*(K|reduction)|(K|reduction).*T[01]",
    ),
    (
        "no_outputs",
        _define(lambda fd: _a(fd)),
        mp.FusionError,
        r"the fusion has no outputs; call fd.add_output",
    ),
    (
        "output_added_twice",
        _define(lambda fd: [fd.add_output(t) for t in [fd.ops.relu(_a(fd))] * 2]),
        mp.FusionError,
        r"T\d+ is already an output",
    ),
    (
        "output_is_scalar",
        _define(lambda fd: fd.add_output(fd.define_scalar())),
        mp.FusionError,
        r"add_output takes a tensor; got S0",
    ),
    (
        "cast_to_string_dtype",
        _define(lambda fd: fd.ops.cast(_a(fd), "float16")),
        mp.FusionError,
        r"cast of T0: dtype must be an mmaplug dtype.*'float16'",
    ),
    (
        "tensor_from_other_definition",
        _define(lambda fd: fd.ops.matmul(_a(fd), mp.FusionDefinition().define_tensor([K, N], H))),
        mp.FusionError,
        r"matmul: T0 comes from fusion definition #\d+ .*not from this one",
    ),
    (
        "evaluate_too_few_inputs",
        _evaluate([ONES_A]),
        mp.FusionError,
        r"takes 2 inputs \(T0, T1\); got 1",
    ),
    (
        "evaluate_wrong_shape",
        _evaluate([ONES_A, ONES_B.T]),
        mp.FusionError,
        r"input T1 was declared with shape \[8, 6\]",
    ),
    (
        "evaluate_non_numeric",
        _evaluate([np.full((M, K), "x"), ONES_B]),
        mp.FusionError,
        r"input T0 has non-numeric",
    ),
]


@pytest.mark.parametrize(
    ("action", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rejection(pm, action, error, match):
    """The bad input raises the documented MatmulError subclass with a precise message."""
    try:
        action(pm)
    except mp.MatmulError as err:
        assert isinstance(err, error), f"{type(err).__name__}: {err}"
        assert isinstance(err, mp.FusionError | mp.UnsupportedFusionError)
        with pytest.raises(error, match=match):
            raise err
    except Exception as err:  # noqa: BLE001 - a bare exception is exactly the failure we report
        pytest.fail(f"bare {type(err).__name__} instead of {error.__name__}: {err}")
    else:
        pytest.fail(f"no error; expected {error.__name__} matching {match!r}")


REFUSED = [c for c in CASES if hasattr(c[1], "build") and c[2] is mp.UnsupportedFusionError]


@pytest.mark.parametrize("action", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_compile_runs_what_analysis_refuses_as_segments(pm, action):
    """mp.compile refuses none of these well-formed fusions (issue 10 item 4): it segments
    them, and the segments chained compute what mp.evaluate computes."""
    from mmaplug.runtime.segmentation import evaluate_segments

    with mp.FusionDefinition() as fd:
        action.build(fd)
    compiled = mp.compile(fd, "h200", pm=pm)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]
    want = mp.evaluate(fd, inputs)
    for got, ref in zip(evaluate_segments(compiled.segments, fd.fusion, inputs), want, strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=1e-6, atol=1e-6)


def test_catalogue_is_large_and_unique():
    """The catalogue has at least 20 distinct cases."""
    ids = [c[0] for c in CASES]
    assert len(ids) >= 20 and len(set(ids)) == len(ids)


def test_errors_derive_from_matmul_error():
    """FusionError and UnsupportedFusionError are MatmulErrors and not bare-exception types."""
    for cls in (mp.FusionError, mp.UnsupportedFusionError):
        assert issubclass(cls, mp.MatmulError)
        assert not issubclass(cls, AssertionError | IndexError | KeyError | TypeError)
