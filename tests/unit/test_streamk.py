"""Stream-K's host side and generated source (``tiling_strategy="persistent_streamk"``): the
tail the host sizes the workspace for is the one the kernel computes, and the kernel is one
entry that counts its pieces with fences and reads partials from L2."""

from __future__ import annotations

import pytest

from mmaplug.plugins.hopper.artifact import streamk_split, streamk_workspace
from mmaplug.plugins.hopper.config import GRID_PARAMS, HopperKernelConfig, kernel_params
from mmaplug.plugins.hopper.kernel_codegen import generate_source

TILES = {"cta_tile": (128, 256, 64), "warp_tile": (64, 256, 64), "stages": 4}


@pytest.mark.parametrize(
    ("tiles", "grid", "split"),
    [(512, 132, (396, 116)), (128, 132, (0, 128)), (1056, 132, (1056, 0)), (3584, 132, (3564, 20))],
)
def test_whole_waves_then_the_tail(tiles: int, grid: int, split: tuple[int, int]) -> None:
    assert streamk_split(tiles, grid) == split


def test_workspace_holds_counters_then_every_pieces_partials() -> None:
    """4096^3 on 128x256 tiles of two consumers, 2 pieces: 116 tail tiles' counters (a word
    per consumer, 16-byte rounded), then 128 accumulators x 128 threads per piece and
    consumer."""
    cfg = HopperKernelConfig(**TILES, splitk=2, streamk=True)
    counters = 116 * 2
    assert streamk_workspace(cfg, 116) == (counters + 116 * 2 * 2 * 128 * 128, counters)
    assert streamk_workspace(cfg, 0) == (4, 0)  # no tail: an array all the same


def test_streamk_config_rules_and_name() -> None:
    cfg = HopperKernelConfig(**TILES, splitk=3, streamk=True)
    assert cfg.name.endswith("_sk") and not cfg.workspace_splitk
    assert kernel_params(cfg)[-len(GRID_PARAMS) - 1] == "ws"
    with pytest.raises(ValueError, match=r"streamk: splitk \(pieces of a tail tile\) must be >= 2"):
        HopperKernelConfig(**TILES, splitk=1, streamk=True)
    with pytest.raises(ValueError, match="streamk is generated without clusters"):
        HopperKernelConfig(**TILES, splitk=2, streamk=True, cluster_m=2)


def test_generated_kernel_counts_pieces_in_one_entry() -> None:
    """The kernel's own tail (from gridDim), one fence before and one after each count, the
    partials read past L1, the pieces summed in piece order; no reduce kernel."""
    source = generate_source(HopperKernelConfig(**TILES, splitk=3, streamk=True), sim=False)
    assert "sk_full = sk_total // ustep * ustep" in source
    assert "units = sk_full + sk_pieces" in source
    assert source.count("fence_acq_rel_gpu()") == 2
    assert "cuda.atomic.add(ws, " in source
    assert "ld_global_cg_v4_f32(ws, " in source
    assert "sk_s0 = sk_p0_0[0] + sk_p1_0[0] + sk_p2_0[0]" in source
    assert "def hopper_splitk_reduce" not in source
