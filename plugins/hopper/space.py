"""The legal values of each MatmulParams field the hopper kernel reads, one field at a time
(``mmaplug.planning.scheduler.Space``), and the values the tuner tries.

Each legal value is written once, here: the scheduler's rules (``limits``) ask these spaces,
or the predicates they are made of, and the rules between fields build on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.ir.ops import SCALE_BLOCK
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape, TilingStrategy
from mmaplug.planning.scheduler import Space

from .tiles import (
    BLOCK_CTA_KS,
    BLOCK_SUMS,
    BOX_INNER,
    CLUSTER_SHAPES,
    MAX_ACCUMULATORS,
    MAX_REDUCE_CLUSTER,
    MAX_TMA_BOX,
    MAX_WGMMA_N,
    MIN_STAGES,
    WARPGROUP,
    WGMMA_M,
    block_sums,
    block_tile,
    horizontal_unit,
    k_box,
    wgmma_k,
)

__all__ = ["space"]

# What the tuner tries: warp tiles (m, n) at each cta_k, one or two consumer warpgroups along
# M or N, stages 2-6, split-K 1-8 and every tiling strategy (only the legal ones are listed).
WARP_EXAMPLES: Final = (
    (64, 64),
    (64, 96),
    (64, 128),
    (64, 160),
    (64, 192),
    (64, 256),
    (128, 64),
    (128, 96),
    (128, 128),
    (128, 160),
)
CTA_K_EXAMPLES: Final = (64, 128, 256)
CONSUMER_GRIDS: Final = ((1, 1), (2, 1), (1, 2))
STAGE_EXAMPLES: Final = (2, 3, 4, 5, 6)
SPLIT_EXAMPLES: Final = (1, 2, 4, 8, 16, 32)


def _int_at_least(low: int) -> Callable[[object], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


STAGES: Final = Space(
    "stages",
    f">= {MIN_STAGES}, as many as shared memory holds",
    accepts=_int_at_least(MIN_STAGES),
    examples=STAGE_EXAMPLES,
)
PREFETCH_GAP: Final = Space("prefetch_gap", "1", values=(1,))
TMA_LOADS: Final = Space("async_gmem_load_operands", "True", values=(True,))
WARP_SPECIALIZED: Final = Space("warp_specialized", "True", values=(True,))
CLUSTER: Final = Space("cluster_dims", " or ".join(map(str, CLUSTER_SHAPES)), values=CLUSTER_SHAPES)
SPLIT_K: Final = Space(
    "splitk_factor", ">= 1, at most the K tiles", accepts=_int_at_least(1), examples=SPLIT_EXAMPLES
)
# no cluster: a horizontal fusion (its products are combined in the epilogue, and each B has
# its own map) and the cluster reduction (the cluster is the tile's splits alone)
NO_CLUSTER: Final = Space("cluster_dims", str(CLUSTER_SHAPES[0]), values=CLUSTER_SHAPES[:1])
# the register epilogue: the cluster reduction's (its epilogue runs on the summed partials)
REGISTER_EPILOGUE: Final = Space("use_smem_epilogue", "False", values=(False,))
HORIZONTAL_SPLIT_K: Final = Space("splitk_factor", "1", values=(1,))
# a horizontal fusion and block scales keep the problem's orientation (limits' swap rules)
SWAP_FIXED: Final = Space(
    "swap_ab", "False for a horizontal fusion or block scales", values=(False,)
)
# the tuner tries the swap where the activations are few: at most this many rows (the default
# swaps up to 112 of a 16-bit product, heuristics/default/streaming.py SWAP_WIDE_M; 128 lost there)
SWAP_TRIED_MAX_M: Final = 128
# the splits of a tile summed in their cluster's distributed shared memory: 2 to 8 CTAs
# (limits' cluster reduction rules)
SPLITK_CLUSTER: Final = Space(
    "splitk_in_cluster", "either", values=(False, True), examples=(False, True)
)
# the pieces of a stream-K tail tile (limits' stream-K rules)
STREAMK_PIECES: Final = Space(
    "splitk_factor", ">= 2 with persistent_streamk", accepts=_int_at_least(2)
)


def asks_streamk(params: MatmulParams) -> bool:
    """Whether *params* ask for stream-K (``persistent_streamk``): the rules, the kernel config
    and the packed-store decision read it here."""
    return params.tiling_strategy is TilingStrategy.persistent_streamk


CLUSTER_SPLITS: Final = Space(
    "splitk_factor",
    f"2..{MAX_REDUCE_CLUSTER} (one portable cluster)",
    values=tuple(range(2, MAX_REDUCE_CLUSTER + 1)),
)
FLAGS: Final = (
    Space("tiling_strategy", "any", values=tuple(TilingStrategy), examples=tuple(TilingStrategy)),
    Space("cta_order", "either", values=tuple(CtaOrder)),
    Space("grid_swizzle_factor", ">= 1", accepts=_int_at_least(1)),
)


def n_unit(problem: MatmulProblem) -> int:
    """What a wgmma's N must be a multiple of: 8-row groups of a K-major B, 64-column swizzle
    rows of an N-major one."""
    return 8 if problem.b_k_inner else BOX_INNER


def wgmma_tile(warp: TileShape, problem: MatmulProblem) -> bool:
    """m64nNk16 (k32 for FP8) wgmmas cover *warp*: whole 64-row blocks, N whole units up to
    256."""
    return warp.m % WGMMA_M == 0 and warp.n % n_unit(problem) == 0 and warp.n <= MAX_WGMMA_N


def accumulators(warp: TileShape) -> int:
    """float32 accumulator registers per consumer thread."""
    return warp.m * warp.n // WARPGROUP


def wgmma_instruction(inst: TileShape, problem: MatmulProblem) -> bool:
    """One m64nNk16 wgmma, m64nNk32 for FP8 (its N is the warp tile's: a rule between the
    two)."""
    return (inst.m, inst.k) == (WGMMA_M, wgmma_k(problem.operand_dtype))


def instruction_text(problem: MatmulProblem) -> str:
    """The instruction tile in words: ``64xNx16`` (``64xNx32`` for FP8)."""
    return f"{WGMMA_M}xNx{wgmma_k(problem.operand_dtype)}"


def box_k(k: int, problem: MatmulProblem) -> bool:
    """cta_tile.k is whole 128-byte swizzle rows within one TMA box (one scale block of a
    block-scaled problem)."""
    return k in cta_ks(problem)


def cta_ks(problem: MatmulProblem) -> range:
    """The legal cta_tile k: ``64, 128, 192, 256`` (``128, 256`` for FP8; ``128``, one scale
    block, when block-scaled)."""
    if problem.block_scaled:
        return range(BLOCK_CTA_KS[0], BLOCK_CTA_KS[-1] + 1, SCALE_BLOCK)
    unit = k_box(problem.operand_dtype)
    return range(unit, MAX_TMA_BOX + 1, unit)


def cta_k_text(problem: MatmulProblem) -> str:
    """The legal cta_tile k in words (:func:`cta_ks`)."""
    return ", ".join(map(str, cta_ks(problem)))


def block_n(tile: TileShape, problem: MatmulProblem) -> bool:
    """A block-scaled CTA or warp tile's n divides one block of B's scales, is whole blocks or
    straddles two at one block of K (``tiles.block_tile``; the rule between the two is
    ``limits``')."""
    return not problem.block_scaled or block_tile(tile.k, tile.n, tile.n)


def block_warp(warp: TileShape, problem: MatmulProblem) -> bool:
    """A block-scaled warp tile's sums fit ``BLOCK_SUMS`` (its k is the CTA tile's)."""
    if not problem.block_scaled:
        return True
    return block_n(warp, problem) and block_sums(warp.as_tuple(), warp.k) <= BLOCK_SUMS


def box_mn(cta: TileShape) -> bool:
    """cta_tile's m and n fit one TMA box each."""
    return max(cta.m, cta.n) <= MAX_TMA_BOX


def stacked_n(cta: TileShape, problem: MatmulProblem) -> bool:
    """cta_tile.n holds a horizontal fusion's h B tiles side by side, each whole swizzle units."""
    return cta.n % (problem.horizontal * horizontal_unit(problem.b_k_inner)) == 0


def space(problem: MatmulProblem, device: Device) -> tuple[Space, ...]:
    """The legal values of each field the hopper kernel reads, for *problem*; ``examples`` are
    what the tuner tries (the legal ones of ``WARP_EXAMPLES`` and the rest)."""
    h = problem.horizontal
    swap = _swap_space(problem)

    def warp_tile(v: object) -> bool:
        if not isinstance(v, TileShape):
            return False
        fits = accumulators(v) <= MAX_ACCUMULATORS and block_warp(v, problem)
        return wgmma_tile(v, problem) and fits

    def cta_tile(v: object) -> bool:
        if not isinstance(v, TileShape):
            return False
        stacked = h == 1 or stacked_n(v, problem)
        return box_k(v.k, problem) and box_mn(v) and stacked and block_n(v, problem)

    def instruction_tile(v: object) -> bool:
        return isinstance(v, TileShape) and wgmma_instruction(v, problem)

    warps = [TileShape(m, n, k) for m, n in _warp_examples(problem, swap) for k in CTA_K_EXAMPLES]
    warps = [w for w in warps if warp_tile(w)]
    ctas = [TileShape(w.m * gm, w.n * gn, w.k) for w in warps for gm, gn in CONSUMER_GRIDS]
    insts = [
        TileShape(WGMMA_M, n, wgmma_k(problem.operand_dtype))
        for n in dict.fromkeys(w.n for w in warps)
    ]
    stacked = f"n a multiple of {h * horizontal_unit(problem.b_k_inner)}, " if h > 1 else ""
    stacked += (
        f"n dividing {SCALE_BLOCK}, a multiple of it or straddling two blocks at k {SCALE_BLOCK}, "
        if problem.block_scaled
        else ""
    )
    sums = (
        f", accumulators + partial sums <= {BLOCK_SUMS} (block scales)"
        if problem.block_scaled
        else ""
    )
    return (
        # first: the tuner fixes the fields in this order, and every rule reads swap_ab
        swap,
        _staging_space(swap),
        Space(
            "cta_tile",
            f"{stacked}m and n <= {MAX_TMA_BOX} (one TMA box each), k in {cta_k_text(problem)}",
            accepts=cta_tile,
            examples=tuple(c for c in dict.fromkeys(ctas) if cta_tile(c)),
        ),
        Space(
            "warp_tile",
            f"m % 64 == 0, n % {n_unit(problem)} == 0, n <= 256, m * n / 128 <= "
            f"{MAX_ACCUMULATORS}{sums}",
            accepts=warp_tile,
            examples=tuple(warps),
        ),
        Space(
            "instruction_tile",
            instruction_text(problem),
            accepts=instruction_tile,
            examples=tuple(insts),
        ),
        STAGES,
        PREFETCH_GAP,
        TMA_LOADS,
        WARP_SPECIALIZED,
        NO_CLUSTER if h > 1 else CLUSTER,
        HORIZONTAL_SPLIT_K if h > 1 else SPLIT_K,
        SPLITK_CLUSTER,
        *FLAGS,
    )


def _warp_examples(problem: MatmulProblem, swap: Space) -> tuple[tuple[int, int], ...]:
    """``WARP_EXAMPLES``, and where the tuner tries the swap (*swap*: its space), the warp
    tile whose wgmma N is the activation rows (rounded up to 8s; the swapped kernel's tile of
    few columns) where they do not hold it."""
    few = (WGMMA_M, 8 * -(-problem.m // 8))
    if swap.examples and few not in WARP_EXAMPLES:
        return (*WARP_EXAMPLES, few)
    return WARP_EXAMPLES


def _staging_space(swap: Space) -> Space:
    """use_smem_epilogue: either; the tuner tries both where it tries the swap (*swap*: its
    space; staged, the swapped kernel's transposed tile ran faster on all eight rows of run
    333, but its staging can take a stage of the ring), else the tuner's preference (the
    staged epilogue)."""
    tried = (True, False) if swap.examples else ()
    return Space("use_smem_epilogue", "either", values=(False, True), examples=tried)


def _swap_space(problem: MatmulProblem) -> Space:
    """swap_ab: either, but for a horizontal fusion or block scales; the tuner tries both
    where the activations are at most ``SWAP_TRIED_MAX_M`` rows."""
    if problem.horizontal > 1 or problem.block_scaled:
        return SWAP_FIXED
    tried = (False, True) if problem.m <= SWAP_TRIED_MAX_M else ()
    return Space("swap_ab", "either", values=(False, True), examples=tried)
