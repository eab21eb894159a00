"""Thread-block clusters in Numba's CUDA simulator: the blocks of a cluster run concurrently."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import UsageError
from . import sm90_sim_block as B

_LAUNCH_LOCK = threading.Lock()
_POLL_S = 0.001  # how often a clustered launch looks for blocks waiting in syncthreads


@contextlib.contextmanager
def clusters_of(size: int) -> Iterator[None]:
    """Within this context, simulated launches run their grid as clusters of *size* blocks along
    x: the blocks of one cluster run at once (Numba's simulator runs one block after another,
    so a block waiting on its peer would wait forever) and share mbarrier visibility, remote
    arrives, multicast and ``barrier.cluster``; clusters still run one after another.

    It swaps the simulator's BlockManager for one that holds each block until its cluster is
    complete, so it takes a lock: one clustered launch at a time.
    """
    if size == 1:
        yield
        return
    from numba.cuda.simulator import kernel as sim

    original = sim.BlockManager

    class ClusterBlockManager(original):  # type: ignore[misc, valid-type]
        pending: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]] = []

        def run(self, grid_point: tuple[int, ...], *args: Any) -> None:
            grid_x = self._grid_dim[0]
            if grid_x % size:
                raise UsageError(
                    f"a grid of {grid_x} blocks along x does not divide into clusters of {size}"
                )
            held = ClusterBlockManager.pending
            held.append((self, grid_point, args))
            if len(held) < size:
                return
            ClusterBlockManager.pending = []
            _run_together(held, B.register_cluster([manager for manager, _, _ in held]))

    module = sim.FakeCUDAModule
    shared_of_kernel = module.shared
    per_block: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def shared_of_block(self: Any) -> Any:
        """Each block its own shared memory (the simulator keeps one per launch)."""
        manager = getattr(threading.current_thread(), "_manager", None)
        if manager is None:
            return shared_of_kernel.fget(self)
        with lock:
            shared = per_block.get(manager)
            if shared is None:
                size = self._shared._dynshared_size
                shared = per_block[manager] = type(self._shared)(size)
            return shared

    with _LAUNCH_LOCK:
        sim.BlockManager, module.shared = ClusterBlockManager, property(shared_of_block)
        try:
            yield
        finally:
            sim.BlockManager, module.shared = original, shared_of_kernel


def install_block_runner() -> None:
    """Make Numba's simulator run each block as a cluster of one (`_run_together`)."""
    from numba.cuda.simulator import kernel as sim

    sim.BlockManager.run = _run_block


def _run_block(manager: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    _run_together([(manager, grid_point, args)], B.register_cluster([manager]))


def _run_together(
    held: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]], cluster: list[B.Block]
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
        for block_point in np.ndindex(*manager._block_dim):
            thread = BlockThread(
                functools.partial(manager._f, *args), manager, grid_point, block_point,
                manager._debug,
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
