"""The exchange of a simulated warp (or warpgroup): each lane deposits its operand, the last to
arrive computes every lane's result; a lane that exited instead means the warp diverged. The
block's warps and warpgroups are ``mmaplug.sim.block.Block``'s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from mmaplug.errors import UsageError

__all__ = ["EXCHANGE_TIMEOUT_S", "WARP_SIZE", "Warp"]

WARP_SIZE: Final = 32
# A lane that exited without reaching the warp-collective op the others wait at means the warp
# diverged: found at the next scan. A live lane may be slow, not lost: the 1,536 threads of a
# simulated cluster on a loaded 2-core machine kept lanes from an exchange over 60 s (a CI run
# of 2026-12-03), so a wait gives up only after as long as a barrier wait
# (``mmaplug.sim.block.WAIT_TIMEOUT_S``): a lane stuck elsewhere (syncthreads, a barrier).
EXCHANGE_TIMEOUT_S: Final = 600.0
_POLL_S: Final = 0.05
_SCAN_S: Final = 0.5  # how often a waiting lane looks for exited lanes

# (simulator thread id, thread) of the block's threads seen so far
Members = Callable[[], Iterable[tuple[int, threading.Thread]]]


class Warp:
    """Scratch slots and a generation barrier shared by the lanes of one simulated warp (or
    warpgroup): threads ``first`` .. ``first + size - 1`` of the block whose threads *members*
    lists."""

    def __init__(self, size: int, members: Members, first: int) -> None:
        self.size = size
        self.members, self.first = members, first
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
        now = time.monotonic()
        deadline, scan = now + EXCHANGE_TIMEOUT_S, now + _SCAN_S
        while self.generation == generation:
            if getattr(thread, "abort", False):
                raise RuntimeError("simulated kernel aborted by another thread")
            now = time.monotonic()
            if now > scan:
                scan = now + _SCAN_S
                missing = [i for i, slot in enumerate(self.slots) if slot is None]
                if exited := self._exited(missing):
                    raise UsageError(
                        f"{op}: lanes {exited} exited without reaching it; every lane of the "
                        "warp must execute the same warp-collective op"
                    )
                if now > deadline:
                    raise UsageError(
                        f"{op}: lanes {missing} never arrived within {EXCHANGE_TIMEOUT_S:.0f} "
                        "s; every lane of the warp must execute the same warp-collective op"
                    )
            self.cond.wait(_POLL_S)

    def _exited(self, missing: list[int]) -> list[int]:
        """The lanes of *missing* whose thread has exited: marked ``exited`` by
        ``mmaplug.sim.simulator.run_together`` (a launch outside ``simulated_launch`` marks
        none, and waits out the timeout)."""
        first, size = self.first, self.size
        lanes = {tid - first: t for tid, t in self.members() if 0 <= tid - first < size}
        return [lane for lane in missing if getattr(lanes.get(lane), "exited", False)]
