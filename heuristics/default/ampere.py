"""The default ampere parameters: nvFuser's warp tiles and grids, shrunk to fill the SMs and to
keep a thread's copies a stage within budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape

from .asker import Asker, scheduler_object
from .grid import SWIZZLE, ceil_div, cta_order_for, split_to_one_wave, tile_grid

__all__ = ["ampere_params", "ampere_tiles", "cta_of", "fill_sms"]

AMPERE_WARP: Final = TileShape(64, 64, 32)
AMPERE_NARROW_WARP: Final = TileShape(64, 32, 32)
AMPERE_SMALL_WARP: Final = TileShape(32, 32, 32)
# global->shared copies a thread may issue a stage (the ampere kernel's Resources.copies): its
# unrolled copy keeps every address live beside the warp tile's accumulators, and past this
# ptxas spills. ptxas for sm_90a, every layout (2026-12-05): 64x64 warp tiles spilled nothing
# at 12 16-byte copies in 2 warps, 100-920 bytes at 24 of 8 bytes in 2; 64x32 and 32x32 tiles
# spilled nothing at 12 of 8 or 4 bytes
AMPERE_COPIES: Final = 12
# ... but where the first grid fills the SMs unshrunk, operand reuse counts for more: 128x128
# CTAs of 64x64 over rows of 4 copy 16 and spill 52-272 bytes, yet ran 1.12-1.20x faster on the
# H200 than the 128x64 CTAs of 12 (run 216: 4100x4100x1028 in TN, NN, TT; 1.02x in NT)
AMPERE_FULL_GRID_COPIES: Final = 16
SMALL_N: Final = 32  # at or below this N a 64-column warp tile is mostly padding
MIN_WARPS_PER_CTA: Final = 2  # shrinking for SM fill stops here
AMPERE_MAX_STAGES: Final = 4  # nvFuser's cap; the kernel takes more where they fit
SPLITK_MAX: Final = 16


def ampere_warp_tile(problem: MatmulProblem) -> TileShape:
    """64x64x32 per warp, or 64x32x32 when N is at most 32."""
    return AMPERE_NARROW_WARP if problem.n <= SMALL_N else AMPERE_WARP


def ampere_warp_grid(problem: MatmulProblem) -> tuple[int, int]:
    """Warps per CTA along (m, n): 1x4 when M/N < 0.5, 4x1 when M/N > 2, else 2x2 (nvFuser)."""
    ratio = problem.m / problem.n
    if ratio < 0.5:
        return 1, 4
    if ratio > 2:
        return 4, 1
    return 2, 2


def fill_sms(
    problem: MatmulProblem,
    device: Device,
    warp: TileShape,
    grid: tuple[int, int],
    keeps: Callable[[tuple[int, int]], bool] = lambda grid: True,
) -> tuple[int, int]:
    """Halve the warp grid (down to 2 warps, and while the halved grid *keeps*) while the
    tiles leave SMs idle; our addition.

    nvFuser keeps 128x128 CTAs even when that launches a handful of blocks on a 100+ SM GPU;
    smaller CTAs cost some operand reuse but put every SM to work on small problems.
    """
    wm, wn = grid
    while wm * wn > MIN_WARPS_PER_CTA:
        m_tiles, n_tiles = tile_grid(problem, cta_of(warp, (wm, wn)))
        if problem.batch * m_tiles * n_tiles >= device.sm_count:
            break
        if wm > wn or (wm == wn and m_tiles <= n_tiles):
            halved = wm // 2, wn
        else:
            halved = wm, wn // 2
        if not keeps(halved):
            break
        wm, wn = halved
    return wm, wn


def ampere_splitk(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """A power of two when the tiles fill under a quarter of the SMs and K keeps 8 tiles a split."""
    return split_to_one_wave(problem, device, cta, SPLITK_MAX)


def ampere_swizzle(m_tiles: int, n_tiles: int, device: Device) -> int:
    """8 when the grid spans two or more waves with 8+ tiles on both axes (L2 reuse), else 1."""
    large = m_tiles * n_tiles >= 2 * device.sm_count and min(m_tiles, n_tiles) >= SWIZZLE
    return SWIZZLE if large else 1


def ampere_tiles(problem: MatmulProblem, device: Device, ask: Asker) -> tuple[TileShape, TileShape]:
    """The warp and CTA tiles: ``ampere_warp_tile`` in ``fill_sms``'s warps, else, while a
    thread would copy more than ``AMPERE_COPIES`` vectors a stage (operands whose rows are no
    8-element multiples copy narrower vectors; ``AMPERE_FULL_GRID_COPIES`` for the first tile
    in a grid ``fill_sms`` left whole), a smaller warp tile; else the smallest in no fewer
    warps than keep the copies within it, as far as its grid goes."""
    first = ampere_warp_tile(problem)
    smaller = [w for w in (AMPERE_NARROW_WARP, AMPERE_SMALL_WARP) if w.n < first.n or w.m < first.m]

    def copies(warp: TileShape, grid: tuple[int, int]) -> int:
        params = ask.params(cta_tile=cta_of(warp, grid), warp_tile=warp, stages=AMPERE_MAX_STAGES)
        return ask.scheduler.resources(params, problem).copies

    full = ampere_warp_grid(problem)
    for warp in (first, *smaller):
        grid = fill_sms(problem, device, warp, full)
        budget = AMPERE_FULL_GRID_COPIES if warp is first and grid == full else AMPERE_COPIES
        if copies(warp, grid) <= budget:
            return warp, cta_of(warp, grid)
    grid = fill_sms(
        problem, device, warp, full, keeps=lambda grid: copies(warp, grid) <= AMPERE_COPIES
    )
    return warp, cta_of(warp, grid)


def cta_of(warp: TileShape, grid: tuple[int, int]) -> TileShape:
    """The CTA tile of a *grid* of *warp* tiles."""
    return TileShape(warp.m * grid[0], warp.n * grid[1], warp.k)


def ampere_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default Ampere parameters: as many stages as the rules allow up to 4 and the K loop,
    the epilogue through smem (the kernel always stages it: nothing to adjust)."""
    ask = Asker(scheduler_object("ampere"), problem, device)
    warp, cta = ampere_tiles(problem, device, ask)
    splitk = ampere_splitk(problem, device, cta)
    m_tiles, n_tiles = tile_grid(problem, cta)
    params = ask.params(
        cta_tile=cta,
        warp_tile=warp,
        cta_order=cta_order_for(m_tiles, n_tiles),
        grid_swizzle_factor=ampere_swizzle(m_tiles, n_tiles, device),
        splitk_factor=splitk,
        use_smem_epilogue=True,
    )
    k_loop = ceil_div(ceil_div(problem.k, cta.k), splitk)
    return params.with_overrides(stages=ask.most_stages(params, min(AMPERE_MAX_STAGES, k_loop)))
