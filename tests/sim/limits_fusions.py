"""The fusion both limits property runners (ampere_limits_property.py,
hopper_limits_property.py) compile for a drawn case: a (batched) matmul in the drawn layout,
optionally with operand prologues (``case["prologue"]``: "a", "b" or "ab") and a bias and relu,
cast back to the operand dtype. FP8 operands make ``scaled_mm`` with per-row and per-column
scales and a bfloat16 bias (or, with ``case["fp8_out"]``, an FP8 output of the operand type)."""

from __future__ import annotations

import mmaplug as mp


def fusion_for(case: dict) -> mp.Fusion:
    (m, n, k), batch, dtype = case["shape"], case["batch"], getattr(mp, case["dtype"])
    if dtype.is_float8:
        return _scaled_fusion(case, dtype)
    lead = [batch] if batch > 1 else []
    inner = list(range(len(lead) + 1, -1, -1))  # row-major
    swap = [*inner[:-2], inner[-1], inner[-2]]  # the two innermost dims exchanged
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor(
            [*lead, m, k], dtype, stride_order=inner if case["a_k_inner"] else swap
        )
        b = fd.define_tensor(
            [*lead, k, n], dtype, stride_order=swap if case["b_k_inner"] else inner
        )
        pro = case.get("prologue") or ""  # operand prologues with op(0) != 0 (ampere only)
        if "a" in pro:
            a = fd.ops.cast(fd.ops.add(fd.ops.cos(a), 0.5), dtype)
        if "b" in pro:
            b = fd.ops.cast(fd.ops.exp(fd.ops.neg(b)), dtype)
        y = fd.ops.matmul(a, b)
        if case["bias_relu"]:
            bias = fd.define_tensor([n], dtype)
            y = fd.ops.relu(
                fd.ops.add(y, fd.ops.broadcast_in_dim(bias, [*lead, m, n], [len(lead) + 1]))
            )
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def _scaled_fusion(case: dict, dtype: mp.DType) -> mp.Fusion:
    (m, n, k) = case["shape"]
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype, stride_order=[1, 0] if case["a_k_inner"] else [0, 1])
        b = fd.define_tensor([k, n], dtype, stride_order=[0, 1] if case["b_k_inner"] else [1, 0])
        if case.get("block"):  # 1x128 blocks of A, 128x128 of B
            sa = fd.define_tensor([m, -(-k // 128)], mp.float32)
            sb = fd.define_tensor([-(-k // 128), -(-n // 128)], mp.float32)
        else:
            sa = fd.define_tensor([m, 1], mp.float32)
            sb = fd.define_tensor([1, n], mp.float32)
        bias = fd.define_tensor([n], mp.bfloat16) if case["bias_relu"] else None
        y = fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.float32)
        if case["bias_relu"]:
            y = fd.ops.relu(y)
        fd.add_output(fd.ops.cast(y, dtype if case.get("fp8_out") else mp.bfloat16))
    return fd.fusion
