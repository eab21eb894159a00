"""How Numba's CUDA simulator runs a launch's blocks here: each block's threads (or a cluster's
blocks' threads) at once, polled with a sleep instead of Numba's GIL-bound busy loop."""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from . import sm90_sim_block as B

_POLL_S = 0.001  # how often a launch looks for exited threads and blocks waiting in syncthreads


def install_block_runner() -> None:
    """Make Numba's simulator run each block as a cluster of one (`run_together`)."""
    from numba.cuda.simulator import kernel as sim

    sim.BlockManager.run = _run_block


def _run_block(manager: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    run_together([(manager, grid_point, args)], B.register_cluster([manager]))


def run_together(
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
