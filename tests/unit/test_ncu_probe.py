"""scripts/ncu_probe.py's skinny overrides (BENCHMARKS.md runs 287-288) plan, without a GPU,
the kernels their comments name: cuBLAS's decomposition of bf16 32x4096x4096 (the transposed
product on 64x16 tiles in pairs along N sharing the weight) and the swapped default split 2.
A rule that came to refuse one, or a plan that drifted from it, would time another kernel."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

import mmaplug as mp


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("ncu_probe")


@pytest.mark.parametrize(
    ("spec", "kernel"),
    [
        ("32x4096x4096@sw16c2", "hopper_bfloat16_kk_64x16x64_w64x16_s16_sk1_cn2_swap"),
        ("32x4096x4096@sw16c2k", "hopper_bfloat16_kk_64x16x128_w64x16_s8_sk1_cn2_swap"),
        ("16x4096x4096@sw8c2", "hopper_bfloat16_kk_64x8x64_w64x8_s16_sk1_cn2_swap"),
        ("32x4096x4096@ss2", "hopper_bfloat16_kk_64x32x128_w64x32_s8_sk2_swap"),
        ("32x4096x4096@ss2c", "hopper_bfloat16_kk_64x32x128_w64x32_s8_sk2_swap_kc"),
    ],
)
def test_skinny_overrides_plan_their_kernels(script: ModuleType, spec: str, kernel: str) -> None:
    problem, overrides = script.problem_and_overrides(script.parse_spec(spec))
    hopper = mp.make_plugin_manager(block=["decode", "ampere"], load_entrypoints=False)
    compiled = mp.compile(problem.fusion(), "h100", pm=hopper, overrides=overrides)
    assert compiled.kernel_name == kernel
