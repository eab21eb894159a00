"""Simulator tier: the decode kernel (mma.sync with the weight as its A operand, 16-byte loads
straight to registers, K split over warps and summed in shared memory) against ``mp.evaluate``.

Each case compiles for an h200 in a simulating subprocess, runs ``compiled.execute`` on numpy
arrays (outputs arrive NaN-poisoned, so an unwritten element shows) and compares with
``mp.evaluate`` (float64 inside). Two seeded property shards draw legal and illegal parameter
sets on random decode problems: every set the rules accept runs correctly, every other names
its fields. Without ``--full-sim`` the cases and the shard named ``QUICK`` run.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.sim

# FP8 operands: the inputs are already FP8, products and sums are float32 (the bound is the
# output's); an FP8 output may round one element of hundreds to the next step (6% for e4m3)
TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float8_e4m3fn": 2e-2,
             "float8_e5m2": 2e-2}  # fmt: skip


def _linear(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any) -> Any:
    x = fd.define_tensor([m, k], dtype=dtype)
    w = fd.define_tensor([n, k], dtype=dtype)
    return fd.ops.linear(x, w)


def case_m1_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """One row (a decode step): 7 of the 8 mma columns are padding, never stored."""
    fd.add_output(fd.ops.cast(_linear(fd, mp, 1, 32, 128, mp.float16), mp.float16))
    return {}


def case_ragged_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 5, N = 40 (the third CTA's rows clamped), K = 72 (the last chunk half past K)."""
    fd.add_output(fd.ops.cast(_linear(fd, mp, 5, 40, 72, mp.bfloat16), mp.bfloat16))
    return {}


def case_m16_two_tiles_unroll3_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 16: two m tiles; 2 warps, 3 chunks in flight over K = 520 (9 chunks, ragged)."""
    fd.add_output(fd.ops.cast(_linear(fd, mp, 16, 48, 520, mp.float16), mp.float16))
    return {"splitk_factor": 2, "stages": 3}


def case_batches_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """Several batches: 2 warps, 2 chunks in flight, K = 840 (13 whole chunks and one vector):
    warp 0 runs three batches (chunks 0-10) and warp 1 three (1-11); then chunk 12 and the
    last vector go one at a time."""
    fd.add_output(fd.ops.cast(_linear(fd, mp, 3, 24, 840, mp.bfloat16), mp.bfloat16))
    return {"splitk_factor": 2, "stages": 2}


def case_batch_gelu_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """A batch of 3 products, each its own activations and weight (a shared operand folds into
    M or N instead): gelu(a [3, 2, 200] @ b [3, 200, 40]), K ragged (3 chunks and one vector),
    the third CTA's rows clamped."""
    a = fd.define_tensor([3, 2, 200], dtype=mp.bfloat16, stride_order=[2, 1, 0])
    b = fd.define_tensor([3, 200, 40], dtype=mp.bfloat16, stride_order=[2, 0, 1])
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.matmul(a, b)), mp.bfloat16))
    return {}


def case_batch_of_weights_residual_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """A batch of 2 products, each its own weight (B [2, K, N] K-inner) and residual [2, M, N]:
    M = 9 (two m tiles), 2 warps over K = 136 (2 chunks and one vector)."""
    a = fd.define_tensor([2, 9, 136], dtype=mp.float16, stride_order=[2, 1, 0])
    b = fd.define_tensor([2, 136, 24], dtype=mp.float16, stride_order=[2, 0, 1])
    residual = fd.define_tensor([2, 9, 24], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.matmul(a, b), residual), mp.float16))
    return {"splitk_factor": 2}


def case_bias_gelu_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """The fused epilogue: gelu(x @ w.T + bias), cast; one warp, one chunk in flight."""
    x = fd.define_tensor([3, 64], dtype=mp.float16)
    w = fd.define_tensor([24, 64], dtype=mp.float16)
    bias = fd.define_tensor([24], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, bias)), mp.float16))
    return {"splitk_factor": 1, "stages": 1}


def case_scalar_residual_two_outputs_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """alpha * (x @ w.T) + residual as bf16, and the product as float32: scalars, an [M, N]
    input and two outputs; 8 warps."""
    y = _linear(fd, mp, 6, 32, 256, mp.bfloat16)
    residual = fd.define_tensor([6, 32], dtype=mp.bfloat16)
    alpha = fd.define_scalar()
    fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.mul(y, alpha), residual), mp.bfloat16))
    fd.add_output(fd.ops.cast(y, mp.float32))
    return {"splitk_factor": 8}


def _scaled(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any, scale: str, **kw: Any) -> Any:
    """torch._scaled_mm on a weight [N, K] (K-major) with per-tensor or per-row/column scales."""
    x = fd.define_tensor([m, k], dtype=dtype)
    w = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1])
    sx = fd.define_tensor([m, 1] if scale == "row" else [], dtype=mp.float32)
    sw = fd.define_tensor([1, n] if scale == "row" else [1], dtype=mp.float32)
    return fd.ops.scaled_mm(x, w, sx, sw, **kw)


def case_fp8_m1_e4m3_tensor(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 decode step: mma.sync m16n8k32, per-tensor scales, bfloat16 out; 2 warps, 1 chunk
    (128 FP8 of K) each."""
    fd.add_output(_scaled(fd, mp, 1, 32, 256, mp.float8_e4m3fn, "tensor", out_dtype=mp.bfloat16))
    return {"splitk_factor": 2, "stages": 1}


def case_fp8_ragged_m5_e5m2_row(fd: Any, mp: Any) -> dict[str, Any]:
    """e5m2, per-row scales, M = 5, N = 40 (the third CTA's rows clamped), K = 144 (the second
    chunk holds one 16-byte vector of K: lanes c > 0 load zeros)."""
    fd.add_output(_scaled(fd, mp, 5, 40, 144, mp.float8_e5m2, "row", out_dtype=mp.bfloat16))
    return {}


def case_fp8_m16_e4m3_row_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 16 (two m tiles), per-row scales, bias + GELU, ragged N = 24 and K = 400 (3 chunks
    and a vector): 1 warp, 2 chunks in flight (the main loop, then the guarded one)."""
    bias = fd.define_tensor([24], dtype=mp.bfloat16)
    y = _scaled(fd, mp, 16, 24, 400, mp.float8_e4m3fn, "row", bias=bias, out_dtype=mp.float32)
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {"splitk_factor": 1, "stages": 2}


def case_fp8_m16_e5m2_tensor_unroll4(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 16, e5m2, per-tensor scales, float32 out; 2 warps with 4 chunks in flight over
    K = 1040 (8 whole chunks in the main loop, one vector in the guarded one)."""
    fd.add_output(_scaled(fd, mp, 16, 48, 1040, mp.float8_e5m2, "tensor", out_dtype=mp.float32))
    return {"splitk_factor": 2, "stages": 4}


def case_fp8_m16_e4m3_8_warps(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 16 of FP8 over 8 warps of 4 chunks (the default where 8 warps' CTAs fit one wave,
    as 16x1040x1024 plans with hopper blocked): K = 1040, a whole chunk for each warp, then one
    vector."""
    fd.add_output(_scaled(fd, mp, 16, 40, 1040, mp.float8_e4m3fn, "row", out_dtype=mp.bfloat16))
    return {"splitk_factor": 8, "stages": 4}


def case_fp8_batch_e4m3(fd: Any, mp: Any) -> dict[str, Any]:
    """A batch of 3 FP8 products without scales (each its own weight), bfloat16 out: K = 272
    (2 chunks and a vector), N = 40 (the third CTA's rows clamped); 2 warps."""
    a = fd.define_tensor([3, 2, 272], dtype=mp.float8_e4m3fn, stride_order=[2, 1, 0])
    b = fd.define_tensor([3, 272, 40], dtype=mp.float8_e4m3fn, stride_order=[2, 0, 1])
    fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), mp.bfloat16))
    return {"splitk_factor": 2}


def case_fp8_quantized_output_e4m3(fd: Any, mp: Any) -> dict[str, Any]:
    """A quantised layer: cast(scaled_mm(...) * out_scale, e4m3) written as bytes by the
    epilogue (cvt.rn.satfinite), M = 3, ragged N = 20."""
    y = _scaled(fd, mp, 3, 20, 128, mp.float8_e4m3fn, "row", out_dtype=mp.float32)
    out_scale = fd.define_tensor([], dtype=mp.float32)
    fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), mp.float8_e4m3fn))
    return {}


def case_fp8_quantized_amax_e4m3(fd: Any, mp: Any) -> dict[str, Any]:
    """Delayed scaling: cast(y * out_scale, e4m3) and the float32 amax of y * out_scale, M = 5
    and N = 40 (the third CTA's clamped rows and the padding columns must not count); 2 warps,
    each thread's maximum over its elements, one red.max a warp."""
    y = _scaled(fd, mp, 5, 40, 256, mp.float8_e4m3fn, "row", out_dtype=mp.float32)
    scaled = fd.ops.mul(y, fd.define_tensor([], dtype=mp.float32))
    fd.add_output(fd.ops.cast(scaled, mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(scaled, [0, 1]))
    return {"splitk_factor": 2}


def case_fp8_residual_and_bias_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """16-bit operands reading FP8 epilogue inputs (loaded as bytes, widened: sm_89+): an e5m2
    residual [M, N] and an e4m3 bias [N], bf16 out and the amax of the sum; M = 3, N = 24."""
    y = _linear(fd, mp, 3, 24, 200, mp.bfloat16)
    y = fd.ops.add(y, fd.define_tensor([3, 24], dtype=mp.float8_e5m2))
    bias = fd.define_tensor([24], dtype=mp.float8_e4m3fn)
    y = fd.ops.add(y, fd.ops.broadcast_in_dim(bias, [3, 24], [1]))
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    fd.add_output(fd.ops.amax(y, [0, 1]))
    return {"splitk_factor": 4, "stages": 2}


def _ffn(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any, h: int = 2) -> list[Any]:
    """x [M, K] against h weights [N, K] (a horizontal fusion): the h products."""
    x = fd.define_tensor([m, k], dtype=dtype)
    return [fd.ops.linear(x, fd.define_tensor([n, k], dtype=dtype)) for _ in range(h)]


def case_ffn_m1_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """The llama FFN's decode step, one kernel: silu(x @ W1.T) * (x @ W3.T), M = 1, N = 40
    (the third CTA's rows clamped), K = 200 (3 chunks and a vector); default params."""
    gate, up = _ffn(fd, mp, 1, 40, 200, mp.bfloat16)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(gate), up), mp.bfloat16))
    return {}


def case_ffn_m16_two_tiles_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """M = 16 (two m tiles), 2 warps a product with 3 chunks in flight over K = 520 (ragged):
    warps 0-1 take W1, warps 2-3 W3; plus the gate as a float32 aux output."""
    gate, up = _ffn(fd, mp, 16, 48, 520, mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(gate), up), mp.float16))
    fd.add_output(fd.ops.cast(gate, mp.float32))
    return {"splitk_factor": 2, "stages": 3}


def case_qkv_m3_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """q, k, v: three products, three outputs, 4 warps each (12 a CTA), K = 1040."""
    for y in _ffn(fd, mp, 3, 32, 1040, mp.bfloat16, h=3):
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {"splitk_factor": 4, "stages": 2}


def case_h3_scalar_bias_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """silu(y0) * y1 * s + y2 + bias: three products meeting with a scalar and a bias, M = 9
    (two m tiles), one warp each, one chunk in flight."""
    y0, y1, y2 = _ffn(fd, mp, 9, 24, 136, mp.float16, h=3)
    bias = fd.define_tensor([24], dtype=mp.float16)
    gated = fd.ops.mul(fd.ops.mul(fd.ops.silu(y0), y1), fd.define_scalar())
    fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.add(gated, y2), bias), mp.float16))
    return {"splitk_factor": 1, "stages": 1}


def case_h4_sum_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """The most products a decode CTA takes, four, summed; 2 warps each (8 a CTA), M = 2."""
    ys = _ffn(fd, mp, 2, 40, 264, mp.float16, h=4)
    fd.add_output(fd.ops.cast(functools.reduce(fd.ops.add, ys), mp.float16))
    return {"splitk_factor": 2, "stages": 2}


def case_ffn_batch_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """A batch of 2 FFNs, each its own activations and weights (W [2, K, N] K-inner): M = 2,
    K = 136 (2 chunks and a vector), 2 warps a product."""
    a = fd.define_tensor([2, 2, 136], dtype=mp.float16, stride_order=[2, 1, 0])
    w1, w3 = (fd.define_tensor([2, 136, 24], dtype=mp.float16, stride_order=[2, 0, 1])
              for _ in range(2))  # fmt: skip
    up = fd.ops.matmul(a, w3)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(fd.ops.matmul(a, w1)), up), mp.float16))
    return {"splitk_factor": 2}


def case_ffn_fp8_e4m3(fd: Any, mp: Any) -> dict[str, Any]:
    """FP8 operands (mma.sync m16n8k32): silu(x @ W1.T) * (x @ W3.T) as bfloat16, M = 5,
    K = 400 (3 chunks of 128 and a vector), 2 warps a product."""
    gate, up = _ffn(fd, mp, 5, 40, 400, mp.float8_e4m3fn)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(gate), up), mp.bfloat16))
    return {"splitk_factor": 2, "stages": 2}


def case_fp8_ffn_quantized_amax(fd: Any, mp: Any) -> dict[str, Any]:
    """An FP8 FFN's decode step quantised for the next layer: h = silu(scaled_mm(x, W1)) *
    scaled_mm(x, W3) (x's per-row scale shared), cast(h * out_scale, e4m3) and amax(h); M = 3,
    N = 40 (clamped rows), K = 272 (2 chunks and a vector), 2 warps a product."""
    x = fd.define_tensor([3, 272], dtype=mp.float8_e4m3fn)
    sx = fd.define_tensor([3, 1], dtype=mp.float32)
    gate, up = (
        fd.ops.scaled_mm(
            x, fd.define_tensor([272, 40], dtype=mp.float8_e4m3fn, stride_order=[0, 1]), sx,
            fd.define_tensor([1, 40], dtype=mp.float32), out_dtype=mp.float32,
        )
        for _ in "13"
    )  # fmt: skip
    h = fd.ops.mul(fd.ops.silu(gate), up)
    fd.add_output(fd.ops.cast(fd.ops.mul(h, fd.define_tensor([], dtype=mp.float32)),
                              mp.float8_e4m3fn))  # fmt: skip
    fd.add_output(fd.ops.amax(h, [0, 1]))
    return {"splitk_factor": 2}


def _rows(m: int, n_rows: int, k: int) -> dict[str, Any]:
    """The CTA (and warp) tile of *n_rows* weight rows for M = *m*, K chunks of *k*."""
    tile = (8 * -(-m // 8), n_rows, k)
    return {"cta_tile": tile, "warp_tile": tile}


def case_two_row_tiles_ragged_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """Two row tiles (32 weight rows a CTA): M = 5, N = 40 (the second CTA's rows 8-31 past N,
    clamped for the loads and never stored), K = 200 (3 chunks and a vector); 2 warps of 2
    chunks, then the guarded loop."""
    fd.add_output(fd.ops.cast(_linear(fd, mp, 5, 40, 200, mp.bfloat16), mp.bfloat16))
    return {**_rows(5, 32, 64), "splitk_factor": 2, "stages": 2}


def case_two_row_tiles_fp8_m16_row_bias_gelu(fd: Any, mp: Any) -> dict[str, Any]:
    """Two row tiles of FP8 with two m tiles: per-row scales, bias + GELU, N = 72 (three CTAs,
    the last of 8 rows), K = 1168 (9 chunks of 128 and a vector); 2 warps of 3 chunks."""
    bias = fd.define_tensor([72], dtype=mp.bfloat16)
    y = _scaled(fd, mp, 16, 72, 1168, mp.float8_e4m3fn, "row", bias=bias, out_dtype=mp.float32)
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), mp.bfloat16))
    return {**_rows(16, 32, 128), "splitk_factor": 2, "stages": 3}


def case_two_row_tiles_ffn_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """A horizontal fusion on two row tiles: silu(x @ W1.T) * (x @ W3.T), M = 9 (two m tiles),
    N = 48 (the second CTA's last 16 rows past N), K = 520; 2 warps a product, 4 chunks."""
    gate, up = _ffn(fd, mp, 9, 48, 520, mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(gate), up), mp.float16))
    return {**_rows(9, 32, 64), "splitk_factor": 2, "stages": 4}


CASES = sorted(name[5:] for name in dir() if name.startswith("case_"))


def _errors(fd: Any, mp: Any, compiled: Any, rng: Any) -> list[dict[str, Any]]:
    import numpy as np

    inputs = [
        np.asarray(rng.standard_normal(v.shape)).astype(v.dtype.numpy)
        if isinstance(v, mp.TensorView) else 1.25
        for v in fd.fusion.inputs
    ]  # fmt: skip
    results = compiled.execute(inputs)
    expected = mp.evaluate(fd.fusion, inputs)
    outputs = []
    for tv, got, ref in zip(fd.fusion.outputs, results, expected, strict=True):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        outputs.append({
            "dtype": tv.dtype.label,
            "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
            "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
        })  # fmt: skip
    return outputs


def run_case(name: str) -> dict[str, Any]:
    """Compile and execute case *name* in this (simulating) process; errors per output. Hopper
    is blocked: it takes batches of short weight rows, which the cases are."""
    import numpy as np

    import mmaplug as mp

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    with mp.FusionDefinition() as fd:
        overrides = globals()["case_" + name](fd, mp)
    compiled = mp.compile(fd.fusion, "h200", pm=pm, overrides=overrides or None)
    outputs = _errors(fd, mp, compiled, np.random.default_rng(3))
    return {"scheduler": compiled.spec.scheduler, "kernel": compiled.kernel_name,
            "operand": compiled.spec.problem.operand_dtype.label, "outputs": outputs}  # fmt: skip


def run_property(seed: int, draws: int) -> dict[str, Any]:
    """Rules = generator: random decode problems of 16-bit or e4m3 operands (bf16 out), most of
    them horizontal fusions of 2 to 4 products (their sum, or silu(y0) * y1 [+ y2 ...]), and
    parameter sets of one or two row tiles (some with a value the rules refuse); every
    accepted set matches mp.evaluate, every refused one names its field."""
    import numpy as np

    import mmaplug as mp

    rng = np.random.default_rng(seed)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    counts: dict[str, Any] = {
        "ran": 0, "horizontal": 0, "fp8": 0, "two_row_tiles": 0, "rejected": 0, "fields": [],
        "errors": [],
    }  # fmt: skip
    for _ in range(draws):
        m, n = int(rng.integers(1, 17)), int(rng.integers(1, 5)) * 16 - int(rng.integers(0, 9))
        dtype = [mp.float16, mp.bfloat16, mp.float8_e4m3fn][int(rng.integers(3))]
        k = int(rng.integers(1, 20)) * (16 if dtype.is_float8 else 8)  # whole 16-byte loads
        out_dtype = mp.bfloat16 if dtype.is_float8 else dtype
        warps = int(rng.choice([1, 2, 4, 8, 3]))  # 3 warps: refused (8 of 3 products too)
        stages = int(rng.choice([1, 2, 3, 4, 5]))  # 5: refused
        h = int(rng.choice([1, 1, 2, 3, 4]))
        rows = int(rng.choice([16, 32, 32, 48]))  # weight rows a CTA; 48: refused
        overrides = {"splitk_factor": warps, "stages": stages,
                     **_rows(m, rows, 128 if dtype.is_float8 else 64)}  # fmt: skip
        with mp.FusionDefinition() as fd:
            if h == 1:
                y = _linear(fd, mp, m, n, k, dtype)
            elif rng.integers(2):
                y = functools.reduce(fd.ops.add, _ffn(fd, mp, m, n, k, dtype, h))
            else:
                y0, y1, *rest = _ffn(fd, mp, m, n, k, dtype, h)
                y = functools.reduce(fd.ops.add, rest, fd.ops.mul(fd.ops.silu(y0), y1))
            fd.add_output(fd.ops.cast(y, out_dtype))
        try:
            compiled = mp.compile(fd.fusion, "h200", pm=pm, overrides=overrides)
        except mp.InvalidParamsError as error:
            counts["rejected"] += 1
            counts["fields"] += sorted({v.field for v in error.violations})
            continue
        assert compiled.spec.scheduler == "decode", compiled.spec.scheduler
        assert compiled.spec.problem.horizontal == h, compiled.spec.problem
        (out,) = _errors(fd, mp, compiled, rng)
        counts["ran"] += 1
        counts["horizontal"] += h > 1
        counts["fp8"] += dtype.is_float8
        if out["unwritten"] or not out["error"] <= TOLERANCE[out["dtype"]]:
            counts["errors"].append({"m": m, "n": n, "k": k, "h": h, **overrides, **out})
        counts["two_row_tiles"] += rows == 32
    return counts


SHARDS = {"property_a": ["property", "11", "20"], "property_b": ["property", "12", "20"]}
# The quick tier (README, Tests): each kind of decode plan once (one and two row tiles, ragged
# rows, batches, horizontal products, FP8 per tensor and per row, FP8 outputs with amax,
# residuals) and one property shard, about 8 of the module's 27 s alone
QUICK = (
    "m1_f16",
    "bias_gelu_f16",
    "batches_bf16",
    "ragged_bf16",
    "two_row_tiles_ragged_bf16",
    "ffn_m1_bf16",
    "h3_scalar_bias_f16",
    "scalar_residual_two_outputs_bf16",
    "fp8_m1_e4m3_tensor",
    "fp8_ragged_m5_e5m2_row",
    "fp8_m16_e4m3_row_bias_gelu",
    "fp8_quantized_amax_e4m3",
    "fp8_residual_and_bias_bf16",
    "ffn_fp8_e4m3",
    "property_a",
)


@pytest.fixture(scope="module")
def sim_results(simulate: Any, sim_tier: Any) -> dict[str, dict[str, Any]]:
    jobs = {name: [__file__, name] for name in CASES}
    jobs.update({name: [__file__, *args] for name, args in SHARDS.items()})
    picked = {name: jobs[name] for name in sim_tier.pick(list(jobs), QUICK)}
    return {name: run.outcome for name, run in simulate(picked, timeout=900).items()}


def test_quick_cases_are_cases() -> None:
    """Every quick case names a case or shard (a renamed one would leave the quick tier short)."""
    assert set(QUICK) <= {*CASES, *SHARDS}, sorted(set(QUICK) - {*CASES, *SHARDS})


@pytest.mark.parametrize("name", CASES)
def test_decode_kernel_matches_evaluate(sim_results: dict, sim_tier: Any, name: str) -> None:
    """The decode kernel was planned and wrote every output element, within tolerance (the
    looser of the output's and the operands': the reference rounds the product to the operand
    type, as the fusion says, before a float32 output takes it)."""
    sim_tier.require(name, sim_results)
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["scheduler"] == "decode", res
    for out in res["outputs"]:
        assert out["unwritten"] == 0, res
        assert out["error"] < max(TOLERANCE[out["dtype"]], TOLERANCE[res["operand"]]), res


@pytest.mark.parametrize("shard", sorted(SHARDS))
def test_accepted_decode_params_match_evaluate(
    sim_results: dict, sim_tier: Any, shard: str
) -> None:
    """What the decode rules accept builds a correct kernel, horizontal fusions and FP8 operands
    included; what they refuse names the field."""
    sim_tier.require(shard, sim_results)
    res = sim_results[shard]
    assert "failed" not in res, res.get("failed")
    assert res["errors"] == [], res["errors"]
    assert res["ran"] >= 3, res
    assert res["horizontal"] >= 1 and res["fp8"] >= 1 and res["two_row_tiles"] >= 1, res
    assert set(res["fields"]) <= {"splitk_factor", "stages", "cta_tile", "warp_tile"}, res


if __name__ == "__main__":
    if sys.argv[1] == "property":
        print(json.dumps(run_property(int(sys.argv[2]), int(sys.argv[3]))), flush=True)
    else:
        print(json.dumps(run_case(sys.argv[1])), flush=True)
