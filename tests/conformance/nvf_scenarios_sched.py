"""nvFuser's scheduler-test scenarios (SCH and MM in nvf_scenarios.py's source list), ported."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from nvf_scenarios import LAYOUTS, Dims, _gelu, scenario
from nvf_scenarios_cpp import mma_ref, operands

# -- SCH PrecisionParametrizedTest.Epilogue*: TT, a bias of shape [M], x {HSS, HSH, TSS, TST} --

_PRECISIONS = {"hss": ("float16", "float32"), "hsh": ("float16", "float16"),
               "tss": ("bfloat16", "float32"), "tst": ("bfloat16", "bfloat16")}  # fmt: skip
_EPILOGUES = ("bias", "relu", "bias_relu", "relu_aux", "bias_relu_aux", "gelu", "gelu_aux",
              "bias_gelu", "bias_gelu_aux")  # fmt: skip

for _epi, (_prec, (_in, _out)) in itertools.product(_EPILOGUES, _PRECISIONS.items()):

    def _epilogue(fd: Any, mp: Any, d: Dims, epi: str = _epi, i: str = _in, o: str = _out) -> None:
        a, b = operands(fd, mp, d, "TT", batch=False, dtype=getattr(mp, i))
        y = fd.ops.fused_multiply_sum(a, b, [-1])
        if "bias" in epi:
            bias = fd.define_tensor([d["M"]], dtype=getattr(mp, o))
            y = fd.ops.add(y, fd.ops.broadcast(bias, [False, True]))
        act = fd.ops.relu(y) if "relu" in epi else fd.ops.gelu(y) if "gelu" in epi else y
        fd.add_output(fd.ops.cast(act, getattr(mp, o)))
        if epi.endswith("aux"):
            fd.add_output(fd.ops.cast(y, getattr(mp, o)))

    def _epilogue_ref(x: list, d: Dims, epi: str = _epi) -> list:
        y = mma_ref(x, "TT", False) + (x[2][:, None] if "bias" in epi else 0)
        act = np.maximum(y, 0) if "relu" in epi else _gelu(y) if "gelu" in epi else y
        return [act, y] if epi.endswith("aux") else [act]

    scenario(
        f"sch_epilogue_{_epi}_{_prec}",
        "SCH PrecisionParametrizedTest.Epilogue*",
        reference=_epilogue_ref,
        vec=(8, 8, 16 // (4 if _out == "float32" else 2)),
        layout="TT",
    )(_epilogue)


# -- SCH FusedMultiplySumOnly, BasicMatmul*, alpha/beta epilogues --------------------------------


@scenario(
    "sch_fused_multiply_sum_only",
    "SCH FusedMultiplySumOnly (pre-broadcast inputs [M,1,K] x [1,N,K])",
    reference=lambda x, d: [x[0][:, 0] @ x[1][0].T],
    vec=(8, 8, 4),
)
def _fms_only(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], 1, d["K"]], dtype=mp.float16)
    b = fd.define_tensor([1, d["N"], d["K"]], dtype=mp.float16)
    fd.add_output(fd.ops.fused_multiply_sum(a, b, [-1]))


for _lay in LAYOUTS:

    def _basic(fd: Any, mp: Any, d: Dims, lay: str = _lay) -> None:
        a, b = operands(fd, mp, d, lay, batch=False)
        fd.add_output(fd.ops.fused_multiply_sum(a, b, [-1]))

    scenario(
        f"sch_basic_matmul_{_lay.lower()}",
        "SCH BasicMatmulStrictCheckTT / BasicMatmulRelaxedCheck",
        reference=lambda x, d, lay=_lay: [mma_ref(x, lay, False)],
        vec=(8, 8, 4),
        layout=_lay,
    )(_basic)


@scenario(
    "sch_basic_matmul_input_shuffled_tt",
    "SCH BasicMatmulInputShuffledTT (B declared before A)",
    reference=lambda x, d: [x[1] @ x[0]],
    vec=(8, 8, 4),
    layout="TT",
)
def _shuffled(fd: Any, mp: Any, d: Dims) -> None:
    b = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
    a3 = fd.ops.broadcast(a, [False, True, False])
    b3 = fd.ops.broadcast(fd.ops.permute(b, [1, 0]), [True, False, False])
    fd.add_output(fd.ops.fused_multiply_sum(a3, b3, [-1]))


_AB = ("output_cast", "alpha", "alpha_output_cast", "beta", "alpha_beta",
       "alpha_beta_gelu_output_cast", "alpha_beta_bias")  # fmt: skip
for _v in _AB:

    def _alpha_beta(fd: Any, mp: Any, d: Dims, v: str = _v) -> None:
        a, b = operands(fd, mp, d, "TT", batch=False)
        y = fd.ops.fused_multiply_sum(a, b, [-1])
        if "alpha" in v:
            y = fd.ops.mul(y, fd.define_scalar())
        if "beta" in v:
            c = fd.define_tensor([d["M"], d["N"]], dtype=mp.float16)
            y = fd.ops.add(y, fd.ops.mul(c, fd.define_scalar()))
        if "bias" in v:
            y = fd.ops.add(y, fd.ops.broadcast(fd.define_tensor([d["M"]]), [False, True]))
        if "gelu" in v:
            y = fd.ops.gelu(y)
        fd.add_output(fd.ops.cast(y, mp.float16) if "cast" in v else y)

    def _alpha_beta_ref(x: list, d: Dims, v: str = _v) -> list:
        y, rest = mma_ref(x, "TT", False), list(x[2:])
        if "alpha" in v:
            y = y * rest.pop(0)
        if "beta" in v:
            c, beta = rest.pop(0), rest.pop(0)
            y = y + c * beta
        if "bias" in v:
            y = y + rest.pop(0)[:, None]
        return [_gelu(y) if "gelu" in v else y]

    scenario(f"sch_epilogue_{_v}", "SCH Epilogue" + _v.title().replace("_", ""),
             reference=_alpha_beta_ref, layout="TT")(_alpha_beta)  # fmt: skip


# -- SCH StridedBatch*: operands [M, B, K] / [B, K, M] / [N, B, K] / [B, K, N] ------------------

for _lay, _v in itertools.product(LAYOUTS, ("plain", "alpha_beta", "bias", "single_bias")):

    def _strided(fd: Any, mp: Any, d: Dims, lay: str = _lay, v: str = _v) -> None:
        a, b = operands(fd, mp, d, lay, batch=True)
        y = fd.ops.fused_multiply_sum(a, b, [-1])
        if v == "alpha_beta":
            c = fd.define_tensor([d["B"], d["M"], d["N"]], dtype=mp.float16)
            y = fd.ops.add(fd.ops.mul(y, fd.define_scalar()), fd.ops.mul(c, fd.define_scalar()))
        elif v == "bias":  # one bias per batch entry: [B, M]
            bias = fd.define_tensor([d["B"], d["M"]])
            y = fd.ops.add(y, fd.ops.broadcast(bias, [False, False, True]))
        elif v == "single_bias":  # one [M] bias shared by every batch entry
            y = fd.ops.add(y, fd.ops.broadcast(fd.define_tensor([d["M"]]), [True, False, True]))
        fd.add_output(y)

    def _strided_ref(x: list, d: Dims, lay: str = _lay, v: str = _v) -> list:
        y = mma_ref(x, lay, True)
        if v == "alpha_beta":
            return [y * x[3] + x[2] * x[4]]
        if v == "bias":
            return [y + x[2][:, :, None]]
        return [y + x[2][None, :, None] if v == "single_bias" else y]

    scenario(
        f"sch_strided_batch_{_v}_{_lay.lower()}",
        "SCH StridedBatch / StridedBatchEpilogue{AlphaBeta,Bias,SingleBias}",
        reference=_strided_ref,
        vec=(8, 8, 4),
        layout=_lay,
    )(_strided)


# -- SCH MisalignedVectorization (static part: odd K, odd N), prologues, dtypes, llama --------


for _name, _k, _n, _vec in (("odd_k_tn", 247, 136, (1, 1, 8)), ("odd_n_tt", 248, 135, (8, 1, 1))):

    def _misaligned(fd: Any, mp: Any, d: Dims, k: int = _k, n: int = _n, name: str = _name) -> None:
        a = fd.define_tensor([d["M"], k], dtype=mp.float16)
        if name.endswith("tn"):
            fd.add_output(fd.ops.linear(a, fd.define_tensor([n, k], dtype=mp.float16)))
        else:
            fd.add_output(fd.ops.matmul(a, fd.define_tensor([k, n], dtype=mp.float16)))

    scenario(
        f"sch_misaligned_vectorization_{_name}",
        "SCH MisalignedVectorization (an odd K or N limits the vector widths)",
        reference=lambda x, d, name=_name: [x[0] @ (x[1].T if name.endswith("tn") else x[1])],
        vec=_vec,
    )(_misaligned)

for _op in ("matmul", "linear"):

    def _prologue(fd: Any, mp: Any, d: Dims, op: str = _op) -> None:
        a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
        shape = [d["K"], d["N"]] if op == "matmul" else [d["N"], d["K"]]
        b = fd.define_tensor(shape, dtype=mp.float16)
        fd.add_output(getattr(fd.ops, op)(fd.ops.cast(fd.ops.sin(a), mp.float16), b))

    scenario(
        f"sch_segment_{_op}_op_prologue",
        f"SCH Segment{_op.title()}OpPrologue (sin on operand A)",
        reference=lambda x, d, op=_op: [np.sin(x[0]) @ (x[1] if op == "matmul" else x[1].T)],
    )(_prologue)  # one ampere kernel computes sin(A) in its prologue (hopper declines: TMA)


@scenario(
    "sch_segment_matmul_op_unsupported_dtype",
    "SCH SegmentMatmulOpUnsupportedDtype (float32 operands)",
    reference=lambda x, d: [x[0] @ x[1]],
    differ="tensor-core operands must be float16, bfloat16",
)
def _f32(fd: Any, mp: Any, d: Dims) -> None:
    a, b = fd.define_tensor([d["M"], d["K"]]), fd.define_tensor([d["K"], d["N"]])
    fd.add_output(fd.ops.matmul(a, b))


@scenario(
    "sch_pre_broadcast_mma_bias_neg",
    "SCH PreBroadcastMmaBiasNeg ([M,1,K] x [1,N,K], an [M] bias, neg, float32 out)",
    reference=lambda x, d: [-(x[0][:, 0] @ x[1][0].T + x[2][:, None])],
)
def _bias_neg(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], 1, d["K"]], dtype=mp.float16)
    b = fd.define_tensor([1, d["N"], d["K"]], dtype=mp.float16)
    bias = fd.define_tensor([d["M"]], dtype=mp.float16)
    y = fd.ops.fused_multiply_sum(a, b, [-1])
    fd.add_output(fd.ops.neg(fd.ops.add(y, fd.ops.broadcast(bias, [False, True]))))


@scenario(
    "sch_llama2_ffn",
    "SCH MatmulFusionTest.Llama2FFN (silu(A @ B1) * (A @ B2))",
    reference=lambda x, d: [(lambda g: g / (1 + np.exp(-g)))(x[0] @ x[1]) * (x[0] @ x[2])],
    differ="one MmaOp per kernel|several matmul|horizontal",
)
def _llama(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
    b1 = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    b2 = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    fd.add_output(fd.ops.mul(fd.ops.silu(fd.ops.matmul(a, b1)), fd.ops.matmul(a, b2)))


# -- MM: tests/cpp/test_matmul.cpp -----------------------------------------------------------------


@scenario(
    "mm_multiple_consecutive_dims",
    "MM MultipleConsecutiveDims (A [M1, M2, K], B [N1, N2, K])",
    reference=lambda x, d: [np.einsum("abk,cdk->abcd", x[0], x[1])],
    dims={"M": 126, "M2": 4, "N": 34, "N2": 4, "K": 248},
)
def _consecutive(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["M2"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["N"], d["N2"], d["K"]], dtype=mp.float16)
    a5 = fd.ops.broadcast(a, [False, False, True, True, False])
    b5 = fd.ops.broadcast(b, [True, True, False, False, False])
    fd.add_output(fd.ops.fused_multiply_sum(a5, b5, [-1]))


@scenario(
    "mm_multiple_m_dims_batch",
    "MM MultipleMDimsBatch (A [M1, Batch, M2, K]: M dims split by the batch)",
    reference=lambda x, d: [np.einsum("abck,bnk->abcn", x[0], x[1])],
    differ="the dims of one role must be adjacent",
    dims={"M": 126, "M2": 4, "N": 136, "K": 248, "B": 2},
)
def _m_dims_batch(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["B"], d["M2"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["B"], d["N"], d["K"]], dtype=mp.float16)
    a5 = fd.ops.broadcast(a, [False, False, False, True, False])
    b5 = fd.ops.broadcast(b, [True, False, True, False, False])
    fd.add_output(fd.ops.fused_multiply_sum(a5, b5, [-1]))


@scenario(
    "mm_mlp_silu_by_exp_reciprocal",
    "MM MLPGemmPersistentBroadcastInputs (silu as neg, exp, add, reciprocal, mul; x an input)",
    reference=lambda x, d: [(lambda y: y * (1 / (1 + np.exp(-y))) * x[2])(x[0] @ x[1].T)],
)
def _mlp(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.bfloat16)
    b = fd.define_tensor([d["N"], d["K"]], dtype=mp.bfloat16)
    c = fd.define_tensor([d["M"], d["N"]], dtype=mp.bfloat16)
    y = fd.ops.linear(a, b)
    gate = fd.ops.mul(y, fd.ops.reciprocal(fd.ops.add(1.0, fd.ops.exp(fd.ops.neg(y)))))
    fd.add_output(fd.ops.cast(fd.ops.mul(gate, c), mp.bfloat16))


# -- SCH HopperPlusMatmulSchedulerTest.FusedMultiplySum{,BiasNeg}: pre-broadcast 3-D operands, --
# -- K reduced where the layout puts it, the result reordered to [M, N] ----------------------

_SS = {  # A, B shapes (1: a broadcast), the MmaOp's K axis, the permute to [M, N] (or None)
    "TT": ("M,K,1", "1,K,N", -2, None), "TN": ("M,1,K", "1,N,K", -1, None),
    "NT": ("K,M,1", "K,1,N", -3, None), "NN": ("1,K,M", "N,K,1", -2, [1, 0]),
}  # fmt: skip
_SS_REF = {"TT": "mk,kn", "TN": "mk,nk", "NT": "km,kn", "NN": "km,nk"}

for _lay, _bias in itertools.product(LAYOUTS, (False, True)):

    def _hopper_fms(fd: Any, mp: Any, d: Dims, lay: str = _lay, bias: bool = _bias) -> None:
        sa, sb, k_axis, perm = _SS[lay]
        dims = {**d, "1": 1}
        a = fd.define_tensor([dims[s] for s in sa.split(",")], dtype=mp.float16)
        b = fd.define_tensor([dims[s] for s in sb.split(",")], dtype=mp.float16)
        y = fd.ops.fused_multiply_sum(a, b, [k_axis])
        y = fd.ops.permute(y, perm) if perm else y
        if bias:
            c = fd.define_tensor([d["M"]], dtype=mp.float16)
            y = fd.ops.neg(fd.ops.add(y, fd.ops.broadcast(c, [False, True])))
            y = fd.ops.cast(y, mp.float16)
        fd.add_output(y)

    def _hopper_fms_ref(x: list, d: Dims, lay: str = _lay, bias: bool = _bias) -> list:
        a, b = (np.squeeze(v) for v in x[:2])
        y = np.einsum(_SS_REF[lay] + "->mn", a, b)
        return [-(y + x[2][:, None]) if bias else y]

    scenario(
        f"sch_hopper_fused_multiply_sum{'_bias_neg' if _bias else ''}_{_lay.lower()}",
        "SCH HopperPlusMatmulSchedulerTest.FusedMultiplySum" + ("BiasNeg" if _bias else ""),
        reference=_hopper_fms_ref,
        layout=_lay,
        dims={"M": 512, "N": 256, "K": 128},
    )(_hopper_fms)


@scenario(
    "sch_operand_order_issue_2434",
    "SCH OperandOrderIssue2434 (bf16 mul+sum, B defined before A)",
    reference=lambda x, d: [x[1] @ x[0].T],
    layout="TN",
)
def _issue_2434(fd: Any, mp: Any, d: Dims) -> None:
    b = fd.define_tensor([d["N"], d["K"]], dtype=mp.bfloat16)
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.bfloat16)
    ab = fd.ops.mul(
        fd.ops.broadcast(a, [False, True, False]), fd.ops.broadcast(b, [True, False, False])
    )
    fd.add_output(fd.ops.sum(ab, [-1]))
