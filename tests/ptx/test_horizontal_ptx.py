"""PTX tier: the horizontal hopper kernel (issue 10 item 3) links as the launch path links it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import mmaplug as mp

pytestmark = pytest.mark.ptx


def _lto_link_log(config: object) -> str:
    """test_compile_ptx's nvJitLink log of the kernel of *config* (one helper for both files)."""
    path = Path(__file__).with_name("test_compile_ptx.py")
    spec = importlib.util.spec_from_file_location("_hopper_compile_ptx", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._lto_link_log(config)  # type: ignore[no-any-return]


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
    h: int, b_k_inner: bool, dtype: str, wgmma: str, overrides: dict | None
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
    text = _lto_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text
