"""GPU tier: the decode kernel on FP8 operands (mma.sync m16n8k32, sm_89+; run on the H200)
against float64, random data, outputs poisoned before each call, through the bound (fast) launch
and the checked one; and the same product as torch._scaled_mm (cuBLASLt)."""

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

pytestmark = pytest.mark.sm90  # FP8 mma.sync needs sm_89; the tier's FP8 GPU is the H200

# (m, n, k): a decode step on a llama weight, ragged N and K (a last chunk of one vector),
# two m tiles, a tiny one, and a wide weight at M = 4. Hopper is blocked: it takes FP8 rows of
# 9-16 activations of most weights by default (the hand-off, run 193), whose kernel the decode
# tests are about.
SHAPES = [(1, 4096, 4096), (5, 1000, 528), (16, 1040, 1024), (3, 16, 64), (4, 14336, 4096)]
CASES = [
    (shape, dtype, scales, epilogue)
    for shape, dtype, scales, epilogue in itertools.product(
        SHAPES, (mp.float8_e4m3fn, mp.float8_e5m2), ("tensor", "row"), ("none", "bias_gelu")
    )
    if dtype is mp.float8_e4m3fn or epilogue == "none"
]


@pytest.fixture
def decode_pm() -> mp.PluginManager:
    """The built-in plugins but hopper: the decode kernel plans every shape here."""
    return mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])


@pytest.mark.parametrize(
    ("shape", "dtype", "scales", "epilogue"),
    CASES,
    ids=[f"{m}x{n}x{k}_{d.label}_{s}_{e}" for (m, n, k), d, s, e in CASES],
)
def test_fp8_decode_matches_float64(
    decode_pm: mp.PluginManager,
    scaled_linear: Linear,
    checks: Checks,
    shape: tuple,
    dtype: object,
    scales: str,
    epilogue: str,
) -> None:
    fusion = scaled_linear(*shape, dtype, scales, epilogue)
    compiled = checks.run(fusion, decode_pm, checks.inputs(fusion, np.random.default_rng(31)))
    assert compiled.spec.scheduler == "decode"
    assert compiled.params.instruction_tile.k == 32 and compiled.params.cta_tile.k == 128


def test_fp8_rows_of_small_weights_stay_on_decode(
    pm: mp.PluginManager, scaled_linear: Linear, checks: Checks
) -> None:
    """12 rows of a 16 MiB e4m3 weight (32 of hopper's swapped tiles): the default plans the
    decode kernel's two m tiles (run 200) and matches float64."""
    fusion = scaled_linear(12, 2048, 8192, mp.float8_e4m3fn, "row", "bias_gelu")
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(33)))
    assert compiled.spec.scheduler == "decode"


@pytest.mark.parametrize(("warps", "stages"), [(1, 1), (2, 4), (4, 3), (8, 2)])
def test_every_fp8_warp_split_and_depth(
    pm: mp.PluginManager, scaled_linear: Linear, checks: Checks, warps: int, stages: int
) -> None:
    """Each legal K split over warps and chunks in flight on a ragged K (1488: 11 chunks of 128
    and 80, five vectors of the last) and N (the last CTA's rows clamped), e5m2 with per-row
    scales and bias + GELU."""
    fusion = scaled_linear(7, 1000, 1488, mp.float8_e5m2, "row", "bias_gelu")
    inputs = checks.inputs(fusion, np.random.default_rng(32))
    compiled = checks.run(fusion, pm, inputs, {"splitk_factor": warps, "stages": stages})
    assert compiled.spec.scheduler == "decode"
    assert (compiled.params.splitk_factor, compiled.params.stages) == (warps, stages)


@pytest.mark.parametrize(("m", "warps", "stages"), [(16, 4, 4), (16, 8, 2), (5, 2, 3)])
def test_fp8_two_row_tiles(
    decode_pm: mp.PluginManager,
    scaled_linear: Linear,
    checks: Checks,
    m: int,
    warps: int,
    stages: int,
) -> None:
    """32 weight rows a CTA (each warp multiplies two row tiles with the activations it loaded
    once), e4m3 with per-row scales and bias + GELU, ragged N (the last CTA's 8 rows) and K
    (11 chunks of 128 and 80)."""
    fusion = scaled_linear(m, 1000, 1488, mp.float8_e4m3fn, "row", "bias_gelu")
    tile = (8 * -(-m // 8), 32, 128)
    overrides = {"cta_tile": tile, "warp_tile": tile, "splitk_factor": warps, "stages": stages}
    inputs = checks.inputs(fusion, np.random.default_rng(34))
    compiled = checks.run(fusion, decode_pm, inputs, overrides)
    assert compiled.kernel_name.endswith(f"_w{warps}_u{stages}_r2")


def test_the_fp8_checked_launch_path(
    pm: mp.PluginManager, scaled_linear: Linear, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MMAPLUG_FAST_LAUNCH=0: every argument (uint8 operands) checked against the signature."""
    monkeypatch.setenv("MMAPLUG_FAST_LAUNCH", "0")
    fusion = scaled_linear(2, 512, 512, mp.float8_e4m3fn, "row", "bias_gelu")
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(33)))
    assert compiled.spec.scheduler == "decode"


@pytest.mark.parametrize("out", [mp.float8_e4m3fn, mp.float8_e5m2], ids=str)
def test_fp8_decode_writes_fp8_outputs(pm: mp.PluginManager, checks: Checks, out: object) -> None:
    """A quantised layer at M = 4: cast(scaled_mm(...) * out_scale, FP8), saturating."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 2048], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([2048, 1000], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([4, 1], dtype=mp.float32)
        sb = fd.define_tensor([1, 1000], dtype=mp.float32)
        scale = fd.define_tensor([], dtype=mp.float32)
        y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.mul(y, scale), 4.0), out))
    compiled = checks.run(fd.fusion, pm, checks.inputs(fd.fusion, np.random.default_rng(34)))
    assert compiled.spec.scheduler == "decode"


@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_fp8_decode_agrees_with_torch_scaled_mm(
    decode_pm: mp.PluginManager, scaled_linear: Linear, scales: str
) -> None:
    """At M = 16 (cuBLASLt's FP8 wants extents of 16s) the bf16 results of ours and
    torch._scaled_mm agree to a few bf16 rounding steps."""
    m, n, k = 16, 4096, 4096
    fusion = scaled_linear(m, n, k, mp.float8_e4m3fn, scales, "none")
    gen = torch.Generator(device="cuda").manual_seed(4)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    shapes = ((m, 1), (1, n)) if scales == "row" else ((), (1,))
    sa = torch.rand(shapes[0], device="cuda", generator=gen) + 0.5
    sb = torch.rand(shapes[1], device="cuda", generator=gen) + 0.5
    compiled = mp.compile(fusion, pm=decode_pm)
    assert compiled.spec.scheduler == "decode"
    ours = compiled.execute([a, w.t(), sa, sb])[0]
    theirs = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    err = (ours.double() - theirs.double()).norm() / theirs.double().norm()
    assert err < 1e-2, float(err)


@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "e4m3_amax"])
@pytest.mark.parametrize("scales", ["tensor", "row"])
@pytest.mark.parametrize("shape", [(1, 14336, 4096), (5, 1000, 528)], ids=str)
def test_fp8_ffn_is_one_decode_kernel(
    checks: Checks, shape: tuple[int, int, int], scales: str, quantized: bool
) -> None:
    """The FP8 llama FFN's decode step, ``h = silu(scaled_mm(x, W1)) * scaled_mm(x, W3)`` with
    x's scale shared, is one horizontal decode kernel (with every scheduler): h as bfloat16,
    or quantised for the next layer (``cast(h * out_scale, e4m3)`` and ``amax(h)``)."""
    m, n, k = shape
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn)
        sx = fd.define_tensor([m, 1] if scales == "row" else [], dtype=mp.float32)
        ys = []
        for _ in range(2):
            w = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
            sw = fd.define_tensor([1, n] if scales == "row" else [1], dtype=mp.float32)
            ys.append(fd.ops.scaled_mm(x, w, sx, sw, out_dtype=mp.float32))
        h = fd.ops.mul(fd.ops.silu(ys[0]), ys[1])
        if quantized:
            out_scale = fd.define_tensor([], dtype=mp.float32)
            fd.add_output(fd.ops.cast(fd.ops.mul(h, out_scale), mp.float8_e4m3fn))
            fd.add_output(fd.ops.amax(h, [0, 1]))
        else:
            fd.add_output(fd.ops.cast(h, mp.bfloat16))
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = checks.run(fd.fusion, pm, checks.inputs(fd.fusion, np.random.default_rng(32)))
    assert compiled.spec.scheduler == "decode"
    assert compiled.kernel_name.endswith("_h2")
