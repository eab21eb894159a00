"""GPU tier, sm_90a: horizontal fusion (issue 10 item 3), one hopper kernel for matmuls sharing
operand A, through mp.compile → execute on torch tensors, against float64.

The llama FFN (K- and N-major B, fp16 and bf16, ragged and 2048x1024x512, default and smaller
tiles, ping-pong), three products with a bias and a scalar, and q/k/v as three outputs. Outputs are
poisoned (the caching allocator's free blocks filled with NaN) before each run; each case runs
twice (the second call reuses the bound launch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

SMALL = {"cta_tile": (64, 128, 64), "warp_tile": (64, 128, 64),
         "instruction_tile": (64, 128, 16), "stages": 3}  # fmt: skip
PINGPONG = {"cta_tile": (64, 256, 64), "warp_tile": (64, 256, 64),
            "instruction_tile": (64, 256, 16),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


def _ffn(m: int, n: int, k: int, dtype: mp.DType, b_k_inner: bool) -> mp.Fusion:
    """cast(silu(x @ W1) * (x @ W3)): W [N, K] through linear, or [K, N] through matmul."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        shape = [n, k] if b_k_inner else [k, n]
        w1, w3 = fd.define_tensor(shape, dtype=dtype), fd.define_tensor(shape, dtype=dtype)
        op = fd.ops.linear if b_k_inner else fd.ops.matmul
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(op(x, w1)), op(x, w3)), dtype))
    return fd.fusion


def _run(
    checks: Checks, fusion: mp.Fusion, pm: mp.PluginManager, overrides: dict | None = None,
    on_gpu: bool = False,
) -> Any:  # fmt: skip
    """Compile (one hopper kernel), execute twice, compare with float64: mp.evaluate, or for a
    large FFN (*on_gpu*) torch's float64 matmuls on the GPU. Every tensor input after x is
    scaled by its last extent ** -0.5, as the weights of a layer are."""
    compiled = mp.compile(fusion, pm=pm, overrides=overrides)
    assert isinstance(compiled, mp.CompiledFusion), compiled.explain()
    assert compiled.spec.scheduler == "hopper" and compiled.spec.problem.horizontal > 1
    x, *rest = checks.inputs(fusion, np.random.default_rng(11))
    inputs = [x, *(w * w.shape[-1] ** -0.5 if hasattr(w, "shape") else w for w in rest)]
    expected = None
    if on_gpu:
        x, w1, w3 = (t.double() for t in inputs)
        gate = x @ w1.T
        expected = [gate * torch.sigmoid(gate) * (x @ w3.T)]
    checks.calls(compiled, fusion, inputs, expected)
    return compiled


@pytest.mark.parametrize("dtype", [mp.float16, mp.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("b_k_inner", [True, False], ids=["kmajor", "nmajor"])
@pytest.mark.parametrize(
    ("shape", "overrides"),
    [
        ((2048, 1024, 512), None),
        ((300, 1000, 520), None),
        ((300, 1000, 520), SMALL),
        ((300, 1000, 520), PINGPONG),
    ],
    ids=["2048x1024x512", "ragged", "ragged_64x128", "ragged_pingpong"],
)
def test_llama_ffn_is_one_kernel_matching_float64(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, b_k_inner: bool, shape: tuple,
    overrides: Any,
) -> None:  # fmt: skip
    compiled = _run(checks, _ffn(*shape, dtype, b_k_inner), pm, overrides)
    assert compiled.kernel_name.endswith("_h2")


def test_llama_ffn_timed_shape_matches_float64(pm: mp.PluginManager, checks: Checks) -> None:
    """The benchmark's shape (scripts/ffn_probe.py) with the default plan: ping-pong consumers
    on 64x256 MMA tiles, the staged epilogue."""
    compiled = _run(checks, _ffn(2048, 14336, 5120, mp.bfloat16, True), pm, on_gpu=True)
    assert compiled.params.cta_tile.as_tuple() == (64, 256, 64)
    assert compiled.kernel_name.endswith("_se_pp_h2")


def test_three_products_bias_scalar(pm: mp.PluginManager, checks: Checks) -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([520, 256], dtype=mp.bfloat16)
        g, u, v = (fd.ops.linear(x, fd.define_tensor([330, 256], dtype=mp.bfloat16)) for _ in "guv")
        bias = fd.define_tensor([330], dtype=mp.bfloat16)
        s = fd.define_scalar()
        y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.silu(g), u), s),
                       fd.ops.add(v, fd.ops.broadcast_in_dim(bias, [520, 330], [1])))  # fmt: skip
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    assert _run(checks, fd.fusion, pm).kernel_name.endswith("_h3")


def test_qkv_outputs(pm: mp.PluginManager, checks: Checks) -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([1000, 512], dtype=mp.float16)
        for _ in "qkv":
            fd.add_output(fd.ops.linear(x, fd.define_tensor([768, 512], dtype=mp.float16)))
    assert _run(checks, fd.fusion, pm).kernel_name.endswith("_h3")
