"""Role orders beyond nvFuser's tests (issue 10, item 1): batch dims inside operands and
outputs, outputs permuted after the MmaOp, K not the MmaOp's last dim."""

from __future__ import annotations

from typing import Any

import numpy as np
from nvf_scenarios import Dims, scenario

SOURCE = "ROLES issue 10 item 1"


@scenario("roles_output_m_batch_n", SOURCE + ": bmm, output permuted to [M, B, N]",
          reference=lambda x, d: [np.transpose(x[0] @ x[1], (1, 0, 2))], vec=(8, 8, 4))  # fmt: skip
def _out_mbn(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["B"], d["K"], d["N"]], dtype=mp.float16)
    fd.add_output(fd.ops.permute(fd.ops.cast(fd.ops.matmul(a, b), mp.float32), [1, 0, 2]))


@scenario("roles_output_m_batch_n_bias", SOURCE + ": [M, B, N] output with a [B, N] bias",
          reference=lambda x, d: [np.swapaxes(x[0] @ x[1] + x[2][:, None], 0, 1)])  # fmt: skip
def _out_mbn_bias(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["B"], d["K"], d["N"]], dtype=mp.float16)
    bias = fd.define_tensor([d["B"], d["N"]])
    y = fd.ops.permute(fd.ops.matmul(a, b), [1, 0, 2])  # [M, B, N]
    fd.add_output(fd.ops.add(y, fd.ops.broadcast(bias, [True, False, False])))


@scenario("roles_output_n_m", SOURCE + ": output permuted to [N, M] (M innermost)",
          reference=lambda x, d: [(x[0] @ x[1]).T],
          differ=r"dims ordered \['n', 'm'\]; kernels store outputs with N innermost")  # fmt: skip
def _out_nm(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    fd.add_output(fd.ops.permute(fd.ops.matmul(a, b), [1, 0]))


@scenario("roles_operand_batch_inside_by_stride_order",
          SOURCE + ": A declared [B, M, K] with memory order [M, B, K]",
          reference=lambda x, d: [x[0] @ x[1]], layout="TT", vec=(8, 8, 8))  # fmt: skip
def _stride_batch(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16, stride_order=[1, 2, 0])
    b = fd.define_tensor([d["B"], d["K"], d["N"]], dtype=mp.float16)
    fd.add_output(fd.ops.matmul(a, b))


@scenario(
    "roles_operand_batch_innermost",
    SOURCE + ": A contiguous along its batch dim",
    reference=lambda x, d: [x[0] @ x[1]],
    differ="contiguous along a batch dim; kernels load operands contiguous along K",
)
def _batch_inner(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["B"], d["M"], d["K"]], dtype=mp.float16, stride_order=[0, 2, 1])
    b = fd.define_tensor([d["B"], d["K"], d["N"]], dtype=mp.float16)
    fd.add_output(fd.ops.matmul(a, b))


@scenario("roles_mma_k_first", SOURCE + ": fused_multiply_sum over dim 0 ([K, M, bN] x [K, bM, N])",
          reference=lambda x, d: [x[0].T @ x[1]], layout="NT")  # fmt: skip
def _k_first(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["K"], d["M"]], dtype=mp.float16)
    b = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    a3 = fd.ops.broadcast(a, [False, False, True])
    b3 = fd.ops.broadcast(b, [False, True, False])
    fd.add_output(fd.ops.fused_multiply_sum(a3, b3, [0]))


@scenario(
    "roles_epilogue_input_transposed",
    SOURCE + ": a C matrix stored [N, M] (M innermost), permuted into the epilogue",
    reference=lambda x, d: [x[0] @ x[1] + x[2].T],
    vec=(8, 8, 8),
)
def _c_transposed(fd: Any, mp: Any, d: Dims) -> None:
    a = fd.define_tensor([d["M"], d["K"]], dtype=mp.float16)
    b = fd.define_tensor([d["K"], d["N"]], dtype=mp.float16)
    c = fd.define_tensor([d["N"], d["M"]], dtype=mp.float16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.permute(c, [1, 0]))
    fd.add_output(fd.ops.cast(y, mp.float16))
