"""Tile grids, their order and their K splits: the arithmetic every default shares."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, TileShape

__all__ = [
    "SPLITK_MAX_FILL", "SPLITK_MIN_K_TILES", "SWIZZLE", "ceil_div", "cta_order_for",
    "split_to_one_wave", "tile_grid", "work_units",
]  # fmt: skip

SWIZZLE: Final = 8
SPLITK_MIN_K_TILES: Final = 8  # every split keeps at least this many K iterations
SPLITK_MAX_FILL: Final = 4  # K is split only while tiles x this fit in the SMs


def ceil_div(a: int, b: int) -> int:
    """*a* / *b* rounded up."""
    return -(-a // b)


def tile_grid(problem: MatmulProblem, cta: TileShape) -> tuple[int, int]:
    """Output tiles along M and along N for one batch entry."""
    return ceil_div(problem.m, cta.m), ceil_div(problem.n, cta.n)


def work_units(problem: MatmulProblem, cta: TileShape, splitk: int = 1) -> int:
    """*cta*'s tiles over every batch entry, each in *splitk* pieces of K: the grid's units."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    return problem.batch * m_tiles * n_tiles * splitk


def whole_waves(problem: MatmulProblem, device: Device, cta: TileShape, splitk: int = 1) -> int:
    """Waves of *cta*'s work units (``work_units``) on the device's SMs, the last counted whole:
    the units a persistent CTA walks."""
    return ceil_div(work_units(problem, cta, splitk), device.sm_count)


def cta_order_for(m_tiles: int, n_tiles: int) -> CtaOrder:
    """The axis with fewer tiles goes on blockIdx.x: column_major when M tiles <= N tiles."""
    return CtaOrder.column_major if m_tiles <= n_tiles else CtaOrder.row_major


def split_to_one_wave(problem: MatmulProblem, device: Device, cta: TileShape, most: int) -> int:
    """Split K of *cta*'s tiles when they fill under 1/SPLITK_MAX_FILL of the SMs: the largest
    power of two up to *most* whose work units still fit one wave, each split keeping
    SPLITK_MIN_K_TILES K tiles; 1 otherwise."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    tiles = problem.batch * m_tiles * n_tiles
    if tiles * SPLITK_MAX_FILL > device.sm_count:
        return 1
    limit = min(device.sm_count // tiles, ceil_div(problem.k, cta.k) // SPLITK_MIN_K_TILES, most)
    factor = 1
    while factor * 2 <= limit:
        factor *= 2
    return factor
