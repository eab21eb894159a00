"""The hopper-tiles heuristic through mmaplug's test harness: its values reach the h200 plan."""

from __future__ import annotations

import attrs
import mmaplug_hopper_tiles as hopper_tiles
import pytest

import mmaplug as mp
from mmaplug.testing import SENTINELS, override_matmul_params, registered

NAME = "hopper_tiles"


def linear(m: int, n: int, k: int, dtype: mp.DType = mp.float16) -> mp.FusionDefinition:
    """``x @ w.T`` (the TN layout) with x ``[m, k]`` and w ``[n, k]``."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w = fd.define_tensor([n, k], dtype=dtype)
        fd.add_output(fd.ops.linear(x, w))
    return fd


def plan(pm: mp.PluginManager, fd: mp.FusionDefinition, device: str = "h200") -> mp.KernelSpec:
    """The plan of *fd* on *device* with the example registered in *pm* for the call."""
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    with registered(pm, hopper_tiles):
        return mp.plan_problem(problem, device, pm=pm)


@pytest.mark.parametrize("dtype", [mp.float16, mp.bfloat16])
def test_large_matmuls_get_cta_pairs(mmaplug_pm, dtype):
    """A large 16-bit matmul on h200: every field from PAIRS, nothing adjusted."""
    spec = plan(mmaplug_pm, linear(4096, 4096, 4096, dtype))
    assert (spec.scheduler, spec.provenance.base) == ("hopper", NAME)
    assert spec.params == hopper_tiles.PAIRS
    assert spec.provenance.source("cluster_dims") == NAME
    assert spec.provenance.adjustments == ()


def test_it_changes_what_the_default_chooses(mmaplug_pm):
    """Without the plugin the same problem runs without CTA pairs: the plugin took effect."""
    problem = mp.matmul_problem(linear(4096, 4096, 4096).fusion, pm=mmaplug_pm)
    default = mp.plan_problem(problem, "h200", pm=mmaplug_pm)
    assert default.params.cluster_dims == (1, 1)
    assert plan(mmaplug_pm, linear(4096, 4096, 4096)).params.cluster_dims == (2, 1)


def test_the_kernel_is_built_from_its_params(mmaplug_pm):
    """mp.compile for h200 (no GPU needed to plan) names the kernel after the plugin's params."""
    with registered(mmaplug_pm, hopper_tiles):
        compiled = mp.compile(linear(4096, 4096, 4096), device="h200", pm=mmaplug_pm)
    assert compiled.params == hopper_tiles.PAIRS
    assert hopper_tiles.PAIRS.name in compiled.spec.name  # ..._cl2x1_persistent_ws_cast


@pytest.mark.parametrize(
    ("fd", "device"),
    [
        (linear(2048, 4096, 4096), "h200"),  # M below LARGE
        (linear(4096, 4096, 512), "h200"),  # K below 1024
        (linear(4096, 4096, 4096), "a100"),  # the ampere scheduler
        (linear(4096, 4096, 4096, mp.float8_e4m3fn), "h200"),  # FP8: K steps of 32
    ],
    ids=["small_m", "short_k", "ampere", "fp8"],
)
def test_defers_otherwise(mmaplug_pm, fd, device):
    """Other problems, and other schedulers, get the default heuristic's base."""
    assert plan(mmaplug_pm, fd, device).provenance.base == "default"


def test_deep_k_splits_k(mmaplug_pm):
    """K = 8192 over 128 output tiles (fewer than the 132 SMs, too many for the default to
    split): the override splits K in two."""
    spec = plan(mmaplug_pm, linear(2048, 2048, 8192))
    assert spec.provenance.base == "default"
    assert (spec.params.splitk_factor, spec.provenance.source("splitk_factor")) == (2, NAME)


def test_a_split_the_default_chose_is_kept(mmaplug_pm):
    """K = 16384 over 16 output tiles: the default already splits K (8 ways); the override,
    which only splits unsplit plans, leaves it."""
    spec = plan(mmaplug_pm, linear(512, 512, 16384))
    assert (spec.params.splitk_factor, spec.provenance.source("splitk_factor")) == (8, "default")


@pytest.mark.parametrize(
    ("fd", "device"),
    [(linear(2048, 8192, 16384), "h200"), (linear(1024, 1024, 16384), "a100")],
    ids=["many_tiles", "ampere"],
)
def test_no_split_where_tiles_fill_the_gpu_or_on_ampere(mmaplug_pm, fd, device):
    """Enough output tiles for every SM, or an ampere plan (not warp-specialized): no split."""
    spec = plan(mmaplug_pm, fd, device)
    assert (spec.params.splitk_factor, spec.provenance.source("splitk_factor")) == (1, "default")


def test_hooks_are_asked_in_plan_order(mmaplug_pm, mmaplug_recorder):
    """The scheduler is chosen first (from the scheduler objects); then params and overrides
    (the chosen scheduler's rules validate them, no hook)."""
    plan(mmaplug_pm, linear(4096, 4096, 4096))
    mmaplug_recorder.assert_order(
        ["mmaplug_schedulers", "mmaplug_matmul_params", "mmaplug_matmul_overrides"]
    )
    (call,) = [c for c in mmaplug_recorder.getcalls("mmaplug_matmul_params") if NAME in c.plugins]
    assert call.scheduler == "hopper"


def test_a_test_override_wins_over_it(mmaplug_pm):
    """override_matmul_params with a sentinel replaces one field; the rest stay the plugin's."""
    swizzle = SENTINELS["grid_swizzle_factor"]
    with override_matmul_params(grid_swizzle_factor=swizzle):
        spec = plan(mmaplug_pm, linear(4096, 4096, 4096))
    assert spec.params == attrs.evolve(hopper_tiles.PAIRS, grid_swizzle_factor=swizzle)
    assert spec.provenance.source("grid_swizzle_factor") == "override_matmul_params"
    assert spec.provenance.source("cta_tile") == NAME
