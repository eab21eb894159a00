"""FP8 through the IR, mp.evaluate, analysis and planning (the kernels: sim, ptx and gpu tiers)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.heuristics.default import hopper_params
from mmaplug.ir.dtypes import DType
from mmaplug.ir.evaluate import round_to
from mmaplug.planning.device import get_device
from mmaplug.planning.params import TileShape
from mmaplug.planning.scheduler import violations
from mmaplug.plugins.hopper.scheduler import SCHEDULER as HOPPER

H200 = get_device("h200")
FP8 = [mp.float8_e4m3fn, mp.float8_e5m2]


def scaled(m: int, n: int, k: int, *, dtype=mp.float8_e4m3fn, rowwise=True, bias=False,
           out=mp.bfloat16, b_k_inner=True) -> mp.FusionDefinition:  # fmt: skip
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=dtype)
        b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1] if b_k_inner else [1, 0])
        sa = fd.define_tensor([m, 1] if rowwise else [], dtype=mp.float32)
        sb = fd.define_tensor([1, n] if rowwise else [1], dtype=mp.float32)
        extra = {"bias": fd.define_tensor([n], dtype=mp.bfloat16)} if bias else {}
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=out, **extra))
    return fd


def inputs(fd: mp.FusionDefinition, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_dtypes_have_letters_sizes_and_numpy_types(dtype: DType) -> None:
    assert dtype.itemsize == 1 and dtype.is_float8 and dtype.is_narrow and not dtype.is_half
    assert dtype.char == {"float8_e4m3fn": "Q", "float8_e5m2": "R"}[dtype.label]
    assert dtype.numpy == np.dtype(getattr(ml_dtypes, dtype.label))
    assert dtype.finite_max == {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}[dtype.label]


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_casts_to_fp8_saturate_and_keep_nan(dtype: DType) -> None:
    top = dtype.finite_max
    x = np.array([1e9, -np.inf, np.inf, np.nan, 0.3, -2 * top, top])
    got = round_to(x, dtype)
    assert list(got[[0, 1, 2, 5, 6]]) == [top, -top, top, -top, top]
    assert np.isnan(got[3])
    assert got[4] == float(np.float64(0.3).astype(dtype.numpy))  # rounded, not saturated


def test_a_cast_to_fp8_in_a_fusion_saturates() -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([4], dtype=mp.float32)
        fd.add_output(fd.ops.cast(x, mp.float8_e4m3fn))
    (out,) = mp.evaluate(fd, [np.array([1000.0, -1000.0, np.nan, 1.0], np.float32)])
    assert out.dtype == DType.float8_e4m3fn.numpy
    assert out.astype(np.float64)[[0, 1, 3]].tolist() == [448.0, -448.0, 1.0]
    assert np.isnan(out.astype(np.float64)[2])


def test_a_cast_to_fp8_in_a_framework_segment_saturates_too() -> None:
    """The framework's ops (a segment no kernel takes) cast to FP8 as the kernels and
    mp.evaluate do: saturating, NaN kept (a plain conversion gave NaN or an infinity)."""
    from mmaplug.runtime.framework_segments import backend_for, run_ops

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([4], dtype=mp.float32)
        fd.add_output(fd.ops.cast(x, mp.float8_e4m3fn))
        fd.add_output(fd.ops.cast(x, mp.float8_e5m2))
    data = np.array([1000.0, -1e6, np.nan, 1.0], np.float32)
    framework = run_ops(fd.fusion, [data], backend_for("numpy"))
    e5m2 = np.array([1000.0, -57344.0, np.nan, 1.0]).astype(mp.float8_e5m2.numpy)
    same = backend_for("numpy").cast(e5m2, mp.float8_e5m2)  # an FP8 copy: as it is
    narrowed = backend_for("numpy").cast(e5m2, mp.float8_e4m3fn)  # FP8 to FP8: saturating
    assert same.astype(float)[[0, 1, 3]].tolist() == [1024.0, -57344.0, 1.0]
    assert narrowed.astype(float)[[0, 1, 3]].tolist() == [448.0, -448.0, 1.0]
    for got, want in zip(framework, mp.evaluate(fd, [data]), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    assert framework[1].astype(float)[1] == -57344.0


def test_an_fp8_input_is_taken_as_given() -> None:
    """An input in its declared FP8 type is read exactly: an e5m2 infinity stays infinite (IEEE:
    inf * 0 is NaN, as in the kernels), where saturating it as a cast gave +-57344; an input of
    another type is converted as a cast would."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([2, 2], dtype=mp.float8_e5m2)
        fd.add_output(fd.ops.cast(a, mp.float32))
        fd.add_output(fd.ops.mul(fd.ops.cast(a, mp.float32), 0.0))
    given = np.array([[np.inf, -np.inf], [1.0, 2.0]]).astype(mp.float8_e5m2.numpy)
    same, times_zero = mp.evaluate(fd, [given])
    assert same[0].tolist() == [np.inf, -np.inf] and np.isnan(times_zero[0]).all()
    (converted, _) = mp.evaluate(fd, [np.array([[1e9, 1.0], [1.0, 2.0]])])
    assert converted[0, 0] == 57344.0


def test_an_fp8_matmul_is_float32_and_arithmetic_on_fp8_promotes() -> None:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([8, 16], dtype=mp.float8_e5m2)
        b = fd.define_tensor([16, 4], dtype=mp.float8_e5m2)
        y = fd.ops.matmul(a, b)
        z = fd.ops.mul(a, 2.0)
        fd.add_output(y)
        fd.add_output(z)
    assert y.dtype is DType.float32 and z.dtype is DType.float32
    a_, b_ = inputs(fd)
    y_, z_ = mp.evaluate(fd, [a_, b_])
    np.testing.assert_array_equal(
        y_, (a_.astype(np.float64) @ b_.astype(np.float64)).astype(np.float32)
    )
    np.testing.assert_array_equal(z_, a_.astype(np.float32) * 2)


@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
def test_scaled_mm_is_torchs_definition(rowwise: bool) -> None:
    fd = scaled(24, 40, 64, rowwise=rowwise, bias=True)
    a, b, sa, sb, bias = inputs(fd, seed=3)
    (got,) = mp.evaluate(fd, [a, b, sa, sb, bias])
    f64 = [x.astype(np.float64) for x in (a, b, sa, sb, bias)]
    ref = (f64[0] @ f64[1]) * f64[2] * f64[3] + f64[4]
    assert got.dtype == DType.bfloat16.numpy
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2**-7, atol=1e-2)


def test_the_problem_of_a_scaled_mm_has_fp8_letters() -> None:
    problem = mp.matmul_problem(scaled(256, 128, 512).fusion)
    assert problem.precision == "QST" and problem.layout == "TN"
    assert problem.epilogue_ops == ("mul", "mul", "cast")
    assert (
        mp.matmul_problem(scaled(64, 64, 64, dtype=mp.float8_e5m2, out=mp.float16).fusion).precision
        == "RSH"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scale_a": [3, 1]}, "scale_a"),
        ({"scale_a": [64, 2]}, r"or \[64, 1\] and \[1, 1\] \(blocks of 1x128 and 128x128\)"),
        ({"scale_b": [64, 1]}, "scale_b"),
        ({"scale_dtype": mp.bfloat16}, "must be float32"),
        ({"out_dtype": mp.float8_e4m3fn}, "out_dtype float8_e4m3fn is not accepted"),
        ({"dtype": mp.float16}, "it takes float8_e4m3fn or float8_e5m2"),
    ],
)
def test_scaled_mm_refuses_what_it_does_not_define(change: dict, message: str) -> None:
    m, n, k = 64, 32, 128
    with pytest.raises(mp.FusionError, match=message):
        with mp.FusionDefinition() as fd:
            dtype = change.get("dtype", mp.float8_e4m3fn)
            a = fd.define_tensor([m, k], dtype=dtype)
            b = fd.define_tensor([k, n], dtype=dtype)
            sdt = change.get("scale_dtype", mp.float32)
            sa = fd.define_tensor(change.get("scale_a", [m, 1]), dtype=sdt)
            sb = fd.define_tensor(change.get("scale_b", [1, n]), dtype=sdt)
            fd.ops.scaled_mm(a, b, sa, sb, out_dtype=change.get("out_dtype", mp.bfloat16))


def quantized(m: int, n: int, k: int, *, operands=mp.float8_e4m3fn, out=mp.float8_e4m3fn,
              extra: str | None = None) -> mp.FusionDefinition:  # fmt: skip
    """``cast(matmul(a, b) * out_scale, out)`` first; *extra*: a second output ("bf16": the
    product as bfloat16)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])
        scale = fd.define_tensor([], dtype=mp.float32)
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, scale), out))
        if extra == "bf16":
            fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd


@pytest.mark.parametrize("out", FP8, ids=str)
def test_an_fp8_first_output_is_analysed_with_its_cast(out: DType) -> None:
    problem = mp.matmul_problem(quantized(64, 64, 64, out=out, extra="bf16").fusion)
    assert problem.output_dtype is out and problem.precision == f"QS{out.char}"
    assert problem.epilogue_ops == ("mul", "cast", "cast")


def test_a_cast_to_fp8_inside_the_epilogue_is_analysed() -> None:
    """The FP8 output's value round-trips through FP8 before a second, float32 output."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 64], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([64, 64], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        q = fd.ops.cast(fd.ops.mul(fd.ops.matmul(a, b), 8.0), mp.float8_e5m2)
        fd.add_output(q)
        fd.add_output(fd.ops.mul(fd.ops.cast(q, mp.float32), 0.125))
    analysis = mp.analyze(fd.fusion)
    casts = [i.arg for i in analysis.epilogue.instrs if i.op == "cast"]
    assert DType.float8_e5m2 in casts
    assert [o.dtype for o in analysis.epilogue.outputs] == [DType.float8_e5m2, DType.float32]


def test_fp8_written_or_rounded_to_needs_an_fp8_first_output() -> None:
    """The schedulers decide on the first output's dtype: FP8 elsewhere is refused with the fix."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 64], dtype=mp.float16)
        b = fd.define_tensor([64, 64], dtype=mp.float16, stride_order=[0, 1])
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(y, mp.float16))
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
    with pytest.raises(mp.UnsupportedFusionError, match="first output T\\d+ is float16.*first"):
        mp.matmul_problem(fd.fusion)
    with mp.FusionDefinition() as fd:  # a fake-quantized float16 output: the same rule
        a = fd.define_tensor([64, 64], dtype=mp.float16)
        b = fd.define_tensor([64, 64], dtype=mp.float16, stride_order=[0, 1])
        fd.add_output(fd.ops.cast(fd.ops.cast(fd.ops.matmul(a, b), mp.float8_e4m3fn), mp.float16))
    with pytest.raises(mp.UnsupportedFusionError, match="a cast to float8_e4m3fn"):
        mp.matmul_problem(fd.fusion)


def test_fp8_outputs_are_written_on_sm89_and_newer_and_the_others_say_why() -> None:
    """Half operands of 8 rows, an FP8 output: decode writes it on the h200 (its epilogue's
    ``cvt.rn.satfinite``, sm_89+), ampere declines it; on an a100 nothing takes it, and each
    scheduler says why."""
    fd = quantized(8, 4096, 4096, operands=mp.float16)
    spec = mp.plan_problem(mp.matmul_problem(fd.fusion), "h200")
    assert spec.scheduler == "decode"
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert "builds no FP8 conversions" in rejected["ampere"]
    with pytest.raises(mp.NoSchedulerError, match="builds no FP8 conversions") as info:
        mp.plan_problem(mp.matmul_problem(fd.fusion), "a100")
    assert "writes float8_e4m3fn with cvt.rn.satfinite, which needs sm_89" in str(info.value)
    big = quantized(64, 4096, 4096, operands=mp.float16)  # above decode's rows: hopper only
    assert mp.plan_problem(mp.matmul_problem(big.fusion), "h200").scheduler == "hopper"


def test_fp8_outputs_pack_only_in_whole_16_byte_vectors() -> None:
    """A packed FP8 chunk row must be whole 16-byte vectors: chunks of 8 columns are not."""
    from mmaplug.plugins.hopper.smem import packed_buffers

    e4m3, f16 = DType.float8_e4m3fn, DType.float16
    assert packed_buffers((e4m3,), 64) == 2 and packed_buffers((e4m3,), 48) == 2  # 32, 16
    assert packed_buffers((e4m3,), 72) == 0 and packed_buffers((f16,), 72) == 2  # chunks of 8
    assert packed_buffers((e4m3, DType.bfloat16), 64) == 1


def test_fp8_operands_plan_to_decode_or_hopper_and_ampere_says_why() -> None:
    """8 rows of FP8 operands: decode on the h200 (mma.sync m16n8k32), hopper from M = 17 on;
    ampere declines the operand type."""
    spec = mp.plan_problem(mp.matmul_problem(scaled(8, 4096, 4096).fusion), "h200")
    assert spec.scheduler == "decode"
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert "not float8_e4m3fn" in rejected["ampere"]
    spec = mp.plan_problem(mp.matmul_problem(scaled(17, 4096, 4096).fusion), "h200")
    assert spec.scheduler == "hopper"


def test_an_n_major_fp8_operand_is_copied_k_major_and_explain_says_why() -> None:
    """hopper declines the layout (FP8 wgmma reads K-major operands only): mp.compile copies
    the operand K-major in a segment of its own, the kernel reads the copy (TN)."""
    compiled = mp.compile(scaled(256, 256, 256, b_k_inner=False).fusion, device="h200")
    assert [s.kind for s in compiled.segments] == ["pointwise", "matmul"]
    text = compiled.explain()
    assert "T1 is copied K-major first" in text and "FP8 wgmma reads K-major operands" in text
    (kernel,) = compiled.kernels.values()
    assert kernel.spec.problem.layout == "TN" and kernel.spec.scheduler == "hopper"


def test_a_layout_no_kernel_takes_even_k_major_is_still_refused() -> None:
    """A K-major copy is made only when a kernel then takes the problem: on sm_80 no scheduler
    runs FP8, so the refusal stands."""
    with pytest.raises(mp.NoSchedulerError, match="float8_e4m3fn"):
        mp.compile(scaled(256, 256, 256, b_k_inner=False).fusion, device="a100")


def test_k_of_one_is_refused_not_copied_k_major_forever() -> None:
    """K = 1 reads as neither operand K-major, and a copy does not change that: compile refuses
    it with the reasons (it recursed until Python's stack ran out)."""
    with pytest.raises(mp.NoSchedulerError, match="k=1"):
        mp.compile(scaled(64, 64, 1).fusion, device="h200")


def fp8_problem(m: int, n: int, k: int) -> MatmulProblem:
    return MatmulProblem(
        m=m, n=n, k=k, a_k_inner=True, b_k_inner=True, operand_dtype=DType.float8_e4m3fn,
        output_dtype=DType.bfloat16, vector_widths=VectorWidths(a=16, b=16, epilogue=8),
    )  # fmt: skip


@pytest.mark.parametrize(
    "shape", [(4096, 4096, 4096), (8192, 8192, 8192), (128, 4096, 4096), (64, 48, 64)]
)
def test_the_default_fp8_plan_uses_k32_wgmmas_and_whole_fp8_swizzle_rows(shape: tuple) -> None:
    problem = fp8_problem(*shape)
    params = hopper_params(problem, H200)
    assert params.instruction_tile == TileShape(64, params.warp_tile.n, 32)
    assert params.cta_tile.k % 128 == 0
    assert violations(HOPPER, params, problem, H200) == []


def test_fp8_rules_name_the_k_of_fp8_wgmmas_and_boxes() -> None:
    problem = fp8_problem(4096, 4096, 4096)
    params = hopper_params(problem, H200).with_overrides(
        cta_tile=(128, 256, 64), warp_tile=(64, 256, 64), instruction_tile=(64, 256, 16)
    )
    found = {v.field: v.message for v in violations(HOPPER, params, problem, H200)}
    assert "instruction_tile=(64, 256, 32)" in found["instruction_tile"]
    assert "128, 256" in found["cta_tile"] and "cta_tile.k=128" in found["cta_tile"]


def test_an_fp8_kernel_uses_the_fp8_wgmma_and_byte_boxes() -> None:
    """The generated source (no GPU needed): k32 wgmmas without transpose bits, 128-element
    K boxes, a stage of bytes."""
    from mmaplug.plugins.hopper.config import HopperKernelConfig
    from mmaplug.plugins.hopper.kernel_codegen import generate_source

    cfg = HopperKernelConfig(
        operand_dtype=DType.float8_e5m2, cta_tile=(128, 128, 256), warp_tile=(64, 128, 256)
    )
    src = generate_source(cfg, sim=False)
    calls = [line.strip() for line in src.splitlines() if "= wgmma_e5m2(" in line]
    assert len(calls) == 256 // 32  # a consumer's 64-row block: eight k32 steps
    assert all(c.endswith((", scale)", ", 1)")) for c in calls)  # no transpose bits
    assert "wgmma_f16" not in src and "k0 + 128" in src  # the second 128-byte K box


def test_a_scale_given_as_a_scalar_says_scales_are_tensors() -> None:
    with pytest.raises(mp.FusionError, match=r"scale_a is S2, not a tensor; scales are float32"):
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([16, 32], dtype=mp.float8_e4m3fn)
            b = fd.define_tensor([32, 16], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
            fd.ops.scaled_mm(
                a, b, fd.define_scalar(dtype=mp.float32), fd.define_scalar(dtype=mp.float32)
            )
