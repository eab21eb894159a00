"""FP8 in the epilogue (issue 24): FP8 epilogue inputs (an FP8 residual) through analysis,
planning and the generated source. (The kernels: sim, ptx and gpu tiers.)"""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.epilogue import EpilogueInput, EpilogueOutput, EpilogueProgram, Instr
from mmaplug.codegen.emitter import fp8_imports
from mmaplug.ir.dtypes import DType
from mmaplug.ir.evaluate import round_to
from mmaplug.planning.plan import explain

FP8 = [mp.float8_e4m3fn, mp.float8_e5m2]


def residual(m: int, n: int, k: int, *, operands=mp.float8_e4m3fn, res=mp.float8_e4m3fn,
             out=mp.bfloat16) -> mp.FusionDefinition:  # fmt: skip
    """``cast(matmul(a, b) (scaled per tensor for FP8 operands) + residual, out)``, the
    residual ``[m, n]`` of dtype *res*."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])
        if operands.is_float8:
            sa = fd.define_tensor([], dtype=mp.float32)
            sb = fd.define_tensor([], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        r = fd.define_tensor([m, n], dtype=res)
        fd.add_output(fd.ops.cast(fd.ops.add(y, r), out))
    return fd


def inputs(fd: mp.FusionDefinition, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]


# -- FP8 epilogue inputs --------------------------------------------------------------------------


@pytest.mark.parametrize("res", FP8, ids=str)
def test_an_fp8_residual_is_an_epilogue_input_of_its_dtype(res: DType) -> None:
    """Analysis takes the FP8 residual as it is (bytes, widened in the kernel) and the problem
    says what the epilogue reads, for the schedulers to decide on."""
    fd = residual(64, 64, 64, res=res)
    analysis = mp.analyze(fd.fusion)
    assert [i.dtype for i in analysis.epilogue.inputs] == [DType.float32, DType.float32, res]
    assert analysis.problem.epilogue_input_dtypes == (DType.float32, DType.float32, res)
    assert analysis.problem.output_dtype is DType.bfloat16
    assert analysis.epilogue_inputs[-1].dtype is res


def test_evaluate_widens_an_fp8_residual_exactly() -> None:
    """mp.evaluate adds the FP8 values themselves (every FP8 value is a float32) to the
    product (rounded to bfloat16, the matmul's type)."""
    fd = residual(16, 24, 32, operands=mp.bfloat16, res=mp.float8_e5m2, out=mp.float32)
    a, b, r = inputs(fd, seed=1)
    (got,) = mp.evaluate(fd, [a, b, r])
    product = round_to(a.astype(np.float64) @ b.astype(np.float64), DType.bfloat16)
    ref = product + r.astype(np.float64)
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=1e-6)


def test_fp8_epilogue_inputs_need_sm89_and_ampere_declines_them() -> None:
    """16-bit operands of 8 rows with an FP8 residual: decode takes it on an H200 (it widens
    the bytes with cvt.rn.f16x2, sm_89+), ampere declines it naming the FP8 input; with decode
    blocked hopper takes it; on an A100 nothing does, each naming why."""
    fd = residual(8, 4096, 4096, operands=mp.float16, res=mp.float8_e5m2)
    problem = mp.matmul_problem(fd.fusion)
    spec = mp.plan_problem(problem, "h200")
    assert spec.scheduler == "decode"
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert "reads FP8 inputs (float8_e5m2)" in rejected["ampere"]
    assert "epilogue reads float8_e5m2" in explain(spec)
    no_decode = mp.make_plugin_manager(load_entrypoints=False, block=["decode"])
    assert mp.plan_problem(problem, "h200", pm=no_decode).scheduler == "hopper"
    with pytest.raises(mp.NoSchedulerError, match=r"FP8 inputs \(float8_e5m2\)") as error:
        mp.plan_problem(problem, "a100")
    assert "FP8 epilogue inputs (float8_e5m2) with cvt.rn.f16x2, which needs sm_89" in str(
        error.value
    )


def test_a_16_bit_residual_plans_as_before() -> None:
    """Without FP8 inputs decode still takes 8 rows (the new problem field only declines FP8)."""
    fd = residual(8, 4096, 4096, operands=mp.float16, res=mp.float16, out=mp.float16)
    assert mp.plan_problem(mp.matmul_problem(fd.fusion), "h200").scheduler == "decode"


def test_fp8_imports_widen_only_for_inputs() -> None:
    """An FP8 input imports its widening alone; an FP8 output also the narrowing, the pair form
    and the 4-byte store; a program without FP8 imports nothing."""
    acc = Instr(op="acc")
    read = Instr(op="input", arg=0)
    add = Instr(op="add", srcs=(0, 1))
    inp = EpilogueInput(name="r", dtype=DType.float8_e5m2, axes=("m", "n"))
    prog = EpilogueProgram(
        inputs=(inp,), instrs=(acc, read, add),
        outputs=(EpilogueOutput(name="y", src=2, dtype=DType.bfloat16),),
    )  # fmt: skip
    assert fp8_imports(prog) == "from mmaplug.cuda.intrinsics import e5m2_to_f32"
    both = EpilogueProgram(
        inputs=(inp,), instrs=(acc, read, add),
        outputs=(EpilogueOutput(name="y", src=2, dtype=DType.float8_e4m3fn),),
    )  # fmt: skip
    assert fp8_imports(both) == (
        "from mmaplug.cuda.intrinsics import f32_to_e4m3, e4m3_to_f32, f32x2_to_e4m3x2, "
        "e5m2_to_f32, st_global_b32"
    )
    plain = EpilogueProgram(outputs=(EpilogueOutput(name="y", src=0, dtype=DType.float16),))
    assert fp8_imports(plain) == ""


@pytest.mark.parametrize("smem", [False, True], ids=["registers", "smem"])
def test_the_hopper_kernel_loads_an_fp8_residual_as_bytes(smem: bool) -> None:
    """The generated source widens the residual's bytes with the FP8 intrinsic, and the kernel
    takes the residual as a uint8 array."""
    from mmaplug.plugins.hopper.kernel import kernel_signatures

    compiled = mp.compile(residual(256, 256, 256).fusion, "h200",
                          overrides={"use_smem_epilogue": smem})  # fmt: skip
    source = compiled.source
    assert "e4m3_to_f32(in2[" in source
    config = compiled._artifact.config
    args = kernel_signatures(config)["hopper_gemm"].args
    assert str(args[1 + 2]) == "array(uint8, 1d, C)"  # maps, in0, in1, in2 (the residual)


# -- the amax output (delayed scaling) -------------------------------------------------------------


def quantized_amax(
    m: int, n: int, k: int, *, batch: int = 0, amax=None, weight: bool = False
) -> mp.FusionDefinition:
    """A quantised layer with delayed scaling: ``y8 = cast(y * out_scale, e4m3)`` first, then
    ``amax(y)`` over every output dim (or what *amax* (fd, y) returns, as the second output);
    B N-major, or with *weight* K-major (a weight [N, K]: the decode kernel's layout)."""
    lead = [batch] if batch else []
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype=mp.bfloat16)
        order = [2, 1, 0][-len(lead) - 2 :]  # row-major, N innermost
        if weight:  # K innermost
            order[-2:] = [0, 1]
        b = fd.define_tensor([*lead, k, n], dtype=mp.bfloat16, stride_order=order)
        scale = fd.define_tensor([], dtype=mp.float32)
        y = fd.ops.mul(fd.ops.matmul(a, b), scale)
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        fd.add_output(amax(fd, y) if amax else fd.ops.amax(y, list(range(len(lead) + 2))))
    return fd


def test_max_is_its_own_op_and_amax_is_max_of_abs() -> None:
    """fd.ops.max builds a MaxReductionOp (never a sum, which the mul+sum recogniser reads as
    a matmul), keeping the input's dtype; fd.ops.amax is max(abs(x)), float32 for half x."""
    from mmaplug.ir.ops import MaxReductionOp, ReductionOp, UnaryOp

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([3, 4], dtype=mp.bfloat16)
        m = fd.ops.max(x, [1])
        am = fd.ops.amax(x, [0, 1])
        fd.add_output(m)
        fd.add_output(am)
    assert isinstance(m.definition, MaxReductionOp) and not isinstance(m.definition, ReductionOp)
    assert m.dtype is DType.bfloat16 and m.shape == (3,)
    assert am.dtype is DType.float32 and am.shape == ()
    src = am.definition.inputs[0]
    assert isinstance(src.definition, UnaryOp) and src.definition.op == "abs"
    assert repr(am.definition) == f"{am.name} = max({src.name}, dims=[0, 1])"


def test_a_max_of_a_product_is_not_a_matmul() -> None:
    """max(a * b, k) has the shape of a mul+sum but is no matmul: no pattern is found."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([8, 1, 16], dtype=mp.float16)
        b = fd.define_tensor([1, 4, 16], dtype=mp.float16)
        fd.add_output(fd.ops.max(fd.ops.mul(a, b), [2]))
    assert mp.find_matmul_patterns(fd.fusion) == []
    with mp.FusionDefinition() as fd2:
        a = fd2.define_tensor([8, 1, 16], dtype=mp.float16)
        b = fd2.define_tensor([1, 4, 16], dtype=mp.float16)
        fd2.add_output(fd2.ops.sum(fd2.ops.mul(a, b), [2]))
    assert [p.kind for p in mp.find_matmul_patterns(fd2.fusion)] == ["mul_sum"]


def test_evaluate_computes_max_and_amax_with_nan_propagating() -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([2, 3], dtype=mp.float32)
        fd.add_output(fd.ops.max(x, [1]))
        fd.add_output(fd.ops.amax(x, [0, 1]))
    x = np.array([[-5.0, 1.0, 2.0], [0.5, -0.25, 3.0]], np.float32)
    row_max, amax = mp.evaluate(fd, [x])
    assert row_max.tolist() == [2.0, 3.0] and amax.shape == () and float(amax) == 5.0
    x[1, 1] = np.nan
    row_max, amax = mp.evaluate(fd, [x])
    assert row_max[0] == 2.0 and np.isnan(row_max[1]) and np.isnan(amax)


@pytest.mark.parametrize("batch", [0, 3], ids=["2d", "batch3"])
def test_an_amax_over_the_whole_output_is_an_amax_output(batch: int) -> None:
    """The amax becomes a float32 [] output of the program (its source the value it reduces),
    listed in the problem's epilogue ops; the FP8 output stays first."""
    fd = quantized_amax(64, 32, 48, batch=batch)
    analysis = mp.analyze(fd.fusion)
    y8, amax = analysis.epilogue.outputs
    assert not y8.amax and y8.dtype is DType.float8_e4m3fn
    assert amax.amax and amax.dtype is DType.float32
    assert analysis.epilogue.instrs[amax.src].op == "mul"  # y = product * scale, before rounding
    assert analysis.outputs[1].shape == () and analysis.outputs[1].dim_roles == ()
    assert analysis.problem.epilogue_ops[-1] == "amax"
    assert analysis.problem.output_dtype is DType.float8_e4m3fn
    assert [j for j, _ in analysis.epilogue.stored] == [0]
    assert [j for j, _ in analysis.epilogue.amaxes] == [1]


@pytest.mark.parametrize(
    ("amax", "message"),
    [
        (lambda fd, y: fd.ops.amax(y, [1]), r"keeps dims of shape \[64\]"),
        (lambda fd, y: fd.ops.max(y, [0, 1]), "a max of a value, not of its abs"),
        (lambda fd, y: fd.ops.max(fd.ops.neg(fd.ops.abs(y)), [0, 1]), "not of its abs"),
        (lambda fd, y: fd.ops.sum(fd.ops.abs(y), [0, 1]), "or an amax over all of them"),
    ],
    ids=["partial_dims", "max_without_abs", "max_of_neg_abs", "sum_reduction"],
)
def test_other_reductions_are_refused_saying_what_is_accepted(amax, message: str) -> None:  # noqa: ANN001
    fd = quantized_amax(64, 32, 48, amax=amax)
    with pytest.raises(mp.UnsupportedFusionError, match=message):
        mp.matmul_problem(fd.fusion)
    assert len(mp.evaluate(fd, inputs(fd))) == 2  # the reference still runs it


def test_an_amax_of_part_of_the_output_is_refused() -> None:
    """The amax of a per-channel bias spans N only: not the whole output."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([64, 48], dtype=mp.bfloat16)
        b = fd.define_tensor([48, 32], dtype=mp.bfloat16)
        bias = fd.define_tensor([32], dtype=mp.float32)
        y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [64, 32], [1]))
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(bias, [0]))
    with pytest.raises(mp.UnsupportedFusionError, match="spans N dims only.*every dim of the"):
        mp.matmul_problem(fd.fusion)


def test_an_amax_as_first_output_or_read_in_the_epilogue_is_refused() -> None:
    with pytest.raises(mp.UnsupportedFusionError, match="first output.*add the tensor output"):
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([64, 48], dtype=mp.bfloat16)
            b = fd.define_tensor([48, 32], dtype=mp.bfloat16)
            y = fd.ops.matmul(a, b)
            fd.add_output(fd.ops.amax(y, [0, 1]))
            fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        mp.matmul_problem(fd.fusion)
    with pytest.raises(mp.UnsupportedFusionError, match="read inside the epilogue"):
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([64, 48], dtype=mp.bfloat16)
            b = fd.define_tensor([48, 32], dtype=mp.bfloat16)
            y = fd.ops.matmul(a, b)
            amax = fd.ops.amax(y, [0, 1])
            fd.add_output(fd.ops.cast(fd.ops.div(y, amax), mp.float8_e4m3fn))
            fd.add_output(amax)
        mp.matmul_problem(fd.fusion)


def test_decode_and_hopper_take_an_amax_and_ampere_declines_it() -> None:
    """The amax of a quantised layer of 8 rows runs on decode (an FP8 output: sm_89+), and on
    hopper with decode blocked; a 16-bit product and its amax run on decode on an A100 too,
    where ampere declines the reduction."""
    fd = quantized_amax(8, 4096, 4096, weight=True)
    problem = mp.matmul_problem(fd.fusion)
    spec = mp.plan_problem(problem, "h200")
    assert spec.scheduler == "decode" and spec.name.endswith("_cast_amax")
    no_decode = mp.make_plugin_manager(load_entrypoints=False, block=["decode"])
    spec = mp.plan_problem(problem, "h200", pm=no_decode)
    assert spec.scheduler == "hopper" and spec.name.endswith("_cast_amax")

    def bf16_amax(m: int) -> mp.MatmulProblem:  # no FP8 at all
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([m, 4096], dtype=mp.bfloat16)
            b = fd.define_tensor([4096, 4096], dtype=mp.bfloat16, stride_order=[0, 1])
            y = fd.ops.matmul(a, b)
            fd.add_output(y)
            fd.add_output(fd.ops.amax(y, [0, 1]))
        return mp.matmul_problem(fd.fusion)

    spec = mp.plan_problem(bf16_amax(8), "a100")
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert spec.scheduler == "decode"
    assert "builds no reductions" in rejected["ampere"]
    with pytest.raises(mp.NoSchedulerError, match="amax output"):
        mp.plan_problem(bf16_amax(64), "a100")  # past decode's rows


def test_the_decode_source_keeps_a_running_max_and_one_red_per_warp() -> None:
    """Each element folds |v| into amx1 (its bits) inside the bounds check; after the element
    loop every lane reduces over its warp and lane 0 folds into out1[0]."""
    source = mp.compile(quantized_amax(4, 256, 256, weight=True).fusion, "h200").source
    assert "decode_gemm" in source
    loop, _, flush = source.partition("amx1 = warp_max_u32(amx1)")
    assert "amx1 = uint32(0)" in loop and "amx1 = max(amx1, f32_abs_bits(" in loop
    assert "if tid % 32 == 0:" in flush and "red_global_max_u32(out1, 0, amx1)" in flush


def test_the_hopper_source_keeps_a_running_max_and_one_red_per_warp() -> None:
    """Each element folds |v| into amx1 (its bits); after the unit loop the warp reduces and
    lane 0 folds into out1[0]; the packed step function takes and returns the maximum."""
    compiled = mp.compile(quantized_amax(256, 256, 256).fusion, "h200",
                          overrides={"use_smem_epilogue": True})  # fmt: skip
    source = compiled.source
    assert "amx1 = uint32(0)" in source
    assert "amx1 = max(amx1, f32_abs_bits(" in source
    assert "amx1 = warp_max_u32(amx1)" in source and "red_global_max_u32(out1, 0, amx1)" in source
    assert "return amx1" in source and "amx1 = packed_step(" in source
    assert "out1[" not in source.replace("out1[0]", "")  # no element stores into the scalar


def test_two_amaxes_each_keep_their_own_maximum() -> None:
    """amax(y) and amax(y + residual): two running maxima, the step function returns both."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([256, 512], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([512, 256], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa, sb = (fd.define_tensor([], dtype=mp.float32) for _ in "ab")
        y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        z = fd.ops.add(y, fd.define_tensor([256, 256], dtype=mp.float8_e5m2))
        fd.add_output(fd.ops.cast(z, mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, [0, 1]))
        fd.add_output(fd.ops.amax(z, [0, 1]))
    program = mp.analyze(fd.fusion).epilogue
    first, second = program.outputs[1], program.outputs[2]
    assert first.amax and second.amax and first.src != second.src
    assert program.instrs[first.src].op == "mul" and program.instrs[second.src].op == "add"
    source = mp.compile(fd, "h200", overrides={"use_smem_epilogue": True}).source
    assert "amx1, amx2 = packed_step(" in source and "return amx1, amx2" in source
    assert "red_global_max_u32(out1, 0, amx1)" in source
    assert "red_global_max_u32(out2, 0, amx2)" in source


def test_a_refused_max_is_cut_off_into_a_framework_segment() -> None:
    """mp.compile runs a max the kernel does not take (over M only) after the kernel, with the
    framework's ops, as it does any op the epilogue cannot take."""
    fd = quantized_amax(256, 256, 256, amax=lambda fd, y: fd.ops.amax(y, [0]))
    compiled = mp.compile(fd, "h200")
    assert [s.kind for s in compiled.segments] == ["matmul", "pointwise"]
    assert "keeps dims of shape [256]" in compiled.explain()
