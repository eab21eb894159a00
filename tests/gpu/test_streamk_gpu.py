"""GPU tier, sm_90a: stream-K (``tiling_strategy="persistent_streamk"``, kernel suffix ``_sk``).

The H200's 132 persistent CTAs take the whole waves' tiles; the tiles of the last, partly
filled wave are cut along K into ``splitk_factor`` pieces, and the CTA finishing a tile's last
piece sums the pieces from the workspace and runs the epilogue. Grids with a tail of a few
tiles and grids of fewer tiles than CTAs (every tile cut), each epilogue path (packed, TMA
stores, registers, FP8 outputs with their amax, block scales, the operand swap), each checked
against float64 on poisoned outputs, twice (the second call takes the bound launch, whose
workspace comes from torch and whose counters are zeroed on the stream), and the result
bit-identical to the same tiles without stream-K where the sums' order is the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks, Linear

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

STREAMK: dict[str, Any] = {"tiling_strategy": "persistent_streamk"}


def _linear(m: int, n: int, k: int, dtype: mp.DType, epilogue: str, batch: int = 1) -> mp.Fusion:
    """TN matmul (A [batch?, m, k], weight-like B), *epilogue* ``"cast"`` or ``"bias_gelu"``
    (a bias along N), cast to *dtype*."""
    lead = [batch] if batch > 1 else []
    keep = [2] * len(lead)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype=dtype, stride_order=[*keep, 1, 0])
        b = fd.define_tensor([*lead, k, n], dtype=dtype, stride_order=[*keep, 0, 1])
        y = fd.ops.matmul(a, b)
        if epilogue == "bias_gelu":
            bias = fd.define_tensor([n], dtype=dtype)
            y = fd.ops.gelu(
                fd.ops.add(y, fd.ops.broadcast_in_dim(bias, [*lead, m, n], [len(lead) + 1]))
            )
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def _tiles(
    cta: tuple[int, int, int], warp: tuple[int, int, int], pieces: int, **extra: Any
) -> dict:
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], 16),
            "stages": 4, "splitk_factor": pieces, **STREAMK, **extra}  # fmt: skip


CASES = {  # (m, n, k, batch), dtype, epilogue, overrides
    # 512 tiles of 64x64: 3 whole waves, 116 tail tiles in 2 pieces; packed stores by TMA
    "f16_tail116_tma": ((2000, 1000, 512, 1), mp.float16, "cast",
                        _tiles((64, 64, 64), (64, 64, 64), 2, use_smem_epilogue=True)),
    # 64 tiles of 128x256 (two consumers): every tile in 3 pieces, the last one short
    "bf16_all_tail_bias_gelu": ((1000, 2000, 1000, 1), mp.bfloat16, "bias_gelu",
                                _tiles((128, 256, 64), (64, 256, 64), 3, use_smem_epilogue=True)),
    # 3 batches of 2 x 4 tiles of 128x128: 24 tiles, 6 pieces each, from registers
    "f16_batch3_registers": ((256, 512, 768, 3), mp.float16, "bias_gelu",
                             _tiles((128, 128, 64), (64, 128, 64), 6, use_smem_epilogue=False)),
    # the operand swap: 64 weight tiles against 24 activation rows, 4 pieces
    "bf16_swap": ((24, 4096, 2048, 1), mp.bfloat16, "cast",
                  {**_tiles((64, 24, 64), (64, 24, 64), 4), "swap_ab": True,
                   "use_smem_epilogue": False}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamk_matches_float64(pm: mp.PluginManager, checks: Checks, case: str) -> None:
    (m, n, k, batch), dtype, epilogue, overrides = CASES[case]
    fusion = _linear(m, n, k, dtype, epilogue, batch)
    inputs = checks.inputs(fusion, np.random.default_rng(29))
    compiled = checks.run(fusion, pm, inputs, overrides)
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_sk"), compiled.kernel_name


def test_streamk_whole_tiles_unchanged_and_calls_identical(
    pm: mp.PluginManager, checks: Checks
) -> None:
    """512 tiles on 132 CTAs, the 116 tail tiles in 2 pieces: the whole tiles' outputs are
    bit-identical to the persistent kernel's (the same K loop), so at most the tail's share
    of elements differ (by the rounding of the pieces' float32 sum); and two calls are
    bit-identical (the last piece sums in piece order, whichever piece finishes last)."""
    fusion = _linear(2000, 1000, 512, mp.bfloat16, "cast")
    inputs = checks.inputs(fusion, np.random.default_rng(31))
    tiles = _tiles((64, 64, 64), (64, 64, 64), 2, use_smem_epilogue=True)
    streamk = mp.compile(fusion, pm=pm, overrides=tiles)
    whole = mp.compile(
        fusion, pm=pm, overrides={**tiles, "tiling_strategy": "persistent", "splitk_factor": 1}
    )
    first, second = (streamk.execute(inputs)[0].float().cpu().numpy() for _ in range(2))
    reference = whole.execute(inputs)[0].float().cpu().numpy()
    assert np.array_equal(first, second)
    differ = np.count_nonzero(first != reference) / first.size
    assert 0 < differ <= 116 / 512, differ
    assert np.abs(first - reference).max() <= 2**-6 * np.abs(reference).max()


@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_streamk_fp8(pm: mp.PluginManager, checks: Checks, scaled_linear: Linear,
                     scales: str) -> None:  # fmt: skip
    """FP8 per tensor and per row with bias + GELU: 8 x 8 tiles of 128x256x128, each in 4
    pieces of K = 2048."""
    fusion = scaled_linear(1000, 2000, 2048, mp.float8_e4m3fn, scales, "bias_gelu")
    inputs = checks.inputs(fusion, np.random.default_rng(37), uniform=1.0)
    overrides = {
        "cta_tile": (128, 256, 128),
        "warp_tile": (64, 256, 128),
        "instruction_tile": (64, 256, 32),
        "stages": 4,
        "splitk_factor": 4,
        **STREAMK,
    }
    compiled = checks.run(fusion, pm, inputs, overrides)
    assert compiled.kernel_name.endswith("_sk"), compiled.kernel_name
