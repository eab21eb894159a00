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
   partials to a workspace and ``hopper_splitk_reduce`` applies the epilogue once, or the
   splits of a tile, one cluster, sum them in distributed shared memory and apply it there
   (``reduction_codegen``); with stream-K the CTA that finishes a tail tile's last piece
   adds the other pieces' partials from the workspace and applies it (``streamk_codegen``).
"""

from __future__ import annotations

from typing import Any, Final

from mmaplug.cuda.modules import GeneratedKernels, KernelFamily, epilogue_types, reduce_signature

from .config import GRID_PARAMS, SCALE_PARAMS, SCALE_STRIDES, SHAPE_PARAMS, HopperKernelConfig
from .kernel_codegen import generate_source

__all__ = [
    "KERNELS",
    "build",
    "compile_ptx",
    "kernel_signatures",
    "load_module",
    "loaded",
]

SM90A: Final = (9, 0, "a")


def kernel_signatures(config: HopperKernelConfig) -> dict[str, Any]:
    """Numba signatures of ``hopper_gemm`` (and ``hopper_splitk_reduce`` with split-K through
    the workspace)."""
    from numba import types

    u64a = types.Array(types.uint64, 1, "C")
    f32a = types.Array(types.float32, 1, "C")
    ins, outs, scal, in_strides, out_strides = epilogue_types(config.epilogue)
    i64 = types.int64
    shape, grid = [i64] * len(SHAPE_PARAMS), [i64] * len(GRID_PARAMS)
    scales = [f32a] * len(SCALE_PARAMS) if config.block_scaled else []
    strides = [i64] * len(SCALE_STRIDES) if config.block_scaled else []
    if config.workspace_splitk:
        return {
            "hopper_gemm": types.void(u64a, f32a, *scales, *shape, *strides, *grid),
            "hopper_splitk_reduce": reduce_signature(config.epilogue),
        }
    main = [u64a, *scales, *ins, *outs, *scal, *shape, *strides, *in_strides, *out_strides]
    main += [f32a] if config.streamk else []  # stream-K's counters and partial sums
    main += grid
    return {"hopper_gemm": types.void(*main)}


def _generate(config: HopperKernelConfig, *, sim: bool) -> str:
    # generate_source looked up per call: scripts/hopper_probe.py swaps it
    return generate_source(config, sim=sim)


#: How the kernels of a config are loaded, built and compiled (shared with ampere).
KERNELS: Final = KernelFamily("hopper", _generate, kernel_signatures)


def load_module(config: HopperKernelConfig, *, sim: bool | None = None) -> dict[str, Any]:
    """Exec the generated source from memory (``KernelFamily.load``)."""
    return KERNELS.load(config, sim=sim)


def compile_ptx(config: HopperKernelConfig, kernel: str = "hopper_gemm") -> str:
    """PTX of one generated kernel for sm_90a (no GPU needed)."""
    return KERNELS.ptx(config, kernel, SM90A)


_BUILD_CACHE: dict[HopperKernelConfig, GeneratedKernels] = {}


def build(config: HopperKernelConfig) -> GeneratedKernels:
    """Kernels for *config* (compiled lazily on first launch), cached by config."""
    return KERNELS.build(config, _BUILD_CACHE)


def loaded(config: HopperKernelConfig, name: str, smem: int, slots: int) -> int:
    """Kernel *name* of *config* as a driver ``CUkernel`` (``KernelFamily.loaded``)."""
    return KERNELS.loaded(config, build, name, smem, slots)
