"""Simulator tier: the intrinsics' Python emulations run real kernels in Numba's CUDA simulator.

Each test body runs once, in one subprocess started with NUMBA_ENABLE_CUDASIM=1 (the variable must
be set before numba is imported, and this process must stay on the real CUDA target); the tests
here report that subprocess's outcome for their body. `cuda` and `I` are module globals because
the simulator swaps the `cuda` global of a kernel's module, and there `I` is the emulation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from numba import cuda
from numba.cuda import types

from mmaplug.cuda import intrinsics as I

pytestmark = pytest.mark.sim

RESULT_TAG = "MMAPLUG-SIM-RESULTS "
RUNNER = f"""
import importlib.util, json, sys, traceback
spec = importlib.util.spec_from_file_location("_sim_bodies", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
results = {{}}
for name, test in vars(module).items():
    body = getattr(test, "sim_body", None)
    if body is not None:
        try:
            body()
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
print({RESULT_TAG!r} + json.dumps(results))
"""
# bf16 keeps 8 significant bits, f16 11; products are exact and sums are fp32, so the error is
# dominated by nothing but fp32 accumulation of 16 terms.
MMA_ATOL = 1e-4
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


@pytest.fixture(scope="module")
def sim_results() -> dict[str, str]:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if proc.returncode or not lines:
        pytest.fail(f"simulator subprocess failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return json.loads(lines[-1][len(RESULT_TAG) :])


def in_simulator(body):
    """Turn `body` into a test that passes when `body` passed in the simulator subprocess."""

    def test(sim_results: dict[str, str]) -> None:
        outcome = sim_results[body.__name__]
        if outcome != "ok":
            pytest.fail(outcome, pytrace=False)

    test.__name__ = test.__qualname__ = body.__name__
    test.__doc__ = body.__doc__
    test.sim_body = body
    return test


def _mma_kernel(dtype_name: str, b_layout: str):
    """One warp: ldmatrix A (16x16 row-major) and B (k-major 16x8 or n-major 8x16), then mma."""

    mma = I.mma_m16n8k16_f16 if dtype_name == "f16" else I.mma_m16n8k16_bf16
    k_major = b_layout == "k_major"

    @cuda.jit
    def kernel(a, b, c, out):
        sa = cuda.shared.array(256, types.uint16)
        sb = cuda.shared.array(128, types.uint16)
        lane = cuda.threadIdx.x
        for i in range(lane, 256, 32):
            sa[i] = a[i]
        for i in range(lane, 128, 32):
            sb[i] = b[i]
        cuda.syncthreads()
        a0, a1, a2, a3 = I.ldmatrix_x4(I.smem_addr(sa, (lane % 16) * 16 + (lane // 16) * 8))
        if k_major:  # B[k, n] at k * 8 + n: transpose rows k = 0..15
            b0, b1 = I.ldmatrix_x2_trans(I.smem_addr(sb, (lane % 16) * 8))
        else:  # B[k, n] at n * 16 + k: matrix j holds k = 8j..8j+7 of rows n = lane % 8
            b0, b1 = I.ldmatrix_x2(I.smem_addr(sb, (lane % 8) * 16 + ((lane // 8) % 2) * 8))
        g, t = lane >> 2, lane & 3
        d = mma(
            a0,
            a1,
            a2,
            a3,
            b0,
            b1,
            c[g, 2 * t],
            c[g, 2 * t + 1],
            c[g + 8, 2 * t],
            c[g + 8, 2 * t + 1],
        )
        out[g, 2 * t], out[g, 2 * t + 1], out[g + 8, 2 * t], out[g + 8, 2 * t + 1] = d

    return kernel


def _check_mma(dtype_name: str, b_layout: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    dtype = DTYPES[dtype_name]
    a = rng.standard_normal((16, 16)).astype(dtype)
    b = rng.standard_normal((16, 8)).astype(dtype)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    b_store = b if b_layout == "k_major" else b.T
    out = np.full((16, 8), np.nan, np.float32)
    kernel = _mma_kernel(dtype_name, b_layout)
    kernel[1, 32](
        a.view(np.uint16).ravel(), np.ascontiguousarray(b_store).view(np.uint16).ravel(), c, out
    )
    expected = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(out, expected, rtol=0, atol=MMA_ATOL)


@in_simulator
def test_mma_f16_with_ldmatrix_trans_b():
    """f16 mma fed by ldmatrix.x4 (A) and ldmatrix.x2.trans (k-major B) matches numpy float64."""
    _check_mma("f16", "k_major", seed=1)


@in_simulator
def test_mma_bf16_with_ldmatrix_b():
    """bf16 mma fed by ldmatrix.x4 (A) and ldmatrix.x2 (n-major B) matches numpy float64."""
    _check_mma("bf16", "n_major", seed=2)


@in_simulator
def test_mma_bf16_with_ldmatrix_trans_b():
    """bf16 mma with a k-major B through ldmatrix.x2.trans matches numpy float64."""
    _check_mma("bf16", "k_major", seed=3)


@in_simulator
def test_mma_fragments_follow_ptx_formulas():
    """mma on fragments packed by the PTX ISA row/col formulas (no ldmatrix) matches numpy."""

    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    bits_a, bits_b = a.view(np.uint16).astype(np.uint32), b.view(np.uint16).astype(np.uint32)

    @cuda.jit
    def kernel(ab, bb, out):
        lane = cuda.threadIdx.x
        g, t = lane >> 2, lane & 3
        k0, k1 = 2 * t, 2 * t + 8
        d = I.mma_m16n8k16_f16(
            ab[g, k0] | (ab[g, k0 + 1] << 16),
            ab[g + 8, k0] | (ab[g + 8, k0 + 1] << 16),
            ab[g, k1] | (ab[g, k1 + 1] << 16),
            ab[g + 8, k1] | (ab[g + 8, k1 + 1] << 16),
            bb[k0, g] | (bb[k0 + 1, g] << 16),
            bb[k1, g] | (bb[k1 + 1, g] << 16),
            0.0,
            0.0,
            0.0,
            0.0,
        )
        out[g, 2 * t], out[g, 2 * t + 1], out[g + 8, 2 * t], out[g + 8, 2 * t + 1] = d

    out = np.zeros((16, 8), np.float32)
    kernel[1, 32](bits_a, bits_b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), atol=MMA_ATOL)


@in_simulator
def test_fp8_mma_fragments_follow_ptx_formulas():
    """mma m16n8k32 on e4m3 and e5m2 fragments packed by the PTX ISA's m16n8k32 formulas (A: row
    g for a0..a3 and a8..a11, else g + 8; col 4t + (i & 3), + 16 from a8; B: row 4t + (i & 3),
    + 16 from b4; col g) matches numpy, accumulating onto C."""

    @cuda.jit
    def kernel(ab, bb, c, out, e5m2):
        lane = cuda.threadIdx.x
        g, t = lane >> 2, lane & 3
        words = cuda.local.array(6, types.uint32)
        for j in range(6):
            words[j] = 0
        for i in range(4):
            k0, k1 = 4 * t + i, 4 * t + 16 + i
            words[0] |= ab[g, k0] << (8 * i)
            words[1] |= ab[g + 8, k0] << (8 * i)
            words[2] |= ab[g, k1] << (8 * i)
            words[3] |= ab[g + 8, k1] << (8 * i)
            words[4] |= bb[k0, g] << (8 * i)
            words[5] |= bb[k1, g] << (8 * i)
        mma = I.mma_m16n8k32_e5m2 if e5m2 else I.mma_m16n8k32_e4m3
        d = mma(
            words[0], words[1], words[2], words[3], words[4], words[5],
            c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1],
        )  # fmt: skip
        out[g, 2 * t], out[g, 2 * t + 1], out[g + 8, 2 * t], out[g + 8, 2 * t + 1] = d

    rng = np.random.default_rng(9)
    for e5m2, fp8 in enumerate((ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)):
        a = rng.standard_normal((16, 32)).astype(fp8)
        b = rng.standard_normal((32, 8)).astype(fp8)
        c = rng.standard_normal((16, 8)).astype(np.float32)
        bits_a, bits_b = a.view(np.uint8).astype(np.uint32), b.view(np.uint8).astype(np.uint32)
        out = np.zeros((16, 8), np.float32)
        kernel[1, 32](bits_a, bits_b, c, out, e5m2)
        ref = a.astype(np.float64) @ b.astype(np.float64) + c
        np.testing.assert_allclose(out, ref, atol=MMA_ATOL)


@in_simulator
def test_ldmatrix_lane_layout():
    """ldmatrix.x1 gives lane l row l>>2, cols 2(l%4) (low half) and +1; .trans the transpose."""

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(64, types.uint16)
        lane = cuda.threadIdx.x
        sm[lane] = lane  # element (r, c) of the 8x8 matrix holds 8r + c
        sm[lane + 32] = lane + 32
        cuda.syncthreads()
        out[0, lane] = I.ldmatrix_x1(I.smem_addr(sm, (lane % 8) * 8))
        out[1, lane] = I.ldmatrix_x1_trans(I.smem_addr(sm, (lane % 8) * 8))

    out = np.zeros((2, 32), np.uint32)
    kernel[1, 32](out)
    lane = np.arange(32)
    r, c = lane >> 2, 2 * (lane & 3)
    np.testing.assert_array_equal(out[0], (8 * r + c) | ((8 * r + c + 1) << 16))
    np.testing.assert_array_equal(out[1], (8 * c + r) | ((8 * (c + 1) + r) << 16))


@in_simulator
def test_ldmatrix_x4_matrix_order():
    """ldmatrix.x4 register j holds the matrix whose rows lanes 8j..8j+7 addressed."""

    @cuda.jit
    def kernel(src, out):
        sm = cuda.shared.array(256, types.uint16)
        lane = cuda.threadIdx.x
        for i in range(lane, 256, 32):
            sm[i] = src[i]
        cuda.syncthreads()
        # Lanes address the matrices in reverse memory order: matrix j starts at 64 * (3 - j).
        regs = I.ldmatrix_x4(I.smem_addr(sm, 64 * (3 - lane // 8) + (lane % 8) * 8))
        for j in range(4):
            out[j, lane] = regs[j]

    src = np.arange(256, dtype=np.uint16)
    out = np.zeros((4, 32), np.uint32)
    kernel[1, 32](src, out)
    lane = np.arange(32)
    for j in range(4):
        first = 64 * (3 - j) + 8 * (lane >> 2) + 2 * (lane & 3)
        np.testing.assert_array_equal(out[j], first | ((first + 1) << 16))


@in_simulator
def test_warps_and_blocks_are_independent():
    """Two warps in each of two blocks run their own ldmatrix exchange without mixing lanes."""

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(128, types.uint16)
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        for i in range(tid, 128, 64):
            sm[i] = i + 1000 * cuda.blockIdx.x
        cuda.syncthreads()
        out[cuda.blockIdx.x, warp, lane] = I.ldmatrix_x1(
            I.smem_addr(sm, 64 * warp + (lane % 8) * 8)
        )

    out = np.zeros((2, 2, 32), np.uint32)
    kernel[2, 64](out)
    lane = np.arange(32)
    for block in range(2):
        for warp in range(2):
            first = 1000 * block + 64 * warp + 8 * (lane >> 2) + 2 * (lane & 3)
            np.testing.assert_array_equal(out[block, warp], first | ((first + 1) << 16))


@in_simulator
def test_partial_warp_is_rejected():
    """A warp-collective intrinsic in a block of 16 threads raises a UsageError."""

    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(64, types.uint16)
        out[cuda.threadIdx.x] = I.ldmatrix_x1(I.smem_addr(sm, 0))

    with pytest.raises(UsageError, match="full warps"):
        kernel[1, 16](np.zeros(16, np.uint32))


@in_simulator
def test_lanes_that_exit_before_a_collective_are_named_at_once():
    """Half a warp returns while the other half waits at ldmatrix: the waiting lanes raise a
    UsageError naming the exited lanes within seconds (the patience for live lanes is minutes:
    a slow lane of a loaded simulator is not a lost one)."""
    import time

    from mmaplug.errors import UsageError
    from mmaplug.sim.simulator import simulated_launch
    from mmaplug.sim.warp import EXCHANGE_TIMEOUT_S

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(64, types.uint16)
        if cuda.threadIdx.x >= 16:
            return
        out[cuda.threadIdx.x] = I.ldmatrix_x1(I.smem_addr(sm, 0))

    start = time.monotonic()
    with pytest.raises(UsageError, match=r"lanes \[16, .*31\] exited without reaching it"):
        with simulated_launch():
            kernel[1, 32](np.zeros(32, np.uint32))
    assert time.monotonic() - start < EXCHANGE_TIMEOUT_S / 10


@in_simulator
def test_cp_async_copies_and_zero_fills():
    """cp.async copies 16/8/4 bytes, zero-fills past src_bytes, and src_bytes=0 writes zeros."""

    @cuda.jit
    def kernel(src, out):
        sm = cuda.shared.array(64, types.uint16)
        if cuda.threadIdx.x == 0:
            for i in range(64):
                sm[i] = 0xFFFF
            I.cp_async_16(I.smem_addr(sm, 0), src, 8, 16)  # full copy of src[8:16]
            I.cp_async_16(I.smem_addr(sm, 8), src, 16, 6)  # 3 elements, 5 zeros
            I.cp_async_16(I.smem_addr(sm, 16), src, 0, 0)  # zero-fill, index 0 (never read)
            I.cp_async_8(I.smem_addr(sm, 24), src, 4, 8)
            I.cp_async_4(I.smem_addr(sm, 28), src, 2, 2)
            I.cp_async_commit()
            I.cp_async_wait_group(0)
            I.cp_async_wait_all()
            for i in range(64):
                out[i] = sm[i]

    src = np.arange(1, 33, dtype=np.uint16)
    out = np.zeros(64, np.uint16)
    kernel[1, 32](src, out)
    expected = np.full(64, 0xFFFF, np.uint16)
    expected[0:8] = src[8:16]
    expected[8:16] = [*src[16:19], 0, 0, 0, 0, 0]
    expected[16:24] = 0
    expected[24:28] = src[4:8]
    expected[28:30] = [src[2], 0]
    np.testing.assert_array_equal(out, expected)


@in_simulator
def test_conversions_round_trip_every_value():
    """Every finite f16/bf16 bit pattern survives widening to f32 and rounding back."""

    for widen, narrow, dtype in (
        (I.f16_to_f32, I.f32_to_f16, np.float16),
        (I.bf16_to_f32, I.f32_to_bf16, ml_dtypes.bfloat16),
    ):
        bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        finite = bits[np.isfinite(bits.view(dtype).astype(np.float32))]
        for b in finite[::97]:  # a spread sample keeps this fast; widen() is scalar
            wide = widen(b)
            assert wide == np.float32(np.uint16(b).view(dtype)), hex(b)
            assert narrow(wide) == b, hex(b)


@in_simulator
def test_conversions_round_half_to_even_in_kernel():
    """f32_to_f16 / f32_to_bf16 inside a kernel round ties to even and widen back exactly."""

    @cuda.jit
    def kernel(x, h, bf, back):
        i = cuda.threadIdx.x
        if i < x.size:
            h[i] = I.f32_to_f16(x[i])
            bf[i] = I.f32_to_bf16(x[i])
            back[i] = I.f16_to_f32(h[i]) + I.bf16_to_f32(bf[i])

    ties = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-11)]
    x = np.array(ties, np.float32)
    h, bf = np.zeros(5, np.uint16), np.zeros(5, np.uint16)
    back = np.zeros(5, np.float32)
    kernel[1, 32](x, h, bf, back)
    # f16: 1+2^-11 ties down to 1.0, 1+3*2^-11 ties up to 1+2^-9; 1+2^-8 is exact in f16.
    np.testing.assert_array_equal(h, [0x3C00, 0x3C02, 0x3C04, 0x3C0C, 0xBC00])
    # bf16: 1+2^-11 rounds down, 1+2^-8 ties down to 1.0, 1+3*2^-8 ties up to 1+2^-6.
    np.testing.assert_array_equal(bf, [0x3F80, 0x3F80, 0x3F80, 0x3F82, 0xBF80])
    expected = h.view(np.float16).astype(np.float32) + bf.view(ml_dtypes.bfloat16).astype(
        np.float32
    )
    np.testing.assert_array_equal(back, expected)


FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


@in_simulator
def test_fp8_conversions_round_trip_every_value():
    """Every FP8 bit pattern widens exactly; every finite one rounds back to itself, NaN to
    NaN, e5m2's infinities to its largest finite value (satfinite)."""
    for fmt, dtype in FP8.items():
        widen, narrow = getattr(I, f"{fmt}_to_f32"), getattr(I, f"f32_to_{fmt}")
        top = np.float32(ml_dtypes.finfo(dtype).max)
        for b in range(256):
            wide = widen(b)
            exact = np.uint8(b).view(dtype).astype(np.float32)
            back = np.uint8(narrow(wide)).view(dtype).astype(np.float32)
            if np.isnan(exact):
                assert np.isnan(wide) and np.isnan(back), hex(b)
            elif np.isinf(exact):
                assert wide == exact and back == np.copysign(top, exact), hex(b)
            else:
                assert wide == exact and narrow(wide) == b, hex(b)


@in_simulator
def test_fp8_narrowing_saturates_as_evaluate_rounds():
    """Rounding float32 to FP8 is mp.evaluate's round_to: nearest even, saturating at the
    finite max (infinities too), NaN kept; the pair form packs the first value high."""
    from mmaplug.ir.dtypes import DType
    from mmaplug.ir.evaluate import round_to

    rng = np.random.default_rng(7)
    for fmt, dtype in FP8.items():
        mp_dtype = {"e4m3": DType.float8_e4m3fn, "e5m2": DType.float8_e5m2}[fmt]
        top = mp_dtype.finite_max
        x = np.concatenate([
            rng.standard_normal(400) * np.logspace(-9, 6, 400),
            [top, -top, 1.01 * top, 1.2 * top, -7 * top, np.inf, -np.inf, np.nan, 0.0, -0.0],
            np.float32(1.0) + np.float32([2**-4, 3 * 2**-4, 2**-3, 3 * 2**-3]),  # e4m3 / e5m2 ties
        ]).astype(np.float32)  # fmt: skip
        narrow = getattr(I, f"f32_to_{fmt}")
        got = np.array([narrow(v) for v in x], np.uint8).view(dtype).astype(np.float64)
        want = round_to(x.astype(np.float64), mp_dtype)
        np.testing.assert_array_equal(got, want)
        assert narrow(np.float32(1e30)) == narrow(np.float32(top))  # ±max, not NaN or inf
        pair = getattr(I, f"f32x2_to_{fmt}x2")
        for hi, lo in [(1.0, -2.0), (np.inf, np.nan), (0.5, 3 * top)]:
            assert pair(hi, lo) == (int(narrow(hi)) << 8) | int(narrow(lo))


@in_simulator
def test_fp8_bytes_in_kernel_pairs_and_word_store():
    """In a kernel: one byte per value, a pair's low byte is its second argument, and
    st_global_b32 stores a word's bytes lowest first into a uint8 array."""

    @cuda.jit
    def kernel(x, q, pairs, words, back):
        i = cuda.threadIdx.x
        if i < 4:
            q[i] = I.f32_to_e4m3(x[i])
            back[i] = I.e4m3_to_f32(q[i])
        if i < 2:
            pairs[i] = I.f32x2_to_e5m2x2(x[2 * i + 1], x[2 * i])
        if i == 0:
            w = types.uint32(I.f32x2_to_e4m3x2(x[1], x[0])) | (
                types.uint32(I.f32x2_to_e4m3x2(x[3], x[2])) << types.uint32(16)
            )
            I.st_global_b32(words, 4, w)

    x = np.array([1.0, -0.5, 1000.0, 0.3], np.float32)
    q, pairs = np.zeros(4, np.uint8), np.zeros(2, np.uint16)
    words, back = np.zeros(8, np.uint8), np.zeros(4, np.float32)
    kernel[1, 32](x, q, pairs, words, back)
    e4m3 = x.astype(ml_dtypes.float8_e4m3fn)  # 1000 saturates to 448 (clipped first)
    e4m3[2] = ml_dtypes.float8_e4m3fn(448.0)
    np.testing.assert_array_equal(q, e4m3.view(np.uint8))
    np.testing.assert_array_equal(back, e4m3.astype(np.float32))
    e5m2 = x.astype(ml_dtypes.float8_e5m2).view(np.uint8)
    np.testing.assert_array_equal(pairs.view(np.uint8), e5m2)
    np.testing.assert_array_equal(words, [0, 0, 0, 0, *e4m3.view(np.uint8)])


@in_simulator
def test_amax_steps_take_the_float_maximum_of_abs_with_nan_winning():
    """|x| as bits, the warp's maximum in every lane, and red.max into a float32 scalar give
    max(|x|) over two warps, starting from 0.0; a NaN in one warp wins, as np.max."""

    @cuda.jit
    def kernel(x, out, lanes):
        i = cuda.threadIdx.x
        m = I.warp_max_u32(I.f32_abs_bits(x[i]))
        lanes[i] = m
        if i % 32 == 0:
            I.red_global_max_u32(out, 0, m)

    rng = np.random.default_rng(7)
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    x[40] = -1e30  # a negative value largest in magnitude
    out, lanes = np.zeros(1, np.float32), np.zeros(64, np.uint32)
    kernel[1, 64](x, out, lanes)
    assert out[0] == np.max(np.abs(x)) == np.float32(1e30)
    first = np.abs(x[:32]).max().view(np.uint32)
    assert (lanes[:32] == first).all()
    assert (lanes[32:] == np.float32(1e30).view(np.uint32)).all()
    x[3] = np.nan
    out[0] = 0.0
    kernel[1, 64](x, out, lanes)
    assert np.isnan(out[0])


def test_import_mmaplug_does_not_import_numba():
    """`import mmaplug` leaves numba unimported (core/cuda is loaded lazily by schedulers)."""
    code = "import sys, mmaplug; sys.exit('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
