"""PTX tier: each sm_90a intrinsic in mmaplug.cuda.sm90 compiles to its exact PTX for sm_90a."""

from __future__ import annotations

import functools
import re

import pytest
from numba import cuda
from numba.core.errors import TypingError
from numba.cuda import types

from mmaplug.cuda import intrinsics as I
from mmaplug.cuda import sm90 as H

pytestmark = pytest.mark.ptx

U8, U32, U64, F32 = types.uint8[::1], types.uint32[::1], types.uint64[::1], types.float32[::1]
SM90A = (9, 0, "a")


def _barrier_kernel(out):
    sm = cuda.shared.array(64, types.uint64)
    bar = H.shared_base(sm) + 8
    if cuda.threadIdx.x == 0:
        H.mbarrier_init(bar, 1)
        H.fence_mbarrier_init()
    cuda.syncthreads()
    H.mbarrier_arrive_expect_tx(bar, 256)
    H.mbarrier_arrive(bar)
    H.mbarrier_wait(bar, 0)
    H.mbarrier_wait(bar, 1)
    out[cuda.threadIdx.x] = H.mbarrier_try_wait(bar, out[0])


def _tma_kernel(maps, out):
    sm = cuda.shared.array(8192, types.uint8)
    buf = (H.shared_base(sm) + 1023) & ~1023
    bar = buf + 4096
    tmap = I.global_addr(maps, 16)
    H.fence_tensormap_acquire(tmap)
    H.prefetch_tensormap(tmap)
    H.tma_load_2d(buf, tmap, out[0], out[1], bar)
    H.tma_load_3d(buf, tmap, out[0], out[1], out[2], bar)
    H.fence_proxy_async()
    H.tma_store_2d(tmap, out[0], out[1], buf)
    H.tma_store_3d(tmap, out[0], out[1], out[2], buf)
    H.bulk_store(I.global_addr(out, 4), buf + 16, out[3])
    H.bulk_commit_group()
    H.bulk_wait_group_read(0)
    H.bulk_wait_group(1)


def _cluster_kernel(maps, out):
    sm = cuda.shared.array(8192, types.uint8)
    buf = (H.shared_base(sm) + 1023) & ~1023
    bar = buf + 4096
    rank = H.cluster_ctarank()
    H.tma_load_3d_multicast(buf, I.global_addr(maps, 0), out[0], out[1], rank, bar, out[2])
    H.fence_acq_rel_cluster()
    H.fence_acq_rel_gpu()
    H.mbarrier_arrive_cluster(H.mapa_shared(bar, rank ^ 1))
    H.mbarrier_wait_cluster(bar, 0)
    out[4] = types.uint32(H.ld_shared_cluster_f32(H.mapa_shared(buf, rank ^ 1)))
    H.cluster_sync()
    H.cluster_sync_after_init()
    out[3] = H.cluster_id()


def _misc_kernel(out):
    sm = cuda.shared.array(2048, types.uint8)
    tid = cuda.threadIdx.x
    addr = H.shared_base(sm) + 16 * tid
    if tid < 128:
        H.setmaxnreg_dec(40)
        H.named_barrier_arrive(1, 256)
    else:
        H.setmaxnreg_inc(232)
        H.named_barrier_sync(1, 256)
    H.stmatrix_x4(addr, out[0], out[1], out[2], out[3])
    H.stmatrix_x4_trans(addr, out[0], out[1], out[2], out[3])
    H.st_shared_b32(addr, tid)
    H.st_shared_b32(addr + 4, types.float32(tid))
    out[tid] = H.ld_shared_b32(addr)
    out[tid] += H.warp_uniform(tid // 128)


def _desc_kernel(out):
    out[0] = H.wgmma_desc(0x400, 16, 1024, 128)
    out[1] = H.wgmma_desc(0x10230, 8192, 1024, 64)
    out[2] = H.wgmma_desc(out[3], 128, 256, 0)


@functools.cache
def _wgmma_kernel(n: int, ta: int, tb: int, dtype: str = "f16"):
    mma = H.wgmma_f16 if dtype == "f16" else H.wgmma_bf16
    regs = n // 2

    def kernel(descs, out):
        acc = H.wgmma_zeros(regs)
        acc = H.fence_operand(acc)
        H.wgmma_fence()
        for k in range(4):
            acc = mma(acc, descs[0] + 2 * k, descs[1] + 2 * k, k, ta, tb)
        H.wgmma_commit_group()
        H.wgmma_wait_group(0)
        acc = H.fence_operand(acc)
        out[cuda.threadIdx.x] = acc[0] + acc[regs - 1]

    return _ptx(kernel, (U64, F32))


@functools.cache
def _wgmma_fp8_kernel(n: int, ab: str):
    mma = H.wgmma_e4m3 if ab == "e4m3" else H.wgmma_e5m2
    regs = n // 2

    def kernel(descs, out):
        acc = H.wgmma_zeros(regs)
        acc = H.fence_operand(acc)
        H.wgmma_fence()
        for k in range(4):
            acc = mma(acc, descs[0] + 2 * k, descs[1] + 2 * k, k)
        H.wgmma_commit_group()
        H.wgmma_wait_group(0)
        acc = H.fence_operand(acc)
        out[cuda.threadIdx.x] = acc[0] + acc[regs - 1]

    return _ptx(kernel, (U64, F32))


@functools.cache
def _ptx(kernel, sig) -> str:
    ptx, _ = cuda.compile_ptx(kernel, sig, cc=SM90A)
    return ptx


KERNELS = {
    "barrier": (_barrier_kernel, (U32,)),
    "tma": (_tma_kernel, (U64, U32)),
    "misc": (_misc_kernel, (U32,)),
    "cluster": (_cluster_kernel, (U64, U32)),
    "desc": (_desc_kernel, (U64,)),
}
TMA_LOAD = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"
TMA_STORE = "cp.async.bulk.tensor.{}d.global.shared::cta.bulk_group"
CASES = {
    "mbarrier_init": ("barrier", r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], %r\d+;"),
    "mbarrier_arrive": ("barrier", r"mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];"),
    "mbarrier_arrive_expect_tx": (
        "barrier",
        r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], %r\d+;",
    ),
    "mbarrier_wait": (
        "barrier",
        r"(mbar_wait_\d+):\nmbarrier\.try_wait\.parity\.shared::cta\.b64 p, \[%r\d+\], %r\d+;"
        r"\n@!p bra \1;",
    ),
    "mbarrier_try_wait": ("barrier", r"try_wait\.parity\.shared::cta\.b64 p, .*\nselp\.u32 %r"),
    "fence_mbarrier_init": ("barrier", r"fence\.mbarrier_init\.release\.cluster;"),
    "shared_base": ("barrier", r"mov\.u64 \t%rd\d+, _cudapy_smem_\d+;"),
    "fence_tensormap_acquire": (
        "tma",
        r"fence\.proxy\.tensormap::generic\.acquire\.gpu \[%rd\d+\], 128;",
    ),
    "prefetch_tensormap": ("tma", r"prefetch\.tensormap \[%rd\d+\];"),
    "tma_load_2d": (
        "tma",
        re.escape(TMA_LOAD.format(2)) + r" \[%r\d+\], \[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\];",
    ),
    "tma_load_3d": (
        "tma",
        re.escape(TMA_LOAD.format(3))
        + r" \[%r\d+\], \[%rd\d+, \{(%r\d+, ){2}%r\d+\}\], \[%r\d+\];",
    ),
    "tma_store_2d": (
        "tma",
        re.escape(TMA_STORE.format(2)) + r" \[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\];",
    ),
    "tma_store_3d": (
        "tma",
        re.escape(TMA_STORE.format(3)) + r" \[%rd\d+, \{(%r\d+, ){2}%r\d+\}\], \[%r\d+\];",
    ),
    "fence_proxy_async": ("tma", r"fence\.proxy\.async\.shared::cta;"),
    "bulk_store": (
        "tma",
        r"cp\.async\.bulk\.global\.shared::cta\.bulk_group \[%rd\d+\], \[%r\d+\], %r\d+;",
    ),
    "bulk_commit_group": ("tma", r"cp\.async\.bulk\.commit_group;"),
    "bulk_wait_group_read": ("tma", r"cp\.async\.bulk\.wait_group\.read 0;"),
    "bulk_wait_group": ("tma", r"cp\.async\.bulk\.wait_group 1;"),
    "tma_load_3d_multicast": (
        "cluster",
        re.escape(TMA_LOAD.format(3) + ".multicast::cluster")
        + r" \[%r\d+\], \[%rd\d+, \{(%r\d+, ){2}%r\d+\}\], \[%r\d+\], %rs\d+;",
    ),
    "cluster_ctarank": ("cluster", r"mov\.u32 %r\d+, %cluster_ctarank;"),
    "cluster_id": ("cluster", r"mov\.u32 %r\d+, %clusterid\.x;"),
    "mapa_shared": ("cluster", r"mapa\.shared::cluster\.u32 %r\d+, %r\d+, %r\d+;"),
    "mbarrier_arrive_cluster": (
        "cluster",
        r"mbarrier\.arrive\.shared::cluster\.b64 _, \[%r\d+\];",
    ),
    "fence_acq_rel_cluster": ("cluster", r"fence\.acq_rel\.cluster;"),
    "fence_acq_rel_gpu": ("cluster", r"fence\.acq_rel\.gpu;"),
    "mbarrier_wait_cluster": (
        "cluster",
        r"(mbar_wait_\d+):\nmbarrier\.try_wait\.parity\.acquire\.cluster\.shared::cta\.b64 "
        r"p, \[%r\d+\], %r\d+;\n@!p bra \1;",
    ),
    "ld_shared_cluster_f32": ("cluster", r"ld\.shared::cluster\.f32 %f\d+, \[%r\d+\];"),
    "cluster_sync": (
        "cluster",
        r"barrier\.cluster\.arrive\.release;\s*barrier\.cluster\.wait\.acquire;",
    ),
    "cluster_sync_after_init": (
        "cluster",
        r"barrier\.cluster\.arrive\.relaxed;\s*barrier\.cluster\.wait\.acquire;",
    ),
    "setmaxnreg_inc": ("misc", r"setmaxnreg\.inc\.sync\.aligned\.u32 232;"),
    "setmaxnreg_dec": ("misc", r"setmaxnreg\.dec\.sync\.aligned\.u32 40;"),
    "named_barrier_sync": ("misc", r"bar\.sync %r\d+, %r\d+;"),
    "named_barrier_arrive": ("misc", r"bar\.arrive %r\d+, %r\d+;"),
    "stmatrix_x4": (
        "misc",
        r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \[%r\d+\], \{(%r\d+, ){3}%r\d+\};",
    ),
    "stmatrix_x4_trans": ("misc", r"stmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16 \["),
    "st_shared_b32": (
        "misc",
        r"st\.shared\.b32 \[%r\d+\], %r\d+;\n(.*\n){1,8}.*st\.shared\.b32 \[%r\d+\], %f\d+;",
    ),
    "ld_shared_b32": ("misc", r"ld\.shared\.b32 %r\d+, \[%r\d+\];"),
    "warp_uniform": ("misc", r"shfl\.sync\.idx\.b32 %r\d+, %r\d+, 0, 0x1f, 0xffffffff;"),
}


def _kernel_ptx(name: str) -> str:
    return _ptx(*KERNELS[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_mnemonic(name):
    """The intrinsic compiles for sm_90a to its exact PTX, shared addresses as 32-bit registers."""
    kernel, pattern = CASES[name]
    ptx = _kernel_ptx(kernel)
    assert ".target sm_90a" in ptx
    assert re.search(pattern, ptx), pattern


def test_every_intrinsic_has_a_case():
    """Each public name of sm90 has a PTX case here (wgmma ones in the tests below)."""
    wgmma = {
        "wgmma_f16",
        "wgmma_bf16",
        "wgmma_e4m3",
        "wgmma_e5m2",
        "wgmma_fence",
        "wgmma_commit_group",
        "wgmma_wait_group",
        "wgmma_zeros",
        "wgmma_promote",
        "wgmma_promote_split",
        "fence_operand",
        "wgmma_desc",
    }
    assert set(H.__all__) == set(CASES) | wgmma


def test_mbarrier_wait_labels_are_unique_per_call():
    """Two inlined waits get distinct labels (`${:uid}`), so ptxas sees no duplicate label."""
    labels = re.findall(r"^(mbar_wait_\d+):", _kernel_ptx("barrier"), re.M)
    assert len(labels) == 2 and len(set(labels)) == 2


def test_wgmma_desc_encoding():
    """wgmma_desc folds to the §2.1 encoding: start>>4, LBO>>4 at 16, SBO>>4 at 32, code at 62."""
    ptx = _kernel_ptx("desc")
    assert str(0x4000004000010040) in ptx  # 0x400, LBO 16, SBO 1024, 128B swizzle
    # 64B swizzle (code 2 sets bit 63, which PTX prints as a negative int64)
    assert str(((2 << 62) | (64 << 32) | (512 << 16) | (0x10230 >> 4)) - (1 << 64)) in ptx


@pytest.mark.parametrize("n", [8, 64, 128, 256])
@pytest.mark.parametrize(("ta", "tb"), [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_wgmma_shapes_and_transpose_bits(n, ta, tb):
    """m64nNk16 with N/2 f32 registers, descriptors as 64-bit registers, predicate from setp,
    and the transpose bits as immediates."""
    ptx = _wgmma_kernel(n, ta, tb)
    regs = r", ".join([r"%f\d+"] * (n // 2))
    pattern = (
        r"setp\.ne\.b32 p, %r\d+, 0;\n"
        rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k16\.f32\.f16\.f16 \{{{regs}\}}, "
        rf"%rd\d+, %rd\d+, p, 1, 1, {ta}, {tb};"
    )
    assert len(re.findall(pattern, ptx)) == 4


def test_wgmma_bf16():
    ptx = _wgmma_kernel(128, 0, 1, "bf16")
    assert (
        len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 ", ptx)) == 4
    )
    assert "wgmma.fence.sync.aligned;" in ptx
    assert "wgmma.commit_group.sync.aligned;" in ptx
    assert "wgmma.wait_group.sync.aligned 0;" in ptx


@pytest.mark.parametrize("n", [8, 64, 256])
@pytest.mark.parametrize("ab", ["e4m3", "e5m2"])
def test_wgmma_fp8_shapes(n, ab):
    """m64nNk32 with N/2 f32 registers, both operands from descriptors, and no transpose
    immediates: FP8 wgmma reads K-major operands only (PTX ISA, wgmma.mma_async)."""
    ptx = _wgmma_fp8_kernel(n, ab)
    regs = r", ".join([r"%f\d+"] * (n // 2))
    pattern = (
        r"setp\.ne\.b32 p, %r\d+, 0;\n"
        rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k32\.f32\.{ab}\.{ab} \{{{regs}\}}, "
        r"%rd\d+, %rd\d+, p, 1, 1;"
    )
    assert len(re.findall(pattern, ptx)) == 4


def _asm_blocks(ptx: str) -> list[str]:
    return [
        b.strip() for b in re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, re.S)
    ]


def _promotion_scales(split: bool) -> list[int]:
    """The scale (index into the kernel's scales) of each fma a promotion of an m64n16
    accumulator compiles to, in register order: wgmma_promote's, or wgmma_promote_split's cut
    at column 8. Each is an fma.rn.f32 whose second source is its scale."""

    def kernel(descs, scales, out):
        acc = H.wgmma_zeros(8)
        part = H.wgmma_f16(H.wgmma_zeros(8), descs[0], descs[1], 0, 0, 0)
        H.wgmma_commit_group()
        H.wgmma_wait_group(0)
        part = H.fence_operand(part)
        if split:
            acc = H.wgmma_promote_split(acc, part, scales[0], scales[1], scales[2], scales[3], 8)
        else:
            acc = H.wgmma_promote(acc, part, scales[0], scales[1])
        for i in range(8):
            out[8 * cuda.threadIdx.x + i] = acc[i]

    ptx = _ptx(kernel, (U64, F32, F32))
    fmas = re.findall(r"\bfma\.rn\.f32\s+%f\d+,\s*%f\d+,\s*(%f\d+),", ptx)
    assert len(fmas) == len(re.findall(r"\bfma\.rn\.f32\b", ptx)) == 8, ptx
    loads = dict(re.findall(r"ld\.global\.f32\s+(%f\d+),\s*\[%rd\d+(?:\+(\d+))?\]", ptx))
    return [int(loads[reg] or 0) // 4 for reg in fmas]


def test_wgmma_promote_is_one_fma_per_accumulator_with_its_rows_scale():
    """acc + part * scale: an fma.rn.f32 per register, registers 2, 3 (the row 8 below) and
    6, 7 taking the second scale."""
    assert _promotion_scales(split=False) == [0, 0, 1, 1, 0, 0, 1, 1]


def test_wgmma_promote_split_takes_the_next_scales_past_its_columns():
    """Cut at column 8: registers 0-3 take the first pair of scales, 4-7 the next pair."""
    assert _promotion_scales(split=True) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_wgmma_promote_split_needs_a_literal_cut_inside_the_tile():
    def kernel(descs, out):
        acc = H.wgmma_zeros(8)
        acc = H.wgmma_promote_split(acc, acc, out[0], out[1], out[2], out[3], 16)
        out[0] = acc[0]

    with pytest.raises(TypingError, match=r"columns must be a multiple of 8 in 8\.\.8"):
        _ptx(kernel, (U64, F32))


def test_wgmma_promote_rejects_unlike_partial_sums():
    def kernel(descs, out):
        acc = H.wgmma_promote(H.wgmma_zeros(8), H.wgmma_zeros(4), out[0], out[1])
        out[0] = acc[0]

    with pytest.raises(TypingError, match="wgmma_promote: the partial sums must be"):
        _ptx(kernel, (U64, F32))


def test_fence_operand_emits_no_instruction():
    """fence_operand is an empty asm block: a compiler fence only."""
    blocks = _asm_blocks(_wgmma_kernel(64, 0, 0))
    assert blocks.count("") == 2  # one before wgmma_fence, one after wait_group


@pytest.mark.parametrize("n", [64, 256])
def test_accumulators_untouched_between_fence_and_wait(n):
    """No instruction outside the wgmma asm reads or writes an accumulator register between
    wgmma.fence and wgmma.wait_group (what ptxas would serialise as C7515)."""
    ptx = _wgmma_kernel(n, 0, 0)
    window = ptx[ptx.index("wgmma.fence.sync.aligned;") : ptx.index("wgmma.wait_group")]
    first = re.search(r"wgmma\.mma_async\S* \{([^}]*)\}", window)
    accs = set(first.group(1).split(", "))
    outside = re.sub(r"// begin inline asm\n.*?// end inline asm", "", window, flags=re.S)
    touched = set(re.findall(r"%f\d+", outside)) & accs
    assert not touched, sorted(touched)
    # all four wgmmas use the same registers: the accumulator chain stays in place
    chains = re.findall(r"wgmma\.mma_async\S* \{([^}]*)\}", window)
    assert len(chains) == 4 and len(set(chains)) == 1


@pytest.mark.parametrize(("count", "extra"), [(1, 0), (3, 0), (3, 4), (128, 4)])
def test_wgmma_rejects_bad_accumulator_length(count, extra):
    """An accumulator whose length is not N/2 for N in 8..256 step 8 (here N = 2, 6, 14, 264)
    is a typing error naming the allowed values."""

    def kernel(descs, out):
        acc = H.wgmma_zeros(count) + H.wgmma_zeros(extra) if extra else H.wgmma_zeros(count)
        acc = H.wgmma_f16(acc, descs[0], descs[1], 1, 0, 0)
        out[0] = acc[0]

    with pytest.raises(TypingError, match=r"one of 8, 16, 24, \.\.\., 256 .*got len\(acc\) = "):
        cuda.compile_ptx(kernel, (U64, F32), cc=SM90A)


@pytest.mark.parametrize(("count", "extra"), [(1, 0), (3, 4), (128, 4)])
@pytest.mark.parametrize("ab", ["e4m3", "e5m2"])
def test_wgmma_fp8_rejects_bad_accumulator_length(count, extra, ab):
    """The FP8 forms check N = 2 * len(acc) as the 16-bit ones do, naming their instruction."""
    mma = H.wgmma_e4m3 if ab == "e4m3" else H.wgmma_e5m2

    def kernel(descs, out):
        acc = H.wgmma_zeros(count) + H.wgmma_zeros(extra) if extra else H.wgmma_zeros(count)
        acc = mma(acc, descs[0], descs[1], 1)
        out[0] = acc[0]

    with pytest.raises(
        TypingError,
        match=rf"m64nNk32\.f32\.{ab}\.{ab}: N = 2 \* len\(acc\) must be one of 8, 16, 24, "
        r"\.\.\., 256 .*got len\(acc\) = ",
    ):
        cuda.compile_ptx(kernel, (U64, F32), cc=SM90A)


def test_wgmma_rejects_non_float_accumulator():
    def kernel(descs, out):
        acc = H.wgmma_f16((descs[0], descs[1], descs[2], descs[3]), descs[0], descs[1], 1, 0, 0)
        out[0] = acc[0]

    with pytest.raises(TypingError, match=r"UniTuple\(float32, n\)"):
        cuda.compile_ptx(kernel, (U64, U64), cc=SM90A)


def test_wgmma_rejects_non_literal_transpose():
    def kernel(descs, out):
        acc = H.wgmma_f16(H.wgmma_zeros(4), descs[0], descs[1], 1, out[0], 0)
        out[1] = acc[0]

    with pytest.raises(TypingError, match="trans_a must be a compile-time literal int"):
        cuda.compile_ptx(kernel, (U64, U32), cc=SM90A)


def test_wgmma_rejects_transpose_2():
    def kernel(descs, out):
        acc = H.wgmma_bf16(H.wgmma_zeros(4), descs[0], descs[1], 1, 0, 2)
        out[0] = acc[0]

    with pytest.raises(TypingError, match=r"trans_b must be 0 \(K-major\) or 1 \(N-major\), got 2"):
        cuda.compile_ptx(kernel, (U64, F32), cc=SM90A)


@pytest.mark.parametrize("n", [20, 260, 100])
def test_setmaxnreg_rejects_bad_counts(n):
    def kernel(out):
        H.setmaxnreg_inc(n)

    with pytest.raises(TypingError, match=rf"a multiple of 8 in 24\.\.256, got {n}"):
        cuda.compile_ptx(kernel, (U32,), cc=SM90A)


def test_wgmma_desc_rejects_bad_swizzle():
    def kernel(out):
        out[0] = H.wgmma_desc(0, 16, 1024, 3)

    with pytest.raises(TypingError, match="128, 64, 32 or 0"):
        cuda.compile_ptx(kernel, (U64,), cc=SM90A)


def test_shared_address_argument_must_be_integer():
    def kernel(out):
        H.mbarrier_init(out, 1)

    with pytest.raises(TypingError, match="mbarrier_init: bar must be an integer"):
        cuda.compile_ptx(kernel, (U32,), cc=SM90A)


@pytest.mark.parametrize(
    "name",
    [
        "barrier",
        "tma",
        "misc",
        "cluster",
        "wgmma64",
        "wgmma256_tt",
        "wgmma_e4m3_256",
        "wgmma_e5m2_64",
    ],
)
def test_ptxas_accepts_and_does_not_serialize(name, assemble_sm90a):
    """ptxas assembles each kernel for sm_90a without serialising the wgmmas (C7510-C7515)."""
    ptx = {
        "wgmma64": lambda: _wgmma_kernel(64, 0, 0),
        "wgmma256_tt": lambda: _wgmma_kernel(256, 1, 1),
        "wgmma_e4m3_256": lambda: _wgmma_fp8_kernel(256, "e4m3"),
        "wgmma_e5m2_64": lambda: _wgmma_fp8_kernel(64, "e5m2"),
    }.get(name, lambda: _kernel_ptx(name))()
    log = assemble_sm90a(ptx)
    assert not re.search(r"C751\d", log), log


def _smoke_kernels():
    """tests/sim/sm90_kernels.py, loaded by path (tests are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "sim" / "sm90_kernels.py"
    spec = importlib.util.spec_from_file_location("_sm90_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


I32 = types.int32[::1]
F32_2D, U32_2D = types.float32[:, ::1], types.uint32[:, ::1]
SMOKE = {
    "tma_load_2d": (lambda k: k._tma_load_kernel(2, 8192), (U64, I32, U8)),
    "tma_load_3d": (lambda k: k._tma_load_kernel(3, 2048), (U64, I32, U8)),
    "tma_store": (lambda k: k._tma_store_kernel(2048), (U64, I32)),
    "bulk_store": (lambda k: k._bulk_store_kernel(24, 64, 40), (U32, U32)),
    "ping_pong": (lambda k: k._ping_pong_kernel, (U32_2D, U32)),
    "wgmma_kk_n256": (lambda k: k._wgmma_kernel(256, "f16", False, False), (U64, F32_2D)),
    "wgmma_mn_bf16_n128": (lambda k: k._wgmma_kernel(128, "bf16", True, True), (U64, F32_2D)),
    "wgmma_fp8_e4m3_n256": (lambda k: k._wgmma_fp8_kernel(256, "e4m3", 128), (U32, F32_2D)),
    "wgmma_fp8_e5m2_n24": (lambda k: k._wgmma_fp8_kernel(24, "e5m2", 64), (U32, F32_2D)),
}


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_smoke_kernels_build_for_sm90a(name, assemble_sm90a):
    """The simulator's smoke kernels (the GPU tier's too) compile and assemble for sm_90a."""
    make, sig = SMOKE[name]
    ptx = _ptx(make(_smoke_kernels()).py_func, sig)
    log = assemble_sm90a(ptx)
    assert not re.search(r"C751\d", log), log
