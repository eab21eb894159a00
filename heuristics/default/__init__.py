"""The built-in default heuristic: nvFuser's Ampere and Hopper choices, adapted to our kernels,
and the decode kernel's. One module per kernel family (``ampere``, ``hopper``, ``decode``;
hopper's tile scores in ``hopper_tiles``, its weight-streaming rules in ``streaming``);
``asker`` asks a scheduler what it allows, ``grid`` holds the tile-grid arithmetic they share.

Only preferences live here: which tiles to try and in which order, when to split K, shrink a CTA
or pair CTAs, how many stages to aim for. What a kernel allows and what it takes are its
scheduler object's (``mmaplug.planning.scheduler``): a field the scheduler allows one value of
takes it (its ``space``), and a choice is a list of candidates in order of preference of which
the first that the scheduler's rules about the chosen fields allow wins (``violations``, whose
shared-memory rules count with the scheduler's one resource model). The object is the plan's
(``mmaplug.planning.scheduler.active``) or, for a heuristic called outside planning, the one
registered with the process-wide plugin manager.
"""

from __future__ import annotations

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.markers import hookimpl
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams

from .ampere import ampere_params
from .asker import scheduler_object
from .decode import decode_params
from .hopper import hopper_horizontal_params, hopper_params, hopper_swizzle

__all__ = [
    "ampere_params",
    "decode_params",
    "hopper_horizontal_params",
    "hopper_params",
    "hopper_swizzle",
    "mmaplug_matmul_params",
    "scheduler_object",
]


@hookimpl(trylast=True)
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """Default parameters for the ``ampere``, ``hopper`` and ``decode`` schedulers; None for
    any other."""
    if scheduler == "ampere":
        return ampere_params(problem, device)
    if scheduler == "hopper":
        return hopper_params(problem, device)
    if scheduler == "decode":
        return decode_params(problem, device)
    return None
