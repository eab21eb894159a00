"""An example mmaplug heuristic: ampere base params from NVIDIA's nvMatmulHeuristics.

nvMatmulHeuristics (PyPI ``nvidia-matmul-heuristics``, import name ``nvMatmulHeuristics``) is
proprietary software under NVIDIA's licence. It is never a dependency of mmaplug, and only an
opt-in extra of this example (``pip install './examples/nvmmh_heuristic[nvmmh]'``). It is
imported lazily, inside :func:`query_configs`: when it is not installed the hook returns None,
says nothing, and mmaplug's default heuristic answers.

The conversion (:func:`to_params`) is pure and needs only an object shaped like the library's
``GemmConfig`` (attributes ``cta_tile_m/n/k``, ``warp_tile_m/n/k``, ``instr_tile_m/n/k``,
``stages``, ``split_k``, ``swizzle_factor``, ``cta_order``, ``cluster_m/n``), so it is tested
without the library.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any, Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import InvalidParamsError
from mmaplug.markers import hookimpl
from mmaplug.planning.device import Device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape
from mmaplug.plugins.ampere import limits

__all__ = [
    "COUNT",
    "FLAGS",
    "GPU_NAMES",
    "TARGET",
    "first_params",
    "mmaplug_matmul_params",
    "nvmmh_gpu",
    "nvmmh_layout",
    "query_configs",
    "to_params",
]

#: Registered name (``mmaplug.testing.registered`` uses it); the same as the entry point's.
name: Final = "nvmmh"

#: Our preset device names -> ``NvMatmulHeuristicsNvidiaGpu`` member names. The library knows
#: only the 80 GB A100, so every A100 is planned as that one.
GPU_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {"a100": "A100_SXM_80GB", "h100": "H100_SXM", "h200": "H200_SXM"}
)
# Names of local GPUs (numba's ``gpu.name``, e.g. "NVIDIA H100 PCIe"): every word of the key must
# occur in the lower-cased name; the first match wins, so the specific variants come first.
_LOCAL_GPUS: Final = (
    (("h200",), "H200_SXM"),
    (("h100", "nvl"), "H100_NVL"),
    (("h100", "pcie"), "H100_PCIE"),
    (("h100",), "H100_SXM"),
    (("a100", "pcie"), "A100_PCIE_80GB"),
    (("a100",), "A100_SXM_80GB"),
)

#: ``NvMatmulHeuristicsTarget`` member asked. The ampere scheduler's kernel is a CUTLASS-2.x
#: style multistage kernel (ldmatrix + mma.sync m16n8k16 + cp.async), on sm_80 and on sm_90. The
#: CUTLASS target models exactly that on both; the NVFUSER and CUTLASS3 targets model wgmma +
#: TMA + cluster kernels on sm_90 (64xNx16 instructions, clusters), which the ampere scheduler
#: cannot run.
TARGET: Final = "CUTLASS"
#: ``NvMatmulHeuristicsFlags`` member: rank many candidates with the library's performance model.
#: ``NvMatmulHeuristicsInterfaceEx`` loads the library's internal discovery set, which this mode
#: is documented to need.
FLAGS: Final = "PERF_MODEL_BASED_AUTO_TUNING"
#: Configurations asked for; the first one our limits accept is used.
COUNT: Final = 8

_UINT32_MAX: Final = 2**32 - 1  # nvmmhMatmulProblem_t holds M, N, K and batch as uint32
_CP_ASYNC_BYTES: Final = frozenset({4, 8, 16})
_CTA_ORDERS: Final = {0: CtaOrder.row_major, 1: CtaOrder.column_major}
_LOCK: Final = threading.Lock()


# --- pure helpers (no nvMatmulHeuristics needed) -------------------------------------------------


def nvmmh_gpu(device: Device) -> str | None:
    """The ``NvMatmulHeuristicsNvidiaGpu`` member name for *device*, or None if unknown."""
    key = device.name.strip().lower()
    if key in GPU_NAMES:
        return GPU_NAMES[key]
    for words, gpu in _LOCAL_GPUS:
        if all(word in key for word in words):
            return gpu
    return None


def nvmmh_layout(problem: MatmulProblem) -> str:
    """The ``NvMatmulHeuristicsMatmulLayout`` member name for *problem*'s operand layout.

    nvMatmulHeuristics' letters are BLAS transposes of row-major operands of ``C = A @ B``: for A,
    ``N`` is ``[M, K]`` (K innermost) and ``T`` is ``[K, M]``; for B, ``N`` is ``[K, N]`` and
    ``T`` is ``[N, K]`` (K innermost). Our nvFuser letters mean the opposite for both operands,
    so our ``TN`` (``F.linear``: both K-innermost) is its ``NT_ROW_MAJOR``.
    """
    a = "N" if problem.a_k_inner else "T"
    b = "T" if problem.b_k_inner else "N"
    return f"{a}{b}_ROW_MAJOR"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _cp_async_ok(problem: MatmulProblem) -> bool:
    """cp.async copies 4, 8 or 16 B: operand itemsize x the narrower vector width must be one."""
    widths = problem.vector_widths
    return problem.operand_dtype.itemsize * min(widths.a, widths.b) in _CP_ASYNC_BYTES


def _int(value: object, default: int) -> int:
    """Integer field of a library config; None (an unset ``GemmConfig`` field) is *default*."""
    return default if value is None else int(value)  # type: ignore[call-overload]


def to_params(config: Any, problem: MatmulProblem, device: Device) -> MatmulParams | None:
    """Convert one nvMatmulHeuristics ``GemmConfig`` to ampere ``MatmulParams``.

    :returns: params that ``mmaplug.plugins.ampere.limits.violations`` accepts, or None when
        the configuration cannot be made into such params (the caller tries the next one).

    Kept from the config: CTA tile, warp tile m and n, split-K, grid swizzle (the library
    documents the CUTLASS/nvFuser/Triton definition, which is ours), CTA order (its 0 is row
    major, N tiles on gridDim.x: our ``row_major``; 1 is ``column_major``) and stages. Changed,
    each because the ampere scheduler cannot run the library's value:

    * instruction tile: always 16x8x16, the only mma.sync shape our kernel issues. The library
      may report 64x8x16 (wgmma) or 16x8x8 (tf32/fp8); the warp tile is kept, and the warp
      issues m16n8k16 over it instead.
    * warp tile k := CTA tile k: our warps do not split K (sliced-K configs have warp k < CTA
      k); every warp walks the CTA's whole K slice.
    * cluster dims dropped to (1, 1): thread block clusters need the hopper scheduler. They only
      add L2/multicast sharing between CTAs, so the tiles stay meaningful without them.
    * stages: capped at the ampere pipeline's maximum, at the K iterations of one split (a
      deeper pipeline than the K loop only holds shared memory that is never filled), at what
      the opt-in shared memory holds, and at 2 when the operands cannot use cp.async.
    * split-K: capped at the number of K tiles.

    Everything else is the ampere default: one tile per CTA, no warp specialization, smem
    epilogue (the ampere kernel always stages it), prefetch gap 1.
    """
    try:
        cta = TileShape(config.cta_tile_m, config.cta_tile_n, config.cta_tile_k)
        warp = TileShape(config.warp_tile_m, config.warp_tile_n, cta.k)
        cta_order = _CTA_ORDERS.get(_int(config.cta_order, 0))
        if cta_order is None:  # an order we do not know the meaning of
            return None
        use_async = _cp_async_ok(problem)
        k_tiles = _ceil(problem.k, cta.k)
        splitk = min(max(1, _int(config.split_k, 1)), k_tiles)
        per_stage = (cta.m + cta.n) * cta.k * problem.operand_dtype.itemsize
        stages = min(
            max(1, _int(config.stages, 1)),
            limits.MAX_STAGES,
            _ceil(k_tiles, splitk),
            device.smem_per_block_optin // per_stage,
        )
        if not use_async:
            stages = min(stages, 2)
        if stages < 1:  # not even one stage of this CTA tile fits in shared memory
            return None
        params = MatmulParams(
            cta_tile=cta,
            warp_tile=warp,
            instruction_tile=limits.INSTRUCTION_TILE,
            stages=stages,
            async_gmem_load_operands=use_async,
            cta_order=cta_order,
            grid_swizzle_factor=max(1, _int(config.swizzle_factor, 1)),
            splitk_factor=splitk,
            use_smem_epilogue=True,
        )
    except (InvalidParamsError, TypeError, ValueError):
        # Zero, missing or non-integer fields, or tiles that do not divide: not a config we
        # can run. (MatmulParams/TileShape raise InvalidParamsError for their own rules.)
        return None
    return None if limits.violations(params, problem, device) else params


def first_params(
    configs: Iterable[Any], problem: MatmulProblem, device: Device
) -> MatmulParams | None:
    """The params of the first of *configs* that :func:`to_params` converts, or None."""
    for config in configs:
        params = to_params(config, problem, device)
        if params is not None:
            return params
    return None


# --- the library (imported lazily) ---------------------------------------------------------------


@functools.cache
def _library() -> ModuleType | None:
    """``nvMatmulHeuristics``, or None when it is not installed (looked up once)."""
    try:
        import nvMatmulHeuristics  # proprietary: optional, never imported at module level
    except ImportError:
        return None
    return nvMatmulHeuristics


@functools.cache
def _interface(target: str, flags: str, gpu: str) -> Any:
    """One ``NvMatmulHeuristicsInterfaceEx`` per (target, flags, GPU): it loads the library."""
    lib = _library()
    assert lib is not None
    return lib.NvMatmulHeuristicsInterfaceEx(
        backend=lib.NvMatmulHeuristicsTarget[target],
        flags=lib.NvMatmulHeuristicsFlags[flags],
        gpu=lib.NvMatmulHeuristicsNvidiaGpu[gpu],
    )


@functools.lru_cache(maxsize=512)
def _query(
    m: int, n: int, k: int, batch: int, layout: str, precision: str, gpu: str, count: int
) -> tuple[Any, ...]:
    lib = _library()
    assert lib is not None
    # The wrapper's InterfaceEx.get swaps its ``precision`` attribute during a call, so one
    # interface must not be queried from two threads at once.
    with _LOCK:
        interface = _interface(TARGET, FLAGS, gpu)
        nv_problem = interface.makeNvMatmulHeuristicsProblem(
            m, n, k, lib.NvMatmulHeuristicsMatmulLayout[layout], batch
        )
        results = interface.get(nv_problem, count, precision=precision)
    return tuple(result["kernel"] for result in results)


def query_configs(problem: MatmulProblem, device: Device, *, count: int = COUNT) -> tuple[Any, ...]:
    """nvMatmulHeuristics' configs for *problem* on *device*, best first (``GemmConfig``\\ s).

    :returns: an empty tuple when the library is not installed, *device* is not a GPU it knows,
        or the problem does not fit its 32-bit problem description.
    """
    gpu = nvmmh_gpu(device)
    sizes = (problem.m, problem.n, problem.k, problem.batch)
    if gpu is None or max(sizes) > _UINT32_MAX or _library() is None:
        return ()
    return _query(*sizes, nvmmh_layout(problem), problem.precision, gpu, count)


@hookimpl
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """The first nvMatmulHeuristics config the ampere limits accept; None to defer otherwise."""
    if scheduler != "ampere":
        return None
    return first_params(query_configs(problem, device), problem, device)
