"""Per-block state of the simulated sm_90 features: shared windows, mbarriers, named barriers."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim.threads import block_dim, current_manager, host_array
from mmaplug.sim.warp import WARP_SIZE, Warp

WARPGROUP_SIZE = 128
# The first shared array of a block starts here: deliberately not 1024-byte aligned, so that a
# kernel that forgets to align its swizzled buffers fails in the simulator too.
FAKE_SHARED_BASE = 0x230
WINDOW_GAP = 1024
# Waits (mbarrier, named barriers) give up after this long: a deadlock on the GPU. A deadlock
# every thread is part of is found at once by the scans; this is for the rest. A ping-pong
# consumer of a simulated CTA pair (768 threads) legitimately waits over 60 s for the other's
# main loop on a loaded 2-core machine.
WAIT_TIMEOUT_S = 600.0
CLUSTER_WAIT_TIMEOUT_S = 1800.0
CLUSTER_SCAN_S = 5.0
# A waiting thread looks for dead or all-waiting siblings this often.
_CHECK_S = 0.25
_ABORTED = "simulated kernel aborted"


class MBarrier:
    """The state of one mbarrier object: completed phases, pending arrivals, transaction bytes."""

    def __init__(self, count: int) -> None:
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def __repr__(self) -> str:
        return (
            f"phase {self.phase}, {self.pending} of {self.count} arrivals pending, "
            f"tx-count {self.tx}"
        )

    def update(self, arrivals: int, tx: int, op: str) -> bool:
        """Apply `arrivals` and a tx-count change; return True when a phase completed."""
        self.pending -= arrivals
        self.tx += tx
        if self.pending < 0:
            raise UsageError(f"{op}: more arrivals than the mbarrier's count ({self!r})")
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            return True
        return False

    def completed(self, parity: int) -> bool:
        """try_wait.parity: true once the phase with `parity` is the one just completed."""
        return (self.phase & 1) != (parity & 1)


class NamedBarrier:
    """`bar.sync` / `bar.arrive` bookkeeping for one barrier id."""

    def __init__(self) -> None:
        self.expected: int | None = None
        self.arrived = 0
        self.generation = 0


class ClusterBarrier:
    """`barrier.cluster` arrive + wait bookkeeping, shared by the blocks of one cluster."""

    def __init__(self) -> None:
        self.arrived = 0
        self.generation = 0
        self.next_exit_scan = 0.0  # when waiters may next count the exited threads


class Block:
    """Everything one simulated thread block shares; guarded by `cond`.

    The blocks of a cluster (``mmaplug.sim.cluster``) share one `cond` and one ClusterBarrier and
    list each other in `cluster`, by rank; a block launched alone is a cluster of one.
    """

    def __init__(self, nthreads: int, lock: Any = None) -> None:
        self.nthreads = nthreads
        self.lock = lock or threading.RLock()
        self.cond = threading.Condition(self.lock)  # the lock's context for plain updates
        # a condition per barrier: a completion wakes only its waiters (each wake-up takes the
        # GIL from the busy threads; waking every waiter of the block starved them)
        self.conds: dict[tuple[str, int], threading.Condition] = {}
        self.cluster_cond = threading.Condition(self.lock)  # barrier.cluster's (shared)
        self.cluster: list[Block] = [self]
        self.cluster_barrier = ClusterBarrier()
        self.windows: list[tuple[int, np.ndarray]] = []  # (fake base, uint8 view)
        self.mbarriers: dict[int, MBarrier] = {}
        self.named: dict[int, NamedBarrier] = {}
        self.warps: dict[int, Warp] = {}
        self.groups: dict[int, Warp] = {}
        # simulator threads seen by `current` (weakly: they reference the BlockManager key)
        self.threads: weakref.WeakValueDictionary[int, threading.Thread] = (
            weakref.WeakValueDictionary()
        )
        self.waiting: dict[threading.Thread, Any] = {}  # thread -> its wait's ready()
        # per thread: its committed bulk groups, oldest first, then the open one; each a list
        # of (global address, shared address, bytes) copies not yet done
        self.bulk: dict[int, list[list[tuple[int, int, int]]]] = {}

    # --- shared memory -------------------------------------------------------------------------

    def register(self, arr: Any) -> int:
        """The fake base address of shared array `arr`, registering it on first sight."""
        a = host_array(arr)
        if not a.flags.c_contiguous:
            raise UsageError(f"shared_base needs a contiguous shared array, got {a.shape}")
        raw = a.reshape(-1).view(np.uint8)
        start = raw.__array_interface__["data"][0]
        with self.cond:
            for base, window in self.windows:
                if window.__array_interface__["data"][0] == start and window.size == raw.size:
                    return base
            end = max((b + w.size for b, w in self.windows), default=0)
            base = FAKE_SHARED_BASE + (-(-end // WINDOW_GAP) * WINDOW_GAP if end else 0)
            self.windows.append((base, raw))
            return base

    def smem(self, addr: Any, nbytes: int, align: int, op: str) -> np.ndarray:
        """Writable uint8 view of shared bytes [addr, addr + nbytes) of this block."""
        address = int(addr)
        if address % align:
            raise UsageError(f"{op}: shared address {address:#x} is not {align}-byte aligned")
        for base, window in self.windows:
            if base <= address and address + nbytes <= base + window.size:
                return window[address - base : address - base + nbytes]
        known = ", ".join(f"[{b:#x}, {b + w.size:#x})" for b, w in self.windows) or "none"
        raise UsageError(
            f"{op}: shared bytes [{address:#x}, {address + nbytes:#x}) are outside every shared "
            f"array registered with shared_base in this block (registered: {known})"
        )

    # --- waiting -------------------------------------------------------------------------------

    def barrier_cond(self, kind: str, address: int) -> threading.Condition:
        """The condition the waiters of barrier (`kind`, `address`) of this block sleep on."""
        cond = self.conds.get((kind, address))
        if cond is None:
            cond = self.conds[kind, address] = threading.Condition(self.lock)
        return cond

    def wait_until(
        self,
        ready: Any,
        describe: Any,
        cond: threading.Condition,
        timeout: float | None = None,
        scan: float | None = None,
    ) -> None:
        """Block (holding the lock) until `ready()`, sleeping on `cond`, which every change that
        can make `ready()` true notifies. Raises at once when another thread of the cluster died
        of an exception (Numba's simulator would report it only after every thread ended) or
        when every thread has exited or waits unsatisfied (found by scans every `scan` seconds,
        default _CHECK_S); otherwise a UsageError naming `describe()` after `timeout` seconds
        (default WAIT_TIMEOUT_S).
        """
        timeout = WAIT_TIMEOUT_S if timeout is None else timeout
        scan = _CHECK_S if scan is None else scan
        thread = threading.current_thread()
        now = time.monotonic()
        deadline, check = now + timeout, now + scan
        self.waiting[thread] = ready
        try:
            while not ready():
                if getattr(thread, "abort", False):
                    raise RuntimeError("simulated kernel aborted by another thread")
                now = time.monotonic()
                if now > check:  # the block-wide scans are O(threads): not on every wake-up
                    check = now + scan
                    if failed := self._failed_thread():
                        # the original's class, so the error a test or user sees does not
                        # depend on which thread Numba's simulator happens to report
                        kind = UsageError if isinstance(failed[1], UsageError) else RuntimeError
                        raise kind(f"{_ABORTED}: {failed[0]}")
                    if self._all_stuck():
                        raise UsageError(
                            f"deadlock: {describe()}; every thread of the block has exited or "
                            "waits on a barrier that cannot complete"
                        )
                if now > deadline:
                    raise UsageError(f"deadlock: {describe()} after {timeout:g} s")
                cond.wait(scan)  # the timeout only paces the scans
        finally:
            del self.waiting[thread]

    def _failed_thread(self) -> tuple[str, BaseException] | None:
        """('thread T raised E', E) for a thread of the cluster that died of its own exception."""
        for block in self.cluster:
            for tid, other in block.seen():
                exc = getattr(other, "exception", None)
                if exc is not None and _ABORTED not in str(exc[0]):
                    return f"thread {tid} raised {type(exc[0]).__name__}: {exc[0]}", exc[0]
        return None

    def _all_stuck(self) -> bool:
        """Every thread of the cluster seen, and each exited or waiting with `ready()` false."""
        for block in self.cluster:
            threads = [t for _, t in block.seen()]
            if len(threads) < block.nthreads:
                return False  # some thread never reached an emulated op: it may still arrive
            for other in threads:
                if other.is_alive() and (other not in block.waiting or block.waiting[other]()):
                    return False
        return True

    def add_thread(self, thread: Any) -> None:
        """Count simulator thread `thread` (a BlockThread) as one of this block's."""
        with _LOCK:
            self.threads.setdefault(thread.thread_id, thread)

    def seen(self) -> list[tuple[int, threading.Thread]]:
        """(thread id, thread) of every thread seen so far (a snapshot: others keep adding)."""
        with _LOCK:
            return list(self.threads.items())

    def live_threads(self) -> int:
        """Threads of the cluster not known to have exited (unseen ones count as live)."""
        exited = sum(not t.is_alive() for block in self.cluster for _, t in block.seen())
        return sum(block.nthreads for block in self.cluster) - exited

    def sync_cluster(self, op: str) -> None:
        """barrier.cluster arrive + wait: until every non-exited thread of the cluster arrived."""
        with self.cond:
            bar = self.cluster_barrier
            generation = bar.generation
            bar.arrived += 1

            everyone = sum(block.nthreads for block in self.cluster)

            def released() -> bool:
                if bar.generation != generation:
                    return True
                # unless enough threads exited (a clustered launch reports exits: threads_exited)
                if bar.arrived < everyone:
                    now = time.monotonic()
                    if now < bar.next_exit_scan or bar.arrived < self.live_threads():
                        bar.next_exit_scan = max(bar.next_exit_scan, now + _CHECK_S)
                        return False
                self._release_cluster()
                return True

            self.wait_until(
                released,
                lambda: (
                    f"{op}: {bar.arrived} of {self.live_threads()} threads of the cluster "
                    f"arrived; {self._elsewhere()}"
                ),
                self.cluster_cond,
                # idle threads reach the exit barrier while the others run the whole kernel:
                # only a cluster whose every thread waits (found at once) is a deadlock here
                timeout=CLUSTER_WAIT_TIMEOUT_S,
                scan=CLUSTER_SCAN_S,  # hundreds of idle waiters: scan the cluster rarely
            )

    def _release_cluster(self) -> None:
        bar = self.cluster_barrier
        bar.arrived, bar.generation = 0, bar.generation + 1
        self.cluster_cond.notify_all()

    def threads_exited(self) -> None:
        """Threads of the cluster exited: barrier.cluster waits for live threads only, so that
        may release it (the clustered launch, which sees exits, calls this)."""
        with self.cond:
            if 0 < self.cluster_barrier.arrived >= self.live_threads():
                self._release_cluster()

    def _elsewhere(self) -> str:
        """Where the cluster's live threads that wait on something else are, per block rank."""
        parts = []
        for rank, block in enumerate(self.cluster):
            seen = set(block.threads)
            unseen = block.nthreads - len(seen)
            busy = sorted(tid for tid, t in block.seen() if t.is_alive() and t not in block.waiting)
            parts.append(f"rank {rank}: {unseen} threads never seen, running {busy[:16]}")
        return "; ".join(parts)

    # --- mbarriers -----------------------------------------------------------------------------

    def mbarrier(self, bar: Any, op: str) -> MBarrier:
        self.smem(bar, 8, 8, op)
        state = self.mbarriers.get(int(bar))
        if state is None:
            raise UsageError(f"{op}: the mbarrier at {int(bar):#x} was never initialised")
        return state

    def init_mbarrier(self, bar: Any, count: int) -> None:
        self.smem(bar, 8, 8, "mbarrier_init")
        if not 1 <= int(count) < 1 << 20:
            raise UsageError(f"mbarrier_init: count must be in 1..2**20-1, got {count}")
        with self.cond:
            self.mbarriers[int(bar)] = MBarrier(int(count))

    def update_mbarrier(self, bar: Any, arrivals: int, tx: int, op: str) -> None:
        with self.cond:
            if self.mbarrier(bar, op).update(arrivals, tx, op):
                self.barrier_cond("mbarrier", int(bar)).notify_all()

    def wait_mbarrier(self, bar: Any, parity: int, op: str) -> None:
        with self.cond:
            state = self.mbarrier(bar, op)
            self.wait_until(
                lambda: state.completed(parity),
                lambda: (
                    f"{op}: the mbarrier at {int(bar):#x} never completed a phase of parity "
                    f"{parity} ({state!r}); check expect_tx bytes against the TMA boxes, the "
                    "arrival count and the wait parity"
                ),
                self.barrier_cond("mbarrier", int(bar)),
            )

    # --- named barriers ------------------------------------------------------------------------

    def named_barrier(self, barrier_id: Any, nthreads: Any, wait: bool, op: str) -> None:
        ident, count = int(barrier_id), int(nthreads)
        if not 0 <= ident < 16 or count <= 0 or count % 32:
            raise UsageError(
                f"{op}: barrier id must be in 0..15 and the thread count a positive multiple "
                f"of 32, got id {ident}, {count} threads"
            )
        with self.cond:
            bar = self.named.setdefault(ident, NamedBarrier())
            if bar.expected not in (None, count):
                raise UsageError(
                    f"{op}: barrier {ident} is in use with {bar.expected} threads, got {count}"
                )
            bar.expected = count
            bar.arrived += 1
            generation = bar.generation
            if bar.arrived == count:
                bar.expected, bar.arrived = None, 0
                bar.generation += 1
                self.barrier_cond("named", ident).notify_all()
            elif wait:
                self.wait_until(
                    lambda: bar.generation != generation,
                    lambda: f"{op}: barrier {ident} got {bar.arrived} of {count} threads",
                    self.barrier_cond("named", ident),
                )

    # --- warps and warpgroups -------------------------------------------------------------------

    def warp(self, thread_id: int, op: str) -> tuple[int, Warp]:
        """The lane of *thread_id* in its warp, and the warp's exchange."""
        return self._exchange(self.warps, WARP_SIZE, "warps of 32", thread_id, op)

    def warpgroup(self, thread_id: int, op: str) -> tuple[int, Warp]:
        """The lane of *thread_id* in its warpgroup, and the warpgroup's exchange."""
        return self._exchange(self.groups, WARPGROUP_SIZE, "warpgroups of 128", thread_id, op)

    def _exchange(
        self, exchanges: dict[int, Warp], size: int, what: str, thread_id: int, op: str
    ) -> tuple[int, Warp]:
        unit, lane = divmod(thread_id, size)
        if self.nthreads < (unit + 1) * size:
            raise UsageError(f"{op} needs full {what} threads; this block has {self.nthreads}")
        exchange = exchanges.get(unit)  # without the lock: every collective of every thread
        if exchange is None:
            with self.cond:
                exchange = exchanges.setdefault(unit, Warp(size, self.seen, unit * size))
        return lane, exchange


# BlockManager (one per simulated block) -> Block; entries vanish with the block.
_BLOCKS: weakref.WeakKeyDictionary[Any, Block] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def block_threads(manager: Any) -> int:
    """Threads per block of a simulator BlockManager."""
    return int(np.prod(block_dim(manager)))


def register_cluster(managers: list[Any]) -> list[Block]:
    """Make the blocks of *managers* (by rank) one cluster (a shared lock and barrier); return
    them."""
    lock = threading.RLock()
    blocks = [Block(block_threads(m), lock) for m in managers]
    for block in blocks:
        block.cluster = blocks
        block.cluster_barrier = blocks[0].cluster_barrier
        # one condition for the cluster barrier: its release wakes the waiters of every block
        block.cluster_cond = blocks[0].cluster_cond
    with _LOCK:
        for manager, block in zip(managers, blocks, strict=True):
            _BLOCKS[manager] = block
    return blocks


def warp_collective(op: str, value: Any, combine: Callable[[list[Any]], Any]) -> Any:
    """Run warp-collective `op`: exchange `value` across the calling thread's warp."""
    block, thread_id = current(op)
    lane, warp = block.warp(thread_id, op)
    return warp.exchange(lane, op, value, combine)


def current(op: str) -> tuple[Block, int]:
    """The calling simulator thread's Block and its linear thread id."""
    thread: Any = threading.current_thread()
    manager = current_manager()
    if manager is None or not hasattr(thread, "thread_id"):
        raise UsageError(f"{op} must be called from a kernel running in Numba's CUDA simulator")
    with _LOCK:
        block = _BLOCKS.get(manager)
        if block is None:
            block = _BLOCKS[manager] = Block(block_threads(manager))
    block.add_thread(thread)
    return block, thread.thread_id
