"""Simulator tier: the generated hopper kernel (TMA + mbarrier + wgmma) against mp.evaluate.

Each case compiles a fusion for an h200-like device with hermetic strict plugins and caller
overrides (small tiles), runs ``compiled.execute`` on numpy arrays (outputs arrive NaN-poisoned
from ``allocate``, so unwritten elements show) and compares with ``mp.evaluate``. The cases run
as jobs of this file on the simulator's worker processes (``simulate``: NUMBA_ENABLE_CUDASIM=1,
on before numba.cuda is imported); this pytest process stays on the CUDA target. The device keeps
the h200's sm_90a but has 2 SMs with room for one CTA each, so persistent CTAs walk several
work units. Two probe kernels check that the sm_90 emulation reports a failing thread or a
block-wide deadlock at once instead of after its 60-second wait timeout.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
from numba import cuda  # a module global: the simulator swaps a kernel module's `cuda`
from numba.cuda import types

from mmaplug.cuda import sm90 as H
from mmaplug.sim.block import WAIT_TIMEOUT_S

pytestmark = pytest.mark.sim

# FP8 outputs match evaluate but where float32 rounding order moves a value across an FP8
# rounding boundary (one FP8 step: 2**-3 of e4m3's values, 2**-2 of e5m2's)
TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float8_e4m3fn": 0.07,
             "float8_e5m2": 0.13}  # fmt: skip
PERSISTENT = {"tiling_strategy": "persistent"}


def _tile(
    cta: tuple[int, int, int], warp: tuple[int, int, int], stages: int, k: int = 16
) -> dict[str, Any]:
    """Tiles and stages; *k*: the wgmma's K (16, or 32 for FP8)."""
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], k),
            "stages": stages}  # fmt: skip


def _operands(fd: Any, mp: Any, m: int, n: int, k: int, layout: str, dtype: Any, batch: int = 1):
    """A [batch?, m, k], B [batch?, k, n] in nvFuser letters (T: A K-inner, N: B K-inner)."""
    lead = [batch] if batch > 1 else []
    keep = [len(lead) + 1] * len(lead)  # the batch dim outermost
    a_order = [1, 0] if layout[0] == "T" else [0, 1]
    b_order = [0, 1] if layout[1] == "N" else [1, 0]
    a = fd.define_tensor([*lead, m, k], dtype=dtype, stride_order=[*keep, *a_order])
    b = fd.define_tensor([*lead, k, n], dtype=dtype, stride_order=[*keep, *b_order])
    return a, b


def case_tn_f16_ragged_persistent(fd: Any, mp: Any) -> dict[str, Any]:
    """TN fp16, cast only, ragged M, N, K; 4 tiles on 2 persistent CTAs."""
    a, b = _operands(fd, mp, 70, 72, 80, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT}


def case_nt_bf16_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """NT bf16 (both operands MN-major), bias + GELU: the looped epilogue over local memory."""
    a, b = _operands(fd, mp, 72, 128, 96, "NT", mp.bfloat16)
    bias = fd.define_tensor([128], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [72, 128], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 64, 64), (64, 64, 64), 3), **PERSISTENT, "use_smem_epilogue": False}


def case_nn_splitk2_relu_aux(fd: Any, mp: Any) -> dict[str, Any]:
    """NN fp16 split-K 2 (float32 workspace + reduce, stored from registers) with relu and a
    float32 aux output."""
    a, b = _operands(fd, mp, 64, 64, 200, "NN", mp.float16)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
    fd.add_output(fd.ops.cast(y, mp.float32))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), "splitk_factor": 2, "use_smem_epilogue": False}


def case_tt_two_consumers_batch2(fd: Any, mp: Any) -> dict[str, Any]:
    """TT fp16, two consumer warpgroups stacked along M (128x64 CTA tile), batch 2, ragged M."""
    a, b = _operands(fd, mp, 136, 64, 72, "TT", mp.float16, batch=2)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((128, 64, 64), (64, 64, 64), 2), **PERSISTENT}


def case_nt_f16_alpha_beta_bk128(fd: Any, mp: Any) -> dict[str, Any]:
    """MN-major B with a 64-wide N tile, BK 128 (two boxes per operand), alpha * AB + beta * C."""
    a, b = _operands(fd, mp, 104, 120, 136, "NT", mp.float16)
    c = fd.define_tensor([104, 120], dtype=mp.float16)
    alpha, beta = fd.define_scalar(), fd.define_scalar()
    y = fd.ops.add(fd.ops.mul(fd.ops.matmul(a, b), alpha), fd.ops.mul(c, beta))
    fd.add_output(fd.ops.cast(y, mp.float16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2), **PERSISTENT}


def case_nt_bf16_bias_gelu_smem_epilogue(fd: Any, mp: Any) -> dict[str, Any]:
    """use_smem_epilogue: two consumers side by side along N, each staging 2 chunks of 32
    columns; a bias along N, GELU, ragged M and N."""
    a, b = _operands(fd, mp, 72, 120, 96, "NT", mp.bfloat16)
    bias = fd.define_tensor([120], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [72, 120], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 128, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_f16_smem_epilogue_relu_aux(fd: Any, mp: Any) -> dict[str, Any]:
    """use_smem_epilogue with a 128x48 warp tile (chunks of 16, staged one 64-row block at a
    time: rows 128..139 of the second M tile in its first block, none in its second) and two
    outputs, ragged."""
    a, b = _operands(fd, mp, 140, 90, 72, "TN", mp.float16)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
    fd.add_output(fd.ops.cast(y, mp.float32))
    return {**_tile((128, 48, 64), (128, 48, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_bf16_160_accumulators(fd: Any, mp: Any) -> dict[str, Any]:
    """Two consumers of 128x160 warp tiles (160 accumulators a thread, the rules' most: two
    m64n160 wgmmas each), bias + GELU staged by chunks, every tile ragged (2 x 2 tiles)."""
    a, b = _operands(fd, mp, 264, 168, 72, "TN", mp.bfloat16)
    bias = fd.define_tensor([168], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [264, 168], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((256, 160, 64), (128, 160, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_f16_pingpong(fd: Any, mp: Any) -> dict[str, Any]:
    """Ping-pong: two consumers take alternate units of each CTA (4 units on 2 CTAs: the
    second consumer skips the first's stages in the ring and waits its turn), bias along M,
    packed epilogue of 128-row tiles one 64-row block at a time (rows 128..149 of the second
    M tile in its first block, none in its second), ragged."""
    a, b = _operands(fd, mp, 150, 72, 72, "TN", mp.float16)
    bias = fd.define_tensor([150], dtype=mp.float16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [150, 72], [0]))
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
    return {**_tile((128, 64, 64), (128, 64, 64), 2), "tiling_strategy": "persistent_pingpong",
            "use_smem_epilogue": True}  # fmt: skip


def case_nn_splitk2_batch2_packed_128rows(fd: Any, mp: Any) -> dict[str, Any]:
    """Packed stores of the float32 split-K partials (one buffer) from one consumer with a
    128-row warp tile (two fragment row blocks), batch 2, ragged M."""
    a, b = _operands(fd, mp, 104, 80, 128, "NN", mp.float16, batch=2)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((128, 64, 64), (128, 64, 64), 2), "splitk_factor": 2,
            "use_smem_epilogue": True}  # fmt: skip


def case_tt_bf16_two_outputs_packed(fd: Any, mp: Any) -> dict[str, Any]:
    """Packed stores of two bf16 outputs (one buffer each chunk), a residual C along M and N,
    ragged M and N (a chunk clipped to 24 columns)."""
    a, b = _operands(fd, mp, 70, 88, 64, "TT", mp.bfloat16)
    c = fd.define_tensor([70, 88], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), c)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.bfloat16))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tt_bf16_two_outputs_tma(fd: Any, mp: Any) -> dict[str, Any]:
    """TMA stores of two casts-only outputs, bf16 and fp16 (one buffer of two 64-byte swizzled
    boxes a chunk), batch 2 x 2 x 2 tiles on 2 persistent CTAs, ragged M and N (the boxes past
    them clipped by the maps)."""
    a, b = _operands(fd, mp, 70, 88, 64, "TT", mp.bfloat16, batch=2)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    fd.add_output(fd.ops.cast(y, mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_f16_out_f32_tma(fd: Any, mp: Any) -> dict[str, Any]:
    """A float32 output by TMA stores: 128-byte rows, swizzled 128 bytes, one buffer; 3 x 2
    tiles on 2 persistent CTAs, ragged M and N."""
    a, b = _operands(fd, mp, 150, 100, 64, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float32))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_f16_batch2_out_m_batch_n_tma(fd: Any, mp: Any) -> dict[str, Any]:
    """TMA stores into an output permuted to [M, B, N]: the map's row stride is B x N and its
    batch stride N, so the boxes of the two batches interleave by rows; 2 x 2 x 2 tiles,
    ragged M and N."""
    a, b = _operands(fd, mp, 70, 72, 64, "TN", mp.float16, batch=2)
    y = fd.ops.cast(fd.ops.matmul(a, b), mp.float16)
    fd.add_output(fd.ops.permute(y, [1, 0, 2]))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True}


def case_tn_f16_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """CTA pairs (cluster_dims=(2, 1)): the cluster's two blocks run at once in the simulator,
    each multicasting half of the B tile into both; M = 100 is one pair of M tiles, ragged; the
    one cluster walks the 2 pair units; packed stores."""
    a, b = _operands(fd, mp, 100, 72, 64, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True,
            "cluster_dims": (2, 1)}  # fmt: skip


def case_tn_f16_odd_pitch_default_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """The default plan of one wave of 64-row tiles whose operand rows are 1,040 bytes apart
    (no multiple of 32): CTA pairs along M (``HOPPER_PAIR_PITCH``), 9 K tiles, the last 8
    columns of K (a partial box), M = 100 ragged."""
    a, b = _operands(fd, mp, 100, 64, 520, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {}


def case_tt_bf16_cluster_pairs_splitk2_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """CTA pairs with an N-major B (every other 64-column swizzle row per CTA) and one M tile
    (the second CTA has no rows but loads and releases its half), split-K 2 over a ragged K
    (one K tile each), packed float32 partials, bias + GELU in the reduce kernel."""
    a, b = _operands(fd, mp, 40, 128, 104, "TT", mp.bfloat16)
    bias = fd.define_tensor([128], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [40, 128], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 128, 64), (64, 128, 64), 2), **PERSISTENT, "splitk_factor": 2,
            "cluster_dims": (2, 1)}  # fmt: skip


def case_tn_f16_pingpong_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """Ping-pong consumers in CTA pairs: the pair walks 3 units (one M pair x 3 N tiles, N
    ragged), consumer 0 of both CTAs takes units 0 and 2, consumer 1 unit 1; each owner
    releases the stage in both CTAs, the other consumer skips it; bias along N."""
    a, b = _operands(fd, mp, 100, 136, 64, "TN", mp.float16)
    bias = fd.define_tensor([136], dtype=mp.float16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [100, 136], [1]))
    fd.add_output(fd.ops.cast(y, mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 3), "tiling_strategy": "persistent_pingpong",
            "use_smem_epilogue": True, "cluster_dims": (2, 1)}  # fmt: skip


def case_tn_f16_splitk4_empty_split(fd: Any, mp: Any) -> dict[str, Any]:
    """Split-K 4 over 5 K tiles (2 a split): the fourth split's K range is empty, so its
    consumer skips the main loop and stores zero partials at its tile; ragged M."""
    a, b = _operands(fd, mp, 70, 64, 320, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "splitk_factor": 4,
            "use_smem_epilogue": False}  # fmt: skip


def case_tt_bf16_batch2_pingpong_batched_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """Ping-pong over batch 2 with a bias per batch and column ([2, N]): the packed epilogue's
    column row (one 128-column load per thread before the main loop, the batch's row); 8
    units: M and N ragged across two tiles each."""
    a, b = _operands(fd, mp, 70, 136, 64, "TT", mp.bfloat16, batch=2)
    bias = fd.define_tensor([2, 136], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [2, 70, 136], [0, 2]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 128, 64), (64, 128, 64), 2), "tiling_strategy": "persistent_pingpong",
            "use_smem_epilogue": True}  # fmt: skip


def _scaled(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any, rowwise: bool) -> tuple:
    """FP8 A [m, k] and B [k, n] (weights [n, k] row-major: K-major) and their float32
    scales, per row / column or per tensor."""
    a = fd.define_tensor([m, k], dtype=dtype)
    b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1])
    sa = fd.define_tensor([m, 1] if rowwise else [1], dtype=mp.float32)
    sb = fd.define_tensor([1, n] if rowwise else [], dtype=mp.float32)
    return a, b, sa, sb


def case_tn_e4m3_rowwise_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 e4m3 scaled_mm, per-row and per-column scales, bf16 bias and output; ragged M, N
    and K (two 128-deep K tiles, the second zero-filled past K)."""
    a, b, sa, sb = _scaled(fd, mp, 70, 72, 160, mp.float8_e4m3fn, rowwise=True)
    bias = fd.define_tensor([72], dtype=mp.bfloat16)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e5m2_tensorwise_pingpong_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 e5m2, per-tensor scales, float16 output, ping-pong consumers, 256-deep K tiles."""
    a, b, sa, sb = _scaled(fd, mp, 128, 64, 256, mp.float8_e5m2, rowwise=False)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float16))
    return {**_tile((64, 64, 256), (64, 64, 256), 2, k=32),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


def case_tn_e4m3_splitk2_cluster_pairs_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 e4m3 split-K 2 in CTA pairs (multicast B), per-row scales, GELU, float32 out."""
    a, b, sa, sb = _scaled(fd, mp, 128, 64, 512, mp.float8_e4m3fn, rowwise=True)
    fd.add_output(fd.ops.gelu(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), "splitk_factor": 2,
            "cluster_dims": (2, 1), **PERSISTENT}  # fmt: skip


def _quantized(fd: Any, mp: Any, n: int, dtype: Any, gain: float) -> tuple:
    """A quantized layer's FP8 output: scaled_mm (70 x *n* x 160, per-row and per-column
    scales) to float32, times a per-tensor output scale and *gain*, cast to *dtype* (the
    operands' FP8 type); *gain* makes a share of the values saturate. Returns (the float32
    product, the scaled value, the FP8 output)."""
    a, b, sa, sb = _scaled(fd, mp, 70, n, 160, dtype, rowwise=True)
    out_scale = fd.define_tensor([], dtype=mp.float32)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    scaled = fd.ops.mul(fd.ops.mul(y, out_scale), gain)
    q = fd.ops.cast(scaled, dtype)
    fd.add_output(q)
    return y, scaled, q


def case_tn_e4m3_out_e4m3_packed_saturating(fd: Any, mp: Any) -> dict[str, Any]:
    """An e4m3 output (first) and the bf16 product beside it, packed: FP8 byte pairs into
    half-words, 16-column vectors (N = 80: the second tile's chunk has one vector of two in
    N); a gain of 64 saturates a share of the values at +-448."""
    y, _, _ = _quantized(fd, mp, 80, mp.float8_e4m3fn, 64.0)
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_out_e4m3_registers_dequantized(fd: Any, mp: Any) -> dict[str, Any]:
    """The register epilogue: an e4m3 output (saturating) and its float32 dequantization (the
    cast to e4m3 inside the epilogue, widened back), ragged M and N."""
    _, _, q = _quantized(fd, mp, 72, mp.float8_e4m3fn, 64.0)
    fd.add_output(fd.ops.mul(fd.ops.cast(q, mp.float32), 1.0 / 64.0))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": False}  # fmt: skip


def case_tn_e5m2_out_e5m2_staged_saturating(fd: Any, mp: Any) -> dict[str, Any]:
    """The staged smem epilogue (N = 72: rows are not whole 16-byte vectors, so not packed)
    with an e5m2 output in 4-byte stores; a gain of 8192 saturates a share at +-57344."""
    _quantized(fd, mp, 72, mp.float8_e5m2, 8192.0)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": True}  # fmt: skip


def case_tn_e4m3_out_e4m3_staged_bytes(fd: Any, mp: Any) -> dict[str, Any]:
    """The staged smem epilogue with rows of N = 74 bytes: no 4-byte store is aligned, every
    element a byte store, the last group of each row partial."""
    _quantized(fd, mp, 74, mp.float8_e4m3fn, 16.0)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": True}  # fmt: skip


def _block_scaled(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any) -> tuple:
    """FP8 A [m, k] and B [k, n] (K-major) with block scales: A's [m, ceil(k / 128)], B's
    [ceil(k / 128), ceil(n / 128)]."""
    a = fd.define_tensor([m, k], dtype=dtype)
    b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1])
    kb, nb = -(-k // 128), -(-n // 128)
    sa = fd.define_tensor([m, kb], dtype=mp.float32)
    sb = fd.define_tensor([kb, nb], dtype=mp.float32)
    return a, b, sa, sb


def case_tn_e4m3_block_ragged_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, e4m3: ragged M (70) and K (304: three K blocks, the last of 48), N = 200
    (two blocks of B's scales, two 64-column tiles each), a bf16 bias and output."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 200, 304, mp.float8_e4m3fn)
    bias = fd.define_tensor([200], dtype=mp.bfloat16)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_one_row(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales at M = 1 (one decode step: scaled_mm states the row, so it is M, not a
    broadcast), three K blocks (the last of 48), N = 200 (two blocks of B's scales)."""
    a, b, sa, sb = _block_scaled(fd, mp, 1, 200, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e5m2_block_splitk2_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, e5m2: split-K 2 (two K blocks per split) in CTA pairs, float32 out with
    SiLU."""
    a, b, sa, sb = _block_scaled(fd, mp, 128, 128, 512, mp.float8_e5m2)
    fd.add_output(fd.ops.silu(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), "splitk_factor": 2,
            "cluster_dims": (2, 1), **PERSISTENT}  # fmt: skip


def case_tn_e4m3_block_pingpong_two_row_blocks(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, e4m3: ping-pong consumers on 128x64 tiles (two 64-row wgmma blocks per
    consumer, each with its rows' scales), two blocks of B's scales, float16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 128, 256, 256, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float16))
    return {**_tile((128, 64, 128), (128, 64, 128), 2, k=32),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


def case_tn_e4m3_block_pairs_k256_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales with 256-deep K tiles (two scale blocks a stage, the first promoted while
    the second's wgmmas run): K = 304, so the second stage's second block lies past K."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 200, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((64, 64, 256), (64, 64, 256), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_two_consumers(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, e4m3, two cooperative consumers (128x64 tiles of two 64x64 warp tiles)
    issuing each stage's wgmmas in turn, over five K blocks (the last of 48) and several units
    a CTA (the turns carry across units); ragged M and N, bf16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 136, 560, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((128, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_two_consumers_k256(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales with 256-deep K tiles and two cooperative consumers (128x32 tiles of two
    64x32 warp tiles), each stage's scales loaded before its full barrier; K = 304, so the
    second stage's second block lies past K."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 72, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float16))
    return {**_tile((128, 32, 256), (64, 32, 256), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_chunks_two_consumers(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 64x256 warp tiles (two consumers, 128x256 tiles): each stage's sums are
    promoted by 64-column chunks, into two sets of partial sums in turn, each chunk with its
    block of B's scales. N = 300: the second tile's second block lies past N (it reads B's
    last scale block); ragged M and K (three K blocks, the last of 48), several units a CTA."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 300, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((128, 256, 128), (64, 256, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_chunks_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 64x256 chunks in CTA pairs along M that multicast B (192 sums a
    consumer in a cluster; the tuner's space and ``config_probe.py fp8_chunks_ab`` run them);
    M = 200 is one pair, ragged; N = 300: two pair units, the last one's second block past N;
    K = 304: three stages, the last of 48."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 300, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((128, 256, 128), (64, 256, 128), 2, k=32), **PERSISTENT,
            "cluster_dims": (2, 1)}  # fmt: skip


def case_tn_e5m2_block_chunks_pingpong(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, e5m2, on 64x256 chunks with ping-pong consumers (each its own units, the
    other's turn handed over once a unit's chunks are all issued and promoted); ragged M (130:
    three row tiles) and K (304), N = 512: six units, float16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 130, 512, 304, mp.float8_e5m2)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float16))
    return {**_tile((64, 256, 128), (64, 256, 128), 2, k=32),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


def case_tn_e4m3_block_straddle_192(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 128x192 tiles (two consumers of 64x192): a tile straddles two blocks of
    B's scales, cut 128 columns in (origin 0) or 64 (origin 192); N = 400, so the third tile's
    second block lies past N (it reads B's last scale block); ragged M and K, several units a
    CTA."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 400, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((128, 192, 128), (64, 192, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_straddle_192_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """The large problems' block-scaled default in small: 128x192 tiles straddling two blocks
    of B's scales, in CTA pairs along M that multicast B (192 sums a consumer in a cluster);
    M = 200 is one pair, ragged; N = 400: three pair units, the last one's second block past
    N; K = 304."""
    a, b, sa, sb = _block_scaled(fd, mp, 200, 400, 304, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((128, 192, 128), (64, 192, 128), 2, k=32), **PERSISTENT,
            "cluster_dims": (2, 1)}  # fmt: skip


def case_tn_e4m3_block_straddle_160_each_cut(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 64x160 tiles (one consumer): the four tiles' origins lie 0, 32, 64 and
    96 columns into a block of B's scales, so each of the four promotions runs; float32 out
    with a bias."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 640, 256, mp.float8_e4m3fn)
    bias = fd.define_tensor([640], dtype=mp.float32)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    fd.add_output(fd.ops.add(y, fd.ops.broadcast_in_dim(bias, [70, 640], [1])))
    return {**_tile((64, 160, 128), (64, 160, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_block_straddle_96_two_consumers(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 128x96 tiles (two consumers taking turns): origins 0 and 32 lie in one
    block of B's scales, 64 and 96 straddle two; float16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 100, 384, 256, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float16))
    return {**_tile((128, 96, 128), (64, 96, 128), 2, k=32), **PERSISTENT}


def case_tn_e5m2_block_straddle_160_pingpong(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales on 64x160 tiles owned by ping-pong consumers: origins 0, 32, 64 and 96
    columns into a block of B's scales, each consumer its own units and cuts; e5m2, bf16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 640, 256, mp.float8_e5m2)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((64, 160, 128), (64, 160, 128), 2, k=32),
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


def case_tn_e4m3_block_out_e4m3_amax(fd: Any, mp: Any) -> dict[str, Any]:
    """A block-scaled quantised layer: an e4m3 output scaled per tensor and the amax of the
    product (its reduction after the block-scaled main loop)."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 128, 256, mp.float8_e4m3fn)
    out_scale = fd.define_tensor([], dtype=mp.float32)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(y, [0, 1]))
    return {**_tile((64, 64, 256), (64, 64, 256), 2, k=32), **PERSISTENT}


def _residual(fd: Any, mp: Any, y: Any, m: int, n: int, dtype: Any, bias: Any = None) -> Any:
    """*y* plus an FP8 residual ``[m, n]`` of *dtype* (and an FP8 per-channel bias ``[n]`` of
    *bias*): epilogue inputs loaded as bytes and widened to float32."""
    y = fd.ops.add(y, fd.define_tensor([m, n], dtype=dtype))
    if bias is not None:
        b = fd.define_tensor([n], dtype=bias)
        y = fd.ops.add(y, fd.ops.broadcast_in_dim(b, [m, n], [1]))
    return y


def case_tn_e4m3_fp8_residual_and_bias_packed(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 epilogue inputs in the packed epilogue: an e4m3 residual read per element and an
    e4m3 bias staged in the column row (prefetched as bytes during the main loop); bf16 out."""
    a, b, sa, sb = _scaled(fd, mp, 70, 80, 160, mp.float8_e4m3fn, rowwise=True)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    y = _residual(fd, mp, y, 70, 80, mp.float8_e4m3fn, bias=mp.float8_e4m3fn)
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_fp8_residual_and_bias_staged(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 epilogue inputs in the staged epilogue (N = 76: bf16 rows are not 16-byte
    vectors): an e5m2 residual per element, an e4m3 bias hoisted per column group."""
    a, b, sa, sb = _scaled(fd, mp, 70, 76, 160, mp.float8_e4m3fn, rowwise=True)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    y = _residual(fd, mp, y, 70, 76, mp.float8_e5m2, bias=mp.float8_e4m3fn)
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": True}  # fmt: skip


def case_tn_bf16_fp8_residual_registers(fd: Any, mp: Any) -> dict[str, Any]:
    """A 16-bit matmul reading an e5m2 residual in the register epilogue, ragged M and N."""
    a, b = _operands(fd, mp, 70, 72, 80, "TN", mp.bfloat16)
    y = _residual(fd, mp, fd.ops.matmul(a, b), 70, 72, mp.float8_e5m2)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.bfloat16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": False}


def case_tn_e4m3_fp8_residual_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """Split-K 2: the reduce kernel reads the e4m3 residual and writes bf16."""
    a, b, sa, sb = _scaled(fd, mp, 70, 72, 512, mp.float8_e4m3fn, rowwise=True)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    fd.add_output(fd.ops.cast(_residual(fd, mp, y, 70, 72, mp.float8_e4m3fn), mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), "splitk_factor": 2, **PERSISTENT}


def _with_amax(fd: Any, mp: Any, n: int, dtype: Any, gain: float, *, product: bool = False,
               residual: Any = None) -> None:  # fmt: skip
    """A quantized layer with delayed scaling: the FP8 output of :func:`_quantized` (70 x *n*
    x 160) first, then the float32 amax of the scaled value (before rounding), ``[]``; with
    *product* the bf16 product after it (the amax between two stored outputs)."""
    a, b, sa, sb = _scaled(fd, mp, 70, n, 160, dtype, rowwise=True)
    out_scale = fd.define_tensor([], dtype=mp.float32)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    if residual is not None:
        y = _residual(fd, mp, y, 70, n, residual)
    scaled = fd.ops.mul(fd.ops.mul(y, out_scale), gain)
    fd.add_output(fd.ops.cast(scaled, dtype))
    fd.add_output(fd.ops.amax(scaled, [0, 1]))
    if product:
        fd.add_output(fd.ops.cast(y, mp.bfloat16))


def case_tn_e4m3_out_e4m3_amax_packed(fd: Any, mp: Any) -> dict[str, Any]:
    """The amax in the packed epilogue's step function (rows past M = 70 and columns past
    N = 80 in the last tiles are computed from clamped inputs: they must not count), between
    the e4m3 output and the bf16 product; a gain that saturates some values."""
    _with_amax(fd, mp, 80, mp.float8_e4m3fn, 64.0, product=True)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT}


def case_tn_e4m3_out_e4m3_amax_registers(fd: Any, mp: Any) -> dict[str, Any]:
    """The amax from the register epilogue, ragged M and N; each thread's maximum over both
    of its persistent units, one red.max per warp."""
    _with_amax(fd, mp, 72, mp.float8_e4m3fn, 16.0)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": False}  # fmt: skip


def case_tn_e5m2_out_e5m2_amax_staged_residual(fd: Any, mp: Any) -> dict[str, Any]:
    """The amax from the staged epilogue (N = 74: a partial last column group whose columns
    past N must not count), an e5m2 residual read as bytes."""
    _with_amax(fd, mp, 74, mp.float8_e5m2, 256.0, residual=mp.float8_e5m2)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": True}  # fmt: skip


def case_tn_e4m3_out_e4m3_amax_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """Split-K 2: the reduce kernel (one element a thread, the last block partly past the
    output) computes the amax where it writes the final values."""
    _with_amax(fd, mp, 72, mp.float8_e4m3fn, 16.0, product=True)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), "splitk_factor": 2, **PERSISTENT}


def case_tn_e4m3_out_e4m3_amax_nan(fd: Any, mp: Any) -> dict[str, Any]:
    """A NaN in the e4m3 residual: the amax is NaN, as np.max (its bits, sign cleared, lie
    above +inf's) and the FP8 output NaN at that element only."""
    _with_amax(fd, mp, 72, mp.float8_e4m3fn, 16.0, residual=mp.float8_e4m3fn)
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **PERSISTENT,
            "use_smem_epilogue": False}  # fmt: skip


def case_tt_bf16_batch2_out_e4m3_amax_pingpong_casts(fd: Any, mp: Any) -> dict[str, Any]:
    """A 16-bit batched matmul quantized to e4m3, the amax over batch, M and N of the product
    itself (casts only: the packed loop without a step function), ping-pong consumers."""
    a, b = _operands(fd, mp, 70, 64, 64, "TT", mp.bfloat16, batch=2)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(y, [0, 1, 2]))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), "tiling_strategy": "persistent_pingpong"}


# --- swap_ab: the kernel computes C^T (its A the problem's B); the epilogue is the problem's ---
SWAP = {**PERSISTENT, "swap_ab": True, "use_smem_epilogue": False}


def case_tn_bf16_swap_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """The transposed product of a skinny TN problem: 64 weight rows a tile against the 20
    activation rows as the wgmma's N = 24; ragged M, N and K, casts only (unrolled stores)."""
    a, b = _operands(fd, mp, 20, 136, 200, "TN", mp.bfloat16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.bfloat16))
    return {**_tile((64, 24, 64), (64, 24, 64), 3), **SWAP}


def case_nt_f16_swap_bias_residual_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """NT swapped (the kernel's A M-major, its B N-major: a 64-wide wgmma N over 40 rows): a
    bias along N and a residual [M, N] read by the output's strides, GELU, the looped
    epilogue."""
    a, b = _operands(fd, mp, 40, 72, 96, "NT", mp.float16)
    bias = fd.define_tensor([72], dtype=mp.float16)
    res = fd.define_tensor([40, 72], dtype=mp.float16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [40, 72], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.add(y, res)), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **SWAP}


def case_tt_bf16_swap_wide_rows_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """TT swapped with the default's wide N of 65-112 rows: 100 activation rows as a wgmma N of
    104, two weight tiles (the second ragged), ragged K; bias along N and GELU."""
    a, b = _operands(fd, mp, 100, 72, 96, "TT", mp.bfloat16)
    bias = fd.define_tensor([72], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [100, 72], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 104, 64), (64, 104, 64), 2), **SWAP}


def case_nn_f16_swap_splitk2_relu_aux(fd: Any, mp: Any) -> dict[str, Any]:
    """NN swapped, split-K 2: partials written in the output's orientation, which the reduce
    reads as any split's; relu and a float32 aux output."""
    a, b = _operands(fd, mp, 24, 100, 200, "NN", mp.float16)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
    fd.add_output(fd.ops.cast(y, mp.float32))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **SWAP, "splitk_factor": 2}


def case_tt_bf16_swap_batch2_row_scale(fd: Any, mp: Any) -> dict[str, Any]:
    """TT swapped over batch 2: a scale per batch and row ([2, M], broadcast along N: the
    kernel's columns), ragged."""
    a, b = _operands(fd, mp, 20, 72, 64, "TT", mp.bfloat16, batch=2)
    scale = fd.define_tensor([2, 20], dtype=mp.bfloat16)
    y = fd.ops.mul(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(scale, [2, 20, 72], [0, 1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 24, 64), (64, 24, 64), 3), **SWAP}


def case_tn_e4m3_swap_rowwise_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 e4m3 swapped: per-row scales of A along the kernel's columns, per-column scales
    of B and the bias along its rows; bf16 out, ragged K."""
    a, b, sa, sb = _scaled(fd, mp, 24, 72, 160, mp.float8_e4m3fn, rowwise=True)
    bias = fd.define_tensor([72], dtype=mp.bfloat16)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.bfloat16))
    return {**_tile((64, 24, 128), (64, 24, 128), 3, k=32), **SWAP}


def case_tn_f16_swap_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped in CTA pairs: the pair multicasts the activations (the kernel's B)."""
    a, b = _operands(fd, mp, 30, 200, 128, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 32, 64), (64, 32, 64), 3), **SWAP, "cluster_dims": (2, 1)}


def case_tn_bf16_swap_pingpong_amax(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped with ping-pong consumers, an e4m3 output and its amax (5 units: the second
    CTA's last turn has no unit)."""
    a, b = _operands(fd, mp, 20, 300, 64, "TN", mp.bfloat16)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(y, [0, 1]))
    return {**_tile((64, 24, 64), (64, 24, 64), 3), **SWAP,
            "tiling_strategy": "persistent_pingpong"}  # fmt: skip


# ... and its staged epilogue: a chunk of the kernel's columns written transposed, stored
# along the output's rows (a case above with STAGED, or SWAP_STAGED)
STAGED = {"use_smem_epilogue": True}
SWAP_STAGED = {**SWAP, **STAGED}


def case_tn_bf16_swap_staged_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """``tn_bf16_swap_ragged`` staged: a wgmma N of 24 in chunks of 8 kernel columns (output
    rows), 136 weight rows in 3 tiles (the last 8 rows), ragged K."""
    return {**case_tn_bf16_swap_ragged(fd, mp), **STAGED}


def case_nt_f16_swap_staged_bias_residual_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """``nt_f16_swap_bias_residual_gelu`` staged: chunks of 32 kernel columns, a bias along the
    output's columns (hoisted per thread) and a residual [M, N] by the output's strides."""
    return {**case_nt_f16_swap_bias_residual_gelu(fd, mp), **STAGED}


def case_tt_bf16_swap_staged_wide_rows_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """``tt_bf16_swap_wide_rows_bias_gelu`` staged: a wgmma N of 104 (13 chunks of 8) over 100
    activation rows, two weight tiles (the second ragged)."""
    return {**case_tt_bf16_swap_wide_rows_bias_gelu(fd, mp), **STAGED}


def case_nn_f16_swap_staged_splitk2_relu_aux(fd: Any, mp: Any) -> dict[str, Any]:
    """``nn_f16_swap_splitk2_relu_aux`` staged: the float32 partials staged and stored in the
    output's orientation (the workspace's rows are the output's)."""
    return {**case_nn_f16_swap_splitk2_relu_aux(fd, mp), **STAGED}


def case_tt_bf16_swap_staged_batch2_row_scale(fd: Any, mp: Any) -> dict[str, Any]:
    """``tt_bf16_swap_batch2_row_scale`` staged: a scale per batch and output row."""
    return {**case_tt_bf16_swap_batch2_row_scale(fd, mp), **STAGED}


def case_tn_e4m3_swap_staged_rowwise_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """``tn_e4m3_swap_rowwise_bias`` staged: FP8 per-row scales along the output's rows."""
    return {**case_tn_e4m3_swap_rowwise_bias(fd, mp), **STAGED}


def case_tn_f16_swap_staged_two_consumers(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped, staged, two consumers along the kernel's M (128 weight rows a tile: each
    consumer's chunk in its own region, its output columns 64 apart), ragged."""
    a, b = _operands(fd, mp, 30, 200, 128, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((128, 32, 64), (64, 32, 64), 3), **SWAP_STAGED}


def case_tn_bf16_swap_staged_batched_short_rows(fd: Any, mp: Any) -> dict[str, Any]:
    """The default of a batch of short weight rows (run 338): 3 products of one row, two
    consumers of 64 weight rows (200: the second tile's second consumer has 8), a K of 72 in
    one 128-deep stage, the ring across the batch's tiles; GELU."""
    a, b = _operands(fd, mp, 1, 200, 72, "TN", mp.bfloat16, batch=3)
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.matmul(a, b)), mp.bfloat16))
    return {**_tile((128, 8, 128), (64, 8, 128), 3), **SWAP_STAGED}


def case_tn_bf16_swap_staged_pingpong_amax(fd: Any, mp: Any) -> dict[str, Any]:
    """``tn_bf16_swap_pingpong_amax`` staged: ping-pong consumers, an e4m3 output and its amax
    folded from the staged rows."""
    return {**case_tn_bf16_swap_pingpong_amax(fd, mp), **STAGED}


def case_tn_f16_swap_staged_cluster_pairs(fd: Any, mp: Any) -> dict[str, Any]:
    """``tn_f16_swap_cluster_pairs`` staged: the pair multicasts the activations."""
    return {**case_tn_f16_swap_cluster_pairs(fd, mp), **STAGED}


def case_tt_bf16_cluster4_relu(fd: Any, mp: Any) -> dict[str, Any]:
    """Clusters of 4 CTAs along M: each multicasts every fourth 64-column swizzle row of the
    N-major B tile (n = 256: one row each) into all four; M = 200 is one cluster of M tiles,
    the last with 8 rows; relu from registers."""
    a, b = _operands(fd, mp, 200, 256, 64, "TT", mp.bfloat16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.bfloat16))
    return {**_tile((64, 256, 64), (64, 256, 64), 2), **PERSISTENT, "use_smem_epilogue": False,
            "cluster_dims": (4, 1)}  # fmt: skip


def case_tn_bf16_swap_cluster4_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped in clusters of 4 (cuBLAS's 4x1 clusters of 64-row weight tiles): each CTA
    multicasts 8 of the 32 activation rows (the kernel's B) into all four; the weight's 300
    rows make 2 clusters of tiles, the second with 44 rows (three CTAs without rows still
    load and release their part); a bias along N (the kernel's rows)."""
    a, b = _operands(fd, mp, 24, 300, 128, "TN", mp.bfloat16)
    bias = fd.define_tensor([300], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [24, 300], [1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 32, 64), (64, 32, 64), 3), **SWAP, "cluster_dims": (4, 1)}


def case_tn_bf16_swap_clustern2_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped in clusters of 2 along N (cuBLAS's 1x2 clusters at 64 activation rows): the 60
    activations in two tiles of 32 (the second 28 rows) share one 64-row weight tile, each CTA
    multicasting 32 of its rows (the kernel's A) into both; the weight's 200 rows make 4 tiles,
    the last with 8 rows; a bias along N (the kernel's rows)."""
    a, b = _operands(fd, mp, 60, 200, 128, "TN", mp.bfloat16)
    bias = fd.define_tensor([200], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [60, 200], [1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 32, 64), (64, 32, 64), 3), **SWAP, "cluster_dims": (1, 2)}


def case_nn_bf16_clustern2_staged_relu(fd: Any, mp: Any) -> dict[str, Any]:
    """Clusters of 2 along N sharing an M-major A tile of 128 rows (two consumers): each CTA
    multicasts one of its two 64-element swizzle rows; N = 104 in 48-column tiles makes 2
    clusters along N, the second CTA of the second wholly past N; staged, packed stores."""
    a, b = _operands(fd, mp, 200, 104, 64, "NN", mp.bfloat16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.bfloat16))
    return {**_tile((128, 48, 64), (64, 48, 64), 2), **PERSISTENT, "use_smem_epilogue": True,
            "cluster_dims": (1, 2)}  # fmt: skip


def case_tn_f16_clustern4_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """Clusters of 4 along N sharing a K-major A tile (16 rows multicast by each CTA), K split
    2 ways through the workspace: 2 M tiles x 1 cluster of N tiles x 2 splits; N = 100 leaves
    the fourth CTA without columns."""
    a, b = _operands(fd, mp, 100, 100, 192, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 32, 64), (64, 32, 64), 3), **PERSISTENT, "use_smem_epilogue": False,
            "splitk_factor": 2, "cluster_dims": (1, 4)}  # fmt: skip


def case_tn_bf16_cluster2x2_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """2x2 clusters: each CTA multicasts half of its column's K-major B tile (8 of 16 rows)
    and half of its row's K-major A tile (32 of 64 rows); M = 200 and N = 40 in 64x16 tiles
    make 2 x 2 clusters, the last M tiles with 8 rows and the second cluster along N with one
    CTA wholly past N (it still loads and releases its parts); a bias along N."""
    a, b = _operands(fd, mp, 200, 40, 128, "TN", mp.bfloat16)
    bias = fd.define_tensor([40], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [200, 40], [1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 16, 64), (64, 16, 64), 3), **PERSISTENT, "use_smem_epilogue": False,
            "cluster_dims": (2, 2)}  # fmt: skip


def case_nn_f16_cluster2x2_staged_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """2x2 clusters of two consumers: each CTA multicasts one of the two 64-element swizzle
    rows of its row's M-major A tile (128 rows) and half of its column's K-major B tile (32 of
    64 rows), K split 2 ways through the workspace; M = 264 leaves the second cluster along M
    a CTA wholly past M, N = 120 the cluster's second CTA along N 56 columns."""
    a, b = _operands(fd, mp, 264, 120, 128, "NN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((128, 64, 64), (64, 64, 64), 2), **PERSISTENT, "use_smem_epilogue": True,
            "splitk_factor": 2, "cluster_dims": (2, 2)}  # fmt: skip


def case_tn_f16_swap_cluster2x2_relu(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped in 2x2 clusters: weight tiles of 64 rows (the kernel's A) shared along the
    kernel's N by two activation tiles of 16, each pair of weight tiles sharing those; the 48
    activations make two clusters along N, the second's second CTA past them; relu."""
    a, b = _operands(fd, mp, 48, 200, 128, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.float16))
    return {**_tile((64, 16, 64), (64, 16, 64), 3), **SWAP, "cluster_dims": (2, 2)}


# --- splitk_in_cluster: a tile's splits are one cluster, summed in distributed shared memory ---
KCLUSTER = {**PERSISTENT, "splitk_in_cluster": True, "use_smem_epilogue": False}


def case_tn_f16_splitk2_kcluster_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """Split-K 2 in a cluster of 2, ragged M, N and K, casts only: 6 tiles walked by one
    persistent cluster (the reduction's barriers turn over every unit)."""
    a, b = _operands(fd, mp, 72, 136, 200, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 3), **KCLUSTER, "splitk_factor": 2}


def case_nt_bf16_splitk3_kcluster_batch2_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """NT over batch 2, split-K 3 in a cluster of 3 (an odd rank count: slices of 1/3 of the
    tile), K of 4 tiles (the third split's range is empty), bias along N and GELU."""
    a, b = _operands(fd, mp, 64, 72, 256, "NT", mp.bfloat16, batch=2)
    bias = fd.define_tensor([72], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [2, 64, 72], [2]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **KCLUSTER, "splitk_factor": 3}


def case_tn_bf16_swap_splitk4_kcluster_relu_aux(fd: Any, mp: Any) -> dict[str, Any]:
    """Swapped, split-K 4 in a cluster of 4: each rank's slice walks the kernel's rows (the
    output's columns); relu and a float32 aux output."""
    a, b = _operands(fd, mp, 24, 136, 256, "TN", mp.bfloat16)
    y = fd.ops.matmul(a, b)
    fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.bfloat16))
    fd.add_output(fd.ops.cast(y, mp.float32))
    return {**_tile((64, 24, 64), (64, 24, 64), 2), **KCLUSTER, "swap_ab": True,
            "splitk_factor": 4}  # fmt: skip


def case_tn_e4m3_block_splitk2_kcluster_out_e4m3_amax(fd: Any, mp: Any) -> dict[str, Any]:
    """Block scales, split-K 2 in a cluster: the promoted sums of each split meet in shared
    memory; an e4m3 output with its scale and the amax."""
    a, b, sa, sb = _block_scaled(fd, mp, 70, 128, 512, mp.float8_e4m3fn)
    y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
    scale = fd.define_scalar()
    fd.add_output(fd.ops.cast(fd.ops.mul(y, scale), mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(y, [0, 1]))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **KCLUSTER, "splitk_factor": 2}


# --- stream-K: 3 tiles on 2 CTAs, so one whole wave and one tail tile cut along K ---------------
STREAMK = {"tiling_strategy": "persistent_streamk"}


def case_tn_f16_streamk3_ragged_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K: the third of 3 tiles (ragged M) in 3 pieces of K = 200 (the last piece
    empty), bias + GELU in the packed epilogue of the last piece."""
    a, b = _operands(fd, mp, 150, 64, 200, "TN", mp.float16)
    bias = fd.define_tensor([64], dtype=mp.float16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [150, 64], [1]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **STREAMK, "splitk_factor": 3,
            "use_smem_epilogue": True}  # fmt: skip


def case_tt_bf16_streamk2_two_consumers_batch3_relu(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K over the batch: 3 batches of one 128x64 tile of two consumers, each with its
    own counter; the third batch's tile in 2 pieces, relu."""
    a, b = _operands(fd, mp, 100, 64, 160, "TT", mp.bfloat16, batch=3)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.bfloat16))
    return {**_tile((128, 64, 64), (64, 64, 64), 2), **STREAMK, "splitk_factor": 2,
            "use_smem_epilogue": True}  # fmt: skip


def case_tn_e4m3_streamk2_out_e4m3_amax_registers(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K, FP8 per row: an e4m3 output and its amax from the register epilogue, which
    the pieces that are not last skip (their sums must not count)."""
    _with_amax(fd, mp, 150, mp.float8_e4m3fn, 16.0)
    return {**_tile((128, 64, 128), (64, 64, 128), 2, k=32), **STREAMK, "splitk_factor": 2,
            "use_smem_epilogue": False}  # fmt: skip


def case_tn_bf16_swap_streamk2_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K of the transposed product: 3 weight tiles, the third in 2 pieces; a bias
    along N from the register epilogue."""
    a, b = _operands(fd, mp, 20, 192, 256, "TN", mp.bfloat16)
    bias = fd.define_tensor([192], dtype=mp.bfloat16)
    y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [20, 192], [1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 24, 64), (64, 24, 64), 2), **SWAP, **STREAMK, "splitk_factor": 2}


def case_tn_bf16_swap_staged_streamk2_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """``tn_bf16_swap_streamk2_bias`` staged: the tail tiles' pieces meet, and the last stores
    the summed tile transposed through shared memory (its staging leaves room for one CTA an
    SM: 2 CTAs walk 4 units)."""
    return {**case_tn_bf16_swap_streamk2_bias(fd, mp), **STAGED}


def case_tn_e4m3_block_streamk3(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K of block scales: each piece one 128-deep block, promoted as it goes; the
    pieces' promoted sums meet; ragged M, bf16 out."""
    a, b, sa, sb = _block_scaled(fd, mp, 60, 192, 384, mp.float8_e4m3fn)
    fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    return {**_tile((64, 64, 128), (64, 64, 128), 2, k=32), **STREAMK, "splitk_factor": 3}


def case_tn_f16_streamk2_tma(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K with the casts-only epilogue's TMA stores, which only the last piece issues."""
    a, b = _operands(fd, mp, 192, 64, 256, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **STREAMK, "splitk_factor": 2,
            "use_smem_epilogue": True}  # fmt: skip


def case_tn_f16_streamk2_staged_rows(fd: Any, mp: Any) -> dict[str, Any]:
    """Stream-K whose output rows (N = 60 halves, 120 bytes) are no 16-byte units: the staged
    epilogue, not the packed one (which float32 partials' rows of 240 bytes would allow: the
    decision reads the outputs, not a workspace stream-K does not have); relu."""
    a, b = _operands(fd, mp, 150, 60, 256, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.matmul(a, b)), mp.float16))
    return {**_tile((64, 64, 64), (64, 64, 64), 2), **STREAMK, "splitk_factor": 2,
            "use_smem_epilogue": True}  # fmt: skip


CASES = sorted(name[5:] for name in dir() if name.startswith("case_"))
SWAPPED = {name for name in CASES if "_swap" in name}
KCLUSTERED = {name for name in CASES if "_kcluster" in name}  # (their epilogue is their own)
STREAMED = {name for name in CASES if "_streamk" in name}
# cases whose epilogue packs the outputs in shared memory and stores 16-byte vectors: all but
# those storing from registers (use_smem_epilogue=False) and the staged ones whose rows are
# not 16-byte units (N = 90; FP8 N = 72, 74; block-scaled N = 300; stream-K N = 60)
PACKED = set(CASES) - {"nt_bf16_bias_gelu", "nn_splitk2_relu_aux", "tn_f16_smem_epilogue_relu_aux",
                       "tn_e4m3_block_chunks_two_consumers", "tn_e4m3_block_chunks_cluster_pairs",
                       "tn_f16_splitk4_empty_split", "tn_e4m3_out_e4m3_registers_dequantized",
                       "tn_e5m2_out_e5m2_staged_saturating",
                       "tn_e4m3_out_e4m3_staged_bytes", "tn_e4m3_fp8_residual_and_bias_staged",
                       "tn_bf16_fp8_residual_registers", "tn_e4m3_out_e4m3_amax_registers",
                       "tn_e5m2_out_e5m2_amax_staged_residual",
                       "tn_e4m3_out_e4m3_amax_nan",
                       "tt_bf16_cluster4_relu",
                       "tn_f16_clustern4_splitk2", "tn_bf16_cluster2x2_bias",
                       "tn_e4m3_streamk2_out_e4m3_amax_registers",
                       "tn_f16_streamk2_staged_rows",
                       } - SWAPPED - KCLUSTERED  # fmt: skip
# cases whose packed chunks leave by TMA stores (casts only, no workspace, more units than CTAs)
TMA = {"tn_e4m3_block_pairs_k256_ragged", "tn_e4m3_block_straddle_192",
       "tn_e5m2_block_chunks_pingpong",
       "tn_e4m3_block_straddle_192_cluster_pairs",
       "tn_e5m2_block_straddle_160_pingpong",
       "tn_e4m3_block_pingpong_two_row_blocks",
       "tn_e4m3_block_two_consumers", "tn_e4m3_block_two_consumers_k256", "tn_f16_cluster_pairs",
       "tn_f16_ragged_persistent", "tt_bf16_batch2_out_e4m3_amax_pingpong_casts",
       "tt_two_consumers_batch2", "tt_bf16_two_outputs_tma", "tn_f16_out_f32_tma",
       "tn_f16_batch2_out_m_batch_n_tma", "tn_f16_streamk2_tma"}  # fmt: skip
# work units (batch x split-K x tiles) of each case; 2 CTAs walk them
UNITS = {"tn_f16_ragged_persistent": 4, "nt_bf16_bias_gelu": 4, "nn_splitk2_relu_aux": 2,
         "tn_bf16_160_accumulators": 4,
         "tt_two_consumers_batch2": 4, "nt_f16_alpha_beta_bk128": 4,
         "nt_bf16_bias_gelu_smem_epilogue": 2, "tn_f16_smem_epilogue_relu_aux": 4,
         "tn_f16_pingpong": 4, "nn_splitk2_batch2_packed_128rows": 8,
         "tt_bf16_two_outputs_packed": 4, "tt_bf16_two_outputs_tma": 8, "tn_f16_out_f32_tma": 6,
         "tn_f16_batch2_out_m_batch_n_tma": 8,
         "tn_f16_cluster_pairs": 2, "tt_bf16_cluster_pairs_splitk2_bias_gelu": 2,
         "tn_f16_odd_pitch_default_pairs": 1,
         "tn_f16_pingpong_cluster_pairs": 3, "tt_bf16_batch2_pingpong_batched_bias": 8,
         "tn_f16_splitk4_empty_split": 8, "tn_e4m3_rowwise_bias": 4,
         "tn_e5m2_tensorwise_pingpong_f16": 2, "tn_e4m3_splitk2_cluster_pairs_gelu": 2,
         "tn_e4m3_out_e4m3_packed_saturating": 4, "tn_e4m3_out_e4m3_registers_dequantized": 4,
         "tn_e5m2_out_e5m2_staged_saturating": 4, "tn_e4m3_out_e4m3_staged_bytes": 4,
         "tn_e4m3_block_ragged_bias": 8, "tn_e4m3_block_one_row": 4,
         "tn_e5m2_block_splitk2_cluster_pairs": 4,
         "tn_e4m3_block_pingpong_two_row_blocks": 4,
         "tn_e4m3_block_pairs_k256_ragged": 8, "tn_e4m3_block_chunks_two_consumers": 4,
         "tn_e4m3_block_chunks_cluster_pairs": 2, "tn_e5m2_block_chunks_pingpong": 6,
         "tn_e4m3_block_out_e4m3_amax": 4, "tn_e4m3_block_straddle_192": 6,
         "tn_e4m3_block_straddle_192_cluster_pairs": 3,
         "tn_e4m3_block_straddle_160_each_cut": 8, "tn_e4m3_block_straddle_96_two_consumers": 4,
         "tn_e5m2_block_straddle_160_pingpong": 8,
         "tn_e4m3_block_two_consumers": 6, "tn_e4m3_block_two_consumers_k256": 6,
         "tn_e4m3_fp8_residual_and_bias_packed": 4, "tn_e4m3_fp8_residual_and_bias_staged": 4,
         "tn_bf16_fp8_residual_registers": 4, "tn_e4m3_fp8_residual_splitk2": 8,
         "tn_e4m3_out_e4m3_amax_packed": 4, "tn_e4m3_out_e4m3_amax_registers": 4,
         "tn_e5m2_out_e5m2_amax_staged_residual": 4, "tn_e4m3_out_e4m3_amax_splitk2": 8,
         "tn_e4m3_out_e4m3_amax_nan": 4,
         "tt_bf16_batch2_out_e4m3_amax_pingpong_casts": 4,
         "tn_bf16_swap_ragged": 3, "nt_f16_swap_bias_residual_gelu": 2,
         "tt_bf16_swap_wide_rows_bias_gelu": 2,
         "nn_f16_swap_splitk2_relu_aux": 4, "tt_bf16_swap_batch2_row_scale": 4,
         "tn_e4m3_swap_rowwise_bias": 2, "tn_f16_swap_cluster_pairs": 2,
         "tn_bf16_swap_pingpong_amax": 5, "tn_bf16_swap_staged_ragged": 3,
         "nt_f16_swap_staged_bias_residual_gelu": 2, "tt_bf16_swap_staged_wide_rows_bias_gelu": 2,
         "nn_f16_swap_staged_splitk2_relu_aux": 4, "tt_bf16_swap_staged_batch2_row_scale": 4,
         "tn_e4m3_swap_staged_rowwise_bias": 2, "tn_f16_swap_staged_two_consumers": 2,
         "tn_bf16_swap_staged_pingpong_amax": 5, "tn_bf16_swap_staged_batched_short_rows": 6,
         "tn_f16_swap_staged_cluster_pairs": 2,
         "tn_bf16_swap_staged_streamk2_bias": 4, "tn_f16_splitk2_kcluster_ragged": 6,
         "nt_bf16_splitk3_kcluster_batch2_bias_gelu": 4,
         "tn_bf16_swap_splitk4_kcluster_relu_aux": 3,
         "tn_e4m3_block_splitk2_kcluster_out_e4m3_amax": 4, "tt_bf16_cluster4_relu": 1,
         "tn_bf16_swap_cluster4_bias": 2, "tn_bf16_swap_clustern2_bias": 4,
         "nn_bf16_clustern2_staged_relu": 4, "tn_f16_clustern4_splitk2": 4,
         "tn_bf16_cluster2x2_bias": 4, "nn_f16_cluster2x2_staged_splitk2": 4,
         "tn_f16_swap_cluster2x2_relu": 4,
         # stream-K: 2 whole tiles, then the third tile's pieces
         "tn_f16_streamk3_ragged_bias_gelu": 5, "tt_bf16_streamk2_two_consumers_batch3_relu": 4,
         "tn_e4m3_streamk2_out_e4m3_amax_registers": 4, "tn_bf16_swap_streamk2_bias": 6,
         "tn_e4m3_block_streamk3": 5, "tn_f16_streamk2_tma": 4,
         "tn_f16_streamk2_staged_rows": 4}  # fmt: skip
# CTAs of the launch where not 2: the cluster of a tile's splits (its units are the tiles), a
# cluster of 4 along M or N, or 2x2
CTAS = {"nt_bf16_splitk3_kcluster_batch2_bias_gelu": 3, "tn_bf16_swap_splitk4_kcluster_relu_aux": 4,
        "tt_bf16_cluster4_relu": 4, "tn_bf16_swap_cluster4_bias": 4,
        "tn_f16_clustern4_splitk2": 4, "tn_bf16_cluster2x2_bias": 4,
        "nn_f16_cluster2x2_staged_splitk2": 4, "tn_f16_swap_cluster2x2_relu": 4,
        "tn_bf16_swap_streamk2_bias": 4}  # fmt: skip
# (the swapped stream-K tile fits 2 CTAs an SM: 4 CTAs, so all 3 tiles are tail tiles)
# work units of a cluster kernel are pairs of M tiles: 2 CTAs are one cluster


def run_case(name: str) -> dict[str, Any]:
    """Compile and execute case *name* in this (simulating) process; errors per output."""
    import attrs
    import numpy as np

    import mmaplug as mp
    from mmaplug.plugins.hopper import artifact

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    # sm_90a with 2 SMs and shared memory for one CTA each: persistent grids of <= 2 CTAs
    device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
    with mp.FusionDefinition() as fd:
        overrides = globals()["case_" + name](fd, mp)
    compiled = mp.compile(fd.fusion, device, pm=pm, overrides=overrides)
    launches: list[tuple[str, int, int]] = []  # (kernel, CTAs, last argument) of each launch
    real_launch = artifact.launch_checked

    def recording_launch(kernels: Any, name: str, args: list, grid: tuple, *rest: Any) -> None:
        launches.append((name, int(grid[0]), int(args[-1])))
        real_launch(kernels, name, args, grid, *rest)

    artifact.launch_checked = recording_launch
    rng = np.random.default_rng(5)
    inputs = [
        rng.standard_normal(v.shape).astype(v.dtype.numpy)
        if isinstance(v, mp.TensorView) else float(rng.uniform(0.5, 2.0)) * rng.choice([-1, 1])
        for v in fd.fusion.inputs
    ]  # fmt: skip
    if name.endswith("_nan"):  # one NaN in the last input (the residual)
        inputs[-1][3, 5] = np.nan
    t0 = time.time()
    results = compiled.execute(inputs)
    seconds = time.time() - t0
    outputs = []
    expected = mp.evaluate(fd.fusion, inputs)
    for tv, got, ref in zip(fd.fusion.outputs, results, expected, strict=True):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        nan = np.isnan(ref64)  # (where the reference is NaN the kernel must be too)
        got_f, ref_f = np.where(nan, 0.0, got64), np.where(nan, 0.0, ref64)
        outputs.append({
            "name": tv.name, "dtype": tv.dtype.label, "shape": list(got64.shape),
            "unwritten": int(np.count_nonzero(~np.isfinite(got64) & ~nan)),
            "nan_differ": int(np.count_nonzero(np.isnan(got64) != nan)), "nan": int(nan.sum()),
            "error": float(np.linalg.norm(got_f - ref_f) / max(np.linalg.norm(ref_f), 1e-30)),
            # FP8: elements not bit-equal to evaluate's, and those saturated at the finite max
            "differ": int(np.count_nonzero(got64 != ref64)),
            "saturated": int(np.count_nonzero(np.abs(got64) == tv.dtype.finite_max))
            if tv.dtype.is_float8 else 0,
        })  # fmt: skip
    return {"scheduler": compiled.spec.scheduler, "params": compiled.params.name,
            "kernel": compiled.kernel_name,
            "seconds": round(seconds, 1), "launches": launches, "outputs": outputs}  # fmt: skip


# --- the emulation's failure reports (a generated kernel that goes wrong must say why, fast) ---


def _probe_kernel(fail: bool) -> Any:
    """64 threads: thread 0 either hits an emulation error or waits too; the rest wait."""

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(4, types.uint64)
        bar = H.shared_base(sm)
        if cuda.threadIdx.x == 0:
            H.mbarrier_init(bar, 1)
        cuda.syncthreads()
        if fail and cuda.threadIdx.x == 0:
            H.mbarrier_arrive(bar + 8)  # never initialised: a UsageError in thread 0
        H.mbarrier_wait(bar, 0)  # nobody arrives: a deadlock on the GPU
        out[cuda.threadIdx.x] = 1

    return kernel


def run_probe(name: str) -> dict[str, Any]:
    """Launch the probe kernel; how long until it failed, and with what message."""
    import numpy as np

    out = cuda.to_device(np.zeros(64, np.int32))
    t0 = time.time()
    try:
        _probe_kernel(name == "probe_error_in_producer")[1, 64](out)
    except Exception as exc:  # what the simulator reports is the result
        return {"raised": f"{type(exc).__name__}: {exc}", "seconds": time.time() - t0}
    return {"raised": None, "seconds": time.time() - t0}


PROBES = ["probe_error_in_producer", "probe_all_threads_wait"]

# The quick tier's cases (README, Tests): one or two of each kind of plan, each under about 5 s
# alone in the simulator; ``--full-sim`` runs every case (2x2 clusters, clusters of four, the
# block-scaled pairs and straddles: 10 s to 6 min each).
QUICK = (
    "tn_f16_ragged_persistent",  # the plain persistent kernel, ragged M, N, K
    "nt_bf16_bias_gelu",  # MN-major operands, the looped epilogue
    "nt_f16_alpha_beta_bk128",  # alpha and beta with C, 128 of K a stage
    "tn_f16_smem_epilogue_relu_aux",  # the staged epilogue, an aux output
    "tt_bf16_two_outputs_packed",  # the packed epilogue, two outputs
    "tn_f16_out_f32_tma",  # TMA stores
    "tt_two_consumers_batch2",  # two consumer warp groups, batched
    "tn_e5m2_tensorwise_pingpong_f16",  # ping-pong consumers, FP8 per tensor
    "nn_f16_swap_splitk2_relu_aux",  # the swap, split-K through the workspace
    "tn_f16_splitk2_kcluster_ragged",  # split-K summed in the cluster
    "tn_f16_streamk3_ragged_bias_gelu",  # stream-K
    "tn_f16_cluster_pairs",  # CTA pairs along M
    "tn_f16_odd_pitch_default_pairs",  # the default's pairs for rows 1,040 bytes apart
    "tn_bf16_swap_clustern2_bias",  # pairs along N, swapped
    "tn_bf16_swap_ragged",  # the swap alone
    "tn_bf16_swap_staged_ragged",  # the swap's staged epilogue, chunks written transposed
    "tt_bf16_swap_batch2_row_scale",  # swapped, batched, a row scale
    "tn_e4m3_rowwise_bias",  # FP8 per row
    "tn_e4m3_block_ragged_bias",  # FP8 block scales
    "tn_e4m3_block_pingpong_two_row_blocks",  # block scales on ping-pong consumers
    "tn_e4m3_out_e4m3_amax_packed",  # FP8 output with its amax
    "tn_e4m3_out_e4m3_amax_nan",  # NaN kept through the amax
    "tn_bf16_fp8_residual_registers",  # an FP8 residual input
)


@pytest.fixture(scope="module")
def sim_results(simulate: Any, sim_tier: Any) -> dict[str, dict[str, Any]]:
    cases = sim_tier.pick(CASES, QUICK)
    runs = simulate({name: [__file__, name] for name in [*cases, *PROBES]})
    return {name: run.outcome for name, run in runs.items()}


def test_quick_cases_are_cases() -> None:
    """Every quick case names a case (a renamed one would leave the quick tier silently short)."""
    assert set(QUICK) <= set(CASES), sorted(set(QUICK) - set(CASES))


@pytest.mark.parametrize("name", CASES)
def test_generated_hopper_kernel_matches_evaluate(
    sim_results: dict, sim_tier: Any, name: str
) -> None:
    """The hopper kernel ran (not ampere), wrote every output element, within tolerance."""
    sim_tier.require(name, sim_results)
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["scheduler"] == "hopper", res
    kernels = [launch[0] for launch in res["launches"]]
    split = "splitk" in name and "_kcluster" not in name  # (a cluster's splits reduce in it)
    assert kernels == ["hopper_gemm", *(["hopper_splitk_reduce"] * split)], res["launches"]
    assert res["launches"][0][1:] == [CTAS.get(name, 2), UNITS[name]], res["launches"]
    assert res["kernel"].endswith("_kc") == ("_kcluster" in name), res["kernel"]
    assert res["kernel"].endswith("_sk") == (name in STREAMED), res["kernel"]
    assert ("_se_ps" in res["kernel"]) == (name in PACKED), res["kernel"]
    assert ("_ps_ts" in res["kernel"]) == (name in TMA), res["kernel"]
    assert ("_swap" in res["kernel"]) == (name in SWAPPED), res["kernel"]
    assert res["outputs"], "no outputs compared"
    operand = "bfloat16" if "bf16" in name else "float16"
    for out in res["outputs"]:
        assert out["unwritten"] == 0, out
        assert out["nan_differ"] == 0, out
        assert bool(out["nan"]) == name.endswith("_nan"), out
        # a float32 output of a half matmul: mp.evaluate rounds the product to the operand type
        assert out["error"] < max(TOLERANCE[out["dtype"]], TOLERANCE[operand]), out
        if out["dtype"].startswith("float8"):  # bit-equal but for a rare rounding-order step
            assert out["differ"] <= out["shape"][0] * out["shape"][1] // 200, out
            assert out["saturated"] > 0 or "saturating" not in name, out


def test_error_in_one_thread_is_reported_at_once(sim_results: dict) -> None:
    """Waiters abort when a sibling died (the simulator alone reports it after their timeout)."""
    res = sim_results["probe_error_in_producer"]
    assert "mbarrier at" in res["raised"] and "was never initialised" in res["raised"], res
    assert res["seconds"] < WAIT_TIMEOUT_S / 10, res  # not after a waiter's timeout


def test_block_wide_deadlock_is_reported_at_once(sim_results: dict) -> None:
    """Every thread waiting on a barrier nobody can complete is a deadlock, found long before a
    waiter's timeout."""
    res = sim_results["probe_all_threads_wait"]
    assert "deadlock: mbarrier_wait" in res["raised"], res
    assert "every thread of the block has exited or waits" in res["raised"], res
    assert res["seconds"] < WAIT_TIMEOUT_S / 10, res


if __name__ == "__main__":
    run = run_probe if sys.argv[1].startswith("probe_") else run_case
    print(json.dumps(run(sys.argv[1])), flush=True)
