"""GPU tier: block-scaled FP8 (1x128 scales of A, 128x128 of B) on the hopper kernel against
float64 of the dequantised inputs, random data, outputs poisoned before each call; and the
promotion's point: with unit scales the block-scaled kernel (partial sums promoted to float32
every 128 of K) is far closer to float64 than the tensorwise kernel (every product added in
the tensor cores' reduced-precision accumulator)."""

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

SHAPES = [
    (256, 256, 256),
    (1000, 1040, 528),  # ragged: the last K block 16 deep, the last block of B's scales 16 wide
    (8, 4096, 4096),
    (1, 7168, 2048),  # one decode step: M = 1 is a row, not a broadcast (scaled_mm states it)
    (128, 7168, 2048),
    (2048, 2048, 4096),
]


def _fusion(m: int, n: int, k: int, dtype: object = mp.float8_e4m3fn, *, epilogue: str = "none",
            b_k_inner: bool = True, out: object = mp.bfloat16) -> mp.Fusion:  # fmt: skip
    kb, nb = -(-k // 128), -(-n // 128)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=dtype)
        b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1] if b_k_inner else [1, 0])
        sa = fd.define_tensor([m, kb], dtype=mp.float32)
        sb = fd.define_tensor([kb, nb], dtype=mp.float32)
        bias = fd.define_tensor([n], dtype=mp.bfloat16) if epilogue != "none" else None
        y = fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.float32)
        if epilogue == "bias_silu":
            y = fd.ops.silu(y)
        fd.add_output(fd.ops.cast(y, out) if out is not mp.float32 else y)
    return fd.fusion


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("dtype", [mp.float8_e4m3fn, mp.float8_e5m2], ids=str)
def test_block_scaled_matches_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, dtype: object
) -> None:
    fusion = _fusion(*shape, dtype, epilogue="bias")
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(7)))
    assert compiled.spec.scheduler == "hopper" and compiled.kernel_name.endswith("_bs")


def _tiles(m: int, n: int, k: int = 128, warp_m: int = 64, **more: object) -> dict:
    """Overrides of the CTA tile m x n x k over warp tiles *warp_m* x n, one wgmma m64nNk32
    a K step, and *more*."""
    return {"cta_tile": (m, n, k), "warp_tile": (warp_m, n, k), "instruction_tile": (64, n, 32),
            **more}  # fmt: skip


PINGPONG = {"tiling_strategy": "persistent_pingpong"}
VARIANTS = {
    "splitk3": {"splitk_factor": 3},
    "cluster_pairs": {"cluster_dims": (2, 1)},
    "register_epilogue": {"use_smem_epilogue": False},
    "pingpong": _tiles(64, 128, **PINGPONG),
    "two_row_blocks": _tiles(128, 64, warp_m=128),
    # two scale blocks a stage (the default of large problems before the chunks)
    "two_blocks_a_stage": _tiles(128, 128, 256, stages=3),
    # 64x256 warp tiles promoted by 64-column chunks; the last tile's second block of B's
    # scales lies past N = 1040
    "chunks": _tiles(128, 256),
    "chunks_pingpong": _tiles(64, 256, **PINGPONG),
    # tiles straddling two blocks of B's scales: at N = 1040, 96- and 160-column tiles start
    # 0, 32, 64 and 96 columns into a block, 192-column ones 0 and 64
    **{f"straddle{n}": _tiles(128, n) for n in (96, 160, 192)},
    "straddle160_pingpong": _tiles(64, 160, **PINGPONG),
    # 192 sums a consumer in clusters along one axis: the default's 128x192 pairs along M of
    # large problems, and chunks in pairs along N (legal, never the default)
    "straddle192_pairs": _tiles(128, 192, cluster_dims=(2, 1)),
    "chunks_pairs_along_n": _tiles(128, 256, cluster_dims=(1, 2)),
}


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_block_scaled_kernel_variants_match_float64(
    pm: mp.PluginManager, checks: Checks, overrides: dict
) -> None:
    fusion = _fusion(1000, 1040, 1552, epilogue="bias_silu")
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(3)), overrides)
    assert compiled.kernel_name.endswith("_bs")


def test_block_scaled_weight_stored_k_by_n_is_copied_k_major(
    pm: mp.PluginManager, checks: Checks
) -> None:
    fusion = _fusion(512, 768, 1024, b_k_inner=False)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(5)))
    assert "copied K-major" in compiled.explain()


def test_promotion_keeps_deep_k_sums_accurate(pm: mp.PluginManager, checks: Checks) -> None:
    """K = 16384, unit scales, float32 out: the same numbers through the block-scaled kernel
    and the tensorwise one; the promoted sums are at least 4x closer to float64."""
    m, n, k = 256, 256, 16384
    block = _fusion(m, n, k, out=mp.float32)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([], dtype=mp.float32)
        sb = fd.define_tensor([], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32))
    tensorwise = fd.fusion
    rng = np.random.default_rng(1)
    a_t, b_t = checks.inputs(block, rng)[:2]
    ones = [torch.ones(m, k // 128, device="cuda"), torch.ones(k // 128, n // 128, device="cuda")]
    unit = [torch.ones((), device="cuda"), torch.ones((), device="cuda")]
    want = a_t.double() @ b_t.double()
    errors = []
    for fusion, scales in ((block, ones), (tensorwise, unit)):
        compiled = mp.compile(fusion, pm=pm)
        (got,) = compiled.execute([a_t, b_t, *scales])
        torch.cuda.synchronize()
        errors.append(float((got.double() - want).norm() / want.norm()))
    assert errors[0] * 4 < errors[1], errors


def test_block_scaled_quantised_layer_writes_its_amax(pm: mp.PluginManager, checks: Checks) -> None:
    """DeepSeek-V3's quantised linear: block-scaled product, an e4m3 output scaled per tensor,
    and the amax of the product for the next step's scale, from one kernel."""
    m, n, k = 512, 768, 1024
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([m, k // 128], dtype=mp.float32)
        sb = fd.define_tensor([k // 128, n // 128], dtype=mp.float32)
        out_scale = fd.define_tensor([], dtype=mp.float32)
        y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    fusion = fd.fusion
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(9)))
    assert compiled.kernel_name.endswith("_bs")
