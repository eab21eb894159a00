"""Python emulations of mmaplug.cuda.sm90 for Numba's CUDA simulator (TMA, mbarrier, wgmma).

As in ``mmaplug.sim.intrinsics``: one function for each name ``mmaplug.cuda.sm90.__all__``
declares, bound there by ``mmaplug.cuda.binding.bind``; the wgmma ones come from ``wgmma``. A
docstring here says what the emulation does beyond the PTX stub's.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim import block as B
from mmaplug.sim.block import warp_collective
from mmaplug.sim.tensormaps import MapSpec, lookup_at
from mmaplug.sim.warp import WARP_SIZE
from mmaplug.sim.wgmma import (  # noqa: F401 - emulations of mmaplug.cuda.sm90 names
    fence_operand,
    literal,
    swizzle,
    wgmma_bf16,
    wgmma_desc,
    wgmma_e4m3,
    wgmma_e5m2,
    wgmma_f16,
    wgmma_promote,
    wgmma_promote_split,
    wgmma_zeros,
)

CHUNK = 16  # swizzling moves 16-byte chunks inside 128-byte lines


# --- Shared memory, barriers, fences -------------------------------------------------------------


def shared_base(arr: Any) -> int:
    """Register `arr` as this block's shared window; return its fake (not 1024-aligned) base."""
    block, _ = B.current("shared_base")
    return block.register(arr)


def mbarrier_init(bar: Any, count: Any) -> None:
    """Emulate mbarrier_init."""
    B.current("mbarrier_init")[0].init_mbarrier(bar, count)


def mbarrier_arrive(bar: Any) -> None:
    """Emulate mbarrier_arrive."""
    B.current("mbarrier_arrive")[0].update_mbarrier(bar, 1, 0, "mbarrier_arrive")


def mbarrier_arrive_expect_tx(bar: Any, nbytes: Any) -> None:
    """Emulate mbarrier_arrive_expect_tx."""
    op = "mbarrier_arrive_expect_tx"
    B.current(op)[0].update_mbarrier(bar, 1, int(nbytes), op)


def mbarrier_wait(bar: Any, parity: Any) -> None:
    """Emulate mbarrier_wait: sleep (no spin) until the phase completed."""
    B.current("mbarrier_wait")[0].wait_mbarrier(bar, int(parity), "mbarrier_wait")


def mbarrier_wait_cluster(bar: Any, parity: Any) -> None:
    """Emulate mbarrier_wait_cluster (the simulator's memory is sequentially consistent)."""
    B.current("mbarrier_wait_cluster")[0].wait_mbarrier(bar, int(parity), "mbarrier_wait_cluster")


def mbarrier_try_wait(bar: Any, parity: Any) -> np.uint32:
    """Emulate mbarrier_try_wait (without the hardware suspend)."""
    block, _ = B.current("mbarrier_try_wait")
    with block.cond:
        done = block.mbarrier(bar, "mbarrier_try_wait").completed(int(parity))
    return np.uint32(done)


def named_barrier_sync(barrier_id: Any, nthreads: Any) -> None:
    """Emulate named_barrier_sync."""
    B.current("named_barrier_sync")[0].named_barrier(barrier_id, nthreads, True, "bar.sync")


def named_barrier_arrive(barrier_id: Any, nthreads: Any) -> None:
    """Emulate named_barrier_arrive."""
    B.current("named_barrier_arrive")[0].named_barrier(barrier_id, nthreads, False, "bar.arrive")


def ld_shared_b32(addr: Any) -> np.uint32:
    """Emulate ld_shared_b32."""
    block, _ = B.current("ld_shared_b32")
    return block.smem(addr, 4, 4, "ld.shared.b32").view(np.uint32)[0]


def warp_uniform(x: Any) -> np.uint32:
    """Emulate warp_uniform: the lanes exchange their values (all 32 must arrive); each gets lane
    0's."""
    return warp_collective("shfl.sync.idx.b32", int(x), lambda xs: [np.uint32(xs[0])] * WARP_SIZE)


def st_shared_b32(addr: Any, value: Any) -> None:
    """Emulate st_shared_b32."""
    block, _ = B.current("st_shared_b32")
    dtype = np.float32 if isinstance(value, float | np.floating) else np.uint32
    word = np.array([value if dtype is np.float32 else int(value) & 0xFFFFFFFF], dtype)
    block.smem(addr, 4, 4, "st.shared.b32")[:] = word.view(np.uint8)


def _stmatrix(trans: bool):
    op = f"stmatrix.x4{'.trans' if trans else ''}"

    def combine(items: list[Any]) -> list[None]:
        block = items[0][0]
        words = np.array([[int(r) for r in regs] for _, _, regs in items], np.uint32)
        halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).astype(np.uint16)  # [lane,j,h]
        lane = np.arange(WARP_SIZE)
        for j in range(4):
            mat = np.empty((8, 8), np.uint16)  # mat[row, col] as stored
            rows, cols = lane >> 2, 2 * (lane & 3)
            if trans:
                rows, cols = cols, rows
                mat[rows, cols], mat[rows + 1, cols] = halves[:, j, 0], halves[:, j, 1]
            else:
                mat[rows, cols], mat[rows, cols + 1] = halves[:, j, 0], halves[:, j, 1]
            for r in range(8):
                dst = block.smem(items[8 * j + r][1], CHUNK, CHUNK, op)
                dst[:] = mat[r].view(np.uint8)
        return [None] * WARP_SIZE

    def emulate(addr: Any, r0: Any, r1: Any, r2: Any, r3: Any) -> None:
        block, _ = B.current(op)
        warp_collective(op, (block, int(addr), (r0, r1, r2, r3)), combine)

    emulate.__name__ = emulate.__qualname__ = f"stmatrix_x4{'_trans' if trans else ''}"
    emulate.__doc__ = f"Emulate `{op}` across the warp (lanes 8j+r address row r of matrix j)."
    return emulate


stmatrix_x4 = _stmatrix(False)
stmatrix_x4_trans = _stmatrix(True)


def _no_op(name: str, doc: str):
    def emulate() -> None:
        B.current(name)

    emulate.__name__ = emulate.__qualname__ = name
    emulate.__doc__ = doc
    return emulate


fence_mbarrier_init = _no_op("fence_mbarrier_init", "Emulate fence.mbarrier_init: a no-op.")
fence_proxy_async = _no_op("fence_proxy_async", "Emulate fence.proxy.async: a no-op.")
wgmma_fence = _no_op("wgmma_fence", "Emulate wgmma.fence: a no-op.")
wgmma_commit_group = _no_op("wgmma_commit_group", "A no-op: emulated wgmmas complete at once.")


def bulk_store(dst: Any, src: Any, nbytes: Any) -> None:
    """Emulate cp.async.bulk shared -> global: the copy joins this thread's open bulk group and
    happens when a bulk wait retires the group, reading shared memory then. A kernel that
    rewrites `src` before waiting stores the new bytes, and one that never waits stores nothing:
    both bugs show in the simulator (TMA stores, by contrast, complete at once)."""
    block, tid = B.current("bulk_store")
    dst, n = int(dst), int(nbytes)
    if n <= 0 or n % 16 or dst % 16:
        raise UsageError(
            f"bulk_store: {n} bytes to global {dst:#x}; the size must be a positive multiple "
            "of 16 and the address 16-byte aligned"
        )
    block.smem(src, n, 16, "bulk_store")  # the source must be this block's shared memory now
    with block.cond:
        block.bulk.setdefault(tid, [[]])[-1].append((dst, int(src), n))


def bulk_commit_group() -> None:
    """Emulate bulk_commit_group."""
    block, tid = B.current("bulk_commit_group")
    with block.cond:
        block.bulk.setdefault(tid, [[]]).append([])


def _retire_bulk(op: str, n: Any) -> None:
    """Do the copies of this thread's oldest committed bulk groups until at most `n` remain."""
    literal(op, n, range(1 << 16), "n >= 0")
    block, tid = B.current(op)
    with block.cond:
        groups = block.bulk.setdefault(tid, [[]])
        while len(groups) - 1 > int(n):
            for dst, src, nbytes in groups.pop(0):
                ctypes.memmove(dst, block.smem(src, nbytes, 16, op).ctypes.data, nbytes)


def bulk_wait_group_read(n: Any) -> None:
    """Emulate cp.async.bulk.wait_group.read: copy the groups beyond the newest `n` now (a
    literal `n` >= 0, as on the GPU)."""
    _retire_bulk("bulk_wait_group_read", n)


def bulk_wait_group(n: Any) -> None:
    """Emulate cp.async.bulk.wait_group; see bulk_wait_group_read."""
    _retire_bulk("bulk_wait_group", n)


def wgmma_wait_group(n: Any) -> None:
    """A no-op (computing eagerly is a legal schedule); `n` a non-negative literal."""
    literal("wgmma_wait_group", n, range(1 << 16), "n >= 0")


def setmaxnreg_inc(n: Any) -> None:
    """A no-op; `n` must be a multiple of 8 in 24..256 as on the GPU."""
    literal("setmaxnreg_inc", n, range(24, 257, 8), "(a multiple of 8 in 24..256)")


def setmaxnreg_dec(n: Any) -> None:
    """A no-op; `n` must be a multiple of 8 in 24..256 as on the GPU."""
    literal("setmaxnreg_dec", n, range(24, 257, 8), "(a multiple of 8 in 24..256)")


# --- TMA -----------------------------------------------------------------------------------------


def _tensor_map(tmap: Any) -> tuple[MapSpec, int]:
    return lookup_at(tmap)


def prefetch_tensormap(tmap: Any) -> None:
    """Emulate prefetch.tensormap: check that `tmap` holds a simulator map."""
    _tensor_map(tmap)


def fence_tensormap_acquire(tmap: Any) -> None:
    """Emulate fence.proxy.tensormap::generic.acquire: check that `tmap` holds a map."""
    _tensor_map(tmap)


def _global_view(spec: MapSpec, address: int) -> np.ndarray:
    """The tensor as a strided uint8 array [dims reversed..., itemsize] at `address`."""
    size = spec.dtype.itemsize
    extent = size + sum(
        (d - 1) * s for d, s in zip(spec.dims, (size, *spec.strides_bytes), strict=True)
    )
    raw = np.frombuffer(memoryview((ctypes.c_uint8 * extent).from_address(address)), np.uint8)
    shape = (*spec.dims[::-1], size)
    strides = (*spec.strides_bytes[::-1], size, 1)
    return np.lib.stride_tricks.as_strided(raw, shape, strides, writeable=True)


def _box_region(spec: MapSpec, coords: tuple[int, ...]):
    """(slices into the tensor, slices into the box) of the in-bounds part, or None."""
    tensor, box = [], []
    for c, d, b in zip(coords[::-1], spec.dims[::-1], spec.box[::-1], strict=True):
        lo, hi = max(c, 0), min(c + b, d)
        if lo >= hi:
            return None
        tensor.append(slice(lo, hi))
        box.append(slice(lo - c, hi - c))
    return tuple(tensor), tuple(box)


def _box_chunks(spec: MapSpec, addr: int, op: str) -> np.ndarray:
    """Where the box's 16-byte chunks land: chunk indices from `addr` after the swizzle."""
    span, row = spec.swizzle, spec.box[0] * spec.dtype.itemsize
    need = 8 * span if span else 128
    if addr % need:
        raise UsageError(
            f"{op}: the shared address {addr:#x} is not {need}-byte aligned, as TMA with "
            f"{span or 'no'}-byte swizzle needs (round shared_base up)"
        )
    if span and row != span:
        raise UsageError(
            f"{op}: a {span}-byte swizzled box row of {row} bytes is not emulated; make the "
            f"box row exactly {span} bytes"
        )
    logical = addr + CHUNK * np.arange(spec.box_bytes // CHUNK)
    return (swizzle(logical, span) - addr) // CHUNK


def _tma(rank: int, store: bool):
    op = f"tma_{'store' if store else 'load'}_{rank}d"

    def run(tmap: Any, coords: tuple[Any, ...], smem_addr: Any, bar: Any, into: Any = None) -> None:
        """The copy; a load lands in block *into* (a cluster peer) when given."""
        block = into or B.current(op)[0]
        spec, address = _tensor_map(tmap)
        if spec.rank != rank:
            raise UsageError(f"{op}: the tensor map has rank {spec.rank}, not {rank}")
        chunks = _box_chunks(spec, int(smem_addr), op)
        smem = block.smem(smem_addr, spec.box_bytes, 1, op).reshape(-1, CHUNK)
        box_shape = (*spec.box[::-1], spec.dtype.itemsize)
        signed = tuple((int(c) + 2**31) % 2**32 - 2**31 for c in coords)
        if (signed[0] * spec.dtype.itemsize) % CHUNK:
            raise UsageError(
                f"{op}: the innermost coordinate {signed[0]} starts "
                f"{signed[0] * spec.dtype.itemsize} bytes into a row; TMA needs a multiple of "
                f"{CHUNK} bytes (the H200 raises an illegal instruction)"
            )
        if store and min(signed) < 0:
            raise UsageError(
                f"{op}: coordinates {signed}: a TMA store starts inside the tensor (a negative "
                "innermost coordinate faulted on the H200); it clips only past the far edges"
            )
        region = _box_region(spec, signed)
        if store:
            box = smem[chunks].reshape(box_shape)
            if region is not None:
                _global_view(spec, address)[region[0]] = box[region[1]]
            return
        box = np.zeros(box_shape, np.uint8)
        if region is not None:
            box[region[1]] = _global_view(spec, address)[region[0]]
        smem[chunks] = box.reshape(-1, CHUNK)
        block.update_mbarrier(bar, 0, -spec.box_bytes, op)

    return run


_load2, _load3, _store2, _store3 = _tma(2, False), _tma(3, False), _tma(2, True), _tma(3, True)


def tma_load_2d(dst: Any, tmap: Any, c0: Any, c1: Any, bar: Any) -> None:
    """Emulate tma_load_2d: copy at once, swizzled by absolute shared address."""
    _load2(tmap, (c0, c1), dst, bar)


def tma_load_3d(dst: Any, tmap: Any, c0: Any, c1: Any, c2: Any, bar: Any) -> None:
    """Emulate tma_load_3d; see tma_load_2d."""
    _load3(tmap, (c0, c1, c2), dst, bar)


def tma_store_2d(tmap: Any, c0: Any, c1: Any, src: Any) -> None:
    """Emulate tma_store_2d: un-swizzle the box and write it at once."""
    _store2(tmap, (c0, c1), src, None)


def tma_store_3d(tmap: Any, c0: Any, c1: Any, c2: Any, src: Any) -> None:
    """Emulate tma_store_3d; see tma_store_2d."""
    _store3(tmap, (c0, c1, c2), src, None)


# --- Clusters (sim.cluster runs a cluster's blocks together; alone, a block is one) --------------

# mapa's result: the shared address with (rank + 1) above every simulated window
_PEER_SHIFT = 28
_OFFSET_MASK = (1 << _PEER_SHIFT) - 1


def _peer(block: B.Block, rank: int, op: str) -> B.Block:
    if not 0 <= rank < len(block.cluster):
        raise UsageError(
            f"{op}: cluster rank {rank} does not exist in a cluster of {len(block.cluster)} "
            "(launch with clusters: mmaplug.sim.cluster.clusters_of in the simulator)"
        )
    return block.cluster[rank]


def _live_peer(block: B.Block, rank: int, op: str) -> B.Block:
    """The block of cluster rank *rank*, which must not have exited: a CTA's shared memory,
    its barriers with it, is gone once every one of its threads exited, and a peer's remote
    arrive, multicast or load there is undefined on the GPU (a kernel keeps its CTAs until no
    peer may still reach them: a closing ``barrier.cluster`` or the producer's tail)."""
    target = _peer(block, rank, op)
    threads = target.seen()
    if (
        target is not block
        and len(threads) == target.nthreads
        and all(getattr(t, "exited", False) for _, t in threads)
    ):
        raise UsageError(
            f"{op}: cluster rank {rank} has exited, and its shared memory with it; a CTA must "
            "not leave while a peer may still arrive on its barriers or write its shared memory"
        )
    return target


def _rank(block: B.Block) -> int:
    return block.cluster.index(block)


def cluster_ctarank() -> np.uint32:
    """Emulate cluster_ctarank."""
    return np.uint32(_rank(B.current("cluster_ctarank")[0]))


def cluster_id() -> np.uint32:
    """Emulate %clusterid.x: blockIdx.x over the cluster size (1-D clusters along x)."""
    block, _ = B.current("cluster_id")
    thread: Any = threading.current_thread()  # a simulator BlockThread
    return np.uint32(thread.blockIdx.x // len(block.cluster))


def mapa_shared(addr: Any, rank: Any) -> Any:
    """Emulate mapa_shared: the offset tagged with `rank` + 1 above every shared window."""
    block, _ = B.current("mapa_shared")
    _peer(block, int(rank), "mapa_shared")
    return int(addr) & _OFFSET_MASK | (int(rank) + 1) << _PEER_SHIFT


def mbarrier_arrive_cluster(bar: Any) -> None:
    """Emulate mbarrier_arrive_cluster: on the block the mapa_shared tag names."""
    op = "mbarrier_arrive_cluster"
    block, _ = B.current(op)
    tag = int(bar) >> _PEER_SHIFT
    target = _live_peer(block, tag - 1, op) if tag else block
    target.update_mbarrier(int(bar) & _OFFSET_MASK, 1, 0, op)


def tma_load_3d_multicast(
    dst: Any, tmap: Any, c0: Any, c1: Any, c2: Any, bar: Any, mask: Any
) -> None:
    """Emulate tma_load_3d_multicast: one tma_load_3d into each block `mask` names."""
    op = "tma_load_3d_multicast"
    block, _ = B.current(op)
    bits = int(mask)
    if not 0 < bits < 1 << len(block.cluster):
        raise UsageError(f"{op}: mask {bits:#x} names no rank or a rank past the cluster's")
    for rank in range(len(block.cluster)):
        if bits >> rank & 1:
            _load3(tmap, (c0, c1, c2), dst, bar, _live_peer(block, rank, op))


def ld_shared_cluster_f32(addr: Any) -> np.float32:
    """Emulate ld_shared_cluster_f32: from the block the mapa_shared tag names (an untagged
    address is this block's own)."""
    op = "ld_shared_cluster_f32"
    block, _ = B.current(op)
    tag = int(addr) >> _PEER_SHIFT
    target = _live_peer(block, tag - 1, op) if tag else block
    return target.smem(int(addr) & _OFFSET_MASK, 4, 4, "ld.shared::cluster.f32").view(np.float32)[0]


def fence_acq_rel_cluster() -> None:
    """Emulate fence_acq_rel_cluster: nothing to order in the simulator."""


def fence_acq_rel_gpu() -> None:
    """Emulate fence_acq_rel_gpu: nothing to order in the simulator."""


def cluster_sync() -> None:
    """Emulate cluster_sync."""
    B.current("cluster_sync")[0].sync_cluster("cluster_sync")


def cluster_sync_after_init() -> None:
    """Emulate cluster_sync_after_init: the simulator's cluster barrier orders every access."""
    B.current("cluster_sync_after_init")[0].sync_cluster("cluster_sync_after_init")
