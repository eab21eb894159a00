"""Inline-PTX intrinsics for Ampere tensor-core kernels: ldmatrix, mma.sync, cp.async, cvt (the
FP8 mma.sync and conversions need sm_89 or newer) and the warp and global max reductions of an
amax."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from numba.cuda import types

from mmaplug.cuda import sm80_factories as F
from mmaplug.cuda.asm import GENERIC_ADDRSPACE, GLOBAL_ADDRSPACE, SHARED_ADDRSPACE
from mmaplug.cuda.binding import bind

# Docs references (PTX ISA):
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-ldmatrix
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-mma
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16832
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async-wait-group
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cvt
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-ld
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-st
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-redux-sync
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-red

__all__ = [
    "bf16_to_f32",
    "cp_async_4",
    "cp_async_8",
    "cp_async_16",
    "cp_async_commit",
    "cp_async_wait_all",
    "cp_async_wait_group",
    "e4m3_to_f32",
    "e5m2_to_f32",
    "ex2_approx",
    "f16_to_f32",
    "f32_abs_bits",
    "f32_to_bf16",
    "f32_to_e4m3",
    "f32_to_e5m2",
    "f32_to_f16",
    "f32x2_to_e4m3x2",
    "f32x2_to_e5m2x2",
    "generic_addr",
    "global_addr",
    "ld_global_cg_v4_f32",
    "ld_global_nc_v4_b32",
    "ld_shared_v4_f32",
    "ldmatrix_x1",
    "ldmatrix_x1_trans",
    "ldmatrix_x2",
    "ldmatrix_x2_trans",
    "ldmatrix_x4",
    "ldmatrix_x4_trans",
    "mma_m16n8k16_bf16",
    "mma_m16n8k16_f16",
    "mma_m16n8k32_e4m3",
    "mma_m16n8k32_e5m2",
    "rcp_approx",
    "red_global_max_u32",
    "smem_addr",
    "st_global_b32",
    "st_global_v2_b32",
    "st_global_v4_b32",
    "warp_max_u32",
]


# --- Stubs: the declarations; bind (at the end) makes each its intrinsic or emulation. -----------


def smem_addr(arr, i):
    """Return the 32-bit shared-state-space byte address of element `i` of 1-D shared array `arr`.

    Pass the final flat index: never do arithmetic on the result (the simulator returns a handle).
    """


def ldmatrix_x1(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x1.shared.b16`; return one uint32.

    Lanes 0-7 pass the addresses of rows 0-7 (16 bytes each) of the 8x8 b16 matrix. Lane `l`
    receives row `l >> 2`, columns `2 * (l % 4)` (low half) and `2 * (l % 4) + 1` (high half).
    """


def ldmatrix_x2(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x2.shared.b16`; return a 2-tuple of uint32.

    Lanes `8 * j + r` pass row `r` of matrix `j`; register `j` holds matrix `j` as in ldmatrix_x1.
    """


def ldmatrix_x4(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x4.shared.b16`; return a 4-tuple of uint32.

    Lanes `8 * j + r` pass row `r` of matrix `j`; register `j` holds matrix `j` as in ldmatrix_x1.
    For an mma A tile (16x16, row-major) pass rows `lane % 16`, column block `8 * (lane // 16)`.
    """


def ldmatrix_x1_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`: ldmatrix_x1 of the transpose.

    Lane `l` receives stored rows `2 * (l % 4)` (low half) and `2 * (l % 4) + 1`, column `l >> 2`.
    """


def ldmatrix_x2_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`: ldmatrix_x2 of the transposes.

    For an mma B tile stored k-major (16x8, row = k) pass rows `lane % 16` from lanes 0-15.
    """


def ldmatrix_x4_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: ldmatrix_x4 of the transposes."""


def mma_m16n8k16_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`; return (d0, d1, d2, d3).

    With `g = lane >> 2`, `t = lane % 4`, each uint32 packing two values, low half = lower index:
    A (16x16): a0 = (row g, cols 2t, 2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..).
    B (16x8, k x n): b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g).
    C, D (16x8, float32): c0, c1 = (row g, cols 2t, 2t+1); c2, c3 = (row g+8, cols 2t, 2t+1).
    """


def mma_m16n8k16_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`; layout as for f16."""


def mma_m16n8k32_e4m3(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32` (sm_89+, PTX ISA 8.4);
    return (d0, d1, d2, d3).

    Each uint32 packs four float8_e4m3fn values, lowest byte = lowest index. In 32-bit words this
    is the f16 layout of mma_m16n8k16_f16 with K counted in bytes (PTX ISA, "Matrix Fragments
    for mma.m16n8k32"; `g = lane >> 2`, `t = lane % 4`):
    A (16x32): a0 = (row g, cols 4t..4t+3), a1 = (g+8, 4t..), a2 = (g, 4t+16..),
    a3 = (g+8, 4t+16..).
    B (32x8, k x n): b0 = (rows 4t..4t+3, col g), b1 = (rows 4t+16..4t+19, col g).
    C, D (16x8, float32): as mma_m16n8k16_f16.
    """


def mma_m16n8k32_e5m2(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32` (sm_89+); layout as for
    e4m3."""


def cp_async_16(dst, src, index, src_bytes):
    """Generate `cp.async.cg.shared.global [dst], [&src[index]], 16, src_bytes`.

    `dst` comes from smem_addr; `src_bytes` (0..16) bytes are read and the rest zero-filled.
    With `src_bytes == 0` nothing is read but the address is still formed: pass a valid index (0).
    """


def cp_async_8(dst, src, index, src_bytes):
    """Generate `cp.async.ca.shared.global [dst], [&src[index]], 8, src_bytes`; see cp_async_16."""


def cp_async_4(dst, src, index, src_bytes):
    """Generate `cp.async.ca.shared.global [dst], [&src[index]], 4, src_bytes`; see cp_async_16."""


def cp_async_commit():
    """Generate `cp.async.commit_group`: close the group of cp.async issued so far."""


def cp_async_wait_group(n):
    """Generate `cp.async.wait_group n`: wait until at most `n` groups are pending (`n` literal)."""


def cp_async_wait_all():
    """Generate `cp.async.wait_all`: wait for every cp.async issued by this thread."""


def f16_to_f32(bits):
    """Generate `cvt.f32.f16`: widen the float16 held in uint16 `bits` (exact)."""


def f32_to_f16(x):
    """Generate `cvt.rn.f16.f32`: round float32 `x` to float16 (nearest-even); return its bits."""


def bf16_to_f32(bits):
    """Widen the bfloat16 held in uint16 `bits` (exact: a 16-bit shift; `cvt.f32.bf16` is sm_90)."""


def f32_to_bf16(x):
    """Generate `cvt.rn.bf16.f32` (sm_80+): round float32 `x` to bfloat16; return its bits."""


def f32_to_e4m3(x):
    """Generate `cvt.rn.satfinite.e4m3x2.f32` (sm_89+): round float32 `x` to float8_e4m3fn
    (nearest-even; beyond the largest finite value, infinities included, that value with the
    sign kept; NaN stays NaN); return its bits as uint8."""


def f32_to_e5m2(x):
    """Generate `cvt.rn.satfinite.e5m2x2.f32` (sm_89+): f32_to_e4m3 for float8_e5m2."""


def f32x2_to_e4m3x2(hi, lo):
    """Generate `cvt.rn.satfinite.e4m3x2.f32 d, hi, lo` (sm_89+): round two float32 as
    f32_to_e4m3 does; return both in a uint16, `hi` in the upper byte and `lo` in the lower
    (stored, `lo` comes first)."""


def f32x2_to_e5m2x2(hi, lo):
    """Generate `cvt.rn.satfinite.e5m2x2.f32 d, hi, lo` (sm_89+): f32x2_to_e4m3x2 for e5m2."""


def e4m3_to_f32(bits):
    """Generate `cvt.rn.f16x2.e4m3x2` and `cvt.f32.f16` (sm_89+): widen the float8_e4m3fn held
    in integer `bits` (its low byte; exact)."""


def e5m2_to_f32(bits):
    """Generate `cvt.rn.f16x2.e5m2x2` and `cvt.f32.f16` (sm_89+): e4m3_to_f32 for e5m2."""


def f32_abs_bits(x):
    """The bits of `|x|` for float32 `x` as a uint32 (the sign cleared; no instruction of its
    own). Non-negative floats order as these bits do, and a NaN's lie above +inf's, so an
    integer max of them is the float max with NaN winning, as `np.max`."""


def warp_max_u32(x):
    """Generate `redux.sync.max.u32 d, x, 0xffffffff` (sm_80+): the maximum of uint32 `x` over
    the 32 lanes of the warp, returned to every lane. Every lane must execute it (converged)."""


def red_global_max_u32(arr, index, w):
    """Generate `red.global.max.u32 [&arr[index]], w`: atomically make the 32-bit element
    `arr[index]` (any 32-bit type, compared as its uint32 bits) the maximum of itself and
    uint32 `w`; returns nothing."""


def ex2_approx(x):
    """Generate `ex2.approx.ftz.f32`: 2 ** float32 `x` (one MUFU op, ~2 ulp)."""


def rcp_approx(x):
    """Generate `rcp.approx.ftz.f32`: 1 / float32 `x` (one MUFU op, ~1 ulp)."""


def generic_addr(arr, i):
    """Return the 64-bit generic byte address of element `i` of 1-D array `arr`: where a
    kernel parameter passed by value lives in the parameter space, the generic address of
    that space (``cvta.param``: a grid-constant tensor map, `mmaplug.cuda.grid_constant`).
    """


def global_addr(arr, i):
    """Return the 64-bit global-state-space byte address of element `i` of 1-D array `arr`.

    Meant for alignment tests (`global_addr(a, 0) & 15`); index arrays with flat indices.
    """


def ld_global_nc_v4_b32(arr, index):
    """Generate `ld.global.nc.v4.u32` of `&arr[index]`: 16 read-only bytes as 4 uint32, lowest
    address first (a uint16 array gives two elements per word, low half first).

    The byte address must be a multiple of 16, and nothing may write the array while the kernel
    runs (the non-coherent texture path).
    """


def ld_global_cg_v4_f32(arr, index):
    """Generate `ld.global.cg.v4.f32` of `&arr[index]`: four float32 from L2, past the SM's
    L1 (which other SMs' stores do not update), lowest address first.

    The byte address must be a multiple of 16. For data other CTAs of the running kernel wrote
    and published (a fence before their count, a fence after reading it).
    """


def ld_shared_v4_f32(addr):
    """Generate `ld.shared.v4.f32`: four consecutive float32 at 16-byte aligned `addr`.

    `addr` comes from smem_addr; return a 4-tuple of float32 (lowest address first).
    """


def st_global_b32(arr, index, w0):
    """Generate `st.global.b32 [&arr[index]], w0`: one 4-byte store of a uint32 or float32 word
    (a uint8 array takes four elements, lowest byte first). The byte address must be a
    multiple of 4."""


def st_global_v2_b32(arr, index, w0, w1):
    """Generate `st.global.v2.b32 [&arr[index]], {w0, w1}`: one 8-byte store.

    The words (all uint32 or all float32) land lowest address first; a uint16 array takes two
    elements per word, low half first. The byte address must be a multiple of 8.
    """


def st_global_v4_b32(arr, index, w0, w1, w2, w3):
    """Generate `st.global.v4.b32 [&arr[index]], {w0, w1, w2, w3}`: 16 bytes, like v2."""


# --- Variant tables and instantiation ------------------------------------------------------------

LDMATRIX_VARIANTS: Final = {
    ldmatrix_x1: (1, False),
    ldmatrix_x2: (2, False),
    ldmatrix_x4: (4, False),
    ldmatrix_x1_trans: (1, True),
    ldmatrix_x2_trans: (2, True),
    ldmatrix_x4_trans: (4, True),
}
# stub -> (PTX operand type, k of the shape m16n8k)
MMA_VARIANTS: Final = {
    mma_m16n8k16_f16: ("f16", 16),
    mma_m16n8k16_bf16: ("bf16", 16),
    mma_m16n8k32_e4m3: ("e4m3", 32),
    mma_m16n8k32_e5m2: ("e5m2", 32),
}
# cp-size -> cache operator: .cg (L2 only) is allowed for 16 bytes only.
CP_ASYNC_VARIANTS: Final = {cp_async_16: (16, "cg"), cp_async_8: (8, "ca"), cp_async_4: (4, "ca")}
CP_ASYNC_SYNC_VARIANTS: Final = {
    cp_async_commit: "cp.async.commit_group",
    cp_async_wait_all: "cp.async.wait_all",
}
# stub -> (the 16-byte load, the type of its 4 words)
LD_GLOBAL_VARIANTS: Final = {
    ld_global_nc_v4_b32: ("ld.global.nc.v4.u32", types.uint32),
    ld_global_cg_v4_f32: ("ld.global.cg.v4.f32", types.float32),
}
# stub -> 32-bit words per access (and the loaded type).
LD_SHARED_VARIANTS: Final = {ld_shared_v4_f32: (4, types.float32)}
ST_GLOBAL_VARIANTS: Final = {st_global_b32: 1, st_global_v2_b32: 2, st_global_v4_b32: 4}
# stub -> (argument type, result type, mnemonic (cvt, MUFU) or None for the bf16 shift).
CVT_VARIANTS: Final = {
    f16_to_f32: (types.uint16, types.float32, "cvt.f32.f16"),
    f32_to_f16: (types.float32, types.uint16, "cvt.rn.f16.f32"),
    bf16_to_f32: (types.uint16, types.float32, None),
    f32_to_bf16: (types.float32, types.uint16, "cvt.rn.bf16.f32"),
    ex2_approx: (types.float32, types.float32, "ex2.approx.ftz.f32"),
    rcp_approx: (types.float32, types.float32, "rcp.approx.ftz.f32"),
}
# stub -> (PTX format, pair): float32 to FP8, one value (uint8) or a pair (uint16)
FP8_NARROW_VARIANTS: Final = {
    f32_to_e4m3: ("e4m3", False),
    f32_to_e5m2: ("e5m2", False),
    f32x2_to_e4m3x2: ("e4m3", True),
    f32x2_to_e5m2x2: ("e5m2", True),
}
FP8_WIDEN_VARIANTS: Final = {e4m3_to_f32: "e4m3", e5m2_to_f32: "e5m2"}


def _instantiate() -> dict[str, Any]:
    stub: Any  # the stubs of the variant tables have different signatures
    text: Any
    made = {smem_addr.__name__: F.address_intrinsic(smem_addr, SHARED_ADDRSPACE, 32)}
    made[cp_async_wait_group.__name__] = F.cp_async_wait_group_intrinsic(cp_async_wait_group)
    made[global_addr.__name__] = F.address_intrinsic(global_addr, GLOBAL_ADDRSPACE, 64)
    made[generic_addr.__name__] = F.address_intrinsic(generic_addr, GENERIC_ADDRSPACE, 64)
    for stub, (text, ty) in LD_GLOBAL_VARIANTS.items():
        made[stub.__name__] = F.ld_global_v4_intrinsic(stub, text, ty)
    for stub, (count, ty) in LD_SHARED_VARIANTS.items():
        made[stub.__name__] = F.ld_shared_v_intrinsic(stub, count, ty)
    for stub, count in ST_GLOBAL_VARIANTS.items():
        made[stub.__name__] = F.st_global_v_intrinsic(stub, count)
    for stub, (count, trans) in LDMATRIX_VARIANTS.items():
        made[stub.__name__] = F.ldmatrix_intrinsic(stub, count, trans)
    for stub, (ab_type, k) in MMA_VARIANTS.items():
        made[stub.__name__] = F.mma_intrinsic(stub, ab_type, k)
    for stub, (size, cache) in CP_ASYNC_VARIANTS.items():
        made[stub.__name__] = F.cp_async_intrinsic(stub, size, cache)
    for stub, text in CP_ASYNC_SYNC_VARIANTS.items():
        made[stub.__name__] = F.cp_async_sync_intrinsic(stub, text)
    for stub, (src, dst, text) in CVT_VARIANTS.items():
        made[stub.__name__] = F.cvt_intrinsic(stub, src, dst, text)
    for stub, (fmt, pair) in FP8_NARROW_VARIANTS.items():
        made[stub.__name__] = F.fp8_narrow_intrinsic(stub, fmt, pair)
    for stub, fmt in FP8_WIDEN_VARIANTS.items():
        made[stub.__name__] = F.fp8_widen_intrinsic(stub, fmt)
    made[f32_abs_bits.__name__] = F.abs_bits_intrinsic(f32_abs_bits)
    made[warp_max_u32.__name__] = F.redux_intrinsic(warp_max_u32, "max")
    made[red_global_max_u32.__name__] = F.red_global_intrinsic(red_global_max_u32, "max")
    return made


def _emulations() -> Mapping[str, Any]:
    from mmaplug.sim import intrinsics

    return vars(intrinsics)


bind(globals(), _instantiate, _emulations)
