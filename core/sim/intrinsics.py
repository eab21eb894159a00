"""Python emulations of mmaplug.cuda.intrinsics for Numba's CUDA simulator.

The names emulated are those ``mmaplug.cuda.intrinsics.__all__`` declares (one function here
each, of the same name and arguments); ``mmaplug.cuda.binding.bind`` binds them there. The
declarations and their documentation are the PTX stubs'; a docstring here says what the
emulation does differently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim.block import warp_collective
from mmaplug.sim.threads import host_array
from mmaplug.sim.warp import WARP_SIZE

LDMATRIX_ROW_BYTES = 16

_LANES = np.arange(WARP_SIZE)
_G, _T = _LANES >> 2, _LANES & 3  # PTX groupID and threadID_in_group


class SmemAddr(NamedTuple):
    """Handle standing in for a shared-memory address: the array and a flat element offset."""

    array: np.ndarray
    offset: int


# --- Memory helpers ------------------------------------------------------------------------------


def _bytes_at(array: Any, index: int, nbytes: int, align: int, what: str) -> np.ndarray:
    """Writable uint8 view of `nbytes` bytes of a 1-D contiguous array from element `index`."""
    arr = host_array(array)
    if arr.ndim != 1 or not arr.flags.c_contiguous:
        raise UsageError(f"{what} needs a 1-D contiguous array, got shape {arr.shape}")
    raw = arr.view(np.uint8)
    start = int(index) * arr.itemsize
    if start % align:
        raise UsageError(f"{what}: byte offset {start} is not a multiple of {align}")
    if start < 0 or start + nbytes > raw.size:
        raise IndexError(
            f"{what}: bytes [{start}, {start + nbytes}) outside an array of {raw.size}"
        )
    return raw[start : start + nbytes]


def _pack(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)


# --- Emulations ----------------------------------------------------------------------------------


def smem_addr(arr: Any, i: int) -> SmemAddr:
    """Emulate smem_addr: a handle for element `i` of shared array `arr`."""
    return SmemAddr(host_array(arr), int(i))


def global_addr(arr: Any, i: int) -> np.uint64:
    """Emulate global_addr: the host address of element `i` (simulator arrays live on the host)."""
    a = host_array(arr)
    return np.uint64(a.__array_interface__["data"][0] + int(i) * a.itemsize)


def generic_addr(arr: Any, i: int) -> np.uint64:
    """Emulate generic_addr: the host address of element `i`, as ``global_addr``'s (a
    grid-constant parameter is the array's host copy under the simulator)."""
    return global_addr(arr, i)


def ld_shared_v4_f32(addr: SmemAddr) -> tuple[np.float32, ...]:
    """Emulate ld_shared_v4_f32 (`addr` a smem_addr handle)."""
    if not isinstance(addr, SmemAddr):
        raise UsageError(f"ld.shared.v4: pass an address from smem_addr, got {type(addr).__name__}")
    raw = _bytes_at(addr.array, addr.offset, 16, 16, "ld.shared.v4.f32")
    return tuple(raw.copy().view(np.float32))


def ld_global_nc_v4_b32(arr: Any, index: int) -> tuple[np.uint32, ...]:
    """Emulate ld_global_nc_v4_b32: 16 bytes at a 16-byte aligned element, as 4 uint32."""
    op = "ld.global.nc.v4.u32"
    if host_array(arr).__array_interface__["data"][0] % 16:
        raise UsageError(f"{op}: the array base is not 16-byte aligned")
    return tuple(_bytes_at(arr, index, 16, 16, op).copy().view(np.uint32))


def ld_global_cg_v4_f32(arr: Any, index: int) -> tuple[np.float32, ...]:
    """Emulate ld_global_cg_v4_f32: 16 bytes at a 16-byte aligned element, as 4 float32 (the
    simulator has no L1 to pass)."""
    op = "ld.global.cg.v4.f32"
    if host_array(arr).__array_interface__["data"][0] % 16:
        raise UsageError(f"{op}: the array base is not 16-byte aligned")
    return tuple(_bytes_at(arr, index, 16, 16, op).copy().view(np.float32))


def _st_global(count: int) -> Callable[..., None]:
    op = "st.global.b32" if count == 1 else f"st.global.v{count}.b32"

    def emulate(arr: Any, index: int, *words: Any) -> None:
        if len(words) != count:
            raise UsageError(f"{op}: expected {count} words, got {len(words)}")
        if all(isinstance(w, np.floating | float) for w in words):
            data = np.asarray(words, dtype=np.float32).view(np.uint8)
        else:
            data = np.asarray([int(w) for w in words], dtype=np.uint32).view(np.uint8)
        a = host_array(arr)
        if a.__array_interface__["data"][0] % (4 * count):
            raise UsageError(f"{op}: the array base is not {4 * count}-byte aligned")
        _bytes_at(arr, index, 4 * count, 4 * count, op)[:] = data

    emulate.__name__ = emulate.__qualname__ = op.replace("st.global.", "st_global_").replace(
        ".", "_"
    )
    emulate.__doc__ = f"Emulate `{op}`: {4 * count} bytes, lowest word first (little-endian)."
    return emulate


def _ldmatrix(count: int, trans: bool) -> Callable[[SmemAddr], Any]:
    op = f"ldmatrix.x{count}{'.trans' if trans else ''}"

    def combine(addrs: list[Any]) -> list[Any]:
        rows = [
            _bytes_at(a.array, a.offset, LDMATRIX_ROW_BYTES, LDMATRIX_ROW_BYTES, op).view(np.uint16)
            for a in addrs[: 8 * count]
        ]
        mats = np.stack(rows).reshape(count, 8, 8)
        if trans:
            mats = mats.transpose(0, 2, 1)
        words = _pack(mats[:, :, 0::2], mats[:, :, 1::2]).reshape(count, WARP_SIZE)
        if count == 1:
            return [np.uint32(w) for w in words[0]]
        return [tuple(np.uint32(w) for w in words[:, lane]) for lane in range(WARP_SIZE)]

    def emulate(addr: SmemAddr) -> Any:
        if not isinstance(addr, SmemAddr):
            raise UsageError(f"{op}: pass an address from smem_addr, got {type(addr).__name__}")
        return warp_collective(op, addr, combine)

    emulate.__name__ = emulate.__qualname__ = f"ldmatrix_x{count}{'_trans' if trans else ''}"
    emulate.__doc__ = f"Emulate `{op}` across the warp (PTX fragment layout)."
    return emulate


def _elements(words: Sequence[Any], dtype: Any) -> np.ndarray:
    """Per lane, the values packed in its 32-bit word (lowest bits = lowest index), as float64:
    shape (32, 4 // itemsize of *dtype*)."""
    w = np.asarray([int(x) for x in words], dtype=np.uint32)
    return w.view(np.uint8).view(dtype).reshape(WARP_SIZE, -1).astype(np.float64)


def _mma(dtype: Any, name: str, k: int) -> Callable[..., tuple[np.float32, ...]]:
    """The warp collective of ``mma.sync.aligned.m16n8k{k}`` on *dtype* operands: in 32-bit
    words the 16-bit m16n8k16 and the FP8 m16n8k32 fragments are one layout (a word per lane
    and register; words t and t + 4 of the 8 words of K), each word holding 2 or 4 values."""
    op = f"mma.m16n8k{k}.{name}"
    per = k // 8  # values in one 32-bit word

    def combine(frags: list[Any]) -> list[tuple[np.float32, ...]]:
        regs = list(zip(*frags, strict=True))  # regs[j][lane]
        cols = per * _T[:, None] + np.arange(per)  # the K columns of word t, per lane
        a = np.zeros((16, k))
        for j, (row, word) in enumerate(((_G, 0), (_G + 8, 0), (_G, 4), (_G + 8, 4))):
            a[row[:, None], cols + per * word] = _elements(regs[j], dtype)
        b = np.zeros((k, 8))
        for j, word in enumerate((0, 4)):
            b[cols + per * word, _G[:, None]] = _elements(regs[4 + j], dtype)
        c = np.zeros((16, 8))
        for j, (c_row, c_col) in enumerate(
            ((_G, 2 * _T), (_G, 2 * _T + 1), (_G + 8, 2 * _T), (_G + 8, 2 * _T + 1))
        ):
            c[c_row, c_col] = np.asarray(regs[6 + j], dtype=np.float32)
        # Products of 16-bit and 8-bit floats are exact in float64; round the sum once to
        # float32 (the GPU's adds may round more often: the tolerance of the tests covers it).
        d = (a @ b + c).astype(np.float32)
        rows, cols2 = (_G, _G, _G + 8, _G + 8), (2 * _T, 2 * _T + 1, 2 * _T, 2 * _T + 1)
        parts = [d[r, col] for r, col in zip(rows, cols2, strict=True)]
        return [tuple(p[lane] for p in parts) for lane in range(WARP_SIZE)]

    def emulate(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):  # noqa: ANN001, ANN202
        return warp_collective(op, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), combine)

    emulate.__name__ = emulate.__qualname__ = f"mma_m16n8k{k}_{name}"
    emulate.__doc__ = (
        f"Emulate `mma.sync.aligned.m16n8k{k}.row.col.f32.{name}.{name}.f32` (float64 sums)."
    )
    return emulate


def _cp_async(size: int) -> Callable[[SmemAddr, Any, int, int], None]:
    op = f"cp.async ({size} bytes)"

    def emulate(dst: SmemAddr, src: Any, index: int, src_bytes: int) -> None:
        n = int(src_bytes)
        if not 0 <= n <= size:
            raise UsageError(f"{op}: src_bytes must be in [0, {size}], got {n}")
        out = _bytes_at(dst.array, dst.offset, size, size, f"{op} destination")
        out[n:] = 0
        if n:  # src_bytes == 0 reads nothing, as on the GPU
            out[:n] = _bytes_at(src, index, n, 1, f"{op} source")

    emulate.__name__ = emulate.__qualname__ = f"cp_async_{size}"
    emulate.__doc__ = f"Emulate a {size}-byte cp.async: copy now, zero-fill past `src_bytes`."
    return emulate


ldmatrix_x1 = _ldmatrix(1, False)
ldmatrix_x2 = _ldmatrix(2, False)
ldmatrix_x4 = _ldmatrix(4, False)
ldmatrix_x1_trans = _ldmatrix(1, True)
ldmatrix_x2_trans = _ldmatrix(2, True)
ldmatrix_x4_trans = _ldmatrix(4, True)
mma_m16n8k16_f16 = _mma(np.float16, "f16", 16)
mma_m16n8k16_bf16 = _mma(ml_dtypes.bfloat16, "bf16", 16)
mma_m16n8k32_e4m3 = _mma(ml_dtypes.float8_e4m3fn, "e4m3", 32)
mma_m16n8k32_e5m2 = _mma(ml_dtypes.float8_e5m2, "e5m2", 32)
st_global_b32 = _st_global(1)
st_global_v2_b32 = _st_global(2)
st_global_v4_b32 = _st_global(4)
cp_async_16 = _cp_async(16)
cp_async_8 = _cp_async(8)
cp_async_4 = _cp_async(4)


def cp_async_commit() -> None:
    """Emulate cp.async.commit_group: a no-op, copies already happened."""


def cp_async_wait_group(n: int) -> None:
    """Emulate cp.async.wait_group: a no-op; `n` must be a non-negative int as on the GPU."""
    if not isinstance(n, int | np.integer) or n < 0:
        raise UsageError(f"cp_async_wait_group needs a non-negative literal int, got {n!r}")


def cp_async_wait_all() -> None:
    """Emulate cp.async.wait_all: a no-op."""


def ex2_approx(x: float) -> np.float32:
    """Emulate ex2.approx.f32 (exactly rounded here: the hardware is within ~2 ulp)."""
    return np.float32(np.exp2(np.float32(x)))


def rcp_approx(x: float) -> np.float32:
    """Emulate rcp.approx.f32 (exactly rounded here: the hardware is within ~1 ulp)."""
    with np.errstate(divide="ignore"):
        return np.float32(np.float32(1.0) / np.float32(x))


def f16_to_f32(bits: int) -> np.float32:
    """Emulate f16_to_f32."""
    return np.float32(np.uint16(bits).view(np.float16))


def f32_to_f16(x: float) -> np.uint16:
    """Emulate f32_to_f16."""
    return np.float32(x).astype(np.float16).view(np.uint16)


def bf16_to_f32(bits: int) -> np.float32:
    """Emulate bf16_to_f32: the same 16-bit shift."""
    return (np.uint32(np.uint16(bits)) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: float) -> np.uint16:
    """Emulate f32_to_bf16."""
    return np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16)


def _to_fp8(x: float, dtype: Any) -> np.uint8:
    """The bits of float32 *x* rounded to FP8 *dtype* as ``cvt.rn.satfinite`` does: clipped to
    the largest finite value first (infinities too; NaN stays NaN), as ``round_to`` does."""
    top = np.float32(ml_dtypes.finfo(dtype).max)
    return np.clip(np.float32(x), -top, top).astype(dtype).view(np.uint8)


def f32_to_e4m3(x: float) -> np.uint8:
    """Emulate f32_to_e4m3."""
    return _to_fp8(x, ml_dtypes.float8_e4m3fn)


def f32_to_e5m2(x: float) -> np.uint8:
    """Emulate f32_to_e5m2."""
    return _to_fp8(x, ml_dtypes.float8_e5m2)


def f32x2_to_e4m3x2(hi: float, lo: float) -> np.uint16:
    """Emulate f32x2_to_e4m3x2."""
    return np.uint16((int(f32_to_e4m3(hi)) << 8) | int(f32_to_e4m3(lo)))


def f32x2_to_e5m2x2(hi: float, lo: float) -> np.uint16:
    """Emulate f32x2_to_e5m2x2."""
    return np.uint16((int(f32_to_e5m2(hi)) << 8) | int(f32_to_e5m2(lo)))


def e4m3_to_f32(bits: int) -> np.float32:
    """Emulate e4m3_to_f32 (the low byte of `bits`)."""
    return np.float32(np.uint8(int(bits) & 0xFF).view(ml_dtypes.float8_e4m3fn))


def e5m2_to_f32(bits: int) -> np.float32:
    """Emulate e5m2_to_f32 (the low byte of `bits`)."""
    return np.float32(np.uint8(int(bits) & 0xFF).view(ml_dtypes.float8_e5m2))


def f32_abs_bits(x: float) -> np.uint32:
    """Emulate f32_abs_bits."""
    return np.uint32(int(np.float32(x).view(np.uint32)) & 0x7FFFFFFF)


def warp_max_u32(x: int) -> np.uint32:
    """Emulate warp_max_u32: the lanes exchange their values (all 32 must arrive)."""
    return warp_collective(
        "redux.sync.max.u32", int(x), lambda xs: [np.uint32(max(xs))] * WARP_SIZE
    )


_RED_LOCK = threading.Lock()  # the simulator's threads reduce into one array


def red_global_max_u32(arr: Any, index: int, w: int) -> None:
    """Emulate red_global_max_u32 (a lock stands for the atomicity)."""
    words = host_array(arr).view(np.uint32)
    with _RED_LOCK:
        words[int(index)] = max(int(words[int(index)]), int(w))
