"""The door to Numba's CUDA simulator's launch: every patch of it is here (what the
emulations read of its threads and arrays is in ``threads``; the compiler's patches are in
``mmaplug.cuda.numba_internals``).

Nothing is patched at import. ``simulated_launch`` wraps simulated launches: it holds one
process-wide lock (Numba's simulator runs one launch at a time: a second thread's launch, while
one runs, runs the kernel body in the caller's own thread, which has no ``threadIdx``) and,
while it is held, has the simulator run each block's threads, or a cluster's blocks' threads,
at once, polled with a sleep instead of Numba's GIL-bound busy loop. Importing this module
imports nothing of Numba.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, Final

import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim import block as B
from mmaplug.sim.threads import block_dim, current_manager, field, grid_dim

__all__ = ["LockedShared", "in_place", "run_together", "simulated_launch"]

_POLL_S: Final = 0.001  # how often a launch looks for exited threads and blocks in syncthreads
_LAUNCH_LOCK: Final = threading.RLock()
_outer_cluster = 0  # the cluster size of the launch the lock's holder runs (0: none)


@contextlib.contextmanager
def simulated_launch(cluster: int = 1) -> Iterator[None]:
    """Around simulated launches (``dispatcher[grid, block, stream, smem](*args)`` under
    ``NUMBA_ENABLE_CUDASIM=1``): one at a time process-wide, each block's threads polled with a
    sleep; with *cluster* > 1 the grid runs as clusters of *cluster* blocks along x, the blocks
    of one cluster at once (a block waiting on its peer would wait forever one after another),
    each block with its own shared memory, sharing mbarrier visibility, remote arrives,
    multicast and ``barrier.cluster``; clusters still run one after another.

    It swaps the simulator's BlockManager class and its fake ``cuda.shared`` (one per block,
    its static arrays made under a lock) for the duration and puts them back after. Inside
    another, it adds nothing; a cluster size other than the outer one's (or 1) is a
    UsageError.
    """
    global _outer_cluster
    with _LAUNCH_LOCK:
        if _outer_cluster:
            if cluster not in (1, _outer_cluster):
                raise UsageError(
                    f"a simulated launch in clusters of {cluster} inside one in clusters of "
                    f"{_outer_cluster}; launch them one after the other"
                )
            yield
            return
        sim = _simulator()
        fake = _required(sim, "FakeCUDAModule")
        patches: list[tuple[Any, str, Any]] = [
            (sim, "BlockManager", _manager_class(sim, cluster)),
            (fake, "shared", _per_block_shared(_required(fake, "shared"))),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        _outer_cluster = cluster
        try:
            for owner, name, value in patches:
                setattr(owner, name, value)
            yield
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)
            _outer_cluster = 0


def in_place(args: list[Any]) -> list[Any]:
    """*args* of a simulated launch with each host array wrapped as the simulator's device
    array over the same memory. Numba's simulator copies a bare numpy argument and writes the
    copy back after the launch, over whatever a TMA store wrote at the array's address in the
    meantime (a map holds the address, not the argument); on the GPU both are one buffer."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return [FakeCUDAArray(a) if isinstance(a, np.ndarray) and a.ndim > 0 else a for a in args]


def _simulator() -> Any:
    """``numba.cuda.simulator.kernel``, checked for what ``simulated_launch`` replaces."""
    try:
        from numba.cuda.simulator import kernel as sim
    except ImportError as error:
        raise UsageError(f"Numba's CUDA simulator cannot be imported: {error}") from error
    for name in ("BlockManager", "BlockThread"):
        _required(sim, name)
    return sim


def _required(owner: Any, name: str) -> Any:
    value = getattr(owner, name, None)
    if value is None:
        raise UsageError(
            f"Numba's CUDA simulator has no {getattr(owner, '__name__', owner)}.{name}, which "
            "mmaplug's simulated launches replace; use the numba-cuda release the simulator "
            "tier tests (mmaplug.cuda.numba_internals.TESTED)"
        )
    return value


def _manager_class(sim: Any, size: int) -> type:
    """The simulator's BlockManager running a launch's blocks by ``run_together``: each alone
    (*size* 1) or held until the *size* blocks of their cluster have come."""
    pending: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]] = []

    base: Any = sim.BlockManager

    class BlockManager(base):
        def run(self, grid_point: tuple[int, ...], *args: Any) -> None:
            if size == 1:
                run_together([(self, grid_point, args)], B.register_cluster([self]))
                return
            grid_x = grid_dim(self)[0]
            if grid_x % size:
                raise UsageError(
                    f"a grid of {grid_x} blocks along x does not divide into clusters of {size}"
                )
            pending.append((self, grid_point, args))
            if len(pending) < size:
                return
            held = pending[:]
            pending.clear()
            run_together(held, B.register_cluster([manager for manager, _, _ in held]))

    return BlockManager


def _per_block_shared(shared_of_kernel: Any) -> property:
    """The fake ``cuda.shared``: each block its own shared memory (the simulator keeps one per
    launch, which a cluster's blocks running at once would share), a ``LockedShared``."""
    per_block: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def shared_of_block(self: Any) -> Any:
        manager = current_manager()
        if manager is None:
            return shared_of_kernel.fget(self)
        with lock:
            shared = per_block.get(manager)
            if shared is None:
                kernel_shared = field(self, "_shared")
                size = field(kernel_shared, "_dynshared_size")
                shared = per_block[manager] = LockedShared(type(kernel_shared)(size))
            return shared

    return property(shared_of_block)


class LockedShared:
    """Numba's fake shared memory (*stock*) with each static array made under a lock. Numba
    finds a line's array in a dict and, if it is missing, makes and stores one, unlocked: two
    threads reaching the line at once could each make their own (CI, ``tma_3d_box``: thread 0
    initialised an mbarrier in its array, thread 1 waited on its own, never initialised)."""

    def __init__(self, stock: Any) -> None:
        self.stock = stock
        self.made: dict[tuple[str, int], np.ndarray] = {}  # by source line, as Numba keys them
        self._lock = threading.Lock()

    def array(self, shape: Any, dtype: Any, alignment: Any = None) -> Any:
        """The calling line's static array, made on the first call; dynamic shared memory
        (*shape* 0) and an *alignment* (which the simulator refuses) go to Numba's."""
        if shape == 0 or alignment is not None:
            return self.stock.array(shape, dtype, alignment)
        caller = sys._getframe(1)
        line = (caller.f_code.co_filename, caller.f_lineno)
        with self._lock:
            if line not in self.made:
                self.made[line] = np.empty(shape, _numpy_dtype(dtype))
            return self.made[line]


def _numpy_dtype(dtype: Any) -> np.dtype:
    """A shared array's element type as numpy's (a Numba type converted as Numba does)."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    return numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)


def _run_to_exit(kernel: Any, args: tuple[Any, ...]) -> None:
    """A simulated thread's body: the kernel, then the mark that it has exited, which the
    exchanges of its warp read (``mmaplug.sim.warp.Warp``: a thread not yet started is not
    alive either, so ``is_alive`` cannot tell an exited lane from a late one)."""
    try:
        kernel(*args)
    finally:
        threading.current_thread().exited = True  # type: ignore[attr-defined]


def run_together(
    held: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]], cluster: list[Any]
) -> None:
    """Run the held blocks' threads at once, as Numba's BlockManager.run runs one block's:
    release a block's ``syncthreads`` once all its live threads wait there, and on a thread's
    exception abort the cluster's threads and re-raise it; exits may release barrier.cluster
    (`cluster`'s blocks, by rank, hear of them). The poll sleeps between rounds: Numba's busy
    loop keeps the GIL, so each wake-up of a kernel thread waited up to 5 ms for it (a
    horizontal case with 64x256 tiles took 100 s, not 2 s; a CTA pair, two loops, 10 to 350 s).
    """
    from numba.cuda.simulator.kernel import BlockThread

    blocks: list[set[Any]] = []
    for (manager, grid_point, args), block in zip(held, cluster, strict=True):
        threads = set()
        kernel, debug = field(manager, "_f"), field(manager, "_debug")
        for block_point in np.ndindex(*block_dim(manager)):
            thread = BlockThread(
                functools.partial(_run_to_exit, kernel, args), manager, grid_point, block_point,
                debug,
            )  # fmt: skip
            block.add_thread(thread)  # seen from the start: a thread may exit before any op
            thread.start()
            threads.add(thread)
        blocks.append(threads)
    everyone = set().union(*blocks)
    live = [set(threads) for threads in blocks]
    while any(live):
        for threads in live:
            failed = next((t for t in threads if t.exception), None)
            if failed is not None:
                for other in everyone:
                    other.abort, other.syncthreads_blocked = True, False
                    other.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            if threads and all(t.syncthreads_blocked for t in threads):
                for t in threads:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
            exited = [t for t in threads if not t.is_alive()]
            if exited:
                threads.difference_update(exited)
                cluster[0].threads_exited()
        time.sleep(_POLL_S)
    for thread in everyone:
        if thread.exception:
            raise thread.exception[0].with_traceback(thread.exception[1])
