"""TMA tensor maps of the operands: what each box is, and their words cached per data address."""

from __future__ import annotations

import threading
from typing import Final

import numpy as np

from mmaplug.analysis.patterns import DimRole
from mmaplug.cuda.kernel_views import DeviceTensor
from mmaplug.cuda.tensormap import TensorMapSpec, encode
from mmaplug.ir.dtypes import DType

from .config import HopperKernelConfig
from .smem import STAGED_ROWS, epilogue_chunk, tma_row_bytes, tma_swizzle
from .tiles import BOX_INNER, SWIZZLE_BYTES, k_box

MAP_WORDS: Final = 16  # a CUtensorMap is 128 bytes
_TMA_ALIGN: Final = 16
# distinct (A address, B address[es]) keys whose maps stay on the device per bound launch
MAP_CACHE_SIZE: Final = 16


def operand_spec(
    cfg: HopperKernelConfig, name: str, tensor: DeviceTensor, extents: dict[DimRole, int]
) -> TensorMapSpec:
    """The 3-D map ``{contiguous dim, other dim, batch}`` of operand *name* ("a" or "b").

    *extents*: M, N, K and BATCH of the problem. A batch stride of 0 (an operand shared by
    every batch) becomes a batch extent of 1, and the kernel reads batch coordinate 0.
    """
    rows = DimRole.M if name == "a" else DimRole.N
    k_inner = cfg.a_k_inner if name == "a" else cfg.b_k_inner
    inner, outer = (DimRole.K, rows) if k_inner else (rows, DimRole.K)
    strides = tensor.role_strides
    itemsize = cfg.operand_dtype.itemsize
    batched = strides[DimRole.BATCH] != 0 and extents[DimRole.BATCH] > 1
    outer_bytes = strides[outer] * itemsize
    if extents[outer] == 1:  # a single row or column: any legal stride describes it
        outer_bytes = _round16(extents[inner] * itemsize)
    batch_bytes = (
        strides[DimRole.BATCH] * itemsize
        if batched
        else _round16(extents[outer] * max(outer_bytes, itemsize))
    )
    bm, _, bk = cfg.cta_tile
    # a CTA of a cluster multicasts its part of the shared K-major tile (B's along M, A's
    # along N), and a horizontal stage holds one n_out-row box of each B (kernel_codegen)
    part = (bm if name == "a" else cfg.n_out) // cfg.sharing(name)
    box_outer = part if k_inner else bk
    return TensorMapSpec(
        dtype=cfg.operand_dtype,
        dims=(extents[inner], extents[outer], extents[DimRole.BATCH] if batched else 1),
        strides_bytes=(outer_bytes, batch_bytes),
        box=(k_box(cfg.operand_dtype) if k_inner else BOX_INNER, box_outer, 1),
        swizzle=SWIZZLE_BYTES,
    )


def output_spec(
    cfg: HopperKernelConfig, dtype: DType, tensor: DeviceTensor, m: int, n: int, batch: int
) -> TensorMapSpec:
    """The 3-D map ``{N, M, batch}`` a ``tma_stores`` kernel stores output *tensor* through:
    boxes of one staged chunk, ``STAGED_ROWS`` rows of ``epilogue_chunk`` columns, swizzled as
    the consumer wrote them (``config.tma_swizzle``). Stores clip at M and N."""
    strides, size = tensor.role_strides, dtype.itemsize
    row_bytes = strides[DimRole.M] * size if m > 1 else _round16(n * size)
    batch_bytes = strides[DimRole.BATCH] * size if batch > 1 else _round16(m * row_bytes)
    chunk = epilogue_chunk(cfg.warp_tile[1])
    return TensorMapSpec(
        dtype=dtype,
        dims=(n, m, batch),
        strides_bytes=(row_bytes, batch_bytes),
        box=(chunk, STAGED_ROWS, 1),
        swizzle=tma_swizzle(tma_row_bytes(dtype, cfg.warp_tile[1])),
    )


def maps_bytes(cfg: HopperKernelConfig) -> int:
    """The bytes of the kernel's ``maps``, which it takes by value: A's map, each B's, then
    those of the outputs a ``tma_stores`` kernel stores."""
    return 8 * MAP_WORDS * (1 + cfg.horizontal + len(cfg.tma_outputs))


def _round16(nbytes: int) -> int:
    return max(_TMA_ALIGN, -(-nbytes // _TMA_ALIGN) * _TMA_ALIGN)


def is_batched(tensor: DeviceTensor, batch: int) -> int:
    """1 when *tensor* varies along the batch (the kernel's batch coordinate follows it)."""
    return int(tensor.role_strides[DimRole.BATCH] != 0 and batch > 1)


def check_operand(what: str, spec: TensorMapSpec, address: int) -> list[str]:
    """Why TMA cannot load this operand (empty when it can)."""
    return [f"{what}: {p}" for p in spec.violations(address)]


class HostMaps:
    """The A and B maps (a horizontal fusion's B maps after A's, then a ``tma_stores``
    kernel's output maps; 128 bytes each) as the host words the kernel takes by value
    (``maps`` is a grid-constant parameter), encoded once per distinct tuple of addresses (a
    "pair" below).

    A map embeds its tensor's address, so new operand buffers need new maps: they are encoded
    on first sight and reused while the pair stays among the ``MAP_CACHE_SIZE`` kept: the
    oldest pair goes first unless it was used since the last eviction (then it goes to the
    back: a second chance, LRU's order without bookkeeping on every use). A launch copies the
    words into its parameters when it is queued (a CUDA graph's kernel node keeps its own
    copy), so nothing lives on the device and nothing is pinned. A hit takes no lock; the
    caller holds the returned array until its launch is queued.

    Each pair keeps its words' host address beside them: a bound launch points its parameter
    block there on every call, and numpy's ``ctypes.data`` costs ~2 us a call.
    """

    def __init__(self, a: TensorMapSpec, *rest: TensorMapSpec) -> None:
        self._specs = (a, *rest)
        self._cache: dict[tuple[int, ...], tuple[np.ndarray, int]] = {}  # oldest first
        self._used: set[tuple[int, ...]] = set()  # pairs used since the last eviction
        self._lock = threading.Lock()

    def get(
        self,
        a_address: int,
        b_address: int,
        more_b: tuple[int, ...] = (),
        outputs: tuple[int, ...] = (),
    ) -> tuple[np.ndarray, int]:
        """The ``maps`` kernel argument for operands at these addresses: its host words, and
        their address.

        *more_b*: the addresses of B operands 1, 2, ... of a horizontal fusion; *outputs*:
        those of the stored outputs of a ``tma_stores`` kernel.
        """
        key = (a_address, b_address, *more_b, *outputs)
        entry = self._cache.get(key)
        if entry is not None:
            self._used.add(key)
            return entry
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                if len(self._cache) >= MAP_CACHE_SIZE:
                    self._evict()
                words = np.concatenate(
                    [encode(spec, addr) for spec, addr in zip(self._specs, key, strict=True)]
                ).astype(np.uint64)
                entry = self._cache[key] = (words, words.ctypes.data)
        return entry

    def _evict(self) -> None:
        """Drop the oldest pair not used since the last eviction (else the oldest)."""
        for old in list(self._cache):
            if old not in self._used:
                break
            self._cache[old] = self._cache.pop(old)  # its second chance: to the back
        else:
            old = next(iter(self._cache))
        del self._cache[old]
        self._used.clear()
