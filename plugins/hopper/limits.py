"""What the Hopper scheduler (TMA, mbarriers, wgmma m64nNk16, sm_90a) builds: every rule
between fields and with the problem and the device (``rules``), and the kernel's one resource
model (``resources``).

Every MatmulParams field is either honoured by the generated kernel or refused here: the
rules mirror ``config_rules.config_problems`` (what the generator can emit) plus the device and the
fields the kernel has no variant for yet. A rule about one field's values asks that field's
``Space`` (``space.py``) or the predicate it is made of, so each legal value is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeAlias

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.ir.ops import SCALE_BLOCK
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TilingStrategy, Violation
from mmaplug.planning.scheduler import Resources, Rule

from .smem import after_stages_bytes, epilogue_chunk, horizontal_chunk, kernel_smem_bytes
from .space import (
    CLUSTER,
    CLUSTER_SPLITS,
    HORIZONTAL_SPLIT_K,
    NO_CLUSTER,
    PREFETCH_GAP,
    REGISTER_EPILOGUE,
    STAGES,
    STREAMK_PIECES,
    SWAP_FIXED,
    TMA_LOADS,
    WARP_SPECIALIZED,
    accumulators,
    asks_streamk,
    box_k,
    box_mn,
    cta_k_text,
    instruction_text,
    n_unit,
    stacked_n,
    wgmma_instruction,
    wgmma_tile,
)
from .tiles import (
    BLOCK_CLUSTER_SUMS,
    BLOCK_PAIR_CLUSTER,
    BLOCK_SUMS,
    MAX_ACCUMULATORS,
    MAX_CONSUMERS,
    MAX_TMA_BOX,
    MIN_STAGES,
    REGISTER_SPLITS,
    STRADDLE_UNIT,
    STRADDLING_WIDTHS,
    block_cluster_spills,
    block_sums,
    block_tile,
    cluster_kind,
    consumer_count,
    horizontal_unit,
    k_box,
    kernel_threads,
    shared_tiles,
    wgmma_k,
)

__all__ = ["MAX_CONSUMERS", "MAX_TMA_BOX", "resources", "rules", "smem_bytes", "violations"]

MAX_UNITS: Final = 2**31 - 1  # work units are walked with int64, the grid x with int32
RuleCheck: TypeAlias = Callable[[MatmulParams, MatmulProblem, Device], str | None]


def resources(params: MatmulParams, problem: MatmulProblem) -> Resources:
    """What one CTA of the kernel for *params* takes: shared memory (:func:`smem_bytes`), the
    producer's and the consumers' threads, and the consumers' ``setmaxnreg`` registers (the
    producer's count is lower, ``tiles.REGISTER_SPLITS``)."""
    consumers = _consumers(params)
    warp, cta = params.warp_tile, params.cta_tile.as_tuple()
    staging = after_stages_bytes(
        consumers, cta, warp.n, staged=params.use_smem_epilogue and warp.n % 8 == 0,
        splitk_cluster=params.splitk_in_cluster, streamk=asks_streamk(params),
    )  # fmt: skip
    smem = kernel_smem_bytes(cta, problem.operand_dtype.itemsize, params.stages, staging)
    kind = cluster_kind(max(params.cluster_dims) > 1, params.splitk_in_cluster)
    return Resources(smem, kernel_threads(consumers), REGISTER_SPLITS[kind][1])


def smem_bytes(params: MatmulParams, problem: MatmulProblem) -> int:
    """Dynamic shared memory of the generated kernel: alignment slack, stages, mbarriers and,
    with ``use_smem_epilogue``, the epilogue staging buffers, with ``splitk_in_cluster`` the
    partial tile (``smem.kernel_smem_bytes``)."""
    return resources(params, problem).smem_bytes


def violations(params: MatmulParams, problem: MatmulProblem, device: Device) -> list[Violation]:
    """Every reason the Hopper scheduler cannot build *params* for *problem* on *device*: its
    rules, checked by ``mmaplug.planning.scheduler.violations``.

    :returns: an empty list when the parameters are legal.
    """
    from mmaplug.planning.scheduler import violations as check

    from .scheduler import SCHEDULER  # the scheduler reads this module

    return check(SCHEDULER, params, problem, device)


def _consumers(params: MatmulParams) -> int:
    """Consumer warpgroups of *params* (``config.consumer_count``)."""
    pingpong = params.tiling_strategy is TilingStrategy.persistent_pingpong
    return consumer_count(params.cta_tile.as_tuple(), params.warp_tile.as_tuple(), pingpong)


# -- the rules ------------------------------------------------------------------------------


def rules(problem: MatmulProblem, device: Device) -> list[Rule]:
    """Every rule of the hopper kernel for *problem* on *device*, in the order its violations
    are reported; each limit in words (numbers of this problem and device)."""
    unit, optin = n_unit(problem), device.smem_per_block_optin
    found = [
        Rule("device", "sm_90a", _device),
        Rule("warp_tile", f"m % 64 == 0, n % {unit} == 0, n <= 256", _warp_wgmma),
        Rule(
            "instruction_tile", f"{instruction_text(problem)}, N = warp_tile.n", _instruction_tile
        ),
        Rule("cta_tile", f"k in {cta_k_text(problem)} and equal to warp_tile.k", _cta_k),
        Rule("cta_tile", f"a multiple of warp_tile, m and n <= {MAX_TMA_BOX}", _cta_box),
        Rule("cta_tile", "equal to warp_tile with ping-pong", _pingpong),
        Rule("cta_tile", f"<= {MAX_CONSUMERS} warp tiles", _consumer_limit),
        Rule("warp_tile", f"m * n / 128 <= {MAX_ACCUMULATORS}", _accumulator_limit),
        Rule("stages", f"<= {optin:,} B shared memory", _smem),
        Rule("stages", f">= {MIN_STAGES}", _min_stages),
        Rule("prefetch_gap", PREFETCH_GAP.text, _prefetch_gap),
        Rule("async_gmem_load_operands", TMA_LOADS.text, _tma_loads),
        Rule("warp_specialized", WARP_SPECIALIZED.text, _warp_specialized),
        Rule("cluster_dims", CLUSTER.text, _cluster),
        Rule(
            "cluster_dims",
            "(1, 1) with a shared tile that does not split into whole boxes per CTA",
            _cluster_pair,
        ),
        Rule("splitk_factor", "<= ceil(k / cta_k)", _k_tiles),
        Rule("splitk_in_cluster", CLUSTER_SPLITS.text, _cluster_splits),
        Rule(
            "splitk_in_cluster",
            f"with cluster_dims {NO_CLUSTER.text}, use_smem_epilogue {REGISTER_EPILOGUE.text} "
            "and no ping-pong",
            _cluster_reduction_alone,
        ),
        Rule("splitk_factor", STREAMK_PIECES.text, _streamk_pieces),
        Rule(
            "tiling_strategy",
            "persistent_streamk with cluster_dims (1, 1) and splitk_in_cluster=False",
            _streamk_alone,
        ),
    ]
    if problem.block_scaled:
        found.append(
            Rule(
                "cta_tile",
                f"n dividing {SCALE_BLOCK}, or n = warp_tile n, a multiple of {SCALE_BLOCK} or "
                f"straddling two blocks with k {SCALE_BLOCK} (block scales)",
                _block_n,
            )
        )
        found.append(
            Rule(
                "warp_tile",
                f"accumulators + partial sums <= {BLOCK_SUMS} a thread (block scales)",
                _block_sums,
            )
        )
        found.append(
            Rule(
                "cluster_dims",
                f"along one axis with block scales over {BLOCK_CLUSTER_SUMS} sums a thread, "
                "and no split cluster",
                _block_pair,
            )
        )
    if problem.horizontal > 1:
        found += _horizontal_rules(problem)
    found.append(Rule("cta_tile", f"batch * splitk * tiles <= {MAX_UNITS:,}", _units))
    swapped = (problem, problem.transposed())  # (transposed once: the tuner asks thousands)
    oriented = [Rule(r.field, r.limit, _in_kernel_orientation(r.check, swapped)) for r in found]
    return [*oriented, *_swap_rules(problem)]


def _in_kernel_orientation(
    check: RuleCheck, swapped: tuple[MatmulProblem, MatmulProblem]
) -> RuleCheck:
    """*check* asked about the problem the kernel computes: with ``swap_ab`` the transposed
    one (its m the problem's n, its A the problem's B), whose tiles the params describe;
    *swapped* is a problem and its transpose."""

    def oriented(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
        if not params.swap_ab:
            return check(params, problem, device)
        kernel = swapped[1] if problem is swapped[0] else problem.transposed()
        return check(params, kernel, device)

    return oriented


def _device(_params: MatmulParams, _problem: MatmulProblem, device: Device) -> str | None:
    if device.cc == (9, 0) and device.arch_suffix == "a":
        return None
    return (
        f"the hopper scheduler emits wgmma and setmaxnreg, which need sm_90a; {device.name} is "
        f"{device.target}. Use an H100/H200 (or preset 'h100'/'h200'), or the ampere scheduler."
    )


def _warp_wgmma(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    warp = params.warp_tile
    if wgmma_tile(warp, problem):
        return None
    return (
        f"warp_tile={warp}: a consumer warpgroup issues m64nNk16 wgmmas (N = warp_tile.n), "
        f"so m must be a multiple of 64 and n a multiple of {n_unit(problem)} up to 256"
        + ("" if problem.b_k_inner else " (an N-major B is read in 64-column swizzle rows)")
        + ". Round the warp tile."
    )


def _instruction_tile(params: MatmulParams, problem: MatmulProblem, _d: Device) -> str | None:
    inst, warp = params.instruction_tile, params.warp_tile
    if wgmma_instruction(inst, problem) and inst.n == warp.n:
        return None
    k = wgmma_k(problem.operand_dtype)
    return (
        f"instruction_tile={inst}; the kernel issues one m64nNk{k} wgmma per 64 rows with N the "
        f"warp tile's n ({problem.operand_dtype.label} operands). Set "
        f"instruction_tile=(64, {warp.n}, {k})."
    )


def _cta_k(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    cta, warp = params.cta_tile, params.warp_tile
    if cta.k == warp.k and box_k(cta.k, problem):
        return None
    first = k_box(problem.operand_dtype)
    return (
        f"cta_tile={cta}: k must be one of {cta_k_text(problem)} (whole 128-byte swizzle rows "
        f"of {problem.operand_dtype.label}, one TMA box) and equal warp_tile.k={warp.k}. Set "
        f"cta_tile.k={first}."
    )


def _cta_box(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    cta, warp = params.cta_tile, params.warp_tile
    if cta.m % warp.m == 0 and cta.n % warp.n == 0 and box_mn(cta):
        return None
    return (
        f"cta_tile={cta} must be a multiple of warp_tile={warp} with m and n at most "
        f"{MAX_TMA_BOX} (one TMA box). Change either tile."
    )


def _pingpong(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    cta, warp = params.cta_tile, params.warp_tile
    pingpong = params.tiling_strategy is TilingStrategy.persistent_pingpong
    if not pingpong or (cta.m, cta.n) == (warp.m, warp.n):
        return None
    return (
        f"cta_tile={cta} with tiling_strategy='persistent_pingpong': each of the two consumer "
        f"warpgroups owns a whole tile, so cta_tile must equal warp_tile={warp}. Set both alike."
    )


def _consumer_limit(params: MatmulParams, _problem: MatmulProblem, _d: Device) -> str | None:
    if (consumers := _consumers(params)) <= MAX_CONSUMERS:
        return None
    return (
        f"cta_tile={params.cta_tile} over warp_tile={params.warp_tile} makes {consumers} "
        f"consumer warpgroups; the kernel runs at most {MAX_CONSUMERS} (their registers share "
        "the SM's 64K). Grow the warp tile."
    )


def _accumulator_limit(params: MatmulParams, _problem: MatmulProblem, _d: Device) -> str | None:
    warp = params.warp_tile
    if (accs := accumulators(warp)) <= MAX_ACCUMULATORS:
        return None
    return (
        f"warp_tile={warp} needs {accs} float32 accumulators per thread; at most "
        f"{MAX_ACCUMULATORS} fit beside addressing registers. Use 64x256, 128x128 or "
        f"128x{MAX_ACCUMULATORS}."
    )


def _block_sums(params: MatmulParams, _problem: MatmulProblem, _d: Device) -> str | None:
    warp, k = params.warp_tile, params.cta_tile.k
    if (sums := block_sums(warp.as_tuple(), k)) <= BLOCK_SUMS:
        return None
    return (
        f"warp_tile={warp} with cta_tile.k={k}: block scales keep {sums} float32 sums per "
        f"thread (the accumulators and, for each scale block of a stage, partial sums of at "
        f"most {SCALE_BLOCK} columns); at most {BLOCK_SUMS} fit. Use 64x128, or 64x256 with "
        f"cta_tile.k={SCALE_BLOCK}."
    )


def _block_pair(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    sums = block_sums(params.warp_tile.as_tuple(), params.cta_tile.k)
    cluster_m, cluster_n = params.cluster_dims
    if not block_cluster_spills(sums, cluster_m, cluster_n, params.splitk_in_cluster):
        return None
    return (
        f"cluster_dims={params.cluster_dims}, splitk_in_cluster={params.splitk_in_cluster} "
        f"with cta_tile={params.cta_tile} and warp_tile={params.warp_tile}: "
        f"{BLOCK_PAIR_CLUSTER}. Set cluster_dims=(2, 1) or (1, 1) without splitk_in_cluster, "
        f"or cta_tile.k={SCALE_BLOCK} with warp_tile 64x128."
    )


def _block_n(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    cta, warp = params.cta_tile, params.warp_tile
    if block_tile(cta.k, cta.n, warp.n):
        return None
    return (
        f"cta_tile={cta} over warp_tile={warp}: with block scales each set of partial sums "
        f"lies in one of B's {SCALE_BLOCK}x{SCALE_BLOCK} scale blocks, or straddles two with "
        f"cta_tile.k={SCALE_BLOCK}, so n must divide {SCALE_BLOCK}, or equal warp_tile.n: a "
        f"multiple of {SCALE_BLOCK} (promoted by chunks) or of {STRADDLE_UNIT} meeting at most "
        f"two blocks {STRADDLING_WIDTHS}. Set cta_tile.n to {SCALE_BLOCK}, or 256 over warp_tile "
        "64x256."
    )


def _smem(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    optin = device.smem_per_block_optin
    if (smem := smem_bytes(params, problem)) <= optin:
        return None
    return (
        f"stages={params.stages} needs {smem:,} B of shared memory per block; {device.target} "
        f"allows {optin:,} B. Lower stages or the CTA tile."
    )


def _min_stages(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    if STAGES.allows(params.stages):
        return None
    return (
        f"stages={params.stages}: the producer fills one stage while the consumers read "
        "another, so at least 2 are needed. Raise stages."
    )


def _prefetch_gap(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    if PREFETCH_GAP.allows(params.prefetch_gap):
        return None
    return (
        f"prefetch_gap={params.prefetch_gap}: the TMA producer refills a stage as soon as "
        "the consumers release it; there is no other gap to choose. Set prefetch_gap=1."
    )


def _tma_loads(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    if TMA_LOADS.allows(params.async_gmem_load_operands):
        return None
    return (
        "the hopper scheduler always loads operands with TMA; set "
        "async_gmem_load_operands=True or use the ampere scheduler."
    )


def _warp_specialized(params: MatmulParams, _pr: MatmulProblem, _d: Device) -> str | None:
    if WARP_SPECIALIZED.allows(params.warp_specialized):
        return None
    return (
        "the hopper kernel is always warp-specialized (a TMA producer warpgroup and consumer "
        "warpgroups); set warp_specialized=True or use the ampere scheduler."
    )


def _cluster(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    if CLUSTER.allows(tuple(params.cluster_dims)):
        return None
    return (
        f"cluster_dims={params.cluster_dims}: the kernel clusters 2 or 4 CTAs along M, which "
        "share one multicast B tile, or along N, which share one multicast A tile, or 2x2, "
        f"which share both; other cluster shapes are not generated. Set one of {CLUSTER.text}."
    )


def _cluster_pair(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    cta, cluster = params.cta_tile, tuple(params.cluster_dims)
    if not CLUSTER.allows(cluster) or cluster == (1, 1):
        return None
    tiles = shared_tiles(cluster, cta.as_tuple(), problem.a_k_inner, problem.b_k_inner)
    tile = next((tile for tile in tiles if tile.rows % tile.unit), None)
    if tile is None:
        return None
    ctas, dim, unit = tile.ctas, tile.dim, tile.unit
    return (
        f"cluster_dims={cluster} with cta_tile={cta}: each of the {ctas} CTAs multicasts a "
        f"1/{ctas} part of the {tile.operand} tile, so {dim} must be a multiple of {unit} for "
        f"this layout. Set cluster_dims=(1, 1), a smaller cluster, or {dim} to a multiple of "
        f"{unit}."
    )


def _k_tiles(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    cta = params.cta_tile
    k_tiles = -(-problem.k // cta.k)
    if params.splitk_factor <= max(1, k_tiles):
        return None
    return (
        f"splitk_factor={params.splitk_factor} exceeds the {k_tiles} K tiles of k={problem.k} "
        f"with cta_k={cta.k}. Lower splitk_factor or cta_tile.k."
    )


def _cluster_splits(params: MatmulParams, _problem: MatmulProblem, _d: Device) -> str | None:
    if not params.splitk_in_cluster or CLUSTER_SPLITS.allows(params.splitk_factor):
        return None
    return (
        f"splitk_in_cluster=True with splitk_factor={params.splitk_factor}: the splits of a "
        f"tile are one cluster, {CLUSTER_SPLITS.text}. Set splitk_factor in that range or "
        "splitk_in_cluster=False (the reduce kernel takes any split)."
    )


def _cluster_reduction_alone(
    params: MatmulParams, _problem: MatmulProblem, _device: Device
) -> str | None:
    pingpong = params.tiling_strategy is TilingStrategy.persistent_pingpong
    alone = NO_CLUSTER.allows(tuple(params.cluster_dims))
    if not params.splitk_in_cluster or (
        alone and REGISTER_EPILOGUE.allows(params.use_smem_epilogue) and not pingpong
    ):
        return None
    return (
        f"splitk_in_cluster=True with cluster_dims={params.cluster_dims}, "
        f"use_smem_epilogue={params.use_smem_epilogue} and tiling_strategy="
        f"'{params.tiling_strategy.value}': the cluster is the tile's splits alone, the "
        "epilogue runs on the summed partials in shared memory, and each consumer group "
        "reduces the tile it computed. Set cluster_dims=(1, 1), use_smem_epilogue=False and "
        "a tiling_strategy other than persistent_pingpong."
    )


def _streamk_pieces(params: MatmulParams, _problem: MatmulProblem, _d: Device) -> str | None:
    if not asks_streamk(params) or STREAMK_PIECES.allows(params.splitk_factor):
        return None
    return (
        f"tiling_strategy='persistent_streamk' with splitk_factor={params.splitk_factor}: "
        "splitk_factor is the number of K pieces each tail tile is cut into. Set it to 2 or "
        "more, or tiling_strategy='persistent'."
    )


def _streamk_alone(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    alone = NO_CLUSTER.allows(tuple(params.cluster_dims)) and not params.splitk_in_cluster
    if not asks_streamk(params) or alone:
        return None
    return (
        f"tiling_strategy='persistent_streamk' with cluster_dims={params.cluster_dims} and "
        f"splitk_in_cluster={params.splitk_in_cluster}: a tail tile's pieces meet in the "
        "workspace, each CTA alone. Set cluster_dims=(1, 1) and splitk_in_cluster=False."
    )


def _units(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    cta = params.cta_tile
    n_out = cta.n // problem.horizontal
    tiles = -(-problem.m // cta.m) * -(-problem.n // n_out) if n_out else 0
    if (units := problem.batch * params.splitk_factor * tiles) <= MAX_UNITS:
        return None
    return (
        f"{units:,} work units (batch x split-K x tiles) exceed the grid's {MAX_UNITS:,}. "
        "Grow the CTA tile."
    )


# -- the operand swap (docs/decisions.md, "The operand swap") -------------------------------


def _swap_rules(problem: MatmulProblem) -> list[Rule]:
    """What the swapped kernel does not generate: a horizontal fusion or block scales keep
    their orientation."""
    if problem.horizontal > 1 or problem.block_scaled:
        return [Rule("swap_ab", SWAP_FIXED.text, _swap_fixed)]
    return []


def _swap_fixed(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    if SWAP_FIXED.allows(params.swap_ab):
        return None
    what = (
        f"a horizontal fusion of {problem.horizontal} matmuls shares its A, which the kernel's "
        "stages hold once beside the stacked Bs"
        if problem.horizontal > 1
        else "block scales are applied along A's rows and B's 128-column blocks"
    )
    return f"swap_ab=True: {what}; the swapped kernel is not generated for it. Set swap_ab=False."


# -- a horizontal fusion (docs/decisions.md, "Horizontal fusion") ---------------------------


def _horizontal_rules(problem: MatmulProblem) -> list[Rule]:
    """What the generated kernel supports of a horizontal fusion's h B tiles stacked along N
    in one wgmma."""
    unit = problem.horizontal * horizontal_unit(problem.b_k_inner)
    return [
        Rule("cta_tile", f"n a multiple of {unit}", _stacked_n),
        Rule("warp_tile", "n == cta_tile.n", _whole_rows),
        Rule("splitk_factor", HORIZONTAL_SPLIT_K.text, _horizontal_split_k),
        Rule("cluster_dims", NO_CLUSTER.text, _horizontal_cluster),
        Rule("use_smem_epilogue", "False for this warp_tile", _horizontal_staging),
    ]


def _stacked_n(params: MatmulParams, problem: MatmulProblem, _device: Device) -> str | None:
    cta, h = params.cta_tile, problem.horizontal
    if stacked_n(cta, problem):
        return None
    return (
        f"cta_tile={cta} for a horizontal fusion of {h} matmuls: cta_tile.n is the wgmma's N, "
        f"{h} B tiles of n/{h} columns each, and each must be whole "
        + (
            "8-row swizzle groups (K-major B)"
            if problem.b_k_inner
            else "64-column swizzle rows (N-major B)"
        )
        + f". Use a cta_tile.n of {h} x the output tile's n, a multiple of "
        f"{h * horizontal_unit(problem.b_k_inner)}."
    )


def _whole_rows(params: MatmulParams, _problem: MatmulProblem, _device: Device) -> str | None:
    cta, warp = params.cta_tile, params.warp_tile
    if warp.n == cta.n:
        return None
    return (
        f"warp_tile={warp} for a horizontal fusion: each consumer thread must hold column c of "
        f"every product, so consumers split the CTA tile along M only. Set warp_tile.n = "
        f"{cta.n}."
    )


def _horizontal_split_k(params: MatmulParams, _pr: MatmulProblem, _d: Device) -> str | None:
    if HORIZONTAL_SPLIT_K.allows(params.splitk_factor):
        return None
    return (
        f"splitk_factor={params.splitk_factor} with a horizontal fusion: the products are "
        "combined in the epilogue, which a split-K reduce of one workspace cannot do. Set "
        "splitk_factor=1."
    )


def _horizontal_cluster(params: MatmulParams, _pr: MatmulProblem, _d: Device) -> str | None:
    if NO_CLUSTER.allows(tuple(params.cluster_dims)):
        return None
    return (
        f"cluster_dims={params.cluster_dims} with a horizontal fusion: B multicast per tensor "
        "map is not generated. Set cluster_dims=(1, 1)."
    )


def _horizontal_staging(params: MatmulParams, problem: MatmulProblem, _d: Device) -> str | None:
    warp, h = params.warp_tile, problem.horizontal
    # a warp tile n that is not whole 8-column chunks breaks the wgmma rule already
    if not params.use_smem_epilogue or warp.n % 8 or horizontal_chunk(warp.n, h) > 0:
        return None
    return (
        f"use_smem_epilogue=True with a horizontal fusion and warp_tile={warp}: the staged "
        f"epilogue puts the {h} products' chunks side by side in one staged row of "
        f"{epilogue_chunk(warp.n)} columns, each chunk 32, 16 or 8 columns dividing "
        f"warp_tile.n / {h} = {warp.n // h}; none fits. Set use_smem_epilogue=False, or a "
        f"cta_tile n whose share per product is a multiple of 8 no wider than 1/{h} of the row."
    )
