"""The hopper epilogue's TMA stores: which kernels take them, the boxes' layout in shared memory
(the swizzle the consumers write against the one TMA reads), and the output maps."""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.ir.dtypes import DType
from mmaplug.plugins.hopper.config import HopperKernelConfig
from mmaplug.plugins.hopper.smem import epilogue_chunk, tma_buffers, tma_row_bytes, tma_swizzle
from mmaplug.sim.wgmma import swizzle
from mmaplug.tune.corpus import TuneProblem

pytest.importorskip("numba")  # the kernel config is the build step's (numba is its extra)


def _config(problem: TuneProblem) -> HopperKernelConfig:
    pm = mp.make_plugin_manager(block=["decode", "ampere"], load_entrypoints=False)
    return mp.compile(problem.fusion(), "h200", pm=pm)._artifact.config


@pytest.mark.parametrize(
    ("problem", "tma"),
    [
        (TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16"), True),
        (TuneProblem(m=2048, n=2048, k=128, batch=16, dtype="float16"), True),
        (TuneProblem(m=8192, n=8192, k=8192, dtype="float8_e4m3fn", scale="block"), True),
        # arithmetic in the epilogue: each chunk would wait for the previous store's reads
        (TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16", epilogue="bias_gelu"), False),
        (TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="row"), False),
        # one 64x128 tile a CTA: no next tile for the stores to drain under
        (TuneProblem(m=1000, n=1000, k=1000, dtype="bfloat16"), False),
        # split-K through the workspace: its partials go to the reduce kernel
        (TuneProblem(m=256, n=256, k=16384, dtype="bfloat16"), False),
        # one row of each 64-row tile: the threads store that row, TMA a fenced chunk
        (TuneProblem(m=1, n=4096, k=128, batch=32, dtype="bfloat16"), False),
    ],
    ids=lambda v: v.key if isinstance(v, TuneProblem) else str(v),
)
def test_default_stores_by_tma_where_measured_faster(problem: TuneProblem, tma: bool) -> None:
    """Casts-only epilogues of grids with more work units than resident CTAs, of problems that
    fill a tile in M and N, store by TMA (BENCHMARKS.md runs 151-153, 158), named ``_ts``; the
    rest keep the threads' stores."""
    config = _config(problem)
    assert config.packed_stores or not tma
    assert config.tma_stores is tma
    assert ("_ps_ts" in config.kernel_name) is tma


def test_tma_stores_need_packed_stores_without_a_workspace() -> None:
    with pytest.raises(ValueError, match="tma_stores needs packed_stores"):
        HopperKernelConfig(smem_epilogue=True, tma_stores=True)
    with pytest.raises(ValueError, match="tma_stores needs packed_stores"):
        HopperKernelConfig(smem_epilogue=True, packed_stores=True, tma_stores=True, splitk=2)


@pytest.mark.parametrize(
    ("outputs", "wn", "buffers"),
    [
        ((DType.bfloat16,), 256, 2),  # 64-byte rows: two 4 KB boxes in 64 x 160 bytes
        ((DType.float32,), 256, 1),  # 128-byte rows
        ((DType.bfloat16, DType.float16), 64, 1),
        ((DType.float8_e4m3fn,), 64, 2),  # 32-byte rows
        ((DType.float8_e4m3fn,), 72, 0),  # chunks of 8: 8-byte rows, not a 16-byte unit
        ((DType.float32, DType.bfloat16), 256, 0),  # 192 bytes a row: no room
    ],
)
def test_tma_buffers(outputs: tuple[DType, ...], wn: int, buffers: int) -> None:
    assert tma_buffers(outputs, wn) == buffers


@pytest.mark.parametrize(
    ("dtype", "wn"),  # rows of 16 (no swizzle), 32, 64 and 128 bytes
    [
        (DType.float16, 256),
        (DType.float16, 48),
        (DType.float16, 24),
        (DType.float32, 256),
        (DType.float32, 48),
        (DType.float32, 24),
        (DType.float8_e4m3fn, 256),
        (DType.float8_e4m3fn, 48),
    ],  # fmt: skip
)
def test_consumers_write_where_the_tma_store_reads(dtype: DType, wn: int) -> None:
    """Each thread's element pair lands where a TMA store of that box swizzle reads element
    (row, column) (the simulator's swizzle of its logical address, as loads use it): the
    generated per-row XOR of the 16-byte unit, evaluated for every thread and column group."""
    from mmaplug.plugins.hopper.packed_epilogue import _swizzle_xor

    row = tma_row_bytes(dtype, wn)
    span, size = tma_swizzle(row), dtype.itemsize
    base = 3 * 1024  # a box's shared address: 1024-aligned
    seen = set()
    for lane in range(128):  # a consumer warpgroup's threads
        frow, fcol = 16 * (lane // 32) + lane % 32 // 4, 2 * (lane % 4)
        xb = eval(_swizzle_xor(f"{frow} * {row}", span))  # the generated expression
        for h in (0, 1):  # the fragment's rows frow and frow + 8 share the XOR
            for q in range(epilogue_chunk(wn) // 8):
                got = base + (frow + 8 * h) * row + ((fcol * size + 8 * q * size) ^ xb)
                logical = base + (frow + 8 * h) * row + (8 * q + fcol) * size
                want = int(swizzle(np.array([logical]), span)[0]) if span else logical
                assert got == want, (lane, h, q)
                seen.add(got)
    assert len(seen) == 64 * epilogue_chunk(wn) // 2  # every pair its own place
