"""Tuning candidates: hopper and ampere configurations ranked by a cheap model, each planned.

The model estimates a kernel's time as the larger of its tensor-core time (padded tiles, wave
quantization) and its memory time (each work unit streams its A and B panels through L2, HBM
reads each operand once), with a small penalty for shallow pipelines, plus split-K's reading
back of its float32 partials. Only the best-ranked
configurations are planned; a candidate is kept when ``plan_problem`` takes it as caller
overrides (every scheduler validator ran on it) and the plan changed nothing: illegal
configurations never reach a build. Searched on hopper: warp tiles, one or two consumer
warpgroups along M or N, cta_k 64/128/256, stages 2-6, split-K 1/2/4/8 and the three tiling
strategies; on ampere: warp tiles 32-128 in grids of 1-8 warps, cta_k 32/64, stages 2-5, split-K
1/2/4 (mma.sync priced at ``MMA_SYNC_SHARE`` of the peak). cta_order and grid_swizzle_factor
only as the heuristics choose them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ..device import Device
from ..errors import InvalidParamsError
from ..params import MatmulParams, TileShape, TilingStrategy
from ..plan import plan_problem
from ..problem import MatmulProblem

PEAK_TFLOPS: Final = 989.0  # dense 16-bit tensor-core peak of an H100/H200 SXM
PEAK_GBPS: Final = 4800.0  # H200 HBM3e
L2_GBPS: Final = 12000.0  # L2 to SMs, roughly (the model only ranks)
WARP_TILES: Final = (
    (64, 64),
    (64, 96),
    (64, 128),
    (64, 160),
    (64, 192),
    (64, 256),
    (128, 64),
    (128, 96),
    (128, 128),
)
CTA_K: Final = (64, 128, 256)
STAGES: Final = (2, 3, 4, 5, 6)
SPLITS: Final = (1, 2, 4, 8)
STRATEGIES: Final = tuple(TilingStrategy)
AMPERE_WARP_TILES: Final = ((32, 32), (32, 64), (64, 32), (64, 64), (64, 128), (128, 64))
AMPERE_GRIDS: Final = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4))
AMPERE_CTA_K: Final = (32, 64)
AMPERE_STAGES: Final = (2, 3, 4, 5)
AMPERE_SPLITS: Final = (1, 2, 4)
MMA_SYNC_SHARE: Final = 0.6  # of the wgmma peak that mma.sync reaches on sm_90 (ranking only)
SCHEDULERS: Final = ("hopper", "ampere")


def estimate_us(params: MatmulParams, problem: MatmulProblem, device: Device) -> float:
    """The model's time for *params* (microseconds; only the order matters)."""
    cta = params.cta_tile
    m_tiles, n_tiles = math.ceil(problem.m / cta.m), math.ceil(problem.n / cta.n)
    units = problem.batch * m_tiles * n_tiles * params.splitk_factor
    waves = math.ceil(units / device.sm_count)
    k_split = math.ceil(problem.k / params.splitk_factor)
    unit_flops = 2.0 * cta.m * cta.n * k_split
    share = MMA_SYNC_SHARE if params.instruction_tile.m == 16 else 1.0  # mma.sync m16n8k16
    compute = waves * unit_flops / (share * PEAK_TFLOPS * 1e12 / device.sm_count)
    itemsize = problem.operand_dtype.itemsize
    # every unit streams its A and B panels through L2; HBM sees each operand once
    panels = units * (cta.m + cta.n) * k_split * itemsize
    out_bytes = 4 if params.splitk_factor > 1 else 2
    unique = problem.batch * (
        (problem.m + problem.n) * problem.k * itemsize
        + problem.m * problem.n * out_bytes * params.splitk_factor
    )
    memory = max(unique / (PEAK_GBPS * 1e9), panels / (L2_GBPS * 1e9))
    shallow = 1.0 + 0.15 * max(0, 4 - params.stages)
    # split-K: the float32 partials are read back after the main loop, not overlapped with it
    split = params.splitk_factor
    reduce = problem.batch * problem.m * problem.n * (4 * split + itemsize) if split > 1 else 0
    return 1e6 * (max(compute, memory) * shallow + reduce / (PEAK_GBPS * 1e9))


def _raw(problem: MatmulProblem) -> Iterator[MatmulParams]:
    """Every combination of the searched fields (the model and the validators prune)."""
    grid = itertools.product(
        WARP_TILES, ((1, 1), (2, 1), (1, 2)), CTA_K, STAGES, SPLITS, STRATEGIES
    )
    for (wm, wn), (gm, gn), ck, stages, split, strategy in grid:
        if strategy is TilingStrategy.persistent_pingpong and (gm, gn) != (1, 1):
            continue
        if split > 1 and math.ceil(problem.k / ck) < 4 * split:
            continue
        try:
            yield MatmulParams(
                cta_tile=TileShape(wm * gm, wn * gn, ck),
                warp_tile=TileShape(wm, wn, ck),
                instruction_tile=TileShape(64, wn, 16),
                stages=stages,
                splitk_factor=split,
                tiling_strategy=strategy,
                warp_specialized=True,
                use_smem_epilogue=True,
            )
        except InvalidParamsError:
            continue


def _raw_ampere(problem: MatmulProblem) -> Iterator[MatmulParams]:
    """Every combination of the ampere scheduler's searched fields."""
    grid = itertools.product(
        AMPERE_WARP_TILES, AMPERE_GRIDS, AMPERE_CTA_K, AMPERE_STAGES, AMPERE_SPLITS
    )
    for (wm, wn), (gm, gn), ck, stages, split in grid:
        if split > 1 and math.ceil(problem.k / ck) < 4 * split:
            continue
        try:
            yield MatmulParams(
                cta_tile=TileShape(wm * gm, wn * gn, ck),
                warp_tile=TileShape(wm, wn, ck),
                instruction_tile=TileShape(16, 8, 16),
                stages=stages,
                splitk_factor=split,
                async_gmem_load_operands=True,
                use_smem_epilogue=True,
            )
        except InvalidParamsError:
            continue


def legal(
    params: MatmulParams,
    problem: MatmulProblem,
    device: Device,
    pm: Any,
    scheduler: str = "hopper",
) -> bool:
    """Whether planning takes *params* unchanged as caller overrides on *scheduler* (*pm*
    blocks the other one)."""
    try:
        spec = plan_problem(problem, device, pm=pm, overrides=params.as_dict(), strict=True)
    except InvalidParamsError:
        return False
    return spec.scheduler == scheduler and spec.params == params


def candidates(
    problem: MatmulProblem,
    device: Device,
    pm: Any,
    *,
    limit: int = 50,
    per_tile: int = 4,
    include: Sequence[MatmulParams] = (),
    scheduler: str = "hopper",
) -> list[MatmulParams]:
    """Up to *limit* legal configurations, best-modelled first; *include* (the heuristics'
    choices) come first whatever the model says, when legal. A first pass keeps at most
    *per_tile* variants of each CTA/warp tile pair, so the model's favourite tile cannot fill
    the list with stage and strategy variants; a second pass fills what is left in model order.
    """
    raw = _raw_ampere(problem) if scheduler == "ampere" else _raw(problem)
    ranked = sorted(raw, key=lambda p: (estimate_us(p, problem, device), p.name))
    chosen: dict[str, MatmulParams] = {}
    per: dict[tuple[TileShape, TileShape], int] = {}
    for cap in (per_tile, limit):
        for params in itertools.chain(include, ranked):
            tiles = (params.cta_tile, params.warp_tile)
            if len(chosen) >= max(limit, len(include)):
                break
            if params.name in chosen or per.get(tiles, 0) >= cap and params not in include:
                continue
            if legal(params, problem, device, pm, scheduler):
                chosen[params.name] = params
                per[tiles] = per.get(tiles, 0) + 1
    return list(chosen.values())
