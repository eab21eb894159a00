"""sm_90a smoke kernels (TMA, mbarrier, wgmma) that run unchanged in the simulator and on an H200.

Each case builds its inputs, launches, and raises AssertionError on a wrong result.
``python sm90_kernels.py NAME [NAME ...]`` (``all`` for every case) prints one JSON line per
case; tests/sim/test_sm90_emulation.py runs it with NUMBA_ENABLE_CUDASIM=1, the GPU tier without.
`cuda`, `H` and `I` are module globals because the simulator swaps a kernel module's `cuda`.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback

import ml_dtypes
import numpy as np
from numba import cuda
from numba.cuda import types

from mmaplug.cuda import intrinsics as I
from mmaplug.cuda import sm90 as H
from mmaplug.cuda.launching import simulating
from mmaplug.cuda.tensormap import TensorMapSpec, device_address, encode
from mmaplug.ir.dtypes import DType
from mmaplug.sim.simulator import simulated_launch

NUMPY = {DType.float16: np.float16, DType.bfloat16: ml_dtypes.bfloat16}
_MASK = {0: 0, 32: 1, 64: 3, 128: 7}


def swizzled(image: np.ndarray, span: int) -> np.ndarray:
    """The bytes of `image` as a TMA with `span`-byte swizzle stores them at a 1024-aligned base."""
    offsets = np.arange(image.size // 16) * 16
    phys = offsets ^ (((offsets >> 7) & _MASK[span]) << 4)
    out = np.empty_like(image.reshape(-1, 16))
    out[phys // 16] = image.reshape(-1, 16)
    return out.reshape(-1)


def _device(host: np.ndarray) -> object:
    """A device copy of 16-bit data as uint16 bits (Numba cannot transfer ml_dtypes' bfloat16)."""
    return cuda.to_device(host.view(np.uint16) if host.dtype.itemsize == 2 else host)


def _maps(*pairs: tuple[TensorMapSpec, object]) -> object:
    """A device uint64 array of tensor maps, one per (spec, device array) pair."""
    words = np.concatenate([encode(spec, device_address(arr)) for spec, arr in pairs])
    return cuda.to_device(words)


def _box_reference(host: np.ndarray, spec: TensorMapSpec, coords: tuple[int, ...]) -> np.ndarray:
    """The box at `coords` (innermost first) of `host` (innermost last), zeros outside."""
    pads = [b + abs(c) for c, b in zip(coords[::-1], spec.box[::-1], strict=True)]
    padded = np.pad(host, [(p, p) for p in pads])
    starts = [c + p for c, p in zip(coords[::-1], pads, strict=True)]
    return padded[tuple(slice(s, s + b) for s, b in zip(starts, spec.box[::-1], strict=True))]


# --- TMA box load (2-D or 3-D) into a swizzled buffer --------------------------------------------


def _tma_load_kernel(rank: int, box_bytes: int):
    smem_bytes = box_bytes + 1024 + 64  # a constant: room to align to 1024, then a barrier

    @cuda.jit
    def kernel(maps, coords, out):
        sm = cuda.shared.array(smem_bytes, types.uint8)
        base = H.shared_base(sm)
        buf = (base + 1023) & ~1023
        bar = buf + box_bytes
        tid = cuda.threadIdx.x
        tmap = I.global_addr(maps, 0)
        if tid == 0:
            H.mbarrier_init(bar, 1)
            H.fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            H.fence_tensormap_acquire(tmap)
            H.prefetch_tensormap(tmap)
            H.mbarrier_arrive_expect_tx(bar, box_bytes)
            if rank == 2:
                H.tma_load_2d(buf, tmap, coords[0], coords[1], bar)
            else:
                H.tma_load_3d(buf, tmap, coords[0], coords[1], coords[2], bar)
        H.mbarrier_wait(bar, 0)
        for w in range(tid, box_bytes // 4, cuda.blockDim.x):
            word = H.ld_shared_b32(buf + 4 * w)
            for b in range(4):
                out[4 * w + b] = (word >> (8 * b)) & 0xFF

    return kernel


def check_tma_load(spec: TensorMapSpec, coords: tuple[int, ...], seed: int = 0) -> None:
    """Load one box; compare the raw swizzled shared image with numpy, byte by byte."""
    rng = np.random.default_rng(seed)
    size = spec.dtype.itemsize
    rows = [spec.strides_bytes[0] // size, *spec.dims[1:]]
    storage = rng.standard_normal(rows[::-1]).astype(NUMPY[spec.dtype])
    host = storage[..., : spec.dims[0]]
    dev = _device(storage)
    out = cuda.to_device(np.full(spec.box_bytes, 0xAB, np.uint8))
    kernel = _tma_load_kernel(spec.rank, spec.box_bytes)
    kernel[1, 64](_maps((spec, dev)), cuda.to_device(np.array(coords, np.int32)), out)
    expected = swizzled(_box_reference(host, spec, coords).view(np.uint8).reshape(-1), spec.swizzle)
    got = out.copy_to_host()
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, f"{bad.size} bytes differ, first at byte {bad[:8]}"


# --- TMA store with clipping ---------------------------------------------------------------------


def _tma_store_kernel(box_bytes: int):
    smem_bytes = box_bytes + 1024 + 64

    @cuda.jit
    def kernel(maps, coords):
        sm = cuda.shared.array(smem_bytes, types.uint8)
        buf = (H.shared_base(sm) + 1023) & ~1023
        bar = buf + box_bytes
        tid = cuda.threadIdx.x
        if tid == 0:
            H.mbarrier_init(bar, 1)
            H.fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            H.fence_tensormap_acquire(I.global_addr(maps, 0))
            H.fence_tensormap_acquire(I.global_addr(maps, 16))
            H.mbarrier_arrive_expect_tx(bar, box_bytes)
            H.tma_load_2d(buf, I.global_addr(maps, 0), coords[0], coords[1], bar)
        H.mbarrier_wait(bar, 0)
        H.fence_proxy_async()
        cuda.syncthreads()
        if tid == 0:
            H.tma_store_2d(I.global_addr(maps, 16), coords[2], coords[3], buf)
            H.bulk_commit_group()
            H.bulk_wait_group_read(0)
            H.bulk_wait_group(0)

    return kernel


def check_tma_store_clips(dtype: DType = DType.float16) -> None:
    """A 64 x 16 box loaded from one matrix is stored across the corner of another: the part
    inside lands, nothing outside the tensor (its padded pitch) changes."""
    rng = np.random.default_rng(3)
    src = rng.standard_normal((16, 64)).astype(NUMPY[dtype])
    dst_storage = np.full((20, 72), -7, NUMPY[dtype])  # 20 x 40 tensor, pitch 72
    dev_src, dev_dst = _device(src), _device(dst_storage)
    load = TensorMapSpec(dtype, (64, 16), (128,), (64, 16), 128)
    store = TensorMapSpec(dtype, (40, 20), (144,), (64, 16), 128)
    # store at columns 8..71, rows 10..25 (a negative column faulted on the H200, run 34)
    coords = np.array([0, 0, 8, 10], np.int32)
    _tma_store_kernel(load.box_bytes)[1, 32](_maps((load, dev_src), (store, dev_dst)), coords)
    expected = dst_storage.copy()
    expected[10:20, 8:40] = src[0:10, 0:32]
    np.testing.assert_array_equal(dev_dst.copy_to_host().view(np.uint16), expected.view(np.uint16))


# --- bulk row stores -----------------------------------------------------------------------------


def _bulk_store_kernel(rows: int, row_bytes: int, pitch_words: int):
    stride = row_bytes + 16  # padded rows, as the hopper epilogue stages them
    words = row_bytes // 4
    smem_bytes = rows * stride + 16

    @cuda.jit
    def kernel(src, out):
        sm = cuda.shared.array(smem_bytes, types.uint8)
        base = (H.shared_base(sm) + 15) & ~15
        t = cuda.threadIdx.x
        for j in range(words):
            H.st_shared_b32(base + t * stride + 4 * j, src[t * words + j])
        H.fence_proxy_async()
        cuda.syncthreads()
        H.bulk_store(I.global_addr(out, t * pitch_words + 4), base + t * stride, row_bytes)
        H.bulk_commit_group()
        H.bulk_wait_group_read(0)
        H.bulk_wait_group(0)

    return kernel


def check_bulk_store_rows(rows: int = 24, row_bytes: int = 64, pitch_words: int = 40) -> None:
    """Each thread copies one padded shared row to a 16-byte aligned offset of its output row;
    the words around each row keep their sentinel."""
    rng = np.random.default_rng(6)
    src = rng.integers(0, 2**32, rows * row_bytes // 4, dtype=np.uint64).astype(np.uint32)
    out = np.full((rows, pitch_words), 0xDEADBEEF, np.uint32)
    dev = cuda.to_device(out.reshape(-1))  # global_addr takes 1-D arrays
    _bulk_store_kernel(rows, row_bytes, pitch_words)[1, rows](cuda.to_device(src), dev)
    expected = out.copy()
    expected[:, 4 : 4 + row_bytes // 4] = src.reshape(rows, -1)
    np.testing.assert_array_equal(dev.copy_to_host().reshape(rows, -1), expected)


# --- mbarrier ping-pong --------------------------------------------------------------------------

PHASES = 6


@cuda.jit
def _ping_pong_kernel(out, probes):
    sm = cuda.shared.array(8, types.uint64)  # 8-byte aligned, as mbarriers must be
    base = H.shared_base(sm)
    full, empty, slot = base, base + 8, base + 16
    tid = cuda.threadIdx.x
    if tid == 0:
        H.mbarrier_init(full, 1)
        H.mbarrier_init(empty, 32)
        H.fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        probes[0] = H.mbarrier_try_wait(full, 1)  # fresh barrier: the "previous" phase is done
        probes[1] = H.mbarrier_try_wait(full, 0)
    cuda.syncthreads()
    if tid < 32:  # producer warp: one thread produces (lanes that waited on their own could
        # fall two phases behind and then wait forever: parity only tells adjacent phases apart)
        if tid == 0:
            for p in range(PHASES):
                H.mbarrier_wait(empty, (p & 1) ^ 1)
                H.st_shared_b32(slot, 100 + p)
                H.mbarrier_arrive(full)
        H.named_barrier_sync(1, 64)
    else:  # consumer warp: all 32 threads read and release
        for p in range(PHASES):
            H.mbarrier_wait(full, p & 1)
            out[p, tid - 32] = H.ld_shared_b32(slot)
            H.mbarrier_arrive(empty)
        H.named_barrier_sync(1, 64)
        if tid == 32:
            probes[2] = H.mbarrier_try_wait(full, (PHASES - 1) & 1)
            probes[3] = H.mbarrier_try_wait(full, PHASES & 1)


def check_mbarrier_ping_pong() -> None:
    """Producer and consumer warps alternate over 6 phases through full/empty mbarriers."""
    out = cuda.to_device(np.zeros((PHASES, 32), np.uint32))
    probes = cuda.to_device(np.full(4, 9, np.uint32))
    _ping_pong_kernel[1, 64](out, probes)
    expected = np.repeat(100 + np.arange(PHASES, dtype=np.uint32)[:, None], 32, axis=1)
    np.testing.assert_array_equal(out.copy_to_host(), expected)
    np.testing.assert_array_equal(probes.copy_to_host(), [1, 0, 1, 0])


# --- wgmma from TMA-loaded 128B-swizzled tiles ----------------------------------------------------


def _wgmma_kernel(n: int, ab: str, a_mn: bool, b_mn: bool):
    mma = H.wgmma_f16 if ab == "f16" else H.wgmma_bf16
    regs, a_bytes = n // 2, 64 * 64 * 2
    b_bytes, b_boxes = n * 64 * 2, (n // 64 if b_mn else 1)
    ta, tb = int(a_mn), int(b_mn)
    step_a = 2048 if a_mn else 32  # one k16 step: 16 K-rows of 128 B, or 32 B along a row
    step_b = 2048 if b_mn else 32
    smem_bytes = a_bytes + b_bytes + 1024 + 64

    @cuda.jit
    def kernel(maps, out):
        sm = cuda.shared.array(smem_bytes, types.uint8)
        buf_a = (H.shared_base(sm) + 1023) & ~1023
        buf_b = buf_a + a_bytes
        bar = buf_b + b_bytes
        tid = cuda.threadIdx.x
        if tid == 0:
            H.mbarrier_init(bar, 1)
            H.fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            map_a, map_b = I.global_addr(maps, 0), I.global_addr(maps, 16)
            H.fence_tensormap_acquire(map_a)
            H.fence_tensormap_acquire(map_b)
            H.mbarrier_arrive_expect_tx(bar, a_bytes + b_bytes)
            H.tma_load_2d(buf_a, map_a, 0, 0, bar)
            for s in range(b_boxes):
                H.tma_load_2d(buf_b + 8192 * s, map_b, 64 * s, 0, bar)
        H.mbarrier_wait(bar, 0)
        acc = H.wgmma_zeros(regs)
        acc = H.fence_operand(acc)
        H.wgmma_fence()
        # a throw-away product first, so that scale_d = 0 below must really discard it
        acc = mma(
            acc,
            H.wgmma_desc(buf_a, 8192, 1024, 128),
            H.wgmma_desc(buf_b, 8192, 1024, 128),
            1,
            ta,
            tb,
        )
        for j in range(4):
            da = H.wgmma_desc(buf_a + step_a * j, 8192, 1024, 128)
            db = H.wgmma_desc(buf_b + step_b * j, 8192, 1024, 128)
            acc = mma(acc, da, db, j, ta, tb)
        H.wgmma_commit_group()
        H.wgmma_wait_group(0)
        acc = H.fence_operand(acc)
        w, lane = tid // 32, tid % 32
        for i in range(regs):
            row = 16 * w + lane // 4 + 8 * ((i >> 1) & 1)
            col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
            out[row, col] = acc[i]

    return kernel


def check_wgmma(n: int, dtype: DType, a_mn: bool, b_mn: bool, seed: int = 0) -> None:
    """One warpgroup: D (64 x n) = A (64 x 64) B^T over four k16 wgmmas, against float64."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 64)).astype(NUMPY[dtype])  # [m, k]
    b = rng.standard_normal((n, 64)).astype(NUMPY[dtype])  # [n, k]
    a_store = np.ascontiguousarray(a.T if a_mn else a)
    b_store = np.ascontiguousarray(b.T if b_mn else b)
    spec_a = TensorMapSpec(dtype, (64, 64), (128,), (64, 64), 128)
    b_dims = (n, 64) if b_mn else (64, n)
    spec_b = TensorMapSpec(dtype, b_dims, (b_dims[0] * 2,), (64, 64 if b_mn else n), 128)
    dev_a, dev_b = _device(a_store), _device(b_store)
    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    kernel = _wgmma_kernel(n, "f16" if dtype is DType.float16 else "bf16", a_mn, b_mn)
    kernel[1, 128](_maps((spec_a, dev_a), (spec_b, dev_b)), out)
    expected = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(out.copy_to_host(), expected, rtol=1e-5, atol=1e-4)


# --- FP8 wgmma from 128B-swizzled K-major tiles written by the threads -------------------------

FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _wgmma_fp8_kernel(n: int, ab: str, k: int):
    """D (64 x n) = A (64 x k) B^T over k // 32 wgmma_<ab> (m64nNk32), after a throw-away one."""
    mma = H.wgmma_e4m3 if ab == "e4m3" else H.wgmma_e5m2
    regs, a_bytes, b_bytes = n // 2, 64 * 128, n * 128  # one 128-byte line per row
    words, steps = (a_bytes + b_bytes) // 4, k // 32
    smem_bytes = a_bytes + b_bytes + 1024

    @cuda.jit
    def kernel(image, out):
        sm = cuda.shared.array(smem_bytes, types.uint8)
        buf_a = (H.shared_base(sm) + 1023) & ~1023
        buf_b = buf_a + a_bytes
        tid = cuda.threadIdx.x
        for w in range(tid, words, 128):  # the host swizzled the image for a 1024-aligned base
            H.st_shared_b32(buf_a + 4 * w, image[w])
        H.fence_proxy_async()  # generic-proxy writes before the async-proxy wgmma reads
        cuda.syncthreads()
        acc = H.wgmma_zeros(regs)
        acc = H.fence_operand(acc)
        H.wgmma_fence()
        # a throw-away product first, so that scale_d = 0 below must really discard it
        acc = mma(acc, H.wgmma_desc(buf_a, 16, 1024, 128), H.wgmma_desc(buf_b, 16, 1024, 128), 1)
        for j in range(steps):  # one k32 step: 32 one-byte elements, 32 B along each line
            da = H.wgmma_desc(buf_a + 32 * j, 16, 1024, 128)
            db = H.wgmma_desc(buf_b + 32 * j, 16, 1024, 128)
            acc = mma(acc, da, db, j)
        H.wgmma_commit_group()
        H.wgmma_wait_group(0)
        acc = H.fence_operand(acc)
        w, lane = tid // 32, tid % 32
        for i in range(regs):
            row = 16 * w + lane // 4 + 8 * ((i >> 1) & 1)
            col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)
            out[row, col] = acc[i]

    return kernel


def random_finite(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """Uniformly random bit patterns of the FP8 `dtype`, the NaNs and infinities redrawn."""
    bits = rng.integers(0, 256, shape, dtype=np.uint8)
    while not np.isfinite(bad := bits.view(dtype).astype(np.float32)).all():
        redraw = ~np.isfinite(bad)
        bits[redraw] = rng.integers(0, 256, int(redraw.sum()), dtype=np.uint8)
    return bits.view(dtype)


def check_wgmma_fp8(n: int, ab: str, k: int = 32, seed: int = 0) -> None:
    """One warpgroup: D (64 x n) = A (64 x k) B^T of random finite FP8 over k // 32 k32 wgmmas,
    against float64 of the decoded values.

    The bound is 2^-9 of sum |a b| per element: the simulator rounds the exact sum once (2^-24),
    while the H200's FP8 accumulator keeps fewer bits than float32 (about 14) and drops the
    rest at every addition: 2^-12 failed 4 of 4096 elements there (BENCHMARKS.md run 74). A
    wrong decode or swizzle is off by the values themselves."""
    rng = np.random.default_rng(seed)
    a, b = random_finite(rng, (64, k), FP8[ab]), random_finite(rng, (n, k), FP8[ab])
    image = np.zeros((64 + n, 128), np.uint8)  # rows of A then B, each one 128-byte line
    image[:64, :k], image[64:, :k] = a.view(np.uint8), b.view(np.uint8)
    words = swizzled(image.reshape(-1), 128).view(np.uint32)
    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    _wgmma_fp8_kernel(n, ab, k)[1, 128](cuda.to_device(words), out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected, bound = a64 @ b64.T, np.abs(a64) @ np.abs(b64).T * 2.0**-9
    error = np.abs(out.copy_to_host() - expected)
    bad = np.argwhere(~(error <= bound))  # NaN (an element never written) fails too
    assert bad.size == 0, f"{len(bad)} elements off, first at {bad[:4].tolist()}"


F16, BF16 = DType.float16, DType.bfloat16
CASES = {
    "tma_2d_sw128_edges": lambda: check_tma_load(
        TensorMapSpec(F16, (100, 70), (208,), (64, 32), 128), (48, 50)
    ),
    "tma_2d_sw128_negative": lambda: check_tma_load(
        TensorMapSpec(BF16, (100, 70), (208,), (64, 16), 128), (-8, -3), seed=1
    ),
    "tma_2d_sw64_sw32": lambda: (
        # TMA's innermost coordinate must be 16-byte aligned: (20, 10) is an illegal
        # instruction on the H200 (run 32), (24, 10) and (32, 20) are 48 and 64 bytes in
        check_tma_load(TensorMapSpec(F16, (40, 30), (96,), (32, 24), 64), (24, 10)),
        check_tma_load(TensorMapSpec(F16, (40, 30), (96,), (16, 24), 32), (32, 20)),
    ),
    "tma_3d_box": lambda: check_tma_load(
        TensorMapSpec(BF16, (72, 20, 3), (160, 3200), (64, 8, 2), 128), (16, 16, 2), seed=2
    ),
    "tma_3d_unswizzled": lambda: check_tma_load(
        TensorMapSpec(F16, (24, 10, 5), (48, 480), (16, 4, 3), 0), (16, 8, -1), seed=4
    ),
    "tma_store_clips": check_tma_store_clips,
    "bulk_store_rows": check_bulk_store_rows,
    "mbarrier_ping_pong": check_mbarrier_ping_pong,
    "wgmma_kk_f16_n64": lambda: check_wgmma(64, F16, False, False),
    "wgmma_kk_bf16_n24": lambda: check_wgmma(24, BF16, False, False, seed=1),
    "wgmma_kk_f16_n256": lambda: check_wgmma(256, F16, False, False, seed=2),
    "wgmma_mn_a_bf16_n64": lambda: check_wgmma(64, BF16, True, False, seed=3),
    "wgmma_mn_b_f16_n128": lambda: check_wgmma(128, F16, False, True, seed=4),
    "wgmma_mn_ab_bf16_n128": lambda: check_wgmma(128, BF16, True, True, seed=5),
    "wgmma_fp8_e4m3_n64": lambda: check_wgmma_fp8(64, "e4m3", seed=6),
    "wgmma_fp8_e5m2_n64": lambda: check_wgmma_fp8(64, "e5m2", seed=7),
    "wgmma_fp8_e4m3_n256_k128": lambda: check_wgmma_fp8(256, "e4m3", k=128, seed=8),
    "wgmma_fp8_e5m2_n24_k64": lambda: check_wgmma_fp8(24, "e5m2", k=64, seed=9),
}


def _launches() -> contextlib.AbstractContextManager:
    """In the simulator, mmaplug's launch (each block's threads polled with a sleep): under
    Numba's own, whose busy loop holds the GIL, a wgmma case took 10 s, not 0.2 s."""
    return simulated_launch() if simulating() else contextlib.nullcontext()


def main(names: list[str]) -> None:
    for name in CASES if names == ["all"] else names:
        start = time.monotonic()
        try:
            with _launches():
                CASES[name]()
            result = {"name": name, "ok": True}
        except BaseException:
            result = {"name": name, "ok": False, "error": traceback.format_exc()}
        result["seconds"] = round(time.monotonic() - start, 2)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
