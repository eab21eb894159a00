"""PTX tier: block-scaled FP8 kernels (1x128 scales of A, 128x128 of B) compile for sm_90a and
link whole as launches link them: the promotion is FMAs on the accumulators in registers,
nothing spilled (partial sums and accumulators are both live), setmaxnreg kept, wgmmas not
serialised. (The simulator runs Python: Numba's typing of the generated code is checked here.)"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp

pytestmark = pytest.mark.ptx


def _block_scaled(m: int, n: int, k: int, fp8: object = mp.float8_e4m3fn) -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=fp8)
        b = fd.define_tensor([k, n], dtype=fp8, stride_order=[0, 1])
        sa = fd.define_tensor([m, -(-k // 128)], dtype=mp.float32)
        sb = fd.define_tensor([-(-k // 128), -(-n // 128)], dtype=mp.float32)
        bias = fd.define_tensor([n], dtype=mp.bfloat16)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.bfloat16))
    return fd.fusion


def _tiles(cta: tuple, warp: tuple, **extra: object) -> dict[str, object]:
    """Overrides of the CTA and warp tiles, with the FP8 wgmma of the warp tile's width."""
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], 32), **extra}


# plan -> (problem, overrides): the default plan of a large problem (two consumers of 64x256
# warp tiles promoted by chunks), 256-deep K tiles (64 accumulators and two sets of 64 partial
# sums a thread), 128-deep tiles alone and in CTA pairs, split-K with ping-pong, the chunks
# with three stages
PLANS = {
    "default": ((4096, 4096, 4096), {}),
    "two_blocks_a_stage": ((4096, 4096, 4096), _tiles((128, 128, 256), (64, 128, 256), stages=3)),
    "pairs": (
        (4096, 4096, 4096),
        _tiles((128, 128, 128), (64, 128, 128), cluster_dims=(2, 1)),
    ),
    "one_block_a_stage": ((4096, 4096, 4096), _tiles((128, 128, 128), (64, 128, 128), stages=4)),
    "pingpong_splitk": (
        (512, 1024, 8192),
        _tiles(
            (64, 128, 128), (64, 128, 128), tiling_strategy="persistent_pingpong", splitk_factor=4
        ),
    ),  # fmt: skip
    "chunks": ((4096, 4096, 4096), _tiles((128, 256, 128), (64, 256, 128), stages=3)),
}
# nothing spilled: the 64x256 tiles promoted by chunks hold 192 sums a thread within 240
# registers, and spilled 112 bytes outside their main loop until the warpgroup index was made
# warp-uniform (its wgmma descriptors moved to uniform registers; BENCHMARKS.md run 125)


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_block_scaled_kernel_compiles_and_links_whole(
    plan: str, hopper_link_log: Callable[[object], str]
) -> None:
    (m, n, k), overrides = PLANS[plan]
    compiled = mp.compile(_block_scaled(m, n, k), "h200", overrides=overrides)
    config = compiled._artifact.config
    assert config.block_scaled and compiled.kernel_name.endswith("_bs"), compiled.kernel_name
    ptx = compiled.ptx
    assert "wgmma.mma_async.sync.aligned.m64n" in ptx and "fma.rn.f32" in ptx
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text  # wgmmas serialised
    assert re.search(r"\b0 bytes spill stores", text), text


def test_block_scaled_default_plan_is_the_chunks() -> None:
    """The default heuristic plans a large problem's 64x256 warp tiles promoted by chunks (the
    "default" plan above is them), one scale block of K a stage."""
    params = mp.compile(_block_scaled(4096, 4096, 4096), "h200").params
    assert params.cta_tile.as_tuple() == (128, 256, 128)
    assert params.warp_tile.as_tuple() == (64, 256, 128)
