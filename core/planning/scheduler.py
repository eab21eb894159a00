"""Schedulers: one object per kernel family, owning everything about its kernels.

A scheduler plugin registers its schedulers through the ``mmaplug_schedulers`` hook. Each one
answers, for its kernels only:

- ``accepts(problem, device)``: None, or the reason it declines (a user can act on it);
- ``space(problem, device)``: the legal values of each ``MatmulParams`` field it reads, one
  field at a time (``Space``), which the tuner enumerates and the plugin reference prints;
- ``rules(problem, device)``: every constraint, on one field's values or between fields and
  with the problem and device, each a ``Rule`` with its limit in words and a check that
  returns the message (what is wrong, what to change) when broken;
- ``resources(params, problem)``: its one resource model (shared memory, threads, registers);
- ``adjustments(params, problem, device)``: values it must change, each recorded and explained;
- ``build(spec, analysis)``: the ``KernelArtifact`` (config, build, launch, ``kernel_jobs``;
  ``mmaplug.planning.artifact``), which the runtime launches with ``LaunchArgs``.

and, optionally, ``block_scales = True`` when its kernels apply FP8 block scales
(``LaunchArgs.scales``): only such schedulers are offered a block-scaled problem.

Core plans with them (candidates, validation, adjustments, build), and the default heuristic,
the tuner, ``explain`` and ``docs/plugin-reference.md`` ask them: nothing outside a scheduler's
folder restates one of its rules. ``violations`` turns a scheduler's rules into ``Violation``
values, the one place that checks them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import attrs

from mmaplug.errors import PluginResultError
from mmaplug.planning.params import MatmulParams, Violation

if TYPE_CHECKING:
    from mmaplug.analysis.bindings import MatmulAnalysis
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.planning.choices import Adjustment, KernelSpec
    from mmaplug.planning.device import Device

__all__ = [
    "Resources",
    "Rule",
    "Scheduler",
    "Space",
    "active",
    "planning_with",
    "resident_ctas",
    "violations",
]


@attrs.frozen
class Resources:
    """What one CTA of a kernel takes: dynamic shared memory, threads, registers per thread."""

    smem_bytes: int
    threads: int
    registers: int = 0  # a thread: what the kernel sets or ptxas was measured to take (0: unknown)
    # global->shared copies a thread issues a pipeline stage, when the kernel copies through
    # its threads (0: it does not, or unknown); each one's address lives across the copy
    copies: int = 0


REGISTER_GRAIN: Final = 8  # registers a thread is allocated in (256 a warp)


def resident_ctas(resources: Resources, device: Device) -> int:
    """CTAs taking *resources* that one SM of *device* holds at once: bounded by its threads,
    shared memory, registers (when *resources* names them) and CTAs; 0 when one does not fit."""
    warps = -(-resources.threads // device.warp_size)
    bounds = [device.ctas_per_sm, device.threads_per_sm // (warps * device.warp_size)]
    if resources.smem_bytes:
        bounds.append(device.smem_per_sm // resources.smem_bytes)
    if resources.registers:
        per_warp = -(-resources.registers // REGISTER_GRAIN) * REGISTER_GRAIN * device.warp_size
        bounds.append(device.regs_per_sm // per_warp // warps)
    return min(bounds)


@attrs.frozen
class Space:
    """The legal values of one ``MatmulParams`` field, before the rules between fields.

    ``values`` lists them when they are few (an enum, a flag, stages); otherwise ``accepts``
    decides and ``text`` says it in words. ``examples`` are values the tuner may try.
    """

    field: str
    text: str
    values: tuple[object, ...] = ()
    accepts: Callable[[object], bool] | None = attrs.field(default=None, eq=False)
    examples: tuple[object, ...] = ()

    def allows(self, value: object) -> bool:
        """Whether *value* is one of this field's legal values."""
        if self.accepts is not None:
            return self.accepts(value)
        return value in self.values


@attrs.frozen
class Rule:
    """One constraint: the *field* it blames, its *limit* in words, and *check*, which returns
    the message (what is wrong, what to change) when *params* break it, else None. *check*
    depends on its arguments only: the tuner asks it about partial combinations and reuses its
    answer while the fields it read keep their values (``mmaplug.tune.candidates``)."""

    field: str
    limit: str
    check: Callable[[MatmulParams, MatmulProblem, Device], str | None] = attrs.field(eq=False)


@runtime_checkable
class Scheduler(Protocol):
    """A kernel family (see the module docstring); ``name`` is unique, ``priority`` ranks it
    among the schedulers that accept a problem (higher wins, ties by name)."""

    name: str
    priority: int
    # Optional ``block_scales = True``: build() applies ``LaunchArgs.scales`` to a
    # block-scaled problem's sum (``MatmulProblem.block_scaled``); only such schedulers are
    # offered one.

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        """None when this scheduler can take *problem* on *device*, else why not."""

    def space(self, problem: MatmulProblem, device: Device) -> Sequence[Space]:
        """The legal values of each field this scheduler reads."""

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        """Every constraint between fields, and with the problem and the device (the same for
        the same problem and device: ``violations`` keeps the last ones)."""

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        """What one CTA of the kernel for *params* takes."""

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> Sequence[Adjustment]:
        """Changes the scheduler must force on valid *params* (a last resort, never silent)."""

    def build(self, spec: KernelSpec, analysis: MatmulAnalysis) -> object:
        """The kernel artifact for *spec* (``mmaplug.planning.artifact.KernelArtifact``)."""


def violations(
    scheduler: Scheduler, params: MatmulParams, problem: MatmulProblem, device: Device
) -> list[Violation]:
    """Every rule of *scheduler* that *params* break, in the order of its rules (a rule about
    one field's legal values checks that field's ``Space``, so each value is written once)."""
    found = []
    for rule in _rules(scheduler, problem, device):
        if (message := rule.check(params, problem, device)) is None:
            continue
        if not isinstance(message, str):
            raise PluginResultError(
                f"scheduler {scheduler.name!r}'s rule about {rule.field!r} ({rule.limit}) "
                f"answered {message!r}; a Rule's check returns None when the params keep it, "
                "else the message (a str: what is wrong, what to change)"
            )
        found.append(Violation(rule.field, getattr(params, rule.field, None), rule.limit, message))
    return found


# (scheduler, problem, device, rules) of the last rules asked for, matched by identity
_kept: tuple[Scheduler, MatmulProblem, Device, tuple[Rule, ...]] | None = None


def _rules(scheduler: Scheduler, problem: MatmulProblem, device: Device) -> tuple[Rule, ...]:
    """*scheduler*'s rules for *problem* on *device*, the last ones kept: a plan checks about
    140 params against one problem, and the hopper scheduler's 25 rules took as long to make
    as to check (a rule depends on the problem and the device only: ``Scheduler.rules``)."""
    global _kept
    kept = _kept
    if kept is not None and kept[0] is scheduler and kept[1] is problem and kept[2] is device:
        return kept[3]
    rules = tuple(scheduler.rules(problem, device))
    _kept = (scheduler, problem, device, rules)
    return rules


_ACTIVE: contextvars.ContextVar[Mapping[str, Scheduler] | None] = contextvars.ContextVar(
    "mmaplug_schedulers", default=None
)


@contextlib.contextmanager
def planning_with(schedulers: Mapping[str, Scheduler]) -> Iterator[None]:
    """Make *schedulers* (by name) what :func:`active` answers while a plan is made."""
    token = _ACTIVE.set(schedulers)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active(name: str) -> Scheduler | None:
    """The scheduler called *name* of the plan being made (heuristic hooks are told only the
    name); None outside planning or for an unknown name."""
    return (_ACTIVE.get() or {}).get(name)
