"""The CTA tile order both schedulers decode: a linear tile index -> the tile's place in M and N.

Tiles are walked in ``cta_order``: ``row_major`` runs along N fastest (the major index is the M
tile), ``column_major`` along M. ``grid_swizzle = G`` > 1 cuts the major order into groups of G
and walks each group's G tiles of one minor index before the next one, so that consecutive
tiles share A and B panels in L2 (a ragged last group is walked the same way, narrower).

The generated code reads the tile counts ``tiles_m`` and ``tiles_n`` (kernel parameters) and
writes ``t_major`` and ``t_minor``; :func:`tile_coords` says which of them is the M tile.
"""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.codegen.emitter import Emitter

__all__ = [
    "CTA_ORDERS",
    "GRID_VARS",
    "GridVars",
    "emit_tile_decode",
    "emit_unsigned_divisors",
    "grid_problems",
    "order_extents",
    "tile_coords",
]

CTA_ORDERS: Final = ("row_major", "column_major")


@attrs.frozen
class GridVars:
    """The generated variables of the tile decode that cross emitters: each field's value is the
    variable's name in the generated source, its docstring what the variable holds."""

    t_major: str = "t_major"
    """The decoded tile's index along the major order (:func:`tile_coords`)."""
    t_minor: str = "t_minor"
    """The decoded tile's index along the minor order."""
    major32: str = "major32"
    """Tiles along the major order (uint32), from :func:`emit_unsigned_divisors`."""
    minor32: str = "minor32"
    """Tiles along the minor order (uint32): the unsigned decode's divisor."""
    group32: str = "group32"
    """Tiles of one ``grid_swizzle`` group (uint32): the unsigned decode's group divisor."""


GRID_VARS: Final = GridVars()


def grid_problems(cta_order: str, grid_swizzle: int) -> list[str]:
    """Why a kernel config's tile order cannot be decoded (empty when it can)."""
    problems = []
    if cta_order not in CTA_ORDERS:
        problems.append(f"cta_order must be one of {CTA_ORDERS}, got {cta_order!r}")
    if grid_swizzle < 1:
        problems.append(f"grid_swizzle must be >= 1, got {grid_swizzle}")
    return problems


def order_extents(cta_order: str) -> tuple[str, str]:
    """The parameters counting the tiles along the major and along the minor order."""
    return ("tiles_m", "tiles_n") if cta_order == "row_major" else ("tiles_n", "tiles_m")


def tile_coords(cta_order: str) -> tuple[str, str]:
    """The decoded names holding the tile's index along M and along N."""
    gv = GRID_VARS
    return (gv.t_major, gv.t_minor) if cta_order == "row_major" else (gv.t_minor, gv.t_major)


def emit_unsigned_divisors(em: Emitter, cta_order: str, grid_swizzle: int) -> None:
    """The divisors :func:`emit_tile_decode` takes with ``unsigned=True``, as uint32
    (``major32``, ``minor32`` and ``group32``, the tiles of one group): emitted once, outside the
    loop that decodes."""
    gv = GRID_VARS
    major, minor = order_extents(cta_order)
    em(f"{gv.major32} = uint32({major})")
    em(f"{gv.minor32} = uint32({minor})")
    em(f"{gv.group32} = uint32(uint32({grid_swizzle}) * {gv.minor32})")


def emit_tile_decode(
    em: Emitter, tile: str, *, cta_order: str, grid_swizzle: int, unsigned: bool = False
) -> tuple[str, str]:
    """``t_major`` and ``t_minor`` of the tile at linear index *tile*; returns
    :func:`tile_coords`, the names of the M and the N tile index.

    Signed: int64 arithmetic on the tile counts, where a kernel decodes once (its ``blockIdx``);
    the group's quotient is kept, so the remainder costs no second division. Unsigned: uint32
    arithmetic on :func:`emit_unsigned_divisors`, where a persistent kernel decodes every work
    unit (tile indices < 2**31): unsigned 32-bit divisions are a third of the code of Python's
    floored int64 ones (sign fix-ups, the INT64_MIN / -1 case). Every intermediate is cast back
    to uint32, as Numba widens uint32 arithmetic to uint64: NVVM then divides in 32 bits.
    """
    g = grid_swizzle
    gv = GRID_VARS
    major, minor = order_extents(cta_order)
    if unsigned:
        if g == 1:
            em(f"{gv.t_major} = uint32({tile} // {gv.minor32})")
            em(f"{gv.t_minor} = uint32({tile} % {gv.minor32})")
        else:
            em(f"first = uint32({tile} // {gv.group32} * uint32({g}))")
            em(f"gsz = uint32(min({gv.major32} - first, uint32({g})))")
            em(f"within = uint32({tile} % {gv.group32})")
            em(f"{gv.t_major} = uint32(first + within % gsz)")
            em(f"{gv.t_minor} = uint32(within // gsz)")
    elif g == 1:
        em(f"{gv.t_major} = {tile} // {minor}")
        em(f"{gv.t_minor} = {tile} % {minor}")
    else:
        em(f"per_group = {g} * {minor}")
        em(f"group = {tile} // per_group")
        em(f"first = group * {g}")
        em(f"gsize = min({major} - first, {g})")
        em(f"rem = {tile} - group * per_group")
        em(f"{gv.t_major} = first + rem % gsize")
        em(f"{gv.t_minor} = rem // gsize")
    return tile_coords(cta_order)
