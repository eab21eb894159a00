"""The fusion both limits property runners (ampere_limits_property.py,
hopper_limits_property.py) compile for a drawn case: a (batched) matmul in the drawn layout,
optionally with operand prologues (``case["prologue"]``: "a", "b" or "ab") and a bias and relu,
cast back to the operand dtype."""

from __future__ import annotations

import mmaplug as mp


def fusion_for(case: dict) -> mp.Fusion:
    (m, n, k), batch, dtype = case["shape"], case["batch"], getattr(mp, case["dtype"])
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
