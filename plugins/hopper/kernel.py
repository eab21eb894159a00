"""Hopper wgmma GEMM: the generated kernels, compiled and cached per config.

Pipeline (one CTA, persistent: it walks work units ``blockIdx.x, + gridDim.x, ...``; a unit
is one output tile of one batch and one K split):

1. **Producer warpgroup** (threads 0-127; thread 0 issues, the others retire after lowering
   their register budget with ``setmaxnreg``): for every K tile of every unit it waits for the
   stage's ``empty`` mbarrier, arms the ``full`` mbarrier with the stage's byte count
   (``arrive.expect_tx``) and issues TMA box loads of A and B into the stage. Boxes are 64
   elements (128 bytes) wide along the operand's contiguous dim, 128B-swizzled; out-of-bounds
   elements arrive as zeros, so ragged M, N and K need no predicates. Tensor maps live in a
   small device array (``maps``): 3-D ``{inner, outer, batch}``.
2. **Consumer warpgroups** (one or two, each owning a ``warp_tile``): wait ``full``, issue
   ``BK/16`` ``wgmma.mma_async m64n{wn}k16`` per 64-row block from shared-memory descriptors
   (K-major or MN-major through the transpose bits, so all four layouts load without copies),
   commit, wait, and release the stage on ``empty`` (lane 0 of every consumer warp arrives).
   Accumulators stay in registers across the whole K loop (``fence_operand`` keeps NVVM from
   touching them between wgmma and wait).
3. **Epilogue** from registers: each thread applies the ``EpilogueProgram`` to its fragment, two
   adjacent columns per step, bounds-checked against M and N; with split-K it writes float32
   partials to a workspace and ``hopper_splitk_reduce`` applies the epilogue once.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from mmaplug.codegen.emitter import REDUCE_THREADS, is16
from mmaplug.cuda.launching import KernelJob, generated_kernel, generated_kernel_jobs, simulating
from mmaplug.cuda.modules import GeneratedKernels, load_generated

from .config import GRID_PARAMS, SHAPE_PARAMS, HopperKernelConfig
from .kernel_codegen import generate_source

__all__ = ["build", "compile_ptx", "kernel_jobs", "kernel_signatures", "load_module", "loaded"]

SM90A: Final = (9, 0, "a")


def kernel_signatures(config: HopperKernelConfig) -> dict[str, Any]:
    """Numba signatures of ``hopper_gemm`` (and ``hopper_splitk_reduce`` with split-K)."""
    from numba import types

    def array(dtype: Any) -> Any:
        return types.Array(types.uint16 if is16(dtype) else types.float32, 1, "C")

    u64a = types.Array(types.uint64, 1, "C")
    f32a = types.Array(types.float32, 1, "C")
    prog = config.epilogue
    ins = [array(i.dtype) for i in prog.inputs]
    outs = [array(o.dtype) for o in prog.outputs]
    scal = [types.float32] * len(prog.scalars)
    i64 = types.int64
    in_strides = [i64] * (3 * len(prog.inputs))
    out_strides = [i64] * (2 * len(prog.outputs))
    shape, grid = [i64] * len(SHAPE_PARAMS), [i64] * len(GRID_PARAMS)
    if config.splitk > 1:
        red = [f32a, *ins, *outs, *scal, i64, i64, i64, *in_strides, *out_strides]
        return {
            "hopper_gemm": types.void(u64a, f32a, *shape, *grid),
            "hopper_splitk_reduce": types.void(*red),
        }
    main = [u64a, *ins, *outs, *scal, *shape, *in_strides, *out_strides, *grid]
    return {"hopper_gemm": types.void(*main)}


def load_module(config: HopperKernelConfig, *, sim: bool | None = None) -> dict[str, Any]:
    """Exec the generated source from memory (see ``mmaplug.cuda.modules.load_generated``)."""
    sim = simulating() if sim is None else sim
    return load_generated(config.kernel_name, generate_source(config, sim=sim))


def compile_ptx(config: HopperKernelConfig, kernel: str = "hopper_gemm") -> str:
    """PTX of one generated kernel for sm_90a (no GPU needed)."""
    from mmaplug.cuda.pipeline import ptx

    ns = load_module(config, sim=False)
    threads = config.threads if kernel == "hopper_gemm" else REDUCE_THREADS
    return ptx(ns[kernel], kernel_signatures(config)[kernel], SM90A, threads)


_BUILD_CACHE: dict[HopperKernelConfig, GeneratedKernels] = {}


def build(config: HopperKernelConfig) -> GeneratedKernels:
    """Kernels for *config* (compiled lazily on first launch), cached by config."""
    hit = _BUILD_CACHE.get(config)
    if hit is not None:
        return hit
    ns = load_module(config)
    kernels = GeneratedKernels(
        config=config,
        gemm=ns["hopper_gemm"],
        reduce=ns.get("hopper_splitk_reduce"),
        source=ns["__source__"],
        signatures=kernel_signatures(config),
        module=config.kernel_name,
    )
    _BUILD_CACHE[config] = kernels
    return kernels


@functools.cache
def _source(config: HopperKernelConfig) -> str:
    return generate_source(config, sim=False)


def loaded(config: HopperKernelConfig, name: str, smem: int, slots: int) -> int:
    """Kernel *name* of *config* as a driver ``CUkernel`` (see ``generated_kernel``)."""
    return generated_kernel(
        config.kernel_name, _source(config), lambda: build(config), name, smem, slots
    )


def kernel_jobs(config: HopperKernelConfig) -> list[KernelJob]:
    """The kernels of *config* that :func:`loaded` will load, as jobs building them (sm_90a)."""
    return generated_kernel_jobs("hopper", config, _source(config), build, SM90A[:2])
