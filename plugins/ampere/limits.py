"""What the ampere kernel (mma.sync m16n8k16, cp.async pipeline) can build: its space and rules.

``space`` gives the legal values of each ``MatmulParams`` field, and the values the tuner tries;
``rules`` gives every constraint as a ``Rule``, in the order ``violations`` reports them. A rule
about one field's values checks that field's ``Space``, so each legal value is written once;
shared memory and threads are counted by ``resources``, the kernel's one model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.codegen.emitter import REDUCE_THREADS, REDUCE_VECTOR, reduce_grid
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape, TilingStrategy, Violation
from mmaplug.planning.scheduler import Rule, Space

from .resources import (
    EPILOGUE_PAD,
    MIN_BUILT_STAGES,
    built_stages,
    epilogue_tile_bytes,
    kernel_vectors,
    operand_ring_bytes,
    operand_vectors,
    resources,
)

__all__ = [
    "INSTRUCTION_TILE",
    "MAX_STAGES",
    "MIN_CC",
    "operand_vectors",
    "rules",
    "space",
    "violations",
]

MIN_CC: Final = (8, 0)
INSTRUCTION_TILE: Final = TileShape(16, 8, 16)
MAX_STAGES: Final = 8
MAX_GRID_X: Final = 2**31 - 1
MAX_GRID_Z: Final = 65_535
CP_ASYNC_BYTES: Final = frozenset({4, 8, 16})

# What the tuner tries (``Space.examples``): warp tiles 32-128 at cta_k 32 and 64, CTAs of
# 1-8 warps, stages 2-5, split-K 1/2/4.
_WARP_MN: Final = ((32, 32), (32, 64), (64, 32), (64, 64), (64, 128), (128, 64))
_CTA_K: Final = (32, 64)
WARP_TILE_EXAMPLES: Final = tuple(TileShape(m, n, k) for m, n in _WARP_MN for k in _CTA_K)
_WARP_GRIDS: Final = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4))
#: CTA tiles of 1-8 warps of the example warp tiles (warps do not split K)
CTA_TILE_EXAMPLES: Final = tuple(
    dict.fromkeys(
        TileShape(w.m * gm, w.n * gn, w.k) for w in WARP_TILE_EXAMPLES for gm, gn in _WARP_GRIDS
    )
)
STAGES_EXAMPLES: Final = (2, 3, 4, 5)
SPLITK_EXAMPLES: Final = (1, 2, 4)

_Message = Callable[[MatmulParams, MatmulProblem, Device], str]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _copy(problem: MatmulProblem) -> tuple[int, int]:
    """(elements, bytes) of the narrower operand copy: the width cp.async must take."""
    vec = min(kernel_vectors(problem))
    return vec, vec * problem.operand_dtype.itemsize


def _grid_z_fits(problem: MatmulProblem, splitk: int) -> bool:
    return problem.batch * splitk <= MAX_GRID_Z


def _reduce_blocks(problem: MatmulProblem) -> int:
    return reduce_grid(problem.batch, problem.m, problem.n)[0]


def _reduce_fits(problem: MatmulProblem, splitk: int) -> bool:
    return splitk == 1 or _reduce_blocks(problem) <= MAX_GRID_X


def _multiple_of_16(tile: object) -> bool:
    return (
        isinstance(tile, TileShape) and tile.m % 16 == 0 and tile.n % 16 == 0 and tile.k % 16 == 0
    )


_LIMIT_GRID_Z: Final = f"batch x splitk_factor <= {MAX_GRID_Z:,} (grid z)"
_LIMIT_REDUCE: Final = (
    f"batch x m x n <= {MAX_GRID_X * REDUCE_THREADS:,} with split-K ({REDUCE_VECTOR}x that "
    f"for a multiple of {REDUCE_VECTOR})"
)


def space(problem: MatmulProblem, device: Device) -> tuple[Space, ...]:
    """The legal values of each field the ampere kernel reads, for *problem* on *device*."""
    async_ok = _copy(problem)[1] in CP_ASYNC_BYTES
    return (
        Space(
            "cta_tile",
            "m, n and k multiples of 16 (a multiple of warp_tile, see the rules)",
            accepts=_multiple_of_16,
            examples=CTA_TILE_EXAMPLES,
        ),
        Space(
            "warp_tile",
            "m % 16, n % 16, k % 16 == 0",
            accepts=_multiple_of_16,
            examples=WARP_TILE_EXAMPLES,
        ),
        Space("instruction_tile", "16x8x16", values=(INSTRUCTION_TILE,)),
        Space(
            "stages",
            f"1..{MAX_STAGES}",
            values=tuple(range(1, MAX_STAGES + 1)),
            examples=STAGES_EXAMPLES,
        ),
        Space("prefetch_gap", "1", values=(1,)),
        Space(
            "async_gmem_load_operands",
            "True when both operands allow cp.async"
            if async_ok
            else "cp.async copies of 4, 8 or 16 B",
            values=(async_ok,),
        ),
        Space("cta_order", "row_major or column_major", values=tuple(CtaOrder)),
        Space(
            "grid_swizzle_factor",
            ">= 1",
            accepts=lambda v: isinstance(v, int) and v >= 1,
        ),
        Space(
            "splitk_factor",
            f"{_LIMIT_GRID_Z}; {_LIMIT_REDUCE}",
            accepts=lambda v: (
                isinstance(v, int)
                and v >= 1
                and _grid_z_fits(problem, v)
                and _reduce_fits(problem, v)
            ),
            examples=SPLITK_EXAMPLES,
        ),
        Space(
            "use_smem_epilogue",
            "True (False is built as True)",
            values=(True, False),
            examples=(True,),
        ),
        Space("cluster_dims", "(1, 1)", values=((1, 1),)),
        Space(
            "tiling_strategy",
            "one_tile_per_cta",
            values=(TilingStrategy.one_tile_per_cta,),
        ),
        Space("warp_specialized", "False", values=(False,)),
        Space("swap_ab", "False", values=(False,)),
        Space("splitk_in_cluster", "False", values=(False,)),
    )


def _in(field: Space, message: _Message) -> Rule:
    """The rule that *field*'s value is in its Space (its text is the limit), with *message*."""

    def check(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
        return None if field.allows(getattr(p, field.field)) else message(p, problem, device)

    return Rule(field.field, field.text, check)


def rules(problem: MatmulProblem, device: Device) -> tuple[Rule, ...]:
    """Every constraint of the ampere kernel for *problem* on *device*, in reporting order."""
    fields = {s.field: s for s in space(problem, device)}
    smem, threads = device.smem_per_block_optin, device.max_threads_per_block
    return (
        Rule("device", "sm_80 or newer", _device),
        _in(fields["instruction_tile"], _instruction),
        _in(fields["warp_tile"], _warp_16),
        Rule("cta_tile", "multiple of warp_tile", _cta_multiple),
        Rule("cta_tile", f"32..{threads} threads", _threads),
        Rule("stages", f"<= {smem:,} B shared memory", _operand_smem),
        Rule(
            "cta_tile", f"cta_tile.m x (cta_tile.n + {EPILOGUE_PAD}) x 4 <= {smem:,} B", _epi_smem
        ),
        _in(fields["stages"], _stages_range),
        Rule("stages", "<= 2 without async loads", _stages_sync),
        _in(fields["async_gmem_load_operands"], _async),
        _in(fields["prefetch_gap"], _prefetch_gap),
        Rule("splitk_factor", "<= ceil(k / cta_k)", _splitk_k_tiles),
        Rule("cta_tile", f"<= {MAX_GRID_X:,} output tiles (grid x)", _grid_x),
        Rule("splitk_factor", _LIMIT_GRID_Z, _grid_z),
        Rule("splitk_factor", _LIMIT_REDUCE, _reduce_grid),
        _in(fields["cluster_dims"], _cluster),
        _in(fields["tiling_strategy"], _tiling),
        _in(fields["warp_specialized"], _warp_specialized),
        _in(fields["swap_ab"], _swap_ab),
        _in(fields["splitk_in_cluster"], _splitk_in_cluster),
    )


def violations(params: MatmulParams, problem: MatmulProblem, device: Device) -> list[Violation]:
    """Every reason the ampere scheduler cannot build *params* for *problem* on *device*
    (``mmaplug.planning.scheduler.violations`` on it).

    :returns: an empty list when the parameters are legal.
    """
    from mmaplug.planning.scheduler import violations as broken

    from .scheduler import SCHEDULER  # the scheduler module imports this one

    return broken(SCHEDULER, params, problem, device)


# --- the checks: None when the rule holds, else what is wrong and what to change -------------


def _device(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if device.cc >= MIN_CC:
        return None
    return (
        f"the ampere scheduler needs mma.sync m16n8k16 and cp.async (sm_80+); {device.name} "
        f"is {device.target}. Use an sm_80 or newer GPU or preset."
    )


def _instruction(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"instruction_tile={p.instruction_tile}; the ampere kernel issues mma.sync m16n8k16 "
        "only. Set instruction_tile=(16, 8, 16)."
    )


def _warp_16(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"warp_tile={p.warp_tile} must be a multiple of 16x16x16: mma.sync m16n8k16 takes A in "
        "m16 x k16 fragments and ldmatrix.x4 loads B for 16 columns (two n8 tiles) at a time. "
        "Round the warp tile up to such a multiple."
    )


def _cta_multiple(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    cta, warp = p.cta_tile, p.warp_tile
    if cta.m % warp.m == 0 and cta.n % warp.n == 0 and cta.k == warp.k:
        return None
    return (
        f"cta_tile={cta} is not a multiple of warp_tile={warp} (with the same k). Change "
        "either tile."
    )


def _threads(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    threads, limit = resources(p, problem).threads, device.max_threads_per_block
    if threads <= limit:
        return None
    return (
        f"cta_tile={p.cta_tile} over warp_tile={p.warp_tile} needs {threads:,} threads per "
        f"block; {device.target} allows {limit:,}. Grow the warp tile or shrink the CTA tile."
    )


def _operand_smem(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    stages, itemsize = built_stages(p), problem.operand_dtype.itemsize
    need, limit = (
        operand_ring_bytes(p.cta_tile.as_tuple(), stages, itemsize),
        device.smem_per_block_optin,
    )
    if need <= limit:
        return None
    built = "" if p.stages >= MIN_BUILT_STAGES else f" (built as {stages})"
    return (
        f"stages={p.stages}{built} needs {need:,} B of shared memory per block; "
        f"{device.target} allows {limit:,} B. Lower stages or the CTA tile."
    )


def _epi_smem(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    cta, limit = p.cta_tile, device.smem_per_block_optin
    need = epilogue_tile_bytes(cta.as_tuple())
    if need <= limit:
        return None
    return (
        f"cta_tile={cta} stages its float32 accumulator tile through shared memory: "
        f"{cta.m} x ({cta.n} + {EPILOGUE_PAD}) x 4 B = {need:,} B; {device.target} allows "
        f"{limit:,} B. Shrink cta_tile.m or cta_tile.n."
    )


def _stages_range(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"stages={p.stages}; the ampere pipeline supports 1 to {MAX_STAGES} stages. "
        f"Set stages between 1 and {MAX_STAGES}."
    )


def _stages_sync(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    if p.stages <= 2 or p.async_gmem_load_operands:
        return None
    return (
        f"stages={p.stages} needs cp.async loads, but async_gmem_load_operands=False. "
        "Set async_gmem_load_operands=True or stages <= 2."
    )


def _async(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    vec, copy = _copy(problem)
    if p.async_gmem_load_operands:
        itemsize = problem.operand_dtype.itemsize
        return (
            f"async_gmem_load_operands=True needs cp.async copies of 4, 8 or 16 B, but the "
            f"operands allow {vec} x {itemsize} B = {copy} B. Set "
            "async_gmem_load_operands=False (and stages <= 2)."
        )
    return (
        f"async_gmem_load_operands=False, but both operands allow cp.async copies of "
        f"{copy}+ B, which the ampere kernel always uses for operands that allow them "
        "(plain loads only for an operand with 2-byte alignment). Set "
        "async_gmem_load_operands=True."
    )


def _prefetch_gap(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"prefetch_gap={p.prefetch_gap}; the ampere pipeline always loads stages - 1 "
        "k-tiles ahead of the math (prefetch_gap=1). Set prefetch_gap=1."
    )


def _splitk_k_tiles(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    k_tiles = _ceil(problem.k, p.cta_tile.k)
    if p.splitk_factor <= k_tiles:
        return None
    return (
        f"splitk_factor={p.splitk_factor} exceeds the {k_tiles} K tiles of k={problem.k} "
        f"with cta_k={p.cta_tile.k}. Lower splitk_factor or cta_tile.k."
    )


def _grid_x(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    cta = p.cta_tile
    tiles = _ceil(problem.m, cta.m) * _ceil(problem.n, cta.n)
    if tiles <= MAX_GRID_X:
        return None
    return (
        f"cta_tile={cta} cuts m={problem.m} x n={problem.n} into {tiles:,} tiles, one CTA "
        f"each on grid x; CUDA allows {MAX_GRID_X:,}. Grow cta_tile.m or cta_tile.n."
    )


def _grid_z(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    splitk = p.splitk_factor
    if _grid_z_fits(problem, splitk):
        return None
    return (
        f"batch={problem.batch:,} x splitk_factor={splitk} = {problem.batch * splitk:,} CTAs "
        f"along grid z; CUDA allows {MAX_GRID_Z:,}. Lower splitk_factor, or split the batch "
        f"into calls of at most {MAX_GRID_Z // splitk:,}."
    )


def _reduce_grid(p: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    splitk = p.splitk_factor
    if _reduce_fits(problem, splitk):
        return None
    return (
        f"splitk_factor={splitk} sums the partials in a kernel of {_reduce_blocks(problem):,} "
        f"blocks on grid x; CUDA allows {MAX_GRID_X:,}. Set splitk_factor=1."
    )


def _cluster(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"the ampere scheduler does not support thread block clusters (cluster_dims="
        f"{p.cluster_dims}); use the hopper scheduler or set cluster_dims=(1, 1)."
    )


def _tiling(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        f"the ampere scheduler does not support {p.tiling_strategy.value} tiling; use the "
        "hopper scheduler or set tiling_strategy='one_tile_per_cta'."
    )


def _warp_specialized(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        "the ampere scheduler does not support warp specialization; use the hopper scheduler "
        "or set warp_specialized=False."
    )


def _splitk_in_cluster(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        "the ampere kernel adds split-K partial sums in a second kernel (sm_80 has no thread "
        "block clusters); use the hopper scheduler or set splitk_in_cluster=False."
    )


def _swap_ab(p: MatmulParams, problem: MatmulProblem, device: Device) -> str:
    return (
        "the ampere kernel computes the product in the problem's orientation; use the hopper "
        "scheduler or set swap_ab=False."
    )
