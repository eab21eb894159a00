"""Thread-block clusters in Numba's CUDA simulator: the blocks of a cluster run concurrently."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from mmaplug.sim.simulator import simulated_launch


@contextlib.contextmanager
def clusters_of(size: int) -> Iterator[None]:
    """Within this context, simulated launches run their grid as clusters of *size* blocks along
    x: the blocks of one cluster run at once (Numba's simulator runs one block after another,
    so a block waiting on its peer would wait forever) and share mbarrier visibility, remote
    arrives, multicast and ``barrier.cluster``; clusters still run one after another.

    It is ``simulator.simulated_launch(size)``: one simulated launch at a time, process-wide.
    """
    with simulated_launch(size):
        yield
