"""Segmentation (issue 10, item 4, first step): where a fusion is cut, why, and that running the
segments in order computes what the whole fusion computes."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.runtime.compiled_fusion import CompiledFusion
from mmaplug.runtime.segmentation import Segment, evaluate_segments, explain_segments, segment
from mmaplug.runtime.segmented_fusion import SegmentedFusion, SymbolicSegments

RNG = np.random.default_rng(5)
PM = mp.make_plugin_manager(load_entrypoints=False, strict=True)


def _inputs(fusion: mp.Fusion) -> list:
    return [RNG.standard_normal(v.shape).astype(v.dtype.numpy) for v in fusion.inputs]


def _check_equivalent(fd: mp.FusionDefinition) -> tuple[Segment, ...]:
    segments = segment(fd, pm=PM)
    inputs = _inputs(fd.fusion)
    for got, want in zip(
        evaluate_segments(segments, fd.fusion, inputs), mp.evaluate(fd, inputs), strict=True
    ):
        np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64), 1e-6)
    for seg in segments:
        if seg.kind == "matmul":
            analyze(seg.fusion, pm=PM)  # a kernel takes it
    return segments


def test_a_fusion_a_kernel_takes_whole_is_one_segment() -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w)), mp.float16))
    (only,) = _check_equivalent(fd)
    assert (only.kind, only.inputs, only.reason) == ("matmul", ("T0", "T1"), "")
    assert only.outputs == (fd.fusion.outputs[0].name,)


def test_an_operand_prologue_becomes_a_pointwise_segment_before_the_kernel() -> None:
    """A reduction on an operand (no kernel prologue takes one) is computed before the kernel."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([2, 64, 32], dtype=mp.float16)
        b = fd.define_tensor([32, 48], dtype=mp.float16)
        fd.add_output(fd.ops.relu(fd.ops.matmul(fd.ops.cast(fd.ops.sum(a, [0]), mp.float16), b)))
    pre, kernel = _check_equivalent(fd)
    assert (pre.kind, pre.inputs, pre.outputs) == ("pointwise", ("T0",), ("T4",))
    assert pre.reason.startswith("T4 is computed from fusion inputs apart from the matmul")
    with pytest.raises(mp.UnsupportedFusionError) as refused:
        analyze(fd, pm=PM)
    assert str(refused.value) in pre.reason  # the cut says why
    assert (kernel.kind, set(kernel.inputs)) == ("matmul", {"T1", "T4"})
    assert "relu" in [getattr(e, "op", "") for e in kernel.fusion.exprs()]  # kept in the kernel


def test_the_epilogue_is_cut_at_the_first_op_a_kernel_cannot_take() -> None:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        y = fd.ops.relu(fd.ops.linear(a, w))
        fd.add_output(fd.ops.exp(fd.ops.reshape(y, [32, 96])))
        fd.add_output(fd.ops.cast(y, mp.float16))
    kernel, post = _check_equivalent(fd)
    assert kernel.kind == "matmul" and post.kind == "pointwise"
    assert set(kernel.outputs) == {"T4", "T7"} and post.inputs == ("T4",)
    assert post.reason.startswith("the matmul kernel's epilogue cannot take what follows")
    assert "reshape(T4)" in post.reason


def test_a_matmul_no_kernel_takes_is_a_framework_segment() -> None:
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([64, 32]), fd.define_tensor([32, 48])
        fd.add_output(fd.ops.matmul(a, b))
    (only,) = _check_equivalent(fd)
    assert only.kind == "framework"
    assert "tensor-core operands must be float16, bfloat16" in only.reason


def test_a_fusion_without_a_matmul_is_one_pointwise_segment_saying_why() -> None:
    with mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.sin(fd.define_tensor([64, 32], dtype=mp.float16)))
    (only,) = _check_equivalent(fd)
    assert only.kind == "pointwise" and only.reason.startswith("no matmul to build a kernel")


def test_the_llama_ffn_is_two_matmul_kernels_one_reading_the_others_result() -> None:
    """silu(x @ W1) * (x @ W3): one kernel per matmul (nvFuser's count with fuse_matmul and
    without fuse_multiple_matmuls), the second multiplying in the first's result."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w1 = fd.define_tensor([32, 48], dtype=mp.float16)
        w3 = fd.define_tensor([32, 48], dtype=mp.float16)
        gate = fd.ops.silu(fd.ops.matmul(x, w1))
        fd.add_output(fd.ops.cast(fd.ops.mul(gate, fd.ops.matmul(x, w3)), mp.float16))
    first, second = _check_equivalent(fd)
    assert (first.kind, second.kind) == ("matmul", "matmul")
    assert first.outputs[0] in second.inputs  # silu(x @ W1), an epilogue input of the second
    assert second.outputs == (fd.fusion.outputs[0].name,)


def test_a_mul_sum_whose_mul_is_an_output_too_computes_the_mul_apart() -> None:
    """sum(a * b) and a * b both outputs: the mul (it holds K) is computed before the kernel,
    which fuses its own copy of it into the matmul."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([4, 1, 8], mp.float16), fd.define_tensor([1, 6, 8], mp.float16)
        prod = fd.ops.mul(a, b)
        fd.add_output(fd.ops.sum(prod, [2]))
        fd.add_output(prod)
    pre, kernel = _check_equivalent(fd)
    assert (pre.kind, pre.outputs) == ("pointwise", (prod.name,))
    assert (kernel.kind, kernel.inputs) == ("matmul", ("T0", "T1"))
    assert isinstance(mp.compile(fd, "a100", pm=PM), SegmentedFusion)


def test_a_mul_sum_the_pattern_hooks_refuse_is_computed_by_the_framework() -> None:
    """A mul+sum over two dims is no matmul pattern (the hooks refuse it): mp.compile does
    not raise, the framework computes it."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 1, 8, 3], mp.float16)
        b = fd.define_tensor([1, 6, 8, 3], mp.float16)
        fd.add_output(fd.ops.sum(fd.ops.mul(a, b), [2, 3]))
    (only,) = _check_equivalent(fd)
    assert only.kind == "pointwise" and "sums over 2 dims [2, 3]" in only.reason
    compiled = mp.compile(fd, "h200", pm=PM)
    inputs = _inputs(fd.fusion)
    (got,) = compiled.execute(inputs)
    np.testing.assert_allclose(got, mp.evaluate(fd, inputs)[0], rtol=1e-5, atol=1e-5)


def test_explain_lists_each_segment_its_ops_and_its_cut() -> None:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.slice(fd.ops.linear(a, w), [0, 0], [8, 8]))
    text = explain_segments(segment(fd, pm=PM))
    assert "segment 1 (matmul): T0, T1 -> T2" in text
    assert "segment 2 (pointwise): T2 -> T3" in text
    assert "T3 = slice(T2" in text and "cut: the matmul kernel's epilogue" in text


def test_a_framework_only_fusion_executes_with_the_inputs_array_ops() -> None:
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([16, 8]), fd.define_tensor([8, 12])
        fd.add_output(fd.ops.stride_order(fd.ops.tanh(fd.ops.matmul(a, b)), [0, 1]))
    compiled = mp.compile(fd, "a100", pm=PM)
    assert isinstance(compiled, SegmentedFusion)
    assert [s.kind for s in compiled.segments] == ["framework", "pointwise"]
    assert not compiled.kernels
    inputs = _inputs(fd.fusion)
    (got,) = compiled.execute(inputs)
    np.testing.assert_allclose(got, mp.evaluate(fd, inputs)[0], rtol=1e-5, atol=1e-6)
    assert got.strides[0] < got.strides[1]  # column-major, as stride_order asks
    assert "segment 1 (framework)" in compiled.explain()
    with pytest.raises(mp.UsageError, match="make the stream current instead"):
        compiled.execute(inputs, stream=7)
    with pytest.raises(mp.UsageError, match="takes 2 inputs; got 1"):
        compiled.execute(inputs[:1])
    with pytest.raises(
        mp.UsageError,
        match=r"0 matmul kernels, so .kernel_name has no single "
        r"value; compiled.kernels is empty: the framework computes every segment",
    ):
        _ = compiled.kernel_name
    assert compiled.dump() == []  # no kernel, nothing to write


def _framework_fusion() -> mp.FusionDefinition:
    """A float32 matmul: no kernel takes it, the framework multiplies."""
    with mp.FusionDefinition() as fd:
        fd.add_output(fd.ops.matmul(fd.define_tensor([16, 8]), fd.define_tensor([8, 12])))
    return fd


def _two_kernel_fusion() -> mp.FusionDefinition:
    """slice(relu(A @ B)) and relu(A @ B) @ C: two matmuls and a slice, three segments."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        b = fd.define_tensor([32, 48], dtype=mp.float16)
        c = fd.define_tensor([48, 16], dtype=mp.float16)
        y = fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.float16)
        fd.add_output(fd.ops.slice(y, [0, 0], [8, 8]))
        fd.add_output(fd.ops.matmul(y, c))
    return fd


def test_compile_of_a_fusion_one_kernel_takes_is_unchanged() -> None:
    """Segmentation happens only where analysis or planning refuses: same type as before."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w)), mp.float16))
    assert type(mp.compile(fd, "a100", pm=PM)) is CompiledFusion


def test_compile_segments_what_analysis_refuses_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fusion whose whole no kernel takes compiles as segments; the log and explain() give
    the refusal; the one kernel's attributes are the fusion's."""
    fd = _two_kernel_fusion()
    with pytest.raises(mp.UnsupportedFusionError) as refused:
        analyze(fd, pm=PM)
    with caplog.at_level(logging.INFO, logger="mmaplug"):
        compiled = mp.compile(fd, "a100", pm=PM)
    assert isinstance(compiled, SegmentedFusion)
    why = " ".join(str(refused.value).split())
    assert compiled.reason == why
    (record,) = [r.getMessage() for r in caplog.records if "segments" in r.getMessage()]
    assert record.startswith(f"{fd.fusion.origin} is compiled as") and why in record
    assert [s.kind for s in compiled.segments] == ["matmul", "pointwise", "matmul"]
    text = compiled.explain()
    assert text.startswith(f"segmented (no single kernel takes this fusion): {why}")
    assert "segment 2 (pointwise): T6 -> T7" in text
    assert "cut: T7 is computed from fusion inputs apart from the matmul" in text
    assert "plan of segment 1:" in text and "plan of segment 3:" in text
    for attribute in ("spec", "params", "provenance", "kernel_name", "ptx", "source", "sass"):
        with pytest.raises(
            mp.UsageError,
            match=rf"3 segments .* 2 matmul kernels, so "
            rf"\.{attribute} has no single value",
        ):
            getattr(compiled, attribute)


def test_a_segmented_fusion_with_one_kernel_answers_for_it(tmp_path: Path) -> None:
    """One kernel segment: spec, params, provenance and kernel_name are that kernel's; dump
    writes its files."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.exp(fd.ops.reshape(fd.ops.relu(fd.ops.linear(a, w)), [32, 96])))
    compiled = mp.compile(fd, "a100", pm=PM, overrides={"stages": 3})
    assert isinstance(compiled, SegmentedFusion)
    (kernel,) = compiled.kernels.values()
    assert compiled.spec is kernel.spec and compiled.params.stages == 3
    assert compiled.provenance is kernel.provenance
    assert compiled.kernel_name == kernel.kernel_name
    assert compiled.spec.scheduler == "ampere"
    files = compiled.dump(tmp_path, ["plan"])
    assert {f.suffix for f in files} == {".txt", ".json"}
    assert all(kernel.kernel_name in f.read_text() for f in files)


@pytest.mark.parametrize("fusion", [_two_kernel_fusion, _framework_fusion], ids=["two", "fw"])
def test_invalid_inputs_to_a_segmented_compile_raise_as_before(fusion) -> None:  # noqa: ANN001
    """Bad overrides and unknown devices are refused, not segmented around."""
    fd = fusion()
    with pytest.raises(mp.UnknownParamError, match=r"unknown parameter 'stagez' from 'caller'"):
        mp.compile(fd, "a100", pm=PM, overrides={"stagez": 3})
    with pytest.raises(mp.UsageError, match=r"v100"):
        mp.compile(fd, "v100", pm=PM)
    with pytest.raises(mp.InvalidParamsError, match=r"stages"):
        mp.compile(_two_kernel_fusion(), "a100", pm=PM, overrides={"stages": 0})


def test_overrides_of_a_kernel_less_segmented_fusion_are_checked_by_name() -> None:
    """No kernel takes the overrides, but a misspelt one is still an error."""
    with pytest.raises(mp.UnknownParamError, match=r"'cta_tiles'.*did you mean 'cta_tile'"):
        mp.compile(_framework_fusion(), "h200", pm=PM, overrides={"cta_tiles": (64, 64, 32)})


def test_several_matmuls_no_scheduler_takes_are_segmented_one_kernel_each() -> None:
    """Analysis takes the llama FFN; on sm_80 planning refuses the two matmuls (only hopper
    builds horizontal fusions): one kernel per matmul (tests/unit/test_horizontal.py: one
    hopper kernel on the h200)."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w1 = fd.define_tensor([32, 48], dtype=mp.float16)
        w3 = fd.define_tensor([32, 48], dtype=mp.float16)
        gate = fd.ops.silu(fd.ops.matmul(x, w1))
        fd.add_output(fd.ops.cast(fd.ops.mul(gate, fd.ops.matmul(x, w3)), mp.float16))
    compiled = mp.compile(fd, "a100", pm=PM)
    assert isinstance(compiled, SegmentedFusion)
    assert "horizontal fusion of 2 matmuls sharing operand A is built by the hopper" in " ".join(
        compiled.reason.split()
    )
    assert sorted(compiled.kernels) == [0, 1]
    assert {k.spec.scheduler for k in compiled.kernels.values()} == {"ampere"}


def test_framework_segments_refuse_arrays_without_array_ops() -> None:
    from mmaplug.runtime.framework_segments import backend_for

    with pytest.raises(mp.UsageError, match="pass torch tensors or CuPy arrays \\(got numba"):
        backend_for("numba")


def test_framework_ops_take_scalar_inputs_given_as_ints() -> None:
    from mmaplug.runtime.framework_segments import backend_for, run_ops

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([3, 4])
        alpha = fd.define_scalar()
        fd.add_output(fd.ops.maximum(fd.ops.mul(x, alpha), 0.5))
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    (got,) = run_ops(fd.fusion, [data, 3], backend_for("numpy"))
    np.testing.assert_allclose(got, np.maximum(data * 3, 0.5), rtol=1e-6)


def test_framework_ops_agree_with_evaluate_where_float32_cancels_or_narrows() -> None:
    """A differential audit of run_ops against mp.evaluate found these: GELU's negative tail
    (1 + erf cancelled in float32: 57% off at -5.5, 0 from -6), a float32 sum asked in
    float64 (summed in float32: [1e8, 1, -1e8] gave 0), and a full reduction returned as a
    read-only numpy scalar instead of a 0-d array."""
    from mmaplug.runtime.framework_segments import backend_for, run_ops

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([5], dtype=mp.float32)
        y = fd.define_tensor([3], dtype=mp.float32)
        fd.add_output(fd.ops.gelu(x))
        fd.add_output(fd.ops.sum(y, [0], dtype=mp.float64))
        fd.add_output(fd.ops.sum(y, [0]))
    data = [np.array([-4, -5, -5.5, -6, -8], np.float32), np.array([1e8, 1, -1e8], np.float32)]
    gelu, wide, full = run_ops(fd.fusion, data, backend_for("numpy"))
    want = mp.evaluate(fd, data)
    np.testing.assert_allclose(gelu, want[0], rtol=1e-5)
    assert wide == want[1] == 1.0
    assert isinstance(full, np.ndarray) and full.shape == () and full.flags.writeable


def test_a_symbolic_fusion_no_kernel_takes_is_segmented_per_call_shapes() -> None:
    """-1 extents: each call's shapes are compiled as a concrete fusion, once per shapes."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, 8])
        w = fd.define_tensor([6, 8])
        fd.add_output(fd.ops.relu(fd.ops.linear(x, w)))
    compiled = mp.compile(fd, "a100", pm=PM)
    assert isinstance(compiled, SymbolicSegments)
    assert "operand T0 is float32" in compiled.reason
    with pytest.raises(mp.UsageError, match=r"segmented per call's shapes: nothing is compiled"):
        _ = compiled.explain()
    weights = RNG.standard_normal((6, 8)).astype(np.float32)
    for m in (3, 5, 3):
        inputs = [RNG.standard_normal((m, 8)).astype(np.float32), weights]
        (got,) = compiled.execute(inputs)
        np.testing.assert_allclose(got, mp.evaluate(fd, inputs)[0], rtol=1e-5, atol=1e-6)
        assert [s.kind for s in compiled.latest.segments] == ["framework", "pointwise"]
    assert compiled.specialize([(5, 8), weights]) is compiled.latest  # compiled once per shapes
    assert "segment 1 (framework): T0, T1 -> T2" in compiled.explain()
    with pytest.raises(mp.LaunchError, match=r"takes 2 inputs; got 1"):
        compiled.execute([weights])
    with pytest.raises(mp.LaunchError, match=r"T0"):
        compiled.execute([np.ones((3, 9), np.float32), weights])
    with pytest.raises(mp.UnknownParamError, match=r"'stagez'"):
        mp.compile(fd, "a100", pm=PM, overrides={"stagez": 2})


def test_a_symbolic_fusion_of_several_matmuls_is_one_kernel_per_matmul_per_shapes() -> None:
    """The llama FFN with a symbolic M on sm_80: each shape's fusion compiles to two kernels."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, 32], dtype=mp.float16)
        w1 = fd.define_tensor([32, 48], dtype=mp.float16)
        w3 = fd.define_tensor([32, 48], dtype=mp.float16)
        gate = fd.ops.silu(fd.ops.matmul(x, w1))
        fd.add_output(fd.ops.cast(fd.ops.mul(gate, fd.ops.matmul(x, w3)), mp.float16))
    compiled = mp.compile(fd, "a100", pm=PM)
    assert isinstance(compiled, SymbolicSegments) and compiled.reason.startswith("several")
    one = compiled.specialize([(16, 32), (32, 48), (32, 48)])
    assert isinstance(one, SegmentedFusion) and sorted(one.kernels) == [0, 1]
    assert one.kernels[0].spec.problem.m == 16
    with pytest.raises(mp.UsageError, match=r"2 matmul kernels, so .params has no single"):
        _ = compiled.params


def test_a_prologue_no_scheduler_takes_is_computed_in_a_segment_before_the_kernel() -> None:
    """sin(A) on the h200 without ampere: hopper declines operand prologues, so the prologue
    is a pointwise segment and hopper computes the matmul (not a NoSchedulerError)."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    pm.set_blocked("ampere")
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([256, 128], dtype=mp.float16)
        b = fd.define_tensor([256, 128], dtype=mp.float16)
        fd.add_output(fd.ops.linear(fd.ops.cast(fd.ops.sin(a), mp.float16), b))
    compiled = mp.compile(fd, "h200", pm=pm)
    assert isinstance(compiled, SegmentedFusion)
    assert [s.kind for s in compiled.segments] == ["pointwise", "matmul"]
    assert compiled.spec.scheduler == "hopper"
    assert "no scheduler takes it with its operand prologue" in compiled.explain()
    assert "hopper: an operand prologue (sin)" in " ".join(compiled.reason.split())
    # with no prologue, a refusal of every scheduler is still an error
    with mp.FusionDefinition() as plain:
        x = plain.define_tensor([256, 128], dtype=mp.float16)
        plain.add_output(plain.ops.linear(x, plain.define_tensor([256, 128], dtype=mp.float16)))
    pm.set_blocked("hopper")
    with pytest.raises(mp.NoSchedulerError, match="no scheduler accepts"):
        mp.compile(plain, "h200", pm=pm)
