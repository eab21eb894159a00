"""The hopper kernel's PTX: its work units decoded in 32-bit unsigned arithmetic (no 64-bit
division or remainder: Python's floored int64 ones cost ~300 SASS a tile, BENCHMARKS run 57),
its epilogue steps inlined."""

from __future__ import annotations

import re

import pytest

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion

PLANS = {
    "default": None,
    "cta_pairs": {"cluster_dims": (2, 1)},
    "swizzle_4_column_major": {"grid_swizzle_factor": 4, "cta_order": "column_major"},
    "splitk_3": {"splitk_factor": 3},
    "pingpong": {"tiling_strategy": "persistent_pingpong", "cta_tile": (128, 128, 64),
                 "warp_tile": (128, 128, 64), "instruction_tile": (64, 128, 16), "stages": 6},
    "swap_ab": {"swap_ab": True, "use_smem_epilogue": False, "cta_tile": (64, 32, 128),
                "warp_tile": (64, 32, 128), "instruction_tile": (64, 32, 16), "stages": 8},
}  # fmt: skip


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_no_64_bit_division(plan: str) -> None:
    compiled = mp.compile(
        linear_fusion(4096, 4096, 4096, mp.float16, True), "h200", overrides=PLANS[plan]
    )
    assert compiled.kernel_name.startswith("hopper_")
    main = compiled.ptx.split(".entry")[1]  # the main kernel (split-K's reduce comes after)
    wide = re.findall(r"\b(?:div|rem)\.[su]64\b", main)
    assert not wide, f"{plan}: {len(wide)} 64-bit divisions in the main kernel"
    assert re.search(r"\bdiv\.u32\b", main), "the decode's 32-bit divisions are missing"


@pytest.mark.parametrize("plan", ["default", "pingpong", "cta_pairs"])
def test_the_epilogue_step_function_is_inlined(plan: str) -> None:
    """The packed epilogue's step is a device function (Numba types one step, not eight);
    NVVM inlines every call (forceinline), so the kernel keeps its registers and constants."""
    compiled = mp.compile(
        linear_fusion(4096, 4096, 4096, mp.float16, True), "h200", overrides=PLANS[plan]
    )
    assert "def packed_step" in compiled.source
    assert re.search(r"^\s*packed_step\(", compiled.source, re.MULTILINE)
    assert not re.search(r"\bcall(\.uni)?\b", compiled.ptx), f"{plan}: a call is left"


@pytest.mark.parametrize("epilogue", [False, True], ids=["bare", "bias_gelu"])
def test_the_default_swaps_a_weight_streaming_row(epilogue: bool) -> None:
    """32 x 4096 x 4096 (x @ w.T): the default's transposed product issues m64n32 wgmmas, the
    weight as A (64 rows a CTA) and the 32 activation rows as the instruction's N, and its
    register epilogue spills nothing to local memory."""
    compiled = mp.compile(linear_fusion(32, 4096, 4096, mp.bfloat16, epilogue), "h200")
    assert compiled.params.swap_ab and compiled.kernel_name.endswith("_swap")
    main = compiled.ptx.split(".entry")[1]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n32k16\.f32\.bf16\.bf16", main)
    assert not re.search(r"wgmma\.mma_async\S*\.m64n(?!32k16)", main), "another wgmma shape"
    assert not re.search(r"\bst\.local\b", main), "the epilogue spills"
