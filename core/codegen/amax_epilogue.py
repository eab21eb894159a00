"""The amax outputs of a generated epilogue (delayed scaling): each thread's running maximum of
``|v|``, reduced over its warp and folded into the output scalar by one global ``red.max``.

The maximum is kept as the uint32 bits of ``|v|``: non-negative float32 values order as their
bits, and a NaN's (sign cleared) lie above +inf's, so integer maxima give the float maximum with
NaN winning, as ``np.max``; the launch zeroes the output (0.0) before the kernel runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmaplug.analysis.epilogue import EpilogueProgram

__all__ = ["amax_flush", "amax_imports", "amax_init", "amax_update"]


def amax_imports(prog: EpilogueProgram) -> str:
    """The import of the intrinsics an amax output needs, or ``""`` when *prog* has none."""
    if not prog.amaxes:
        return ""
    return "from mmaplug.cuda.intrinsics import f32_abs_bits, warp_max_u32, red_global_max_u32"


def amax_init(prog: EpilogueProgram) -> list[str]:
    """The lines starting each amax output ``j``'s running maximum ``amx{j}``: the uint32 bits
    of a non-negative float32 (0.0 to start), which order as the floats do, NaN above +inf."""
    return [f"amx{j} = uint32(0)" for j, _ in prog.amaxes]


def amax_update(j: int, value: str) -> str:
    """The statement folding float32 *value* into amax output *j*'s running maximum."""
    return f"amx{j} = max(amx{j}, f32_abs_bits({value}))"


def amax_flush(prog: EpilogueProgram, lane: str) -> list[str]:
    """The lines reducing each amax output's running maxima over the warp (every lane must run
    them) and folding the result into ``out{j}[0]`` from lane *lane* 0: one ``red.global.max``
    per warp. The launch zeroes the output first."""
    if not prog.amaxes:
        return []
    lines = [f"amx{j} = warp_max_u32(amx{j})" for j, _ in prog.amaxes]
    lines.append(f"if {lane} == 0:")
    lines += [f"    red_global_max_u32(out{j}, 0, amx{j})" for j, _ in prog.amaxes]
    return lines
