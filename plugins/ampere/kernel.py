"""Ampere tensor-core GEMM: a code generator for Numba-CUDA ``mma.sync`` kernels.

Pipeline (one CTA computes a ``BM x BN`` tile of ``D[bt] = A[bt] @ B[bt]^T`` over its K range):

1. **Global -> shared**, ``STAGES``-deep ring: every thread issues ``cp.async`` copies of
   ``vec`` elements (16 bytes: ``.cg``; 8 / 4 bytes: ``.ca``; ``vec == 1``: plain load +
   ``st.shared``) for the A and B tiles ``STAGES - 1`` k-tiles ahead of the math. Rows or
   columns past M, N or K are zero-filled (``src_bytes`` below the copy size, the source
   pointed at element 0 when nothing is read). One ``cp.async.commit_group`` per k-tile, also
   when nothing was issued, so ``cp.async.wait_group(STAGES - 2)`` always means "the tile the
   math needs next has landed".
   K-tile order: the FIRST tile computed is the LAST k-tile of the CTA's K range (the only one
   that can cross K); it alone takes the predicated copies above, in the prologue. Every other
   k-tile (``k_begin``, ``k_begin + BK``, ...) lies inside K and takes unpredicated copies from
   loop-invariant per-slot bases: at an M/N edge a K-inner operand's rows are clamped to the last
   row (they only feed output rows that are never stored) and an M/N-inner operand's vectors
   keep their (loop-invariant) byte counts. So the main loop has no per-tile predicate math:
   ~1.3 non-mma SASS instructions per ``mma`` (see docs/ampere-notes.md).
2. **Shared layout**: each operand tile is stored with its contiguous global dimension as the
   smem row (A ``[BM][BK]`` when K is inner, ``[BK][BM]`` when M is inner; B likewise with N).
   Rows are cut into 16-byte units and unit ``c`` of row ``r`` is stored at ``c ^ f(r)``
   (``f(r) = r & 7`` for 8j units a row, ``(r >> 1) & 3`` for 8j + 4, ``(r >> 2) & 1`` for
   4j + 2: ``c ^ f(r)`` stays in the row), so with 8j units the eight row addresses of every
   ``ldmatrix`` 8x8 matrix fall in eight different bank groups: conflict-free reads.
3. **Shared -> registers**: ``ldmatrix.x4`` (``.trans`` for an M- or N-inner operand) loads an
   A fragment (16x16) per m16 tile and a B fragment pair (16x16 = two n8 tiles) per n16.
   Fragments are double-buffered in registers: the k16 step ``s + 1`` is loaded before the
   ``mma`` of step ``s`` is issued; at the last k16 step of a k-tile the thread waits for the
   next stage, syncs the CTA once and reads the next tile's first fragments.
4. **Math**: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}`` on float32 accumulators.
   Accumulators, fragments and fragment offsets are ``cuda.local.array``s indexed by the
   counters of constant-trip loops over the warp tile (one statement per loop for Numba to
   type and lower, not one per ``mma``); NVVM unrolls them, every index becomes a constant and
   SROA keeps the arrays in registers (no local memory: tests/ptx/test_ampere_no_local_memory.py).

Warp roles: all warps do all work (no specialization). Warps form a ``WARPS_M x WARPS_N`` grid
(warp ``w`` at ``(w % WARPS_M, w // WARPS_M)``), each owning a ``WM x WN`` sub-tile; every
thread takes part in the global->shared copies.

CTA scheduling: ``blockIdx.x`` walks the ``tiles_m x tiles_n`` tiles; ``cta_order`` says which
dimension is fastest (``row_major``: N tiles fastest; ``column_major``: M tiles fastest), and
``grid_swizzle = G`` groups ``G`` rows (columns) of tiles so that consecutive CTAs share A and B
panels in L2. ``blockIdx.z = batch_index * splitk + split_index``.

Epilogue: the accumulators are staged through shared memory (float32, rows padded to BN + 8),
then the ``EpilogueProgram`` is applied in ONE copy in the source (a runtime loop; the 109 s
fully-inlined per-fragment version is history, see docs/ampere-notes.md): one float32 SSA line
per instruction (``input`` loads and widens an element at ``bt * sb + row * sm + col * sn``;
``cast`` rounds through the narrow type). With ``splitk == 1`` and a tile where every thread
can own one group of ``EPI_COLS`` (4) consecutive columns (``emit_staged_epilogue``): per row
of the thread one ``ld.shared.v4``, the program inside a ``for j`` loop NVVM unrolls, and one
8-byte (16-bit output) or 16-byte (float32) store, scalar stores only when the group crosses N
or the output is not aligned (runtime check, once per thread); N-only inputs (a bias) are
loaded once per thread. Otherwise a loop over single elements. With ``splitk > 1`` the main
kernel stores float32 partial sums to a ``[splitk, batch, M, N]`` workspace and a second kernel
sums the partials in a fixed order and applies the epilogue exactly once.

Modules: ``config`` (what a kernel is specialised on, its parameter list), ``copy_codegen``
(steps 1-2), ``prologue_codegen`` (operand prologues on a landed stage), ``mainloop_codegen``
(steps 3-4, the CTA's tile from ``mmaplug.codegen.grid``, the epilogue); the split-K reduce
kernel is ``mmaplug.codegen.emitter``'s. This one puts the source together and loads it
through ``mmaplug.cuda.modules.KernelFamily``.
"""

from __future__ import annotations

from typing import Any, Final

from mmaplug.codegen.emitter import REDUCE_THREADS, Emitter, emit_splitk_reduce
from mmaplug.codegen.grid import CTA_ORDERS
from mmaplug.cuda.launching import simulating
from mmaplug.cuda.modules import GeneratedKernels, KernelFamily, epilogue_types, reduce_signature

from .config import GRID_PARAMS, SHAPE_PARAMS, VECTOR_WIDTHS, AmpereKernelConfig
from .mainloop_codegen import emit_main_kernel

__all__ = [
    "CTA_ORDERS",
    "REDUCE_THREADS",
    "VECTOR_WIDTHS",
    "KERNELS",
    "AmpereKernelConfig",
    "build",
    "compile_ptx",
    "generate_source",
    "kernel_signatures",
    "load_module",
]


INTRINSICS_MODULE: Final = "mmaplug.cuda.intrinsics"


def generate_source(config: AmpereKernelConfig, *, sim: bool | None = None) -> str:
    """Python source of the kernels for *config*: ``ampere_gemm`` (+ ``ampere_splitk_reduce``).

    *sim* (default: whether Numba's CUDA simulator is on) drops the options the simulator's
    ``cuda.jit`` rejects (``launch_bounds``, ``inline``).
    """
    if sim is None:
        sim = simulating()
    em = Emitter()
    em(f'"""Generated by mmaplug.plugins.ampere.kernel for {config.name}."""')
    em("import math")
    em("from mmaplug.cuda.mathfuncs import gelu")
    em("from numba import cuda, float32, int32, int64, uint16, uint32, uint64")
    em(
        f"from {INTRINSICS_MODULE} import (smem_addr, ldmatrix_x4, ldmatrix_x4_trans, "
        "mma_m16n8k16_f16, mma_m16n8k16_bf16, cp_async_16, cp_async_8, cp_async_4, "
        "cp_async_commit, cp_async_wait_group, cp_async_wait_all, f16_to_f32, f32_to_f16, "
        "bf16_to_f32, f32_to_bf16, global_addr, ld_shared_v4_f32, st_global_v2_b32, "
        "st_global_v4_b32)"
    )
    em()
    emit_main_kernel(em, config, sim)
    if config.splitk > 1:
        emit_splitk_reduce(em, config.epilogue, config.splitk, "ampere_splitk_reduce", sim)
    return em.text()


def kernel_signatures(config: AmpereKernelConfig) -> dict[str, Any]:
    """Numba signatures of ``ampere_gemm`` (and ``ampere_splitk_reduce`` with split-K)."""
    from numba import types

    u16 = types.Array(types.uint16, 1, "C")
    f32a = types.Array(types.float32, 1, "C")
    ins, outs, scal, in_strides, out_strides = epilogue_types(config.epilogue)
    i64 = types.int64
    if config.splitk > 1:
        pro_scal = scal if config.prologue_scalars else []
        main = [u16, u16, f32a, *pro_scal] + [i64] * (len(SHAPE_PARAMS) + len(GRID_PARAMS))
        return {
            "ampere_gemm": types.void(*main),
            "ampere_splitk_reduce": reduce_signature(config.epilogue),
        }
    main = [u16, u16, *ins, *outs, *scal, *[i64] * len(SHAPE_PARAMS), *in_strides, *out_strides]
    main += [i64] * len(GRID_PARAMS)
    return {"ampere_gemm": types.void(*main)}


#: How the kernels of a config are loaded, built and compiled (shared with hopper).
KERNELS: Final = KernelFamily("ampere", generate_source, kernel_signatures)


def load_module(config: AmpereKernelConfig, *, sim: bool | None = None) -> dict[str, Any]:
    """Exec the generated source from memory (``KernelFamily.load``)."""
    return KERNELS.load(config, sim=sim)


def compile_ptx(
    config: AmpereKernelConfig, cc: tuple[int, ...] = (8, 0), kernel: str = "ampere_gemm"
) -> str:
    """PTX of one generated kernel for compute capability *cc* (no GPU needed)."""
    return KERNELS.ptx(config, kernel, cc)


_BUILD_CACHE: dict[AmpereKernelConfig, GeneratedKernels] = {}


def build(config: AmpereKernelConfig) -> GeneratedKernels:
    """Compiled (lazily, on first launch) kernels for *config*, cached by config."""
    return KERNELS.build(config, _BUILD_CACHE)
