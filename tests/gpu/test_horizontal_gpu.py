"""GPU tier, sm_90a: horizontal fusion (issue 10 item 3), one hopper kernel for matmuls sharing
operand A, through mp.compile → execute on torch tensors, against float64.

The llama FFN (K- and N-major B, fp16 and bf16, ragged and 2048x1024x512, default and smaller
tiles, ping-pong), three products with a bias and a scalar, and q/k/v as three outputs. Outputs are
poisoned (the caching allocator's free blocks filled with NaN) before each run; each case runs
twice (the second call reuses the bound launch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.gpu import cuda_device_count

torch = pytest.importorskip("torch") if cuda_device_count() else None


def _is_sm90() -> bool:
    return bool(cuda_device_count()) and torch.cuda.get_device_capability() == (9, 0)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.sm90,
    pytest.mark.skipif(not _is_sm90(), reason="needs an sm_90 GPU (H100/H200)"),
    pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
]

TOLERANCE = {mp.float16: 1e-2, mp.bfloat16: 2e-2, mp.float32: 1e-3}
SMALL = {"cta_tile": (64, 128, 64), "warp_tile": (64, 128, 64),
         "instruction_tile": (64, 128, 16), "stages": 3}  # fmt: skip
PINGPONG = {"cta_tile": (64, 256, 64), "warp_tile": (64, 256, 64),
            "instruction_tile": (64, 256, 16),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


@pytest.fixture(scope="module")
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


def _ffn(m: int, n: int, k: int, dtype: mp.DType, b_k_inner: bool) -> mp.Fusion:
    """cast(silu(x @ W1) * (x @ W3)): W [N, K] through linear, or [K, N] through matmul."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        shape = [n, k] if b_k_inner else [k, n]
        w1, w3 = fd.define_tensor(shape, dtype=dtype), fd.define_tensor(shape, dtype=dtype)
        op = fd.ops.linear if b_k_inner else fd.ops.matmul
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(op(x, w1)), op(x, w3)), dtype))
    return fd.fusion


def _inputs(fusion: mp.Fusion, rng: np.random.Generator) -> list:
    tdtype = {mp.float16: torch.float16, mp.bfloat16: torch.bfloat16}
    out: list = []
    for val in fusion.inputs:
        if not isinstance(val, mp.TensorView):
            out.append(float(rng.uniform(0.5, 1.5)))
            continue
        scale = 1.0 if val is fusion.inputs[0] else val.shape[-1] ** -0.5
        host = torch.tensor(rng.standard_normal(val.shape) * scale, dtype=torch.float64)
        out.append(host.to("cuda", tdtype[val.dtype]))
    return out


def _run(
    fusion: mp.Fusion, pm: mp.PluginManager, overrides: dict | None = None, on_gpu: bool = False
) -> Any:
    """Compile (one hopper kernel), execute twice, compare with float64: mp.evaluate, or for a
    large FFN (*on_gpu*) torch's float64 matmuls on the GPU."""
    compiled = mp.compile(fusion, pm=pm, overrides=overrides)
    assert isinstance(compiled, mp.CompiledFusion), compiled.explain()
    assert compiled.spec.scheduler == "hopper" and compiled.spec.problem.horizontal > 1
    inputs = _inputs(fusion, np.random.default_rng(11))
    if on_gpu:
        x, w1, w3 = (t.double() for t in inputs)
        gate = x @ w1.T
        expected = [(gate * torch.sigmoid(gate) * (x @ w3.T)).cpu().numpy()]
    else:
        host = [x.double().cpu().numpy() if hasattr(x, "double") else x for x in inputs]
        expected = mp.evaluate(fusion, host)  # float64 inside
    for _ in range(2):
        torch.full(((64 << 20) // 4,), float("nan"), device="cuda")  # poison freed blocks
        outputs = compiled.execute(inputs)
        torch.cuda.synchronize()
        for tv, got, ref in zip(fusion.outputs, outputs, expected, strict=True):
            got64 = got.double().cpu().numpy()
            assert np.all(np.isfinite(got64)), f"{tv.name}: unwritten (NaN) elements"
            ref64 = np.asarray(ref, np.float64)
            err = np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)
            assert err < TOLERANCE[tv.dtype], f"{tv.name}: relative error {err:.2e}"
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
    pm: mp.PluginManager, dtype: mp.DType, b_k_inner: bool, shape: tuple, overrides: Any
) -> None:
    compiled = _run(_ffn(*shape, dtype, b_k_inner), pm, overrides)
    assert compiled.kernel_name.endswith("_h2")


def test_llama_ffn_timed_shape_matches_float64(pm: mp.PluginManager) -> None:
    """The benchmark's shape (scripts/ffn_probe.py) with the default plan: ping-pong consumers
    on 64x256 MMA tiles, the staged epilogue."""
    compiled = _run(_ffn(2048, 14336, 5120, mp.bfloat16, True), pm, on_gpu=True)
    assert compiled.params.cta_tile.as_tuple() == (64, 256, 64)
    assert compiled.kernel_name.endswith("_se_pp_h2")


def test_three_products_bias_scalar(pm: mp.PluginManager) -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([520, 256], dtype=mp.bfloat16)
        g, u, v = (fd.ops.linear(x, fd.define_tensor([330, 256], dtype=mp.bfloat16)) for _ in "guv")
        bias = fd.define_tensor([330], dtype=mp.bfloat16)
        s = fd.define_scalar()
        y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.silu(g), u), s),
                       fd.ops.add(v, fd.ops.broadcast_in_dim(bias, [520, 330], [1])))  # fmt: skip
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    assert _run(fd.fusion, pm).kernel_name.endswith("_h3")


def test_qkv_outputs(pm: mp.PluginManager) -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([1000, 512], dtype=mp.float16)
        for _ in "qkv":
            fd.add_output(fd.ops.linear(x, fd.define_tensor([768, 512], dtype=mp.float16)))
    assert _run(fd.fusion, pm).kernel_name.endswith("_h3")
