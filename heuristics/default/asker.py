"""The default heuristic asks a scheduler object what it allows: the scheduler's space, its
rules about the fields being chosen, its stages (``Asker``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape
from mmaplug.planning.scheduler import Scheduler, active, violations
from mmaplug.planning.scheduler_registry import schedulers

__all__ = ["INSTRUCTION_KS", "STAGE_PROBES", "Asker", "scheduler_object"]

STAGE_PROBES: Final = 64  # stage counts asked of a scheduler's space for its fewest
INSTRUCTION_KS: Final = (16, 32, 8)  # instruction K asked of a scheduler's space, in order


def scheduler_object(name: str) -> Scheduler:
    """The scheduler called *name*: the plan's (``mmaplug.planning.scheduler.active``), or outside
    planning (a test calling ``hopper_params``) the one registered with the process-wide
    plugin manager.

    :raises UsageError: no scheduler of that name is registered.
    """
    found = active(name)
    if found is not None:
        return found
    registered = schedulers()
    if name not in registered:
        raise UsageError(
            f"the default heuristic needs the {name!r} scheduler, which is not registered "
            f"(registered: {', '.join(sorted(registered)) or 'none'}); unblock its plugin"
        )
    return registered[name][1]


class Asker:
    """One scheduler asked about one problem on one device (its space is read once)."""

    def __init__(self, scheduler: Scheduler, problem: MatmulProblem, device: Device) -> None:
        self.scheduler, self.problem, self.device = scheduler, problem, device
        self.spaces = {space.field: space for space in scheduler.space(problem, device)}
        #: the fields the scheduler allows a single value of, with that value
        self.pinned = {f: s.values[0] for f, s in self.spaces.items() if len(s.values) == 1}

    def params(self, **chosen: Any) -> MatmulParams:
        """*chosen*, every field the scheduler allows a single value of set to that value."""
        return MatmulParams(**{**chosen, **self.pinned})

    def allows(self, params: MatmulParams, fields: Collection[str]) -> bool:
        """Whether the scheduler's rules about *fields* hold for *params*."""
        broken = violations(self.scheduler, params, self.problem, self.device)
        return not any(v.field in fields for v in broken)

    def instruction(self, m: int, n: int) -> TileShape:
        """The instruction tile of *m* x *n* the scheduler's space allows: its K is the
        operand type's (m64nNk16 for 16-bit wgmma, m64nNk32 for FP8); K 16 when none is."""
        space = self.spaces["instruction_tile"]
        return next(
            (TileShape(m, n, k) for k in INSTRUCTION_KS if space.allows(TileShape(m, n, k))),
            TileShape(m, n, 16),
        )

    def fewest_stages(self) -> int:
        """The fewest stages the scheduler's space allows."""
        space = self.spaces["stages"]
        return next((s for s in range(1, STAGE_PROBES) if space.allows(s)), 1)

    def deepest(self, params: MatmulParams, depths: Iterable[int]) -> int | None:
        """The first of *depths* stages the rules about stages allow (shared memory above
        all); None if none is."""
        allowed = (s for s in depths if self.allows(params.with_overrides(stages=s), ("stages",)))
        return next(allowed, None)

    def most_stages(self, params: MatmulParams, cap: int) -> int:
        """The most stages up to *cap* the rules about stages allow; the fewest the space
        allows when none do."""
        found = self.deepest(params, range(cap, 0, -1))
        return self.fewest_stages() if found is None else found
