"""Emulated wgmma for Numba's CUDA simulator: descriptors, operand layouts, the fragment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim import block as B

_SWIZZLE_MASK = {0: 0, 32: 1, 64: 3, 128: 7}  # line bits 7.. XOR-ed into chunk bits 4..
_DESC_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}  # descriptor bits 62-63 -> span in bytes
_DESC_FIELDS = 0x3FFF | (0x3FFF << 16) | (0x3FFF << 32) | (3 << 62)
_WGMMA_N = range(8, 257, 8)


def swizzle(addr: Any, span: int) -> Any:
    """Physical shared address of logical `addr` under the `span`-byte swizzle (absolute)."""
    return addr ^ (((addr >> 7) & _SWIZZLE_MASK[span]) << 4)


def literal(op: str, n: Any, allowed: Any, accepted: str) -> int:
    """`n` as an int if it is one of `allowed` (the emulated side of a literal-int check)."""
    if not isinstance(n, int | np.integer) or int(n) not in allowed:
        raise UsageError(f"{op} needs a literal int {accepted}, got {n!r}")
    return int(n)


def wgmma_zeros(count: Any) -> tuple[np.float32, ...]:
    """A tuple of `count` float32 zeros."""
    return (np.float32(0.0),) * literal("wgmma_zeros", count, range(1, 129), "in 1..128")


def wgmma_promote(acc: Any, part: Any, scale_lo: Any, scale_hi: Any) -> tuple[np.float32, ...]:
    """`fma(part, scale, acc)` in float32, `scale_lo` for the registers of a thread's first
    row, `scale_hi` for those 8 rows below (one rounding, as the GPU's fma: the float32
    product is exact in float64, and the sum is rounded once to float32 but for ties)."""
    return _promoted("wgmma_promote", acc, part, [_pair(scale_lo, scale_hi)] * len(acc))


def wgmma_promote_split(
    acc: Any, part: Any, scale_lo: Any, scale_hi: Any, next_lo: Any, next_hi: Any, columns: Any
) -> tuple[np.float32, ...]:
    """wgmma_promote with the scales of the first `columns` columns (registers below
    `columns` // 2) and `next_lo` / `next_hi` for the rest."""
    cut = literal("wgmma_promote_split", columns, range(8, 2 * len(acc), 8),
                  f"a multiple of 8 in 8..{2 * len(acc) - 8}")  # fmt: skip
    first, rest = _pair(scale_lo, scale_hi), _pair(next_lo, next_hi)
    pairs = [first] * (cut // 2) + [rest] * (len(acc) - cut // 2)
    return _promoted("wgmma_promote_split", acc, part, pairs)


def _pair(lo: Any, hi: Any) -> tuple[np.float64, np.float64]:
    """A row pair of scales as the GPU holds them (float32), widened once for the FMAs."""
    return np.float64(np.float32(lo)), np.float64(np.float32(hi))


def _promoted(op: str, acc: Any, part: Any, pairs: list[tuple[Any, Any]]) -> tuple[np.float32, ...]:
    if len(acc) != len(part):
        raise UsageError(f"{op}: {len(part)} partial sums for {len(acc)} accumulators")
    return tuple(
        np.float32(np.float64(a) + np.float64(p) * pair[(i >> 1) & 1])
        for i, (a, p, pair) in enumerate(zip(acc, part, pairs, strict=True))
    )


def fence_operand(acc: Any) -> Any:
    """The accumulators unchanged (a compiler fence on the GPU)."""
    return acc


def wgmma_desc(addr: Any, lbo_bytes: Any, sbo_bytes: Any, swizzle: Any) -> np.uint64:
    """The §2.1 wgmma matrix descriptor, computed as on the GPU."""
    if swizzle not in tuple(_SWIZZLE_MASK):
        raise UsageError(f"wgmma_desc: swizzle must be 128, 64, 32 or 0 bytes, got {swizzle!r}")
    code = {0: 0, 128: 1, 64: 2, 32: 3}[int(swizzle)]
    fields = [(int(v) & 0x3FFFF) >> 4 for v in (addr, lbo_bytes, sbo_bytes)]
    return np.uint64(fields[0] | fields[1] << 16 | fields[2] << 32 | code << 62)


def decode_desc(desc: Any, op: str) -> tuple[int, int, int, int]:
    """(start, LBO, SBO, swizzle bytes) of a wgmma descriptor; UsageError for other forms."""
    d = int(desc)
    if d & ~_DESC_FIELDS:
        raise UsageError(
            f"{op}: descriptor {d:#018x} sets bits outside start/LBO/SBO/layout (a base offset "
            "or reserved bits); only base offset 0 with aligned swizzle atoms is emulated"
        )
    start, lbo, sbo = (((d >> shift) & 0x3FFF) << 4 for shift in (0, 16, 32))
    return start, lbo, sbo, _DESC_SWIZZLE[d >> 62]


def operand_offsets(desc: Any, rows: int, trans: int, op: str, itemsize: int = 2) -> np.ndarray:
    """Shared byte address of each element [row, k] (rows x 32 / itemsize) a descriptor describes.

    One wgmma reads 32 bytes of K: 16 two-byte or 32 one-byte (FP8) elements. K-major: rows
    8-row groups SBO apart; swizzled, a row is one `span`-byte line and K runs inside it;
    unswizzled, 8x16-byte core matrices with the K halves LBO apart (the same bytes for either
    element size). MN-major (2-byte types only): 8-K-row groups SBO apart, MN chunks of span/2
    elements LBO apart (unswizzled: 8-element groups SBO apart and 8-K-row groups LBO apart), as
    in CUTLASS's canonical GMMA layouts.
    """
    if itemsize not in (1, 2) or (trans and itemsize != 2):
        raise UsageError(
            f"{op}: operands are 2-byte (K- or MN-major) or 1-byte (K-major only) elements, got "
            f"{itemsize}-byte elements with trans={trans}"
        )
    start, lbo, sbo, span = decode_desc(desc, op)
    per_chunk = 16 // itemsize  # elements of one 16-byte core-matrix row
    r, k = np.arange(rows)[:, None], np.arange(2 * per_chunk)[None, :]
    if not trans and span:
        logical = start + (r // 8) * sbo + (r % 8) * span + itemsize * k
    elif not trans:
        half, within = k // per_chunk, k % per_chunk
        logical = start + (r // 8) * sbo + half * lbo + (r % 8) * 16 + itemsize * within
    elif span:
        chunk = span // 2
        logical = start + (r // chunk) * lbo + (k // 8) * sbo + (k % 8) * span + 2 * (r % chunk)
    else:
        logical = start + (r // 8) * sbo + (k // 8) * lbo + (k % 8) * 16 + 2 * (r % 8)
    return swizzle(logical, span)


def _read_operand(block: B.Block, desc: Any, rows: int, trans: int, dtype: Any, op: str):
    size = np.dtype(dtype).itemsize
    addrs = operand_offsets(desc, rows, trans, op, size)
    lo, hi = int(addrs.min()), int(addrs.max()) + size
    window = block.smem(lo, hi - lo, size, op)
    raw = window[(addrs - lo)[..., None] + np.arange(size)].copy()
    return raw.view(dtype)[..., 0].astype(np.float64)


_T = np.arange(B.WARPGROUP_SIZE)[:, None]


def fragment_coords(regs: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) [thread, register] of the m64nNk16 f32 accumulator fragment (§1.2)."""
    i = np.arange(regs)[None, :]
    w, lane = _T // 32, _T % 32
    return 16 * w + lane // 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


def _wgmma(dtype: Any, name: str):
    """The emulation of wgmma with `dtype` operands: m64nNk16 with literal trans_a/trans_b for
    2-byte types, m64nNk32 without transposes (K-major only) for FP8."""
    transposes = np.dtype(dtype).itemsize == 2
    op = f"wgmma.m64nNk{32 // np.dtype(dtype).itemsize}.f32.{name}.{name}"
    uniform_args = "descriptors, scale_d" + (" and transpose bits" if transposes else "")

    def combine(items: list[Any]) -> list[tuple[np.float32, ...]]:
        block, acc, *uniform = items[0]
        if any(item[2:] != tuple(uniform) for item in items):
            raise UsageError(f"{op}: {uniform_args} differ across the warpgroup")
        desc_a, desc_b, scale_d, ta, tb = uniform
        regs = len(acc)
        a = _read_operand(block, desc_a, 64, ta, dtype, op)
        b = _read_operand(block, desc_b, 2 * regs, tb, dtype, op)
        d = a @ b.T  # products of 16- and 8-bit floats are exact in float64
        rows, cols = fragment_coords(regs)
        if scale_d:
            c = np.zeros_like(d)
            c[rows, cols] = np.asarray([item[1] for item in items], np.float32)
            d += c
        out = d.astype(np.float32)[rows, cols]
        return [tuple(out[t]) for t in range(B.WARPGROUP_SIZE)]

    def issue(acc: Any, desc_a: Any, desc_b: Any, scale_d: Any, ta: int, tb: int) -> Any:
        block, tid = B.current(op)
        regs = len(acc)
        if 2 * regs not in _WGMMA_N:
            raise UsageError(
                f"{op}: N = 2 * len(acc) must be one of 8, 16, 24, ..., 256, got {2 * regs}"
            )
        lane, exchange = block.warpgroup(tid, op)
        item = (block, tuple(acc), int(desc_a), int(desc_b), bool(scale_d), ta, tb)
        return exchange.exchange(lane, f"{op} n{2 * regs}", item, combine)

    def emulate_16bit(
        acc: Any, desc_a: Any, desc_b: Any, scale_d: Any, trans_a: Any, trans_b: Any
    ) -> Any:
        ta = literal(op, trans_a, (0, 1), "trans_a 0 or 1")
        tb = literal(op, trans_b, (0, 1), "trans_b 0 or 1")
        return issue(acc, desc_a, desc_b, scale_d, ta, tb)

    def emulate_fp8(acc: Any, desc_a: Any, desc_b: Any, scale_d: Any) -> Any:
        return issue(acc, desc_a, desc_b, scale_d, 0, 0)

    emulate: Callable[..., Any] = emulate_16bit if transposes else emulate_fp8
    emulate.__name__ = emulate.__qualname__ = f"wgmma_{name}"
    emulate.__doc__ = f"Emulate `wgmma.mma_async ... .f32.{name}.{name}` over the warpgroup."
    return emulate


wgmma_f16 = _wgmma(np.float16, "f16")
wgmma_bf16 = _wgmma(ml_dtypes.bfloat16, "bf16")
wgmma_e4m3 = _wgmma(ml_dtypes.float8_e4m3fn, "e4m3")
wgmma_e5m2 = _wgmma(ml_dtypes.float8_e5m2, "e5m2")
