"""Simulator tier: the sm_90 emulations (TMA, mbarrier, wgmma) run kernels in Numba's simulator.

The smoke kernels of sm90_kernels.py (the GPU tier runs the same text) and the `sim_body` tests
here run in subprocesses started with NUMBA_ENABLE_CUDASIM=1; this process stays on the CUDA
target. The descriptor and layout helpers are pure Python and are tested here directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda
from numba.cuda import types

from mmaplug.cuda import intrinsics as I
from mmaplug.cuda import sm90 as H
from mmaplug.sim import sm90 as E
from mmaplug.sim import wgmma as W

pytestmark = pytest.mark.sim

KERNELS = Path(__file__).with_name("sm90_kernels.py")
CASES = [
    "tma_2d_sw128_edges",
    "tma_2d_sw128_negative",
    "tma_2d_sw64_sw32",
    "tma_3d_box",
    "tma_3d_unswizzled",
    "tma_store_clips",
    "bulk_store_rows",
    "mbarrier_ping_pong",
    "wgmma_kk_f16_n64",
    "wgmma_kk_bf16_n24",
    "wgmma_kk_f16_n256",
    "wgmma_mn_a_bf16_n64",
    "wgmma_mn_b_f16_n128",
    "wgmma_mn_ab_bf16_n128",
    "wgmma_fp8_e4m3_n64",
    "wgmma_fp8_e5m2_n64",
    "wgmma_fp8_e4m3_n256_k128",
    "wgmma_fp8_e5m2_n24_k64",
]
RESULT_TAG = "MMAPLUG-SIM-RESULTS "
RUNNER = f"""
import importlib.util, json, sys, traceback
spec = importlib.util.spec_from_file_location("_sim_bodies", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
results = {{}}
for name, test in vars(module).items():
    if getattr(test, "sim_body", None) is not None:
        try:
            test.sim_body()
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
print({RESULT_TAG!r} + json.dumps(results))
"""
SIM_ENV = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")


@pytest.fixture(scope="module")
def kernel_results() -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, str(KERNELS), "all"],
        env=SIM_ENV,
        text=True,
        capture_output=True,
        timeout=300,
    )
    results = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not results:
        pytest.fail(f"simulator subprocess failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return {r["name"]: r for r in results}


@pytest.mark.parametrize("name", CASES)
def test_smoke_kernel(kernel_results: dict, name: str) -> None:
    """The smoke kernel matches its numpy reference (bytes for TMA, float64 for wgmma)."""
    result = kernel_results[name]
    assert result["ok"], result.get("error")


def test_case_list_is_complete(kernel_results: dict) -> None:
    """Every case of sm90_kernels.py has its test here."""
    assert sorted(kernel_results) == sorted(CASES)


@pytest.fixture(scope="module")
def sim_results() -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, __file__],
        env=SIM_ENV,
        text=True,
        capture_output=True,
        timeout=300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
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


# --- Errors a kernel author can hit in the simulator ----------------------------------------------


@in_simulator
def test_wrong_parity_is_a_deadlock_error():
    """Waiting for a phase that never completes raises a deadlock UsageError with the state."""
    from mmaplug.errors import UsageError
    from mmaplug.sim import block as sm90_sim_block

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(2, types.uint64)
        bar = H.shared_base(sm)
        H.mbarrier_init(bar, 2)
        H.mbarrier_arrive(bar)
        H.mbarrier_wait(bar, 0)  # one of two arrivals: phase 0 never completes

    sm90_sim_block.WAIT_TIMEOUT_S = 0.5
    with pytest.raises(
        UsageError,
        match=r"deadlock: mbarrier_wait: .* parity 0 \(phase 0, "
        r"1 of 2 arrivals pending, tx-count 0\)",
    ):
        kernel[1, 1](np.zeros(1))


@in_simulator
def test_bulk_store_copies_when_its_group_retires():
    """A bulk store reads its shared source at the wait that retires its group: bytes written
    after the store but before the wait are what lands, and a store never waited for lands
    nowhere (both kernel bugs show in the simulator)."""

    @cuda.jit
    def kernel(out, wait):
        sm = cuda.shared.array(64, types.uint8)
        src = (H.shared_base(sm) + 15) & ~15
        H.st_shared_b32(src, 1)
        H.bulk_store(I.global_addr(out, 0), src, 16)
        H.bulk_commit_group()
        H.st_shared_b32(src, 2)  # the bug: rewriting the source before bulk_wait_group_read
        if wait[0]:
            H.bulk_wait_group(0)

    out = np.zeros(4, np.uint32)
    kernel[1, 1](out, np.array([1]))
    assert out[0] == 2
    out[:] = 0
    kernel[1, 1](out, np.array([0]))
    assert out[0] == 0


@in_simulator
def test_expect_tx_counts_bytes():
    """A phase with expect_tx completes only when the transaction bytes arrive too."""

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(2, types.uint64)
        bar = H.shared_base(sm)
        H.mbarrier_init(bar, 1)
        H.mbarrier_arrive_expect_tx(bar, 64)
        out[0] = H.mbarrier_try_wait(bar, 0)  # arrivals done, 64 bytes still due

    out = np.full(1, 7, np.uint32)
    kernel[1, 1](out)
    assert out[0] == 0


@in_simulator
def test_shared_base_is_not_1024_aligned_and_tma_checks_alignment():
    """shared_base gives a fake base that is not 1024-aligned; a swizzled TMA there fails."""
    from mmaplug.cuda.tensormap import TensorMapSpec, device_address, encode
    from mmaplug.errors import UsageError
    from mmaplug.ir.dtypes import DType

    @cuda.jit
    def kernel(maps, out):
        sm = cuda.shared.array(4096, types.uint8)
        base = H.shared_base(sm)
        out[0] = base
        H.mbarrier_init(base + 2048, 1)
        H.tma_load_2d(base, I.global_addr(maps, 0), 0, 0, base + 2048)

    src = cuda.to_device(np.zeros((8, 64), np.float16))
    spec = TensorMapSpec(DType.float16, (64, 8), (128,), (64, 8), 128)
    maps = cuda.to_device(encode(spec, device_address(src)))
    out = np.zeros(1, np.uint64)
    with pytest.raises(UsageError, match=r"shared address 0x230 is not 1024-byte aligned"):
        kernel[1, 1](maps, out)


@in_simulator
def test_tma_inner_coordinate_must_be_16_byte_aligned():
    """An innermost TMA coordinate 40 bytes into a row is an illegal instruction on the H200
    (run 32), and so is a store at a negative one (run 34); the simulator refuses both."""
    from mmaplug.cuda.tensormap import TensorMapSpec, device_address, encode
    from mmaplug.errors import UsageError
    from mmaplug.ir.dtypes import DType

    @cuda.jit
    def kernel(maps, c0, store):
        sm = cuda.shared.array(8192, types.uint8)
        buf = (H.shared_base(sm) + 1023) & ~1023
        H.mbarrier_init(buf + 4096, 1)
        if store:
            H.tma_store_2d(I.global_addr(maps, 0), c0, 0, buf)
        else:
            H.tma_load_2d(buf, I.global_addr(maps, 0), c0, 0, buf + 4096)

    src = cuda.to_device(np.zeros((8, 64), np.float16))
    spec = TensorMapSpec(DType.float16, (64, 8), (128,), (32, 8), 64)
    maps = cuda.to_device(encode(spec, device_address(src)))
    for store in (False, True):
        with pytest.raises(UsageError, match=r"innermost coordinate 20 starts 40 bytes into"):
            kernel[1, 1](maps, 20, store)
    kernel[1, 1](maps, 24, False)  # 48 bytes: accepted
    with pytest.raises(UsageError, match=r"a TMA store starts inside the tensor"):
        kernel[1, 1](maps, -8, True)  # aligned, but a negative store coordinate faulted (run 34)


@in_simulator
def test_address_outside_shared_arrays():
    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(16, types.uint32)
        H.st_shared_b32(H.shared_base(sm) + 64, 1)

    with pytest.raises(
        UsageError,
        match=r"shared bytes \[0x270, 0x274\) are outside every "
        r"shared array registered .*\[0x230, 0x270\)",
    ):
        kernel[1, 1](np.zeros(1))


@in_simulator
def test_two_shared_arrays_get_disjoint_windows():
    """Each shared array gets its own window; stores through one never land in the other."""

    @cuda.jit
    def kernel(out):
        a = cuda.shared.array(8, types.uint32)
        b = cuda.shared.array(8, types.uint32)
        base_a, base_b = H.shared_base(a), H.shared_base(b)
        H.st_shared_b32(base_a + 4, 11)
        H.st_shared_b32(base_b + 4, 22)
        out[0], out[1] = a[1], b[1]
        out[2], out[3] = base_a, base_b

    out = np.zeros(4, np.uint32)
    kernel[1, 1](out)
    assert list(out[:2]) == [11, 22] and out[2] == 0x230 and out[3] >= out[2] + 32


@in_simulator
def test_wgmma_needs_a_full_warpgroup():
    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        acc = H.wgmma_f16(H.wgmma_zeros(4), 0, 0, 0, 0, 0)
        out[cuda.threadIdx.x] = acc[0]

    with pytest.raises(UsageError, match="needs full warpgroups of 128 threads; this block has 64"):
        kernel[1, 64](np.zeros(64, np.float32))


@in_simulator
def test_wgmma_rejects_base_offset_descriptors():
    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(8192, types.uint8)
        desc = H.wgmma_desc(H.shared_base(sm), 16, 1024, 128) | (1 << 49)
        acc = H.wgmma_f16(H.wgmma_zeros(4), desc, desc, 0, 0, 0)
        out[cuda.threadIdx.x] = acc[0]

    with pytest.raises(UsageError, match="base offset or reserved bits"):
        kernel[1, 128](np.zeros(128, np.float32))


@in_simulator
def test_wgmma_fp8_rejects_bad_accumulator_length():
    """The FP8 emulation checks N = 2 * len(acc) as the 16-bit one does."""
    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(8192, types.uint8)
        desc = H.wgmma_desc(H.shared_base(sm), 16, 1024, 128)
        acc = H.wgmma_e5m2(H.wgmma_zeros(3), desc, desc, 0)
        out[cuda.threadIdx.x] = acc[0]

    with pytest.raises(
        UsageError, match=r"m64nNk32\.f32\.e5m2\.e5m2: N = 2 \* len\(acc\) .* got 6"
    ):
        kernel[1, 128](np.zeros(128, np.float32))


@in_simulator
def test_stmatrix_layouts():
    """stmatrix.x4 stores lane l's register j at row l//4, cols 2(l%4)+{0,1} of matrix j;
    .trans stores the transpose; lanes 8j+r address row r of matrix j."""

    @cuda.jit
    def kernel(out, out_t):
        sm = cuda.shared.array(512, types.uint16)
        base = (H.shared_base(sm) + 15) & ~15
        lane = cuda.threadIdx.x
        regs = cuda.local.array(4, types.uint32)
        for j in range(4):
            e = 64 * j + 8 * (lane // 4) + 2 * (lane % 4)  # element id of the low half
            regs[j] = e | ((e + 1) << 16)
        row = base + 16 * lane  # matrix j = lane // 8, row lane % 8: 16 bytes each
        H.stmatrix_x4(row, regs[0], regs[1], regs[2], regs[3])
        for w in range(4):
            out[4 * lane + w] = H.ld_shared_b32(row + 4 * w)
        H.stmatrix_x4_trans(row, regs[0], regs[1], regs[2], regs[3])
        for w in range(4):
            out_t[4 * lane + w] = H.ld_shared_b32(row + 4 * w)

    out, out_t = np.zeros(128, np.uint32), np.zeros(128, np.uint32)
    kernel[1, 32](out, out_t)
    halves = np.stack([out & 0xFFFF, out >> 16], -1).reshape(4, 8, 8)
    halves_t = np.stack([out_t & 0xFFFF, out_t >> 16], -1).reshape(4, 8, 8)
    ids = np.arange(256).reshape(4, 8, 8)
    np.testing.assert_array_equal(halves, ids)
    np.testing.assert_array_equal(halves_t, ids.transpose(0, 2, 1))


@in_simulator
def test_a_remote_arrive_on_an_exited_peer_is_an_error():
    """A CTA's barriers go with it: arriving on an exited peer's raises, on a live one's
    counts (the producer's tail keeps a clustered kernel's CTAs until no peer arrives)."""
    import time

    from mmaplug.errors import UsageError
    from mmaplug.sim.cluster import clusters_of

    @cuda.jit
    def kernel(out, late):
        sm = cuda.shared.array(2, types.uint64)
        bar = H.shared_base(sm)
        H.mbarrier_init(bar, 1)
        H.cluster_sync()  # both barriers initialised
        if cuda.blockIdx.x == 0:
            if late:
                time.sleep(0.3)  # block 1 has exited by now
            H.mbarrier_arrive_cluster(H.mapa_shared(bar, 1))
        else:
            if not late:
                H.mbarrier_wait(bar, 0)  # alive until block 0 arrived
            out[0] = 1

    out = np.zeros(1)
    with clusters_of(2):
        kernel[2, 1](out, False)
        assert out[0] == 1
        with pytest.raises(UsageError, match="cluster rank 1 has exited"):
            kernel[2, 1](out, True)


@in_simulator
def test_named_barrier_thread_count_mismatch():
    from mmaplug.errors import UsageError

    @cuda.jit
    def kernel(out):
        H.named_barrier_sync(2, 64 if cuda.threadIdx.x < 32 else 96)

    with pytest.raises(UsageError, match="barrier 2 is in use with (64|96) threads"):
        kernel[1, 64](np.zeros(1))


@in_simulator
def test_warp_uniform_gives_every_lane_its_lanes_zero_value():
    """Each warp's lanes get lane 0's value (a per-warp value: a warp that read another's, or a
    lane that kept its own, would show)."""

    @cuda.jit
    def kernel(out):
        tid = cuda.threadIdx.x
        out[tid] = H.warp_uniform(tid + 1000 * (tid // 32) if tid % 32 == 0 else tid)

    out = np.zeros(64, np.uint32)
    kernel[1, 64](out)
    np.testing.assert_array_equal(out, [0] * 32 + [1032] * 32)


# --- Pure-Python helpers (no simulator needed) ----------------------------------------------------


def test_desc_matches_the_reference_worked_value():
    """0x400, LBO 16, SBO 1024, 128B swizzle -> 0x4000004000010040 (reference §2.1)."""
    assert E.wgmma_desc(0x400, 16, 1024, 128) == 0x4000004000010040
    assert W.decode_desc(0x4000004000010042, "t") == (0x420, 16, 1024, 128)
    assert W.decode_desc(E.wgmma_desc(0x1230, 8192, 512, 64), "t") == (0x1230, 8192, 512, 64)


def test_promote_split_scales_each_side_of_its_cut_with_its_rows_scale():
    """Registers below columns // 2 take the first pair (by row: registers 2, 3 the row 8
    below), the rest the next pair; one float32 rounding each, as an fma; the cut is checked."""
    from mmaplug.errors import UsageError

    acc, part = tuple(np.float32(i) for i in range(8)), (np.float32(1.5),) * 8
    got = E.wgmma_promote_split(acc, part, 1.0, 2.0, 3.0, 4.0, 8)
    assert got == tuple(np.float32(i + 1.5 * s) for i, s in enumerate([1, 1, 2, 2, 3, 3, 4, 4]))
    assert E.wgmma_promote_split(acc, part, 1.0, 2.0, 3.0, 4.0, 8)[:4] == E.wgmma_promote(
        acc[:4], part[:4], 1.0, 2.0
    )
    with pytest.raises(UsageError, match="a multiple of 8 in 8..8, got 16"):
        E.wgmma_promote_split(acc, part, 1.0, 2.0, 3.0, 4.0, 16)


def test_desc_rejects_unknown_swizzle():
    from mmaplug.errors import UsageError

    with pytest.raises(UsageError, match="swizzle must be 128, 64, 32 or 0 bytes, got 16"):
        E.wgmma_desc(0, 16, 1024, 16)


def test_fragment_layout_covers_the_tile_once():
    """The §1.2 accumulator layout maps 128 threads x N/2 registers onto 64 x N exactly once;
    thread 0 holds (0,0) (0,1) (8,0) (8,1) (0,8) (0,9) (8,8) (8,9)."""
    for n in (8, 24, 256):
        rows, cols = W.fragment_coords(n // 2)
        flat = np.sort((rows * n + cols).ravel())
        np.testing.assert_array_equal(flat, np.arange(64 * n))
    rows, cols = W.fragment_coords(8)
    assert list(zip(rows[0], cols[0], strict=True)) == [
        (0, 0),
        (0, 1),
        (8, 0),
        (8, 1),
        (0, 8),
        (0, 9),
        (8, 8),
        (8, 9),
    ]


def test_operand_offsets_k_major_unswizzled_is_the_h200_layout():
    """No swizzle, K-major: core matrix (row_block, k_block) at (row_block*2 + k_block)*128
    with LBO 128, SBO 256 (what ran on the H200, reference §0.1)."""
    addrs = W.operand_offsets(E.wgmma_desc(0x1000, 128, 256, 0), 64, 0, "t")
    r, k = np.arange(64)[:, None], np.arange(16)[None, :]
    expected = 0x1000 + ((r // 8) * 2 + k // 8) * 128 + (r % 8) * 16 + 2 * (k % 8)
    np.testing.assert_array_equal(addrs, expected)


def test_operand_offsets_k_major_sw128_k_step():
    """K-major SW128: row r at 128 B pitch in 1024-B atoms, k16 step j at +32 B, chunk bits
    4-6 XOR row bits 7-9 of the absolute address."""
    base = 0x2000
    for j in range(4):
        addrs = W.operand_offsets(E.wgmma_desc(base + 32 * j, 16, 1024, 128), 16, 0, "t")
        r, k = np.arange(16)[:, None], np.arange(16)[None, :]
        logical = base + (r // 8) * 1024 + (r % 8) * 128 + 32 * j + 2 * k
        np.testing.assert_array_equal(addrs, logical ^ (((logical >> 7) & 7) << 4))


def test_operand_offsets_mn_major_sw128():
    """MN-major SW128: 64-element MN chunks LBO apart, K rows at 128 B, 8-row groups SBO."""
    addrs = W.operand_offsets(E.wgmma_desc(0x4000, 8192, 1024, 128), 128, 1, "t")
    m, k = np.arange(128)[:, None], np.arange(16)[None, :]
    logical = 0x4000 + (m // 64) * 8192 + (k // 8) * 1024 + (k % 8) * 128 + 2 * (m % 64)
    np.testing.assert_array_equal(addrs, logical ^ (((logical >> 7) & 7) << 4))


@pytest.mark.parametrize("swizzle", [128, 64, 32, 0])
def test_operand_offsets_fp8_k_major_has_the_16_bit_bytes(swizzle):
    """A K-major FP8 operand (64 x 32 one-byte elements) spans the bytes of a 16-bit one (64 x 16):
    FP8 element [r, k] is byte k % 2 of 16-bit element [r, k // 2], for every layout."""
    desc = E.wgmma_desc(0x4000, 128 if swizzle == 0 else 16, 1024 if swizzle else 256, swizzle)
    half = W.operand_offsets(desc, 64, 0, "t")
    fp8 = W.operand_offsets(desc, 64, 0, "t", itemsize=1)
    assert fp8.shape == (64, 32)
    np.testing.assert_array_equal(fp8, np.repeat(half, 2, axis=1) + np.arange(32) % 2)


def test_operand_offsets_rejects_mn_major_fp8():
    from mmaplug.errors import UsageError

    desc = E.wgmma_desc(0x4000, 8192, 1024, 128)
    with pytest.raises(UsageError, match=r"1-byte \(K-major only\) elements, got 1-byte"):
        W.operand_offsets(desc, 64, 1, "t", itemsize=1)


def test_every_sm90_name_has_a_documented_emulation():
    """Each name mmaplug.cuda.sm90 declares has an emulation here, with a docstring."""
    for name in H.__all__:
        assert getattr(E, name).__doc__, name
