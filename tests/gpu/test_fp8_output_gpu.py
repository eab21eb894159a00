"""GPU tier: FP8 outputs of the hopper kernel, a quantized layer's
``cast(scaled_mm(..., out_dtype=float32) * out_scale, e4m3 / e5m2)`` with a gain that makes a
share of the values saturate, through the packed, staged and register epilogues, split-K,
ping-pong and CTA pairs, on random data against float64 (``mp.evaluate``, which saturates as
``cvt.rn.satfinite``). Outputs are poisoned before each call: a quarter of the poison's bytes
read as FP8 NaN, so an unwritten 16-byte span shows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

# (m, n, k): N = 1000 stages without packing (rows are not 16-byte vectors), N = 1001 stores
# bytes (no 4-byte store is aligned); M = 8 is the decode scheduler's range (its epilogue
# writes FP8 one byte per element, sm_89+)
SHAPES = [(256, 256, 256), (1000, 1040, 528), (1000, 1000, 528), (1000, 1001, 528),
          (2048, 2048, 4096), (8, 4096, 4096)]  # fmt: skip
OUTPUTS = [
    (mp.float8_e4m3fn, mp.float8_e4m3fn),
    (mp.float8_e5m2, mp.float8_e5m2),
    (mp.bfloat16, mp.float8_e4m3fn),  # a 16-bit matmul quantized on the way out
]
CASES = [(shape, ab, out) for shape in SHAPES for ab, out in OUTPUTS]


def _fusion(m: int, n: int, k: int, operands: object, out: object, *, gain: float | None = None,
            product: bool = False) -> mp.Fusion:  # fmt: skip
    """``cast(A @ B (scaled for FP8 operands, per row and column) * out_scale * gain, out)``;
    the default gain puts a typical value at twice the FP8 maximum; *product*: the float32
    product as a second, bfloat16 output."""
    gain = _gain(out, k) if gain is None else gain
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])  # a weight [N, K]
        if operands.is_float8:  # type: ignore[attr-defined]
            sa = fd.define_tensor([m, 1], dtype=mp.float32)
            sb = fd.define_tensor([1, n], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        out_scale = fd.define_tensor([], dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.mul(y, out_scale), gain), out))
        if product:
            fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd.fusion


def _gain(out: object, k: int) -> float:
    """A gain putting a typical value of a k-deep product at twice *out*'s FP8 maximum."""
    fp8 = out if out.is_float8 else mp.float8_e4m3fn  # type: ignore[attr-defined]
    return 2 * fp8.finite_max / math.sqrt(k)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("shape", "operands", "out"),
    CASES,
    ids=[f"{m}x{n}x{k}_{a.label}_to_{o.label}" for (m, n, k), a, o in CASES],
)
def test_fp8_output_matches_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, operands: object, out: object
) -> None:
    fusion = _fusion(*shape, operands, out)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(21)))
    assert compiled.spec.scheduler == ("decode" if shape[0] <= 16 else "hopper")


def test_fp8_output_kernel_variants(
    pm: mp.PluginManager, checks: Checks, epilogue_variant: dict
) -> None:
    """Split-K (the reduce kernel writes the FP8 output), CTA pairs, ping-pong and both
    epilogues, on ragged M and N with an e4m3 output beside the bf16 product."""
    fusion = _fusion(1000, 1040, 1536, mp.float8_e4m3fn, mp.float8_e4m3fn, product=True)
    compiled = checks.run(
        fusion, pm, checks.inputs(fusion, np.random.default_rng(22)), epilogue_variant
    )
    assert compiled.params == compiled.params.with_overrides(**epilogue_variant)  # taken as asked


@pytest.mark.parametrize("out", [mp.float8_e4m3fn, mp.float8_e5m2], ids=str)
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "registers"])
def test_fp8_output_is_the_float32_result_rounded_as_evaluate(
    pm: mp.PluginManager, checks: Checks, out: object, packed: bool
) -> None:
    """The FP8 output is bit for bit the same fusion's float32 result (the same main loop,
    planned alike) rounded as mp.evaluate rounds, saturation included. (Against evaluate itself
    about 1% of the values sit one FP8 step away: FP8 wgmma accumulates with fewer bits than
    float32. The simulator tier, float32 sums, finds those bit-equal too.)"""
    from mmaplug.ir.evaluate import round_to

    m, n, k = 512, 768, 1024
    fusion = _fusion(m, n, k, out, out)
    inputs = checks.inputs(fusion, np.random.default_rng(23))
    inputs[-1].fill_(1.0)  # out_scale: a typical value at twice the maximum, whatever the draw
    compiled = mp.compile(fusion, pm=pm, overrides={"use_smem_epilogue": packed})
    assert ("_ps" in compiled.kernel_name) == packed
    p = compiled.params
    same_loop = {
        "cta_tile": p.cta_tile.as_tuple(), "warp_tile": p.warp_tile.as_tuple(),
        "instruction_tile": p.instruction_tile.as_tuple(), "stages": p.stages,
        "splitk_factor": p.splitk_factor, "tiling_strategy": p.tiling_strategy.value,
        "cluster_dims": p.cluster_dims, "use_smem_epilogue": packed,
    }  # fmt: skip
    wide = mp.compile(_fusion(m, n, k, out, mp.float32, gain=_gain(out, k)), pm=pm,
                      overrides=same_loop)  # fmt: skip
    (got,) = compiled.execute(inputs)
    (y,) = wide.execute(inputs)
    torch.cuda.synchronize()
    got64, y64 = got.double().cpu().numpy(), y.double().cpu().numpy()
    np.testing.assert_array_equal(got64, round_to(y64, out))  # (round_to saturates)
    top = out.finite_max  # type: ignore[attr-defined]
    assert np.mean(np.abs(y64) > top) > 0.05, "the gain should saturate a share of the values"
