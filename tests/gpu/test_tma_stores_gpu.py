"""GPU tier, sm_90a: the packed epilogue's chunks stored by TMA (kernel suffix ``_ts``).

Casts-only epilogues on grids of more work units than the H200 runs at once, ragged in M and
N (the maps clip the boxes past them): 16-bit outputs (64-byte swizzled boxes, two buffers), a
float32 output (128-byte boxes, one buffer), two outputs in one buffer, a batched output
permuted to [M, B, N] (the map's row stride B x N), 48-column consumer tiles (32-byte boxes),
ping-pong consumers and CTA pairs. Each is checked against float64 on poisoned outputs, twice
(the second call takes the bound launch, whose output maps are keyed by the output's address).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90


def _fusion(m: int, n: int, k: int, dtype: mp.DType, outputs: str, batch: int = 1) -> mp.Fusion:
    """TN matmul cast to *outputs*: "same" (the operand type), "f32", "two" (bf16 and fp16) or
    "mbn" (the operand type, permuted to [M, B, N])."""
    lead = [batch] if batch > 1 else []
    keep = [2] * len(lead)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype=dtype, stride_order=[*keep, 1, 0])
        b = fd.define_tensor([*lead, k, n], dtype=dtype, stride_order=[*keep, 0, 1])
        y = fd.ops.matmul(a, b)
        if outputs == "f32":
            fd.add_output(fd.ops.cast(y, mp.float32))
        elif outputs == "two":
            fd.add_output(fd.ops.cast(y, mp.bfloat16))
            fd.add_output(fd.ops.cast(y, mp.float16))
        elif outputs == "mbn":
            fd.add_output(fd.ops.permute(fd.ops.cast(y, dtype), [1, 0, 2]))
        else:
            fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def _tiles(cta: tuple[int, int, int], warp: tuple[int, int, int], **extra: object) -> dict:
    """Persistent smem-epilogue overrides of *cta* over *warp* in 4 stages."""
    return {
        "cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], 16), "stages": 4,
        "use_smem_epilogue": True, "tiling_strategy": "persistent", **extra,
    }  # fmt: skip


SMALL = _tiles((64, 64, 64), (64, 64, 64))
CASES = {  # (m, n, k, batch), operand dtype, outputs, overrides
    "bf16_128x256": ((4000, 2008, 320, 1), mp.bfloat16, "same", {}),  # the default plan
    "f16_64x64_f32_out": ((2000, 1000, 256, 1), mp.float16, "f32", SMALL),
    "bf16_two_outputs": ((2000, 1000, 256, 1), mp.bfloat16, "two", SMALL),
    "f16_batch3_m_batch_n": (
        (600, 520, 192, 3), mp.float16, "mbn", _tiles((128, 64, 64), (64, 64, 64))
    ),
    "bf16_48_columns": (
        (2000, 1000, 256, 1), mp.bfloat16, "same", _tiles((128, 48, 64), (64, 48, 64))
    ),
    "f16_pingpong": (
        (4000, 1000, 256, 1), mp.float16, "same",
        _tiles((128, 128, 64), (128, 128, 64), tiling_strategy="persistent_pingpong"),
    ),
    "bf16_cluster_pairs": (
        (4000, 1000, 256, 1), mp.bfloat16, "same",
        _tiles((128, 128, 64), (64, 128, 64), cluster_dims=(2, 1)),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_tma_stores_match_float64(pm: mp.PluginManager, checks: Checks, case: str) -> None:
    (m, n, k, batch), dtype, outputs, overrides = CASES[case]
    fusion = _fusion(m, n, k, dtype, outputs, batch)
    inputs = checks.inputs(fusion, np.random.default_rng(23))
    compiled = checks.run(fusion, pm, inputs, overrides, operand_floor=True)
    assert compiled.spec.scheduler == "hopper"
    assert "_ps_ts" in compiled.kernel_name, compiled.kernel_name
