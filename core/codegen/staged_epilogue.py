"""The staged-tile epilogue shared by the schedulers: float32 accumulators in shared memory,
read back 4 columns per thread and step, the ``EpilogueProgram`` applied once in the source,
packed coalesced stores."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.amax_epilogue import amax_update
from mmaplug.codegen.emitter import (
    EPILOGUE_VARS,
    Emitter,
    instr_expr,
    is16,
    live_instrs,
    n_only_inputs,
    narrow,
    widen,
)

__all__ = ["EPI_COLS", "emit_staged_epilogue", "fits_staged"]

EPI_COLS: Final = 4  # consecutive output columns per thread and step


def fits_staged(rows: int, cols: int, threads: int) -> bool:
    """Whether every thread keeps one column group of EPI_COLS columns for the whole tile."""
    groups = cols // EPI_COLS
    return cols % EPI_COLS == 0 and threads % groups == 0 and rows % (threads // groups) == 0


def emit_staged_epilogue(
    em: Emitter,
    prog: EpilogueProgram,
    *,
    rows: int,
    cols: int,
    threads: int,
    stride: int,
    tid: str = "tid",
    m0: str = "m0",
    n0: str = "n0",
    smem: str = "cs",
    base: str = "",
    products: int = 1,
) -> None:
    """Epilogue of the staged tile, ``EPI_COLS`` consecutive columns per thread and step.

    Thread ``tid`` owns column group ``tid % groups`` of rows ``tid // groups + it * rpi``: one
    ``ld.shared.v4`` per step, the program once in the source inside a ``for j`` loop over the
    group (NVVM unrolls it; the values rotate through named registers, so nothing is indexed by
    ``j``), the results packed into 4-byte (FP8 outputs), 8-byte (16-bit) or 16-byte (float32)
    stores. A store is scalar when the group crosses N or the output's base, batch or row
    stride is not aligned to the packed size (checked once per thread). Inputs varying along N
    only are loaded once per thread; loads of other inputs clamp the column to N - 1 in the
    tail group. Amax outputs fold the thread's elements (rows below M, columns below N) into
    their running maxima (``mmaplug.codegen.amax_epilogue``; the caller starts and flushes them).

    The tile is *rows* x *cols* float32 at ``smem[base + row * stride + col]``, its origin in
    the output at (*m0*, *n0*); *threads* threads (index *tid*) share it, and
    :func:`fits_staged` must hold. With *products* p > 1 (a horizontal fusion) each row holds
    p such tiles side by side, product ``j``'s column ``c`` at ``j * cols + c``: the program's
    ``acc`` of product ``j`` reads ``v{j}``. The element's names are :data:`EPILOGUE_VARS`.
    """
    ev = EPILOGUE_VARS
    bm, bn, cst = rows, cols, stride
    g = EPI_COLS  # the register rotations below are written for 4 columns
    groups = bn // g
    rpi = threads // groups
    used = live_instrs(prog)
    used_inputs = {int(prog.instrs[i].arg) for i in used if prog.instrs[i].op == "input"}
    hoisted = [i for i in n_only_inputs(prog) if i in used_inputs]
    em(f"ecol = ({tid} % {groups}) * {g}")
    em(f"erow = {tid} // {groups}")
    em(f"gcol = {n0} + ecol")
    em("ncol = N - gcol  # valid columns of this thread's group (>= G: all)")
    em(f"es = {base + ' + ' if base else ''}erow * {cst} + ecol")
    em(f"cfull = ncol >= {g}")
    em(f"rlim = int32(min(M - {m0} - erow, {bm}))  # rows of this thread below M, relative")
    for i in sorted(used_inputs - set(hoisted)):
        em(f"ib{i} = {ev.bt} * in{i}_sb")
    for i in hoisted:
        em(f"ib{i} = {ev.bt} * in{i}_sb")
        for j in range(g):
            em(
                f"h{i}_{j} = {widen(prog.inputs[i].dtype, f'in{i}[ib{i} + min(gcol + {j}, N - 1) * in{i}_sn]')}"
            )
    for k, out in prog.stored:
        size = 1 if out.dtype.is_float8 else 2 if is16(out.dtype) else 4
        nbytes = g * size
        em(f"ob{k} = {ev.bt} * out{k}_sb + ({m0} + erow) * out{k}_sm + gcol")
        em(f"ostep{k} = {rpi} * out{k}_sm")
        em(
            f"wide{k} = cfull and ((global_addr(out{k}, 0) | uint64(out{k}_sb * {size}) "
            f"| uint64(out{k}_sm * {size})) & uint64({nbytes - 1})) == 0"
        )
    # a plain counted loop over this thread's rows (a range() loop costs ~6 more instructions
    # per trip), stopping at M
    em("lr = int32(0)")
    em("while lr < rlim:")
    with em.indent():
        em(f"{ev.row} = {m0} + erow + lr")
        em(f"va0, va1, va2, va3 = ld_shared_v4_f32(smem_addr({smem}, es + lr * {cst}))")
        for p in range(1, products):
            em(
                f"vp{p}_0, vp{p}_1, vp{p}_2, vp{p}_3 = "
                f"ld_shared_v4_f32(smem_addr({smem}, es + lr * {cst} + {p * bn}))"
            )
        for k, out in prog.stored:
            if out.dtype.is_float8:
                em(f"w{k} = uint64(0)")
            elif is16(out.dtype):
                em(f"w{k} = uint64(0)")
            else:
                em(f"f{k}_0 = f{k}_1 = f{k}_2 = f{k}_3 = float32(0.0)")
        em(f"for j in range({g}):")
        with em.indent():
            em(f"{ev.v} = va0")
            em(f"va0, va1, va2, va3 = va1, va2, va3, {ev.v}")
            for p in range(1, products):
                em(f"{ev.v}{p} = vp{p}_0")
                em(f"vp{p}_0, vp{p}_1, vp{p}_2, vp{p}_3 = vp{p}_1, vp{p}_2, vp{p}_3, {ev.v}{p}")
            inputs = {}
            for i in sorted(used_inputs):
                if i in hoisted:
                    em(f"hv{i} = h{i}_0")
                    em(f"h{i}_0, h{i}_1, h{i}_2, h{i}_3 = h{i}_1, h{i}_2, h{i}_3, hv{i}")
                    inputs[i] = f"hv{i}"
                else:
                    inputs[i] = widen(
                        prog.inputs[i].dtype,
                        f"in{i}[ib{i} + {ev.row} * in{i}_sm + min(gcol + j, N - 1) * in{i}_sn]",
                    )
            for idx, ins_ in enumerate(prog.instrs):
                if idx in used:
                    em(f"x{idx} = {instr_expr(prog, ins_, inputs)}")
            if prog.amaxes:
                em("if j < ncol:  # (a tail group's columns past N hold no output)")
                with em.indent():
                    for k, out in prog.amaxes:
                        em(amax_update(k, f"x{out.src}"))
            for k, out in prog.stored:
                if out.dtype.is_float8:
                    em(
                        f"w{k} = (w{k} >> uint64(8)) | (uint64({narrow(out.dtype, f'x{out.src}')}) << uint64(24))"
                    )
                elif is16(out.dtype):
                    em(
                        f"w{k} = (w{k} >> uint64(16)) | (uint64({narrow(out.dtype, f'x{out.src}')}) << uint64(48))"
                    )
                else:
                    em(f"f{k}_0, f{k}_1, f{k}_2, f{k}_3 = f{k}_1, f{k}_2, f{k}_3, x{out.src}")
        for k, out in prog.stored:
            em(f"if wide{k}:")
            with em.indent():
                if out.dtype.is_float8:
                    em(f"st_global_b32(out{k}, ob{k}, uint32(w{k}))")
                elif is16(out.dtype):
                    em(
                        f"st_global_v2_b32(out{k}, ob{k}, uint32(w{k} & uint64(0xFFFFFFFF)), uint32(w{k} >> uint64(32)))"
                    )
                else:
                    em(f"st_global_v4_b32(out{k}, ob{k}, f{k}_0, f{k}_1, f{k}_2, f{k}_3)")
            em("else:")
            with em.indent():
                em(f"for j in range({g}):")
                with em.indent():
                    em("if j < ncol:")
                    with em.indent():
                        if out.dtype.is_float8:
                            em(f"out{k}[ob{k} + j] = uint8(w{k} & uint64(0xFF))")
                        elif is16(out.dtype):
                            em(f"out{k}[ob{k} + j] = uint16(w{k} & uint64(0xFFFF))")
                        else:
                            em(f"out{k}[ob{k} + j] = f{k}_0")
                    if out.dtype.is_float8:
                        em(f"w{k} = w{k} >> uint64(8)")
                    elif is16(out.dtype):
                        em(f"w{k} = w{k} >> uint64(16)")
                    else:
                        em(f"f{k}_0, f{k}_1, f{k}_2 = f{k}_1, f{k}_2, f{k}_3")
        for k, _ in prog.stored:
            em(f"ob{k} += ostep{k}")
        em(f"lr = int32(lr + {rpi})")
