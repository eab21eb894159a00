"""GPU tier: FP8 in the hopper epilogue (issue 24). FP8 epilogue inputs (an FP8 residual, an
FP8 per-channel bias) read as bytes and widened, through the packed, staged and register
epilogues, split-K, ping-pong and CTA pairs; random data, float64 reference (``mp.evaluate``),
outputs poisoned before each call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

# (m, n, k): N = 1004 stages without packing (bf16 rows are not 16-byte vectors); M = 8 with
# 16-bit operands is the decode scheduler's range, which declines FP8 inputs
SHAPES = [(256, 256, 256), (1000, 1040, 528), (1000, 1004, 528), (8, 4096, 4096)]
INPUTS = [
    (mp.float8_e4m3fn, mp.float8_e4m3fn),
    (mp.float8_e4m3fn, mp.float8_e5m2),
    (mp.bfloat16, mp.float8_e4m3fn),  # a 16-bit matmul reading an FP8 residual
]
CASES = [(shape, ab, res) for shape in SHAPES for ab, res in INPUTS]


def _residual(m: int, n: int, k: int, operands: object, res: object, *,
              bias: object = None) -> mp.Fusion:  # fmt: skip
    """``cast(A @ B (scaled per row and column for FP8 operands) + r (+ bias), bfloat16)``
    with ``r`` ``[m, n]`` of FP8 *res* and, with *bias*, an FP8 ``[n]`` bias of that type."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])  # a weight [N, K]
        if operands.is_float8:  # type: ignore[attr-defined]
            sa = fd.define_tensor([m, 1], dtype=mp.float32)
            sb = fd.define_tensor([1, n], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        y = fd.ops.add(y, fd.define_tensor([m, n], dtype=res))
        if bias is not None:
            column = fd.define_tensor([n], dtype=bias)
            y = fd.ops.add(y, fd.ops.broadcast_in_dim(column, [m, n], [1]))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd.fusion


@pytest.fixture
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


@pytest.mark.parametrize(
    ("shape", "operands", "res"),
    CASES,
    ids=[f"{m}x{n}x{k}_{a.label}_plus_{r.label}" for (m, n, k), a, r in CASES],
)
def test_fp8_residual_matches_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, operands: object, res: object
) -> None:
    fusion = _residual(*shape, operands, res)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(31)))
    assert compiled.spec.scheduler == "hopper"


@pytest.mark.parametrize(
    "overrides",
    [
        {"splitk_factor": 3},
        {"cluster_dims": (2, 1)},
        {
            "tiling_strategy": "persistent_pingpong",
            "cta_tile": (64, 128, 128),
            "warp_tile": (64, 128, 128),
            "instruction_tile": (64, 128, 32),
        },
        {"use_smem_epilogue": False},
        {"use_smem_epilogue": True},
    ],
    ids=["splitk3", "cluster_pairs", "pingpong", "register_epilogue", "smem_epilogue"],
)
def test_fp8_residual_and_bias_kernel_variants(
    pm: mp.PluginManager, checks: Checks, overrides: dict
) -> None:
    """Split-K (the reduce kernel reads the bytes), CTA pairs, ping-pong and both epilogues
    (the packed one stages the e5m2 bias in its column row), ragged M and N."""
    fusion = _residual(1000, 1040, 1536, mp.float8_e4m3fn, mp.float8_e4m3fn,
                       bias=mp.float8_e5m2)  # fmt: skip
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(32)), overrides)
    assert compiled.params == compiled.params.with_overrides(**overrides)  # taken as asked
