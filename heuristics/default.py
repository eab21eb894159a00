"""The built-in default heuristic: nvFuser's Ampere and Hopper rules, adapted to our kernels."""

from __future__ import annotations

from typing import Final, NamedTuple

from mmaplug.device import Device
from mmaplug.markers import hookimpl
from mmaplug.params import CtaOrder, MatmulParams, TileShape, TilingStrategy
from mmaplug.plugins.hopper.config import (
    horizontal_chunk,
    horizontal_unit,
    pair_n_unit,
    staging_bytes,
)
from mmaplug.problem import MatmulProblem

__all__ = [
    "ampere_params",
    "hopper_horizontal_params",
    "hopper_params",
    "mmaplug_matmul_params",
]

AMPERE_INSTRUCTION: Final = TileShape(16, 8, 16)  # our kernel issues mma.sync m16n8k16 only
AMPERE_WARP: Final = TileShape(64, 64, 32)
AMPERE_NARROW_WARP: Final = TileShape(64, 32, 32)
SMALL_N: Final = 32  # at or below this N a 64-column warp tile is mostly padding
MIN_WARPS_PER_CTA: Final = 2  # shrinking for SM fill stops here
AMPERE_MAX_STAGES: Final = 4
HOPPER_MAX_STAGES: Final = 6  # more stages only hide latency already hidden; keeps stages=7 free
SWIZZLE: Final = 8
SPLITK_MAX: Final = 16
SPLITK_MIN_K_TILES: Final = 8  # every split keeps at least this many K iterations
CP_ASYNC_BYTES: Final = frozenset({4, 8, 16})
MBARRIER_BYTES: Final = 16  # a full and an empty mbarrier per Hopper stage
HOPPER_SMEM_SLACK: Final = 1024  # the kernel aligns its stages to 1024 bytes (128B swizzle)
HOPPER_CTA_K: Final = (256, 192, 128, 64)
HOPPER_WARP_GRIDS: Final = ((2, 1), (1, 2), (1, 1))  # (m, n) warp groups: coopA, coopB, single
HOPPER_INSTR_N: Final = (256, 192, 128, 64)
MAX_TMA_BOX: Final = 256
STAGE_TIE_TARGET: Final = 10  # nvFuser's tie-break threshold on K stages per SM
# CTA pairs sharing a multicast B tile paid on the H200 at 15.5 waves of 128x256 tiles (8192^2
# x 4096 and 8192^3: +2 to +7%) and lost at 3.9 to 6.8 waves (4096^3, the llama FFN: -2 to
# -10%), BENCHMARKS.md run 35; no shape in between was measured.
HOPPER_CLUSTER_MIN_WAVES: Final = 12
INT32_MAX: Final = 2**31 - 1


@hookimpl(trylast=True)
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """Default parameters for the ``ampere`` and ``hopper`` schedulers; None for any other."""
    if scheduler == "ampere":
        return ampere_params(problem, device)
    if scheduler == "hopper":
        return hopper_params(problem, device)
    return None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tile_grid(problem: MatmulProblem, cta: TileShape) -> tuple[int, int]:
    """Output tiles along M and along N for one batch entry."""
    return _ceil(problem.m, cta.m), _ceil(problem.n, cta.n)


def cta_order_for(m_tiles: int, n_tiles: int) -> CtaOrder:
    """The axis with fewer tiles goes on blockIdx.x: column_major when M tiles <= N tiles."""
    return CtaOrder.column_major if m_tiles <= n_tiles else CtaOrder.row_major


# --- Ampere (mma.sync m16n8k16, cp.async pipeline) ----------------------------------------------


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
    problem: MatmulProblem, device: Device, warp: TileShape, grid: tuple[int, int]
) -> tuple[int, int]:
    """Halve the warp grid (down to 2 warps) while the tiles leave SMs idle; our addition.

    nvFuser keeps 128x128 CTAs even when that launches a handful of blocks on a 100+ SM GPU;
    smaller CTAs cost some operand reuse but put every SM to work on small problems.
    """
    wm, wn = grid
    while wm * wn > MIN_WARPS_PER_CTA:
        m_tiles, n_tiles = tile_grid(problem, TileShape(warp.m * wm, warp.n * wn, warp.k))
        if problem.batch * m_tiles * n_tiles >= device.sm_count:
            break
        if wm > wn or (wm == wn and m_tiles <= n_tiles):
            wm //= 2
        else:
            wn //= 2
    return wm, wn


def ampere_async(problem: MatmulProblem) -> bool:
    """cp.async copies 4, 8 or 16 bytes: operand itemsize x the narrower vector width must match."""
    widths = problem.vector_widths
    return problem.operand_dtype.itemsize * min(widths.a, widths.b) in CP_ASYNC_BYTES


def ampere_splitk(problem: MatmulProblem, device: Device, cta: TileShape) -> int:
    """A power of two when the tiles fill under a quarter of the SMs and K keeps 8 tiles a split."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    tiles = problem.batch * m_tiles * n_tiles
    if tiles * 4 > device.sm_count:
        return 1
    limit = min(device.sm_count // tiles, _ceil(problem.k, cta.k) // SPLITK_MIN_K_TILES, SPLITK_MAX)
    factor = 1
    while factor * 2 <= limit:
        factor *= 2
    return factor


def ampere_stages(
    problem: MatmulProblem, device: Device, cta: TileShape, splitk: int, use_async: bool
) -> int:
    """As many stages as the opt-in smem holds, capped at 4 and the K loop; 2 without cp.async."""
    per_stage = problem.operand_dtype.itemsize * (cta.m + cta.n) * cta.k
    k_loop = _ceil(_ceil(problem.k, cta.k), splitk)
    stages = min(AMPERE_MAX_STAGES, device.smem_per_block_optin // per_stage, k_loop)
    if not use_async:
        stages = min(stages, 2)
    return max(1, stages)


def ampere_swizzle(m_tiles: int, n_tiles: int, device: Device) -> int:
    """8 when the grid spans two or more waves with 8+ tiles on both axes (L2 reuse), else 1."""
    large = m_tiles * n_tiles >= 2 * device.sm_count and min(m_tiles, n_tiles) >= SWIZZLE
    return SWIZZLE if large else 1


def ampere_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default Ampere parameters; the epilogue goes through smem, as the kernel always does."""
    warp = ampere_warp_tile(problem)
    wm, wn = fill_sms(problem, device, warp, ampere_warp_grid(problem))
    cta = TileShape(warp.m * wm, warp.n * wn, warp.k)
    splitk = ampere_splitk(problem, device, cta)
    use_async = ampere_async(problem)
    m_tiles, n_tiles = tile_grid(problem, cta)
    return MatmulParams(
        cta_tile=cta,
        warp_tile=warp,
        instruction_tile=AMPERE_INSTRUCTION,
        stages=ampere_stages(problem, device, cta, splitk, use_async),
        async_gmem_load_operands=use_async,
        cta_order=cta_order_for(m_tiles, n_tiles),
        grid_swizzle_factor=ampere_swizzle(m_tiles, n_tiles, device),
        splitk_factor=splitk,
        use_smem_epilogue=True,
    )


# --- Hopper (TMA, wgmma m64nNk16, warp-specialized persistent kernel) ----------------------------


class HopperTiles(NamedTuple):
    """One candidate of the Hopper tile search and how it scored."""

    cta: TileShape
    warp: TileShape
    instruction: TileShape
    score: int
    k_stages_per_sm: int


def hopper_stage_bytes(problem: MatmulProblem, cta: TileShape) -> int:
    """Shared memory of one operand stage, including its two mbarriers."""
    return problem.operand_dtype.itemsize * (cta.m + cta.n) * cta.k + MBARRIER_BYTES


def hopper_tile_score(problem: MatmulProblem, device: Device, cta: TileShape) -> tuple[int, int]:
    """(bytes loaded with wave quantization, K stages per SM) of a CTA tile; lower bytes win."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    waves = _ceil(problem.batch * m_tiles * n_tiles, device.sm_count)
    k_tiles = _ceil(problem.k, cta.k)
    return waves * device.sm_count * k_tiles * (cta.m + cta.n) * cta.k, k_tiles * waves


def _hopper_better(candidate: HopperTiles, best: HopperTiles | None) -> bool:
    """nvFuser's order: lower score; on a tie more K stages per SM, or fewer once past 10."""
    if best is None or candidate.score != best.score:
        return best is None or candidate.score < best.score
    if best.k_stages_per_sm < STAGE_TIE_TARGET:
        return candidate.k_stages_per_sm > best.k_stages_per_sm
    return STAGE_TIE_TARGET <= candidate.k_stages_per_sm < best.k_stages_per_sm


def hopper_tiles(problem: MatmulProblem, device: Device) -> HopperTiles:
    """nvFuser's exhaustive tile search, requiring two stages to fit (the epilogue writes from
    registers, so no output tile sits in shared memory)."""
    best: HopperTiles | None = None
    for cta_k in HOPPER_CTA_K:
        for rm, rn in HOPPER_WARP_GRIDS:
            for instr_n in HOPPER_INSTR_N:
                cta = TileShape(64 * rm, instr_n * rn, cta_k)
                if max(cta.m, cta.n, cta.k) > MAX_TMA_BOX:
                    continue
                score, k_stages = hopper_tile_score(problem, device, cta)
                # Our kernel is always warp-specialized, so it needs at least two stages.
                min_stages = max(2, min(3, k_stages))
                warp = TileShape(64, instr_n, cta_k)
                smem = hopper_stage_bytes(problem, cta) * min_stages
                smem += HOPPER_SMEM_SLACK + hopper_staging_bytes(cta, warp)
                if smem > device.smem_per_block_optin:
                    continue
                candidate = HopperTiles(
                    cta, TileShape(64, instr_n, cta_k), TileShape(64, instr_n, 16), score, k_stages
                )
                if _hopper_better(candidate, best):
                    best = candidate
    if best is None:  # nvFuser's fallback; fits any sm_90 budget
        cta = TileShape(64, 64, 64)
        return HopperTiles(cta, cta, TileShape(64, 64, 16), 0, 0)
    return best


def hopper_staging_bytes(cta: TileShape, warp: TileShape) -> int:
    """Shared memory of the hopper kernel's staged epilogue (one chunk per consumer)."""
    return staging_bytes((cta.m // warp.m) * (cta.n // warp.n), warp.n)


def hopper_stages(problem: MatmulProblem, device: Device, cta: TileShape, warp: TileShape) -> int:
    """Fill shared memory beside the epilogue staging, capped at 6 and the K loops a CTA
    runs; >= 2."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    tiles_per_cta = _ceil(problem.batch * m_tiles * n_tiles, device.sm_count)
    budget = device.smem_per_block_optin - HOPPER_SMEM_SLACK - hopper_staging_bytes(cta, warp)
    stages = budget // hopper_stage_bytes(problem, cta)
    stages = min(stages, HOPPER_MAX_STAGES, _ceil(problem.k, cta.k) * tiles_per_cta)
    return max(2, stages)


def hopper_cluster(problem: MatmulProblem, device: Device, cta: TileShape) -> tuple[int, int]:
    """CTA pairs along M (``(2, 1)``) when the grid runs at least HOPPER_CLUSTER_MIN_WAVES
    waves of tiles and B's tile halves into whole boxes; one CTA per cluster otherwise."""
    m_tiles, n_tiles = tile_grid(problem, cta)
    waves = problem.batch * m_tiles * n_tiles / device.sm_count
    halves = cta.n % pair_n_unit(problem.b_k_inner) == 0
    if m_tiles >= 2 and halves and waves >= HOPPER_CLUSTER_MIN_WAVES:
        return (2, 1)
    return (1, 1)


def hopper_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default Hopper parameters: persistent, warp-specialized, TMA-loaded, CTA pairs on
    large grids (``hopper_cluster``), the epilogue staged through shared memory (1.1-1.5x
    faster than storing from registers on the H200 at 4096^3 and the llama FFN shape,
    BENCHMARKS.md run 17)."""
    if problem.horizontal > 1:
        return hopper_horizontal_params(problem, device)
    tiles = hopper_tiles(problem, device)
    m_tiles, n_tiles = tile_grid(problem, tiles.cta)
    return MatmulParams(
        cta_tile=tiles.cta,
        warp_tile=tiles.warp,
        instruction_tile=tiles.instruction,
        stages=hopper_stages(problem, device, tiles.cta, tiles.warp),
        async_gmem_load_operands=True,
        cta_order=cta_order_for(m_tiles, n_tiles),
        use_smem_epilogue=True,
        tiling_strategy=TilingStrategy.persistent,
        warp_specialized=True,
        cluster_dims=hopper_cluster(problem, device, tiles.cta),
    )


def hopper_horizontal_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """A horizontal fusion of h matmuls: one wgmma of N = h x the output tile's n (128
    columns for two, whole swizzle units of each B otherwise) per 64 rows, the epilogue staged
    through shared memory where the products' chunks fit a staged row (else from registers),
    no split-K or cluster (docs/decisions.md, "Horizontal fusion"). Ping-pong consumers on 64-row
    tiles where every CTA gets two or more (their epilogues overlap the other's main loop:
    1.02-1.04x faster than cooperative on the bf16/fp16 llama FFN, run 38); else two consumers
    along M (one when M fits 64 rows), persistent."""
    h, unit = problem.horizontal, horizontal_unit(problem.b_k_inner)
    widest = min(128, MAX_TMA_BOX // h // unit * unit)
    # the widest output tile whose products' chunks fit a staged row (the register epilogue
    # is ~3x slower per tile: run 37), else the widest
    fits = [n for n in range(widest, 0, -unit) if horizontal_chunk(h * n, h)]
    n_out = fits[0] if fits else widest
    n_tiles = _ceil(problem.n, n_out)
    pingpong = problem.batch * _ceil(problem.m, 64) * n_tiles >= 2 * device.sm_count
    cta = TileShape(64 if pingpong or problem.m <= 64 else 128, h * n_out, 64)
    warp = TileShape(64, cta.n, cta.k)
    m_tiles = _ceil(problem.m, cta.m)
    per_cta = _ceil(problem.batch * m_tiles * n_tiles, device.sm_count)
    staged = horizontal_chunk(warp.n, h) > 0  # the products combined in a staged chunk
    consumers = 2 if pingpong else cta.m // warp.m  # a staging region each
    budget = device.smem_per_block_optin - HOPPER_SMEM_SLACK
    budget -= staging_bytes(consumers, warp.n) if staged else 0
    stages = min(budget // hopper_stage_bytes(problem, cta), HOPPER_MAX_STAGES)
    return MatmulParams(
        cta_tile=cta,
        warp_tile=warp,
        instruction_tile=TileShape(64, cta.n, 16),
        stages=max(2, min(stages, _ceil(problem.k, cta.k) * per_cta)),
        async_gmem_load_operands=True,
        cta_order=cta_order_for(m_tiles, n_tiles),
        use_smem_epilogue=staged,
        tiling_strategy=(
            TilingStrategy.persistent_pingpong if pingpong else TilingStrategy.persistent
        ),
        warp_specialized=True,
    )
