"""The exchange of a simulated warp (or warpgroup): each lane deposits its operand, the last to
arrive computes every lane's result, and a lane stuck too long means the warp diverged."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from mmaplug.errors import UsageError
from mmaplug.sim.threads import block_dim, current_manager

__all__ = ["EXCHANGE_TIMEOUT_S", "WARP_SIZE", "Warp", "warp_collective"]

WARP_SIZE: Final = 32
# A lane stuck this long at a warp-collective op means the warp diverged (or a lane is in
# syncthreads): fail instead of hanging the simulator.
EXCHANGE_TIMEOUT_S: Final = 60.0
_POLL_S: Final = 0.05


class Warp:
    """Scratch slots and a generation barrier shared by the lanes of one simulated warp."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cond = threading.Condition()
        self.slots: list[Any] = [None] * size
        self.arrived = 0
        self.generation = 0
        self.result: Any = None

    def exchange(self, lane: int, op: str, value: Any, combine: Callable[[list[Any]], Any]) -> Any:
        """Deposit `value`; the last lane runs `combine` over all lanes; return this lane's part."""
        with self.cond:
            generation = self.generation
            self.slots[lane] = (op, value)
            self.arrived += 1
            if self.arrived == self.size:
                self.result = self._combine(op, combine)
                self.slots, self.arrived = [None] * self.size, 0
                self.generation += 1
                self.cond.notify_all()
            else:
                self._wait(generation, op)
            if isinstance(self.result, BaseException):
                raise self.result
            return self.result[lane]

    def _combine(self, op: str, combine: Callable[[list[Any]], Any]) -> Any:
        ops = sorted({slot[0] for slot in self.slots})
        if len(ops) > 1:
            return UsageError(
                f"warp lanes diverged: they reached {ops} together; keep warps converged"
            )
        try:
            return combine([slot[1] for slot in self.slots])
        except Exception as exc:  # raised in every lane, not only the one that combined
            return exc

    def _wait(self, generation: int, op: str) -> None:
        thread = threading.current_thread()
        deadline = time.monotonic() + EXCHANGE_TIMEOUT_S
        while self.generation == generation:
            if getattr(thread, "abort", False):
                raise RuntimeError("simulated kernel aborted by another thread")
            if time.monotonic() > deadline:
                missing = [i for i, slot in enumerate(self.slots) if slot is None]
                raise UsageError(
                    f"{op}: lanes {missing} never arrived within {EXCHANGE_TIMEOUT_S:.0f} s; "
                    "every lane of the warp must execute the same warp-collective op"
                )
            self.cond.wait(_POLL_S)


# BlockManager (one per simulated block) -> {warp id: Warp}; entries vanish with the block.
_BLOCKS: weakref.WeakKeyDictionary[Any, dict[int, Warp]] = weakref.WeakKeyDictionary()
_BLOCKS_LOCK = threading.Lock()


def _lane_and_warp(op: str) -> tuple[int, Warp]:
    """Find the calling simulator thread's lane and its warp's exchange.

    Numba's simulator runs each CUDA thread as a `BlockThread`, which carries `thread_id` (the
    linear id x + X * (y + Y * z)) and the BlockManager of its block (``current_manager``).
    """
    thread: Any = threading.current_thread()
    manager = current_manager()
    if manager is None or not hasattr(thread, "thread_id"):
        raise UsageError(f"{op} must be called from a kernel running in Numba's CUDA simulator")
    warp_id, lane = divmod(thread.thread_id, WARP_SIZE)
    nthreads = int(np.prod(block_dim(manager)))
    size = min(WARP_SIZE, nthreads - warp_id * WARP_SIZE)
    if size != WARP_SIZE:
        raise UsageError(f"{op} needs full warps of 32 threads; this block has {nthreads} threads")
    with _BLOCKS_LOCK:
        warps = _BLOCKS.setdefault(manager, {})
        warp = warps.get(warp_id)
        if warp is None:
            warp = warps[warp_id] = Warp(size)
    return lane, warp


def warp_collective(op: str, value: Any, combine: Callable[[list[Any]], Any]) -> Any:
    """Run warp-collective `op`: exchange `value` across the calling thread's warp."""
    lane, warp = _lane_and_warp(op)
    return warp.exchange(lane, op, value, combine)
