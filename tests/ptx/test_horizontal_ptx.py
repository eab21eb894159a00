"""PTX tier: the horizontal hopper kernel (issue 10 item 3) links as the launch path links it."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp

pytestmark = pytest.mark.ptx


PINGPONG = {"cta_tile": (64, 256, 64), "warp_tile": (64, 256, 64),
            "instruction_tile": (64, 256, 16),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


@pytest.mark.parametrize(
    ("h", "b_k_inner", "dtype", "wgmma", "overrides"),
    [(2, True, "bfloat16", "m64n256k16.f32.bf16.bf16", None),
     (2, False, "float16", "m64n256k16", None), (3, True, "float16", "m64n192k16", None),
     (2, True, "bfloat16", "m64n256k16", PINGPONG)],
    ids=["ffn_bf16_kmajor", "ffn_f16_nmajor", "three_f16_kmajor", "ffn_bf16_pingpong"],
)  # fmt: skip
def test_horizontal_kernel_links_whole(
    h: int,
    b_k_inner: bool,
    dtype: str,
    wgmma: str,
    overrides: dict | None,
    hopper_link_log: Callable[[object], str],
) -> None:
    """The default plan for the FFN at the benchmark's shape (h = 3, ping-pong too): one wgmma
    of N = h x the output tile's n, a tensor map per B, setmaxnreg kept (no C7504), the wgmmas
    pipelined (no C7509), no spills (the epilogue's local array is a stack frame)."""
    m, n, k = 2048, 14336, 5120
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=getattr(mp, dtype))
        ws = [fd.define_tensor([n, k] if b_k_inner else [k, n], dtype=getattr(mp, dtype))
              for _ in range(h)]  # fmt: skip
        op = fd.ops.linear if b_k_inner else fd.ops.matmul
        y = fd.ops.silu(op(x, ws[0]))
        for w in ws[1:]:
            y = fd.ops.mul(y, op(x, w))
        fd.add_output(fd.ops.cast(y, getattr(mp, dtype)))
    compiled = mp.compile(fd.fusion, "h200", overrides=overrides)
    config = compiled._artifact.config  # the HopperArtifact's kernel config
    assert config.horizontal == h
    ptx = compiled.ptx
    assert f"wgmma.mma_async.sync.aligned.{wgmma}" in ptx
    assert ptx.count("cp.async.bulk.tensor.3d") >= 1 + h  # A's boxes and each B map's
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text
