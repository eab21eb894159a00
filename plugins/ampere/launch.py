"""Launch the generated Ampere GEMM kernels: grid, workspace, dynamic shared memory, arguments.

Argument conventions of :func:`run_gemm` (every array a 1-D Numba device array; strides in
elements, a stride of 0 meaning "does not vary along that axis"):

- ``a = (array_u16, sb, s_outer)``: logical ``A[bt, i, kk]`` is at ``bt*sb + i*s_outer + kk``
  when ``config.a_k_inner`` and at ``bt*sb + kk*s_outer + i`` otherwise (``sb == 0``: A is
  shared by every batch). ``b`` likewise, with N in place of M.
- ``epi_inputs``: one ``(array, sb, sm, sn)`` per ``config.epilogue.inputs`` entry (uint16 array
  for float16/bfloat16 inputs, float32 otherwise).
- ``scalars``: one float per ``config.epilogue.scalars`` entry (passed as float32).
- ``outputs``: one ``(array, sb, sm)`` per ``config.epilogue.outputs`` entry, n contiguous
  (uint16 for float16/bfloat16 outputs, float32 otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mmaplug.codegen.emitter import reduce_grid
from mmaplug.cuda.launching import launch_checked

from .kernel import KERNELS, REDUCE_THREADS, AmpereKernelConfig, build


def grid_for(config: AmpereKernelConfig, m: int, n: int, batch: int) -> tuple[int, int, int]:
    """Grid of the main kernel: all output tiles on x, ``batch * splitk`` on z."""
    bm, bn, _ = config.cta_tile
    return (-(-m // bm)) * (-(-n // bn)), 1, batch * config.splitk


def k_per_split(config: AmpereKernelConfig, k: int) -> int:
    """K extent of one split (a multiple of the CTA k tile)."""
    bk = config.cta_tile[2]
    k_tiles = -(-k // bk)
    return max(1, -(-k_tiles // config.splitk)) * bk


def loaded(config: AmpereKernelConfig, name: str, smem: int, slots: int) -> int:
    """Kernel *name* of *config* as a driver ``CUkernel`` (``KernelFamily.loaded``)."""
    return KERNELS.loaded(config, build, name, smem, slots)


def _workspace(size: int) -> Any:
    # one per launch: a shared one would be written by launches on two streams at once
    from numba import cuda

    return cuda.device_array(size, dtype=np.float32)


def run_gemm(
    config: AmpereKernelConfig,
    a: tuple[Any, int, int],
    b: tuple[Any, int, int],
    epi_inputs: Sequence[tuple[Any, int, int, int]],
    scalars: Sequence[float],
    outputs: Sequence[tuple[Any, int, int]],
    *,
    m: int,
    n: int,
    k: int,
    batch: int,
    stream: int = 0,
) -> None:
    """Launch ``outputs = epilogue(A @ B^T)`` for *batch* problems of size *m* x *n* x *k*."""
    prog = config.epilogue
    if len(epi_inputs) != len(prog.inputs):
        raise ValueError(f"expected {len(prog.inputs)} epilogue inputs, got {len(epi_inputs)}")
    if len(scalars) != len(prog.scalars):
        raise ValueError(f"expected {len(prog.scalars)} scalars, got {len(scalars)}")
    if len(outputs) != len(prog.outputs):
        raise ValueError(f"expected {len(prog.outputs)} outputs, got {len(outputs)}")
    kernels = build(config)
    bm, bn, _ = config.cta_tile
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    grid = grid_for(config, m, n, batch)
    block = (config.threads, 1, 1)
    smem = config.smem_bytes
    ksplit = k_per_split(config, k)
    a_arr, a_sb, a_s1 = a
    b_arr, b_sb, b_s1 = b
    ins = [t[0] for t in epi_inputs]
    in_strides = [int(s) for t in epi_inputs for s in t[1:4]]
    outs = [t[0] for t in outputs]
    out_strides = [int(s) for t in outputs for s in t[1:3]]
    scal = [np.float32(s) for s in scalars]
    dims = [int(m), int(n), int(k), int(batch), int(a_sb), int(a_s1), int(b_sb), int(b_s1)]
    tail = [int(ksplit), tiles_m, tiles_n]
    if config.splitk == 1:
        args = [a_arr, b_arr, *ins, *outs, *scal, *dims, *in_strides, *out_strides, *tail]
        launch_checked(kernels, "ampere_gemm", args, grid, block, stream, smem)
        return
    ws = _workspace(config.splitk * batch * m * n)
    pro_scal = scal if config.prologue_scalars else []
    main = [a_arr, b_arr, ws, *pro_scal, *dims, *tail]
    launch_checked(kernels, "ampere_gemm", main, grid, block, stream, smem)
    rgrid = reduce_grid(batch, m, n)
    rargs = [ws, *ins, *outs, *scal, int(m), int(n), int(batch), *in_strides, *out_strides]
    reduce_block = (REDUCE_THREADS, 1, 1)
    launch_checked(kernels, "ampere_splitk_reduce", rargs, rgrid, reduce_block, stream, 0)
