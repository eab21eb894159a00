"""Hostile definitions: each fails at the line that is wrong, with a MatmulError naming the culprit.

The catalogue extends ``test_rejections.py``: finished definitions, foreign values, bad dtypes,
scalars and extents, float64 fusions, API entry points given the wrong thing, and value objects
(MatmulProblem, Device, EpilogueInput) built with bad fields. Below it, one test per defect.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.epilogue import EpilogueInput
from mmaplug.ir.fusion import Fusion, TensorView

H, T, S, D = mp.float16, mp.bfloat16, mp.float32, mp.float64
M, N, K = 16, 24, 32
FINISHED = r"fusion definition #\d+ \(created at test_hostile_definitions.py:\d+\) is finished"


def _linear():
    """A finished definition: T0 [M, K], T1 [N, K], T2 = linear(T0, T1) as output."""
    with mp.FusionDefinition() as fd:
        x, w = fd.define_tensor([M, K], H), fd.define_tensor([N, K], H)
        fd.add_output(fd.ops.linear(x, w))
    return fd


def _after(act):
    """Run *act(fd, x, y)* on a finished definition (x: input T0, y: output T2)."""

    def run():
        fd = _linear()
        act(fd, fd.fusion.inputs[0], fd.fusion.outputs[0])

    return run


def _inside(act):
    """Run *act(fd, x, y)* inside a definition's block (x: input T0, y = linear output T2)."""

    def run():
        with mp.FusionDefinition() as fd:
            x, w = fd.define_tensor([M, K], H), fd.define_tensor([N, K], H)
            y = fd.ops.linear(x, w)
            act(fd, x, y)
            fd.add_output(y)

    return run


def _foreign(act):
    """Run *act(fd, own, other)*: *other* is T2 (the output) of another, finished definition."""

    def run():
        other = _linear().fusion.outputs[0]
        with mp.FusionDefinition() as fd:
            own = fd.define_tensor([M, N], S)
            act(fd, own, other)
            fd.add_output(own)

    return run


def _analyze(build):
    """Build a fusion with *build(fd)* and analyse it."""

    def run():
        with mp.FusionDefinition() as fd:
            build(fd)
        mp.analyze(fd)

    return run


def _mm(fd, dtype=H, a_shape=(M, K)):
    return fd.ops.matmul(fd.define_tensor(list(a_shape), dtype), fd.define_tensor([K, N], dtype))


def _problem(**changes):
    fields = dict(
        m=M,
        n=N,
        k=K,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=H,
        output_dtype=H,
        vector_widths=mp.VectorWidths(a=8, b=8, epilogue=8),
    )
    return lambda: mp.MatmulProblem(**{**fields, **changes})


def _device(**changes):
    fields = dict(name="x", cc=(8, 0), sm_count=1, smem_per_block_optin=1, smem_per_sm=1)
    return lambda: mp.Device(**{**fields, **changes})


def _translated_tensor(fd, own, other):
    """A tensor of the analysis' translated copy handed back to the user's definition."""
    analysis = mp.analyze(_linear())
    fd.ops.relu(analysis.fusion.outputs[0])


def _hand_built(fd, own, other):
    fd.ops.relu(TensorView("T9", S, []))


CASES = [
    # -- a finished definition is frozen --
    (
        "define_tensor_after_with",
        _after(lambda fd, x, y: fd.define_tensor([4], H)),
        mp.FusionError,
        rf"define_tensor: {FINISHED}",
    ),
    (
        "define_scalar_after_with",
        _after(lambda fd, x, y: fd.define_scalar(2.0)),
        mp.FusionError,
        rf"define_scalar: {FINISHED}",
    ),
    (
        "add_output_after_with",
        _after(lambda fd, x, y: fd.add_output(x)),
        mp.FusionError,
        rf"add_output of T0: {FINISHED}",
    ),
    (
        "relu_after_with",
        _after(lambda fd, x, y: fd.ops.relu(y)),
        mp.FusionError,
        rf"relu of T2: {FINISHED}",
    ),
    (
        "add_number_after_with",
        _after(lambda fd, x, y: fd.ops.add(2.0, y)),
        mp.FusionError,
        rf"add: {FINISHED}",
    ),
    (
        "cast_after_with",
        _after(lambda fd, x, y: fd.ops.cast(y, S)),
        mp.FusionError,
        rf"cast of T2: {FINISHED}",
    ),
    (
        "matmul_after_with",
        _after(lambda fd, x, y: fd.ops.matmul(x, y)),
        mp.FusionError,
        rf"matmul of T0: {FINISHED}",
    ),
    (
        "sum_after_with",
        _after(lambda fd, x, y: fd.ops.sum(y, [0])),
        mp.FusionError,
        rf"sum of T2: {FINISHED}",
    ),
    ("with_again", _after(lambda fd, x, y: fd.__enter__()), mp.FusionError, rf"with: {FINISHED}"),
    # -- values of another definition --
    (
        "foreign_computed_tensor_add",
        _foreign(lambda fd, own, other: fd.ops.add(own, other)),
        mp.FusionError,
        r"add: T2 comes from fusion definition #\d+ .*not from this one, "
        r"fusion definition #\d+",
    ),
    (
        "foreign_tensor_cast",
        _foreign(lambda fd, own, other: fd.ops.cast(other, H)),
        mp.FusionError,
        r"cast: T2 comes from fusion definition",
    ),
    (
        "foreign_input_matmul",
        _foreign(lambda fd, own, other: fd.ops.matmul(other.definition.inputs[0], own)),
        mp.FusionError,
        r"matmul: T0 comes from fusion definition",
    ),
    (
        "foreign_output",
        _foreign(lambda fd, own, other: fd.add_output(other)),
        mp.FusionError,
        r"add_output: T2 comes from fusion definition",
    ),
    (
        "foreign_linear_bias",
        _foreign(
            lambda fd, own, other: fd.ops.linear(
                fd.define_tensor([M, K], H), fd.define_tensor([N, K], H), other.definition.inputs[0]
            )
        ),
        mp.FusionError,
        r"linear bias: T0 comes from fusion definition",
    ),
    (
        "foreign_scalar",
        _foreign(lambda fd, own, other: fd.ops.mul(own, mp.FusionDefinition().define_scalar())),
        mp.FusionError,
        r"mul: S0 comes from fusion definition",
    ),
    (
        "translated_copy_tensor",
        _foreign(_translated_tensor),
        mp.FusionError,
        r"relu: T\d+ comes from fusion definition #\d+",
    ),
    (
        "hand_built_tensor",
        _foreign(_hand_built),
        mp.FusionError,
        r"relu: T9 comes from no fusion definition",
    ),
    # -- dtypes --
    (
        "sum_dtype_string",
        _inside(lambda fd, x, y: fd.ops.sum(x, [1], dtype="float16")),
        mp.FusionError,
        r"sum of T0: dtype must be an mmaplug dtype .*'float16'",
    ),
    (
        "sum_dtype_numpy",
        _inside(lambda fd, x, y: fd.ops.sum(x, [1], dtype=np.float32)),
        mp.FusionError,
        r"sum of T0: dtype must be an mmaplug dtype",
    ),
    (
        "cast_dtype_numpy",
        _inside(lambda fd, x, y: fd.ops.cast(y, np.float16)),
        mp.FusionError,
        r"cast of T2: dtype must be an mmaplug dtype",
    ),
    (
        "define_scalar_dtype_string",
        _inside(lambda fd, x, y: fd.define_scalar(1.0, "float64")),
        mp.FusionError,
        r"define_scalar: dtype must be an mmaplug dtype .*'float64'",
    ),
    # -- scalars --
    (
        "define_scalar_string",
        _inside(lambda fd, x, y: fd.define_scalar("abc")),
        mp.FusionError,
        r"define_scalar: 'abc' is not a real number",
    ),
    (
        "define_scalar_bool",
        _inside(lambda fd, x, y: fd.define_scalar(True)),
        mp.FusionError,
        r"define_scalar: True is not a real number",
    ),
    (
        "define_scalar_nan",
        _inside(lambda fd, x, y: fd.define_scalar(float("nan"))),
        mp.FusionError,
        r"define_scalar: scalar nan is not a finite float32 value",
    ),
    (
        "define_scalar_inf",
        _inside(lambda fd, x, y: fd.define_scalar(-np.inf)),
        mp.FusionError,
        r"define_scalar: scalar -inf is not a finite float32",
    ),
    (
        "define_scalar_beyond_float32",
        _inside(lambda fd, x, y: fd.define_scalar(1e39)),
        mp.FusionError,
        r"define_scalar: scalar 1e\+39 is not a finite float32",
    ),
    (
        "mul_huge_int",
        _inside(lambda fd, x, y: fd.ops.mul(y, 10**400)),
        mp.FusionError,
        r"mul: scalar 1000000000000000000\d*\.\.\. is not a finite float32",
    ),
    (
        "mul_nan",
        _inside(lambda fd, x, y: fd.ops.mul(y, float("nan"))),
        mp.FusionError,
        r"mul: scalar nan is not a finite",
    ),
    (
        "add_numpy_inf",
        _inside(lambda fd, x, y: fd.ops.add(np.float64("inf"), y)),
        mp.FusionError,
        r"add: scalar np.float64\(inf\) is not a finite",
    ),
    (
        "sub_complex",
        _inside(lambda fd, x, y: fd.ops.sub(y, 1j)),
        mp.FusionError,
        r"sub: 1j is not a real number",
    ),
    (
        "mul_numpy_bool",
        _inside(lambda fd, x, y: fd.ops.mul(y, np.True_)),
        mp.FusionError,
        r"mul: np.True_ is not a real number",
    ),
    (
        "mul_string",
        _inside(lambda fd, x, y: fd.ops.mul(y, "2")),
        mp.FusionError,
        r"mul: '2' is not a real number",
    ),
    (
        "mul_none",
        _inside(lambda fd, x, y: fd.ops.mul(y, None)),
        mp.FusionError,
        r"mul: None is not a real number",
    ),
    (
        "add_list",
        _inside(lambda fd, x, y: fd.ops.add(y, [1.0, 2.0])),
        mp.FusionError,
        r"add: \[1.0, 2.0\] is not a real number",
    ),
    # -- extents --
    (
        "shape_2_pow_31",
        _inside(lambda fd, x, y: fd.define_tensor([2**31, 8], H)),
        mp.FusionError,
        r"shape \[2147483648, 8\] must hold positive ints below 2\*\*31",
    ),
    (
        "shape_numpy_float",
        _inside(lambda fd, x, y: fd.define_tensor([np.float32(4), 8], H)),
        mp.FusionError,
        r"shape \[np.float32\(4.0\), 8\] must hold ints",
    ),
    (
        "shape_bool",
        _inside(lambda fd, x, y: fd.define_tensor([True, 8], H)),
        mp.FusionError,
        r"shape \[True, 8\] must hold ints",
    ),
    (
        "shape_string",
        _inside(lambda fd, x, y: fd.define_tensor("48", H)),
        mp.FusionError,
        r"define_tensor: shape must be a sequence of ints; got '48'",
    ),
    (
        "shape_none",
        _inside(lambda fd, x, y: fd.define_tensor(None, H)),
        mp.FusionError,
        r"define_tensor: shape must be a sequence of ints; got None",
    ),
    (
        "shape_too_many_bytes",
        _inside(lambda fd, x, y: fd.define_tensor([2**30] * 3, S)),
        mp.FusionError,
        r"shape \[1073741824, 1073741824, 1073741824\] of float32 spans \d+ bytes",
    ),
    (
        "broadcast_in_dim_huge",
        _inside(lambda fd, x, y: fd.ops.broadcast_in_dim(x, [M, 2**31, K], [0, 2])),
        mp.FusionError,
        r"broadcast_in_dim of T0: shape \[16, 2147483648, 32\]",
    ),
    (
        "broadcast_in_dim_negative",
        _inside(lambda fd, x, y: fd.ops.broadcast_in_dim(x, [M, -3, K], [0, 2])),
        mp.FusionError,
        r"broadcast_in_dim of T0: shape \[16, -3, 32\]",
    ),
    (
        "problem_m_beyond_2_pow_31",
        _analyze(lambda fd: fd.add_output(_mm(fd, a_shape=(65536, 65536, K)))),
        mp.UnsupportedFusionError,
        r"M of this matmul is 4294967296 .*M dims of T0",
    ),
    # -- other op arguments --
    (
        "sum_no_dims",
        _inside(lambda fd, x, y: fd.ops.sum(x, [])),
        mp.FusionError,
        r"sum of T0: give at least one dim",
    ),
    (
        "sum_dim_out_of_range",
        _inside(lambda fd, x, y: fd.ops.sum(x, [2])),
        mp.FusionError,
        r"sum: dim 2 is out of range for T0 of rank 2",
    ),
    (
        "squeeze_dim_out_of_range",
        _inside(lambda fd, x, y: fd.ops.squeeze(x, [5])),
        mp.FusionError,
        r"squeeze: dim 5 is out of range for T0",
    ),
    (
        "fms_dims_string",
        _inside(lambda fd, x, y: fd.ops.fused_multiply_sum(x, x, "k")),
        mp.FusionError,
        r"fused_multiply_sum: dims must be a sequence of ints; got 'k'",
    ),
    (
        "linear_scalar_bias",
        _inside(lambda fd, x, y: fd.ops.linear(x, fd.define_tensor([N, K], H), fd.define_scalar())),
        mp.FusionError,
        r"linear bias takes a tensor from this definition; got S\d",
    ),
    (
        "matmul_number_operand",
        _inside(lambda fd, x, y: fd.ops.matmul(x, 2.0)),
        mp.FusionError,
        r"matmul takes a tensor from this definition; got 2.0",
    ),
    # -- float64: accepted by the frontend, refused at analysis with the reason --
    (
        "float64_output",
        _analyze(lambda fd: fd.add_output(fd.ops.cast(_mm(fd), D))),
        mp.UnsupportedFusionError,
        r"T3 is float64; matmul kernels compute epilogues in float32",
    ),
    (
        "float64_epilogue_input",
        _analyze(lambda fd: fd.add_output(fd.ops.add(_mm(fd), fd.define_tensor([N], D)))),
        mp.UnsupportedFusionError,
        r"T3 is float64",
    ),
    (
        "float64_intermediate",
        _analyze(lambda fd: fd.add_output(fd.ops.cast(fd.ops.cast(_mm(fd), D), H))),
        mp.UnsupportedFusionError,
        r"T3 is float64",
    ),
    # -- entry points given something other than a fusion --
    (
        "compile_none",
        lambda: mp.compile(None, device="h200"),
        mp.UsageError,
        r"mp.compile takes a Fusion or a FusionDefinition .*got NoneType",
    ),
    (
        "evaluate_string",
        lambda: mp.evaluate("fusion", []),
        mp.UsageError,
        r"evaluate takes a Fusion or a FusionDefinition .*got str",
    ),
    (
        "matmul_problem_tensor",
        lambda: mp.matmul_problem(_linear().fusion.outputs[0]),
        mp.UsageError,
        r"matmul_problem takes a Fusion .*got TensorView T2",
    ),
    (
        "analyze_list",
        lambda: mp.analyze([_linear()]),
        mp.UsageError,
        r"analyze takes a Fusion .*got list",
    ),
    (
        "find_patterns_int",
        lambda: mp.find_matmul_patterns(3),
        mp.UsageError,
        r"find_matmul_patterns takes a Fusion .*got int 3",
    ),
    (
        "translate_dict",
        lambda: mp.translate_matmul_patterns({}),
        mp.UsageError,
        r"translate_matmul_patterns takes a Fusion .*got dict",
    ),
    (
        "evaluate_masked_array",
        lambda: mp.evaluate(
            _linear(), [np.ma.masked_array(np.ones((M, K)), mask=True), np.ones((N, K))]
        ),
        mp.FusionError,
        r"input T0 is a masked array; a fusion reads every element",
    ),
    (
        "evaluate_inputs_array",
        lambda: mp.evaluate(_linear(), np.ones((M, K))),
        mp.FusionError,
        r"inputs must be a list or tuple with one value per fusion input \(T0, T1\)",
    ),
    (
        "evaluate_scalar_input_huge",
        lambda: mp.evaluate(_scalar_input_fusion(), [np.ones((M, N)), 10**400]),
        mp.FusionError,
        r"scalar input S1 = 1000\d* does not fit a float",
    ),
    # -- value objects built with bad fields (no attrs ValueError) --
    (
        "problem_m_zero",
        _problem(m=0),
        mp.UsageError,
        r"MatmulProblem.m=0 is not allowed; it must be an int >= 1",
    ),
    ("problem_k_float", _problem(k=8.0), mp.UsageError, r"MatmulProblem.k=8.0 is not allowed"),
    (
        "problem_batch_negative",
        _problem(batch=-2),
        mp.UsageError,
        r"MatmulProblem.batch=-2 is not allowed",
    ),
    (
        "problem_k_inner_string",
        _problem(a_k_inner="yes"),
        mp.UsageError,
        r"MatmulProblem.a_k_inner='yes' is not allowed; it must be True or False",
    ),
    (
        "problem_dtype_string",
        _problem(output_dtype="float16"),
        mp.UsageError,
        r"MatmulProblem.output_dtype='float16' is not allowed",
    ),
    (
        "problem_epilogue_ops_none",
        _problem(epilogue_ops=None),
        mp.UsageError,
        r"MatmulProblem.epilogue_ops=None is not allowed; it must be a tuple of op names",
    ),
    (
        "problem_prologue_ops_none",
        _problem(a_prologue_ops=None),
        mp.UsageError,
        r"MatmulProblem.a_prologue_ops=None is not allowed",
    ),
    (
        "problem_epilogue_dtypes_strings",
        _problem(epilogue_input_dtypes=("float16",)),
        mp.UsageError,
        r"epilogue_input_dtypes=\('float16',\) is not allowed; it must be a tuple of mmaplug",
    ),
    (
        "problem_block_scaled_string",
        _problem(block_scaled="yes"),
        mp.UsageError,
        r"MatmulProblem.block_scaled='yes' is not allowed; it must be True or False",
    ),
    (
        "explain_a_problem",
        lambda: mp.explain(_problem()()),
        mp.UsageError,
        r"explain takes a KernelSpec .* not a MatmulProblem",
    ),
    (
        "vector_width_zero",
        lambda: mp.VectorWidths(a=0, b=8, epilogue=8),
        mp.UsageError,
        r"VectorWidths.a=0 is not allowed",
    ),
    (
        "device_sm_count_zero",
        _device(sm_count=0),
        mp.UsageError,
        r"Device.sm_count=0 is not allowed",
    ),
    (
        "device_cc_string",
        _device(cc="90"),
        mp.UsageError,
        r"Device.cc=\('9', '0'\) is not allowed; it must be \(major, minor\)",
    ),
    ("device_cc_int", _device(cc=90), mp.UsageError, r"Device.cc=90 is not allowed"),
    (
        "epilogue_input_axis",
        lambda: EpilogueInput(name="T4", dtype=S, axes=("q",)),
        mp.UsageError,
        r"EpilogueInput.axes: 'q' is not an axis; use 'batch', 'm', 'n'",
    ),
]


def _scalar_input_fusion():
    with mp.FusionDefinition() as fd:
        t = fd.define_tensor([M, N], S)
        fd.add_output(fd.ops.mul(t, fd.define_scalar()))
    return fd


@pytest.mark.parametrize(
    ("action", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hostile_definition(action, error, match):
    """The bad call raises the documented MatmulError subclass naming the culprit."""
    try:
        action()
    except mp.MatmulError as err:
        assert isinstance(err, error), f"{type(err).__name__}: {err}"
        with pytest.raises(error, match=match):
            raise err
    except Exception as err:  # noqa: BLE001 - a bare exception is exactly the failure we report
        pytest.fail(f"bare {type(err).__name__} instead of {error.__name__}: {err}")
    else:
        pytest.fail(f"no error; expected {error.__name__} matching {match!r}")


def test_catalogue_has_45_distinct_cases():
    """At least 45 hostile definitions, each with its own id."""
    ids = [c[0] for c in CASES]
    assert len(ids) >= 45 and len(set(ids)) == len(ids)


# -- one test per defect ------------------------------------------------------------------------


def test_finished_definition_is_frozen():
    """After the with block nothing changes the fusion: every builder call is refused."""
    fd = _linear()
    before = repr(fd.fusion)
    x, y = fd.fusion.inputs[0], fd.fusion.outputs[0]
    calls = [
        lambda: fd.define_tensor([4], H),
        lambda: fd.define_scalar(),
        lambda: fd.ops.relu(y),
        lambda: fd.ops.mul(y, 2.0),
        lambda: fd.add_output(x),
        lambda: fd.__enter__(),
    ]
    for call in calls:
        with pytest.raises(mp.FusionError, match="is finished"):
            call()
    assert repr(fd.fusion) == before and fd.is_finished
    assert len(fd.fusion.inputs) == 2 and fd.fusion.outputs == [y]


def test_definition_with_an_error_inside_is_finished_too():
    """A block that raised leaves a finished definition (no half-built reuse)."""
    fd = mp.FusionDefinition()
    with pytest.raises(ZeroDivisionError), fd:
        fd.define_tensor([4], H)
        1 / 0  # noqa: B018 - the user's own error inside the block
    with pytest.raises(mp.FusionError, match="is finished"):
        fd.define_tensor([4], H)


def test_foreign_tensor_is_refused_where_passed_not_in_evaluate():
    """A tensor computed in another definition is refused at the op, naming both definitions."""
    other = _linear()
    y = other.fusion.outputs[0]
    with pytest.raises(mp.FusionError) as info, mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.add(fd.define_tensor([M, N], S), y))
    message = str(info.value)
    assert other.fusion.origin in message and fd.fusion.origin in message
    assert other.fusion.origin != fd.fusion.origin


def test_evaluate_of_a_hand_built_fusion_reading_a_stranger_is_a_fusion_error():
    """A Fusion built by hand that reads a value it does not own: FusionError, not KeyError."""
    stranger = _linear()
    fusion = Fusion()
    fusion.add_output(stranger.fusion.outputs[0])
    with pytest.raises(mp.FusionError, match=r"T0 is read by the fusion but is neither"):
        mp.evaluate(fusion, [])


@pytest.mark.parametrize(
    "number",
    [np.float32(0.5), np.float64(0.5), np.int64(3), np.int8(-2)],
    ids=["np_float32", "np_float64", "np_int64", "np_int8"],
)
def test_numpy_scalars_are_numbers(number):
    """numpy scalars work wherever a Python number does, with the same result."""
    x = np.linspace(-2, 2, M * N, dtype=np.float32).reshape(M, N)
    results = []
    for value in (number, number.item()):
        with mp.FusionDefinition() as fd:
            t = fd.define_tensor([M, N], S)
            fd.add_output(fd.ops.add(fd.ops.mul(t, value), fd.define_scalar()))
        results.append(mp.evaluate(fd, [x, value])[0])
    np.testing.assert_array_equal(results[0], results[1])


def test_float64_output_is_cast_after_the_kernel_not_refused():
    """A float64 output no kernel writes: analysis names it, and mp.compile cuts the cast off
    into a segment after the kernel (issue 10 item 4) instead of refusing the fusion."""
    with mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.cast(_mm(fd), D))
    with pytest.raises(mp.UnsupportedFusionError, match=r"T3 is float64.*cast to float32"):
        mp.analyze(fd)
    compiled = mp.compile(fd, device="h200")
    assert [seg.kind for seg in compiled.segments] == ["matmul", "pointwise"]
    assert re.search(r"T3 is float64.*cast to float32", compiled.reason)
    x, w = np.ones((M, K), np.float16), np.ones((K, N), np.float16)
    assert mp.evaluate(fd, [x, w])[0].dtype == np.float64  # the reference still runs it


def test_entry_points_accept_a_definition():
    """compile, evaluate, matmul_problem, analyze, find and translate take fd like fd.fusion."""
    fd = _linear()
    x, w = np.ones((M, K), np.float16), np.ones((N, K), np.float16)
    np.testing.assert_array_equal(mp.evaluate(fd, [x, w])[0], mp.evaluate(fd.fusion, [x, w])[0])
    assert mp.matmul_problem(fd) == mp.matmul_problem(fd.fusion)
    assert mp.analyze(fd).problem == mp.analyze(fd.fusion).problem
    assert [p.kind for p in mp.find_matmul_patterns(fd)] == ["linear"]
    assert mp.compile(fd, device="h200").params == mp.compile(fd.fusion, device="h200").params
    assert [p.kind for p in mp.translate_matmul_patterns(fd)] == ["mma"]
    assert [p.kind for p in mp.find_matmul_patterns(fd.fusion)] == ["mma"]  # fd's own fusion


def test_zero_extent_problem_is_a_usage_error_not_value_error():
    """attrs validators of MatmulProblem raise UsageError (a MatmulError), never ValueError."""
    with pytest.raises(mp.UsageError) as info:
        _problem(m=0)()
    assert not isinstance(info.value, ValueError)


def test_messages_name_the_users_tensors_not_the_translated_copy():
    """A refused operand or output is named as the user wrote it, not as translation renamed it."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([M, K], S), fd.define_tensor([K, N], H)
        operand = fd.ops.cast(fd.ops.sin(a), H)  # a float32 input: no prologue takes it
        fd.add_output(fd.ops.matmul(operand, b))
    with pytest.raises(mp.UnsupportedFusionError, match=rf"operand {operand.name} is computed"):
        mp.analyze(fd)
    with mp.FusionDefinition() as fd:
        inner = _mm(fd, a_shape=(M, K))
        fd.add_output(
            fd.ops.matmul(
                fd.ops.broadcast_in_dim(inner, [M, N], [0, 1]), fd.define_tensor([N, N], H)
            )
        )
    with pytest.raises(mp.UnsupportedFusionError, match=r"matmul operand T3 is computed from"):
        mp.analyze(fd)


def test_output_bindings_carry_the_users_names():
    """The output binding of a half linear is named like the user's output, not its cast."""
    fd = _linear()
    analysis = mp.analyze(fd)
    assert analysis.fusion.outputs[0].name != "T2"  # translation replaced it in the copy
    assert analysis.outputs[0].name == "T2"
    assert analysis.epilogue.outputs[0].name == "T2"


@pytest.mark.parametrize("dtype", [S, H, T], ids=["float32", "float16", "bfloat16"])
def test_scalar_does_not_promote_a_tensor(dtype):
    """float64 scalar x float32/half tensor is float32 (nvFuser and torch); evaluate agrees."""
    x = np.linspace(-3, 3, M * N).reshape(M, N)
    with mp.FusionDefinition() as fd:
        t = fd.define_tensor([M, N], dtype)
        out = fd.ops.mul(t, fd.define_scalar(0.1, dtype=D))
        fd.add_output(out)
    assert out.dtype is S
    (got,) = mp.evaluate(fd, [x])
    xs = x.astype(dtype.numpy).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, xs * np.float32(0.1))  # float32 math, as torch does it


def test_float64_tensor_keeps_float64_with_float32_scalar():
    """The tensor decides: float64 tensor x float32 scalar is float64, with the exact double."""
    with mp.FusionDefinition() as fd:
        out = fd.ops.mul(fd.define_tensor([4], D), 0.1)
        fd.add_output(out)
    assert out.dtype is D
    np.testing.assert_array_equal(mp.evaluate(fd, [np.arange(4.0)])[0], np.arange(4.0) * 0.1)


@pytest.mark.parametrize("axis", [0, 1, -2], ids=["k_first", "k_middle", "k_minus_2"])
def test_mma_with_k_not_last_feeds_epilogue_ops(axis):
    """An MmaOp whose K is not last, then bias + cast: same results before and after translation,
    and the problem has the right M, N, K."""
    shapes = {0: ([K, M, 1], [K, 1, N]), 1: ([M, K, 1], [1, K, N]), -2: ([M, K, 1], [1, K, N])}
    a_shape, b_shape = shapes[axis]
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor(a_shape, H), fd.define_tensor(b_shape, H)
        mma = fd.ops.fused_multiply_sum(a, b, [axis])
        fd.add_output(fd.ops.cast(fd.ops.add(mma, fd.define_tensor([N], S)), H))
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(a_shape), rng.standard_normal(b_shape), rng.standard_normal(N)]
    before = mp.evaluate(fd, inputs)[0]
    problem = mp.matmul_problem(fd)
    assert (problem.m, problem.n, problem.k) == (M, N, K)
    translated = copy.deepcopy(fd.fusion)
    mp.translate_matmul_patterns(translated)
    np.testing.assert_array_equal(mp.evaluate(translated, inputs)[0], before)
    a64 = inputs[0].astype(np.float16).astype(np.float64)
    b64 = inputs[1].astype(np.float16).astype(np.float64)
    want = np.einsum("kmx,kxn->mn" if axis == 0 else "mkx,xkn->mn", a64, b64)
    np.testing.assert_allclose(before, want + inputs[2], rtol=2e-3, atol=2e-2)
