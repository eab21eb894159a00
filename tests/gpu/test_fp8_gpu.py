"""GPU tier: FP8 scaled matmuls (e4m3 / e5m2, per-tensor and per-row/column scales, fused
epilogues) on the hopper kernel (the decode kernel at M = 8) against float64, random data,
outputs poisoned before each call; and the same product as torch._scaled_mm (cuBLASLt)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks, Linear

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

SHAPES = [
    (256, 256, 256),
    (1000, 1040, 528),
    (128, 4096, 4096),
    (8, 4096, 4096),
    (2048, 2048, 4096),
]
EPILOGUES = ("none", "bias", "bias_gelu")
CASES = [
    (shape, dtype, scales, epilogue)
    for shape, dtype, scales, epilogue in itertools.product(
        SHAPES, (mp.float8_e4m3fn, mp.float8_e5m2), ("tensor", "row"), EPILOGUES
    )
    if dtype is mp.float8_e4m3fn or epilogue == "none"
]


@pytest.mark.parametrize(
    ("shape", "dtype", "scales", "epilogue"),
    CASES,
    ids=[f"{m}x{n}x{k}_{d.label}_{s}_{e}" for (m, n, k), d, s, e in CASES],
)
def test_fp8_matches_float64(
    pm: mp.PluginManager,
    scaled_linear: Linear,
    checks: Checks,
    shape: tuple,
    dtype: object,
    scales: str,
    epilogue: str,
) -> None:
    fusion = scaled_linear(*shape, dtype, scales, epilogue)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(11)))
    # M <= 8: the decode kernel's mma.sync m16n8k32; above, hopper's wgmma m64nNk32
    assert compiled.spec.scheduler == ("decode" if shape[0] <= 8 else "hopper")
    assert compiled.params.instruction_tile.k == 32


@pytest.mark.parametrize(
    ("m", "dtype", "scales", "epilogue"),
    [
        (12, mp.float8_e4m3fn, "row", "bias_gelu"),
        (16, mp.float8_e5m2, "tensor", "none"),
        (24, mp.float8_e4m3fn, "row", "bias_gelu"),
        (32, mp.float8_e5m2, "tensor", "none"),
    ],
    ids=["12_e4m3_row_bias_gelu", "16_e5m2_tensor", "24_e4m3_row_bias_gelu", "32_e5m2_tensor"],
)
def test_fp8_default_swaps_skinny_rows(
    pm: mp.PluginManager, scaled_linear: Linear, checks: Checks, m: int, dtype: object,
    scales: str, epilogue: str,
) -> None:  # fmt: skip
    """A skinny FP8 row's default plan is the transposed product (256 of K a stage) and
    matches float64: from 9 rows, which the decode kernel hands to hopper (run 193)."""
    fusion = scaled_linear(m, 6144, 4096, dtype, scales, epilogue)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(19)))
    assert compiled.spec.scheduler == "hopper" and compiled.params.swap_ab
    assert compiled.params.cta_tile.k == 256


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
        {
            "cta_tile": (128, 128, 256),
            "warp_tile": (64, 128, 256),
            "instruction_tile": (64, 128, 32),
            "stages": 3,
        },
        {"use_smem_epilogue": False},
        {
            "swap_ab": True,
            "use_smem_epilogue": False,
            "cta_tile": (128, 128, 128),
            "warp_tile": (64, 128, 128),
            "instruction_tile": (64, 128, 32),
            "splitk_factor": 2,
        },
    ],
    ids=["splitk3", "cluster_pairs", "pingpong", "bk256", "register_epilogue", "swap_ab"],
)
def test_fp8_kernel_variants(
    pm: mp.PluginManager, scaled_linear: Linear, checks: Checks, overrides: dict
) -> None:
    """Split-K, CTA pairs, ping-pong, 256-deep K tiles, the register epilogue and the
    transposed product (split), on ragged M and N with per-row scales, bias and GELU."""
    fusion = scaled_linear(1000, 1040, 1536, mp.float8_e4m3fn, "row", "bias_gelu", out=mp.float16)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(12)), overrides)
    assert compiled.params == compiled.params.with_overrides(**overrides)  # taken as asked


@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_fp8_agrees_with_torch_scaled_mm(
    pm: mp.PluginManager, scaled_linear: Linear, scales: str
) -> None:
    """The same inputs through torch._scaled_mm (cuBLASLt): the two bf16 results agree to a
    few bf16 rounding steps (both accumulate the same exact FP8 products in float32)."""
    m, n, k = 512, 768, 1024
    fusion = scaled_linear(m, n, k, mp.float8_e4m3fn, scales, "none")
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    if scales == "row":
        sa = torch.rand(m, 1, device="cuda", generator=gen) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=gen) + 0.5
        ours = mp.compile(fusion, pm=pm).execute([a, w.t(), sa, sb])[0]
    else:
        sa = torch.rand((), device="cuda", generator=gen) + 0.5
        sb = torch.rand(1, device="cuda", generator=gen) + 0.5
        ours = mp.compile(fusion, pm=pm).execute([a, w.t(), sa, sb])[0]
    theirs = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    err = (ours.double() - theirs.double()).norm() / theirs.double().norm()
    assert err < 1e-2, float(err)


@pytest.mark.parametrize("layout", [("k", "n"), ("m", "n")], ids=["TT", "NT"])
def test_fp8_operands_not_k_major_are_copied_then_multiplied(
    pm: mp.PluginManager, checks: Checks, layout: tuple[str, str]
) -> None:
    """FP8 wgmma reads K-major operands only: an M-major A or N-major B is copied K-major by
    torch in a segment of its own, then the kernel runs (float64 reference, poisoned outputs)."""
    m, n, k = 1000, 1040, 528
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn,
                             stride_order=[1, 0] if layout[0] == "k" else [0, 1])  # fmt: skip
        b = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn, stride_order=[1, 0])
        sa = fd.define_tensor([m, 1], dtype=mp.float32)
        sb = fd.define_tensor([1, n], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    compiled = checks.run(fd.fusion, pm, checks.inputs(fd.fusion, np.random.default_rng(15)))
    assert [s.kind for s in compiled.segments] == ["pointwise", "matmul"]
