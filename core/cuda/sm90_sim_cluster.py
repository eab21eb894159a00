"""Thread-block clusters in Numba's CUDA simulator: the blocks of a cluster run concurrently."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from ..errors import UsageError
from . import sm90_sim_block as B
from .sim_runner import run_together

_LAUNCH_LOCK = threading.Lock()


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
            run_together(held, B.register_cluster([manager for manager, _, _ in held]))

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
