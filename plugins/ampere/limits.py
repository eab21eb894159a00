"""What the Ampere scheduler (mma.sync m16n8k16, cp.async pipeline) can build, as Violations."""

from __future__ import annotations

from typing import Final

from mmaplug.choices import Adjustment
from mmaplug.device import Device
from mmaplug.params import MatmulParams, TileShape, TilingStrategy, Violation, Violations
from mmaplug.problem import MatmulProblem

__all__ = [
    "INSTRUCTION_TILE",
    "MAX_STAGES",
    "adjustments",
    "built_stages",
    "epilogue_smem_bytes",
    "operand_smem_bytes",
    "operand_vectors",
    "violations",
]

INSTRUCTION_TILE: Final = TileShape(16, 8, 16)
MAX_STAGES: Final = 8
MIN_BUILT_STAGES: Final = 2  # the cp.async ring always has two buffers (see adjustments)
MAX_GRID_X: Final = 2**31 - 1
MAX_GRID_Z: Final = 65_535
REDUCE_THREADS: Final = 256  # threads per block of the split-K reduce kernel (config.py)
EPILOGUE_PAD: Final = 8  # floats of padding per staged accumulator row (epilogue_codegen)
KERNEL_VECTORS: Final = (8, 4, 2, 1)  # elements per operand copy the generator emits
_CP_ASYNC_BYTES: Final = frozenset({4, 8, 16})


def built_stages(params: MatmulParams) -> int:
    """Stages of the built pipeline: ``params.stages``, but at least two."""
    return max(MIN_BUILT_STAGES, params.stages)


def operand_vectors(params: MatmulParams, problem: MatmulProblem) -> tuple[int, int]:
    """Elements per global->shared copy of A and B the kernel is generated with.

    The widest of 8/4/2/1 dividing the problem's vector width. A width of 1 is a plain
    synchronous load; 2, 4 and 8 are cp.async copies of 4, 8 and 16 B.
    """
    widths = problem.vector_widths
    return _kernel_vector(widths.a), _kernel_vector(widths.b)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _kernel_vector(width: int) -> int:
    return next(v for v in KERNEL_VECTORS if width % v == 0)


def operand_smem_bytes(params: MatmulParams, problem: MatmulProblem) -> int:
    """Shared memory of the operand ring: built stages x (cta_m + cta_n) x cta_k x itemsize."""
    cta = params.cta_tile
    return built_stages(params) * (cta.m + cta.n) * cta.k * problem.operand_dtype.itemsize


def epilogue_smem_bytes(params: MatmulParams) -> int:
    """Shared memory of the staged float32 accumulator tile (rows padded by EPILOGUE_PAD)."""
    cta = params.cta_tile
    return cta.m * (cta.n + EPILOGUE_PAD) * 4


def adjustments(params: MatmulParams) -> list[Adjustment]:
    """The changes the ampere kernel forces on valid *params*: each field it cannot honour."""
    found = []
    if params.stages < MIN_BUILT_STAGES:
        found.append(
            Adjustment(
                "stages",
                params.stages,
                MIN_BUILT_STAGES,
                "the ampere cp.async ring always has 2 buffers; one stage would only save "
                "shared memory (which limits counts for 2)",
            )
        )
    return found


def violations(params: MatmulParams, problem: MatmulProblem, device: Device) -> list[Violation]:
    """Every reason the Ampere scheduler cannot build *params* for *problem* on *device*.

    :returns: an empty list when the parameters are legal.
    """
    found = Violations()
    _check_target_and_tiles(found, params, device)
    _check_memory(found, params, problem, device)
    _check_pipeline(found, params, problem)
    _check_grid(found, params, problem)
    _check_unsupported(found, params)
    return found


def _check_target_and_tiles(found: Violations, params: MatmulParams, device: Device) -> None:
    check = found.check
    cta, warp, inst = params.cta_tile, params.warp_tile, params.instruction_tile
    target = device.target
    check(
        device.cc >= (8, 0),
        "device",
        target,
        "sm_80 or newer",
        f"the ampere scheduler needs mma.sync m16n8k16 and cp.async (sm_80+); {device.name} "
        f"is {target}. Use an sm_80 or newer GPU or preset.",
    )
    check(
        inst == INSTRUCTION_TILE,
        "instruction_tile",
        inst,
        "16x8x16",
        f"instruction_tile={inst}; the ampere kernel issues mma.sync m16n8k16 only. "
        "Set instruction_tile=(16, 8, 16).",
    )
    check(
        warp.m % 16 == 0 and warp.n % 16 == 0 and warp.k % 16 == 0,
        "warp_tile",
        warp,
        "m % 16, n % 16, k % 16 == 0",
        f"warp_tile={warp} must be a multiple of 16x16x16: mma.sync m16n8k16 takes A in "
        "m16 x k16 fragments and ldmatrix.x4 loads B for 16 columns (two n8 tiles) at a time. "
        "Round the warp tile up to such a multiple.",
    )
    check(
        cta.m % warp.m == 0 and cta.n % warp.n == 0 and cta.k == warp.k,
        "cta_tile",
        cta,
        "multiple of warp_tile",
        f"cta_tile={cta} is not a multiple of warp_tile={warp} (with the same k). Change "
        "either tile.",
    )
    warps = (cta.m // warp.m) * (cta.n // warp.n)
    threads = device.warp_size * warps
    check(
        device.warp_size <= threads <= device.max_threads_per_block,
        "cta_tile",
        cta,
        f"32..{device.max_threads_per_block} threads",
        f"cta_tile={cta} over warp_tile={warp} needs {threads:,} threads per block; "
        f"{target} allows {device.max_threads_per_block:,}. Grow the warp tile or shrink "
        "the CTA tile.",
    )


def _check_memory(
    found: Violations, params: MatmulParams, problem: MatmulProblem, device: Device
) -> None:
    check = found.check
    cta, limit, target = params.cta_tile, device.smem_per_block_optin, device.target
    operands = operand_smem_bytes(params, problem)
    built = "" if params.stages >= MIN_BUILT_STAGES else f" (built as {built_stages(params)})"
    check(
        operands <= limit,
        "stages",
        params.stages,
        f"<= {limit:,} B shared memory",
        f"stages={params.stages}{built} needs {operands:,} B of shared memory per block; "
        f"{target} allows {limit:,} B. Lower stages or the CTA tile.",
    )
    epilogue = epilogue_smem_bytes(params)
    check(
        epilogue <= limit,
        "cta_tile",
        cta,
        f"cta_tile.m x (cta_tile.n + {EPILOGUE_PAD}) x 4 <= {limit:,} B",
        f"cta_tile={cta} stages its float32 accumulator tile through shared memory: "
        f"{cta.m} x ({cta.n} + {EPILOGUE_PAD}) x 4 B = {epilogue:,} B; {target} allows "
        f"{limit:,} B. Shrink cta_tile.m or cta_tile.n.",
    )


def _check_pipeline(found: Violations, params: MatmulParams, problem: MatmulProblem) -> None:
    check = found.check
    cta = params.cta_tile
    check(
        1 <= params.stages <= MAX_STAGES,
        "stages",
        params.stages,
        f"1..{MAX_STAGES}",
        f"stages={params.stages}; the ampere pipeline supports 1 to {MAX_STAGES} stages. "
        f"Set stages between 1 and {MAX_STAGES}.",
    )
    check(
        params.stages <= 2 or params.async_gmem_load_operands,
        "stages",
        params.stages,
        "<= 2 without async loads",
        f"stages={params.stages} needs cp.async loads, but async_gmem_load_operands=False. "
        "Set async_gmem_load_operands=True or stages <= 2.",
    )
    vec_a, vec_b = operand_vectors(params, problem)
    itemsize = problem.operand_dtype.itemsize
    copy = itemsize * min(vec_a, vec_b)
    if params.async_gmem_load_operands:
        check(
            copy in _CP_ASYNC_BYTES,
            "async_gmem_load_operands",
            True,
            "cp.async copies of 4, 8 or 16 B",
            f"async_gmem_load_operands=True needs cp.async copies of 4, 8 or 16 B, but the "
            f"operands allow {min(vec_a, vec_b)} x {itemsize} B = {copy} B. Set "
            "async_gmem_load_operands=False (and stages <= 2).",
        )
    else:
        check(
            copy not in _CP_ASYNC_BYTES,
            "async_gmem_load_operands",
            False,
            "True when both operands allow cp.async",
            f"async_gmem_load_operands=False, but both operands allow cp.async copies of "
            f"{copy}+ B, which the ampere kernel always uses for operands that allow them "
            "(plain loads only for an operand with 2-byte alignment). Set "
            "async_gmem_load_operands=True.",
        )
    check(
        params.prefetch_gap == 1,
        "prefetch_gap",
        params.prefetch_gap,
        "1",
        f"prefetch_gap={params.prefetch_gap}; the ampere pipeline always loads stages - 1 "
        "k-tiles ahead of the math (prefetch_gap=1). Set prefetch_gap=1.",
    )
    k_tiles = _ceil(problem.k, cta.k)
    check(
        params.splitk_factor <= k_tiles,
        "splitk_factor",
        params.splitk_factor,
        f"<= ceil(k / cta_k) = {k_tiles}",
        f"splitk_factor={params.splitk_factor} exceeds the {k_tiles} K tiles of k={problem.k} "
        f"with cta_k={cta.k}. Lower splitk_factor or cta_tile.k.",
    )


def _check_grid(found: Violations, params: MatmulParams, problem: MatmulProblem) -> None:
    check = found.check
    cta, splitk = params.cta_tile, params.splitk_factor
    tiles = _ceil(problem.m, cta.m) * _ceil(problem.n, cta.n)
    check(
        tiles <= MAX_GRID_X,
        "cta_tile",
        cta,
        f"<= {MAX_GRID_X:,} output tiles (grid x)",
        f"cta_tile={cta} cuts m={problem.m} x n={problem.n} into {tiles:,} tiles, one CTA "
        f"each on grid x; CUDA allows {MAX_GRID_X:,}. Grow cta_tile.m or cta_tile.n.",
    )
    z = problem.batch * splitk
    check(
        z <= MAX_GRID_Z,
        "splitk_factor",
        splitk,
        f"batch x splitk_factor <= {MAX_GRID_Z:,} (grid z)",
        f"batch={problem.batch:,} x splitk_factor={splitk} = {z:,} CTAs along grid z; CUDA "
        f"allows {MAX_GRID_Z:,}. Lower splitk_factor, or split the batch into calls of at "
        f"most {MAX_GRID_Z // splitk:,}.",
    )
    if splitk > 1:
        blocks = _ceil(problem.batch * problem.m * problem.n, REDUCE_THREADS)
        check(
            blocks <= MAX_GRID_X,
            "splitk_factor",
            splitk,
            f"batch x m x n <= {MAX_GRID_X * REDUCE_THREADS:,} with split-K",
            f"splitk_factor={splitk} sums the partials in a kernel of {blocks:,} blocks on "
            f"grid x; CUDA allows {MAX_GRID_X:,}. Set splitk_factor=1.",
        )


def _check_unsupported(found: Violations, params: MatmulParams) -> None:
    check = found.check
    check(
        params.cluster_dims == (1, 1),
        "cluster_dims",
        params.cluster_dims,
        "(1, 1)",
        f"the ampere scheduler does not support thread block clusters (cluster_dims="
        f"{params.cluster_dims}); use the hopper scheduler or set cluster_dims=(1, 1).",
    )
    check(
        params.tiling_strategy is TilingStrategy.one_tile_per_cta,
        "tiling_strategy",
        params.tiling_strategy,
        "one_tile_per_cta",
        f"the ampere scheduler does not support {params.tiling_strategy.value} tiling; use the "
        "hopper scheduler or set tiling_strategy='one_tile_per_cta'.",
    )
    check(
        not params.warp_specialized,
        "warp_specialized",
        True,
        "False",
        "the ampere scheduler does not support warp specialization; use the hopper scheduler "
        "or set warp_specialized=False.",
    )
