"""The hopper consumer's epilogue: from registers, through the staged float32 chunk, or packed
(``mmaplug.plugins.hopper.packed_epilogue``); with split-K the float32 partials."""

from __future__ import annotations

from mmaplug.analysis.epilogue import EpilogueOutput, EpilogueProgram, Instr
from mmaplug.codegen.emitter import EPILOGUE_VARS as ev
from mmaplug.codegen.emitter import Emitter, casts_only, emit_epilogue_body
from mmaplug.codegen.staged_epilogue import emit_staged_epilogue
from mmaplug.ir.dtypes import DType

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS as kv
from .packed_epilogue import emit_packed_epilogue, emit_step_branches, emit_step_origin
from .reduction_codegen import emit_cluster_reduction
from .smem import STAGED_ROWS
from .tiles import WARPGROUP

__all__ = ["emit_epilogue", "staged_program", "trivial_epilogue"]

# split-K partials: the accumulator stored as float32 (output 0 = the workspace)
PARTIALS = EpilogueProgram(
    instrs=(Instr(op="acc"),), outputs=(EpilogueOutput(name="ws", src=0, dtype=DType.float32),)
)


def trivial_epilogue(cfg: HopperKernelConfig) -> bool:
    """Only casts of one accumulator: the unrolled per-register code stays small."""
    return cfg.horizontal == 1 and casts_only(cfg.epilogue)


def emit_epilogue(em: Emitter, cfg: HopperKernelConfig, accs: list[str]) -> None:
    """Each thread's accumulators to global memory, two adjacent columns per step (of the
    kernel's tile: two adjacent rows of the output with ``swap_ab``).

    wgmma m64nN fragment (f32 D): register ``i`` of thread ``t`` (warp ``w``, lane ``l``) is
    row ``16w + l/4 + 8((i >> 1) & 1)``, column ``8(i >> 2) + 2(l % 4) + (i & 1)``. The code
    is emitted once per register pair (constant tuple indices keep the values in registers).
    """
    wm, wn, _ = cfg.warp_tile
    if cfg.splitk_cluster:
        emit_cluster_reduction(em, cfg, accs)
        return
    if cfg.smem_epilogue:
        prog = _staged_target(em, cfg)
        if cfg.packed_stores:
            emit_packed_epilogue(em, cfg, prog, accs)
        else:
            _emit_staged(em, cfg, prog, accs)
        return
    em(f"rbase = {kv.m0} + {kv.cm} * {wm} + 16 * {kv.w} + {kv.lane} // 4")
    em(f"cbase = {kv.n0} + {kv.cn} * {wn} + 2 * ({kv.lane} % 4)")
    if cfg.workspace_splitk:
        em(f"wbase = ({kv.sp} * batch + {kv.bt}) * M * N")
    # the variables holding the kernel's row and column: the output's transposed with swap_ab
    row, col = (ev.col, ev.row) if cfg.swap_ab else (ev.row, ev.col)
    out_cols = "M" if cfg.swap_ab else "N"  # the output's columns (the kernel's rows, swapped)

    def element(value: str) -> None:
        if cfg.workspace_splitk:  # partials in the output's orientation, as the reduce reads them
            em(f"ws[wbase + {ev.row} * {out_cols} + {ev.col}] = {value}")
        else:
            em(f"{ev.v} = {value}")
            emit_epilogue_body(em, cfg.epilogue)

    def pair(first: str, second: str) -> None:
        em(f"if {row} < M:")
        with em.indent():
            em(f"if {col} < N:")
            with em.indent():
                element(first)
            em(f"{col} += 1")
            em(f"if {col} < N:")
            with em.indent():
                element(second)

    nacc = wn // 2
    if cfg.horizontal > 1:
        _emit_horizontal(em, cfg, accs)
        return
    if cfg.workspace_splitk or trivial_epilogue(cfg):
        for r, acc in enumerate(accs):
            for q in range(wn // 8):
                for h in range(2):
                    i = 4 * q + 2 * h
                    em(f"{row} = rbase + {64 * r + 8 * h}")
                    em(f"{col} = cbase + {8 * q}")
                    pair(f"{acc}[{i}]", f"{acc}[{i + 1}]")
        return
    # a long epilogue once in the code (unrolled 128 times it thrashes the instruction
    # cache): the registers go to a local array, a runtime loop walks the pairs
    for r, acc in enumerate(accs):
        for i in range(nacc):
            em(f"{kv.spill}[{r * nacc + i}] = {acc}[{i}]")
    half = nacc // 2
    em("pr = 0")
    em(f"while pr < {len(accs) * half}:")
    with em.indent():
        em(f"rb = pr // {half}")
        em(f"ii = (pr - rb * {half}) * 2")
        em(f"{row} = rbase + 64 * rb + 8 * ((ii >> 1) & 1)")
        em(f"{col} = cbase + 8 * (ii >> 2)")
        pair(f"{kv.spill}[2 * pr]", f"{kv.spill}[2 * pr + 1]")
        em("pr += 1")


def _emit_horizontal(em: Emitter, cfg: HopperKernelConfig, accs: list[str]) -> None:
    """The register epilogue of a horizontal fusion: output column ``c`` of product ``j`` is
    accumulator register ``i + j * n_out / 2`` of the thread holding ``c`` at register ``i``
    (``n_out / 2`` registers per product in the fragment); for each output column pair the
    program reads ``v`` (product 0), ``v1``, ... from those registers, spilled to a local
    array and walked by a runtime loop as the one-matmul epilogue is."""
    nacc, part = cfg.warp_tile[1] // 2, cfg.n_out // 2  # registers per row block, per product
    for r, acc in enumerate(accs):
        for i in range(nacc):
            em(f"{kv.spill}[{r * nacc + i}] = {acc}[{i}]")
    quarter = part // 2  # column pairs of one product per row block
    em("pr = 0")
    em(f"while pr < {len(accs) * quarter}:")
    with em.indent():
        em(f"rb = pr // {quarter}")
        em(f"ii = (pr - rb * {quarter}) * 2")
        em(f"{ev.row} = rbase + 64 * rb + 8 * ((ii >> 1) & 1)")
        em(f"{ev.col} = cbase + 8 * (ii >> 2)")
        em(f"sp0 = rb * {nacc} + ii")

        def element(e: int) -> None:
            em(f"{ev.v} = {kv.spill}[sp0 + {e}]")
            for j in range(1, cfg.horizontal):
                em(f"{ev.v}{j} = {kv.spill}[sp0 + {e + j * part}]")
            emit_epilogue_body(em, cfg.epilogue)

        em(f"if {ev.row} < M:")
        with em.indent():
            em(f"if {ev.col} < N:")
            with em.indent():
                element(0)
            em(f"{ev.col} += 1")
            em(f"if {ev.col} < N:")
            with em.indent():
                element(1)
        em("pr += 1")


def staged_program(cfg: HopperKernelConfig) -> EpilogueProgram:
    """The program a staged epilogue applies: the fusion's, or with split-K through the
    workspace the float32 partials stored into it."""
    return PARTIALS if cfg.workspace_splitk else cfg.epilogue


def _staged_target(em: Emitter, cfg: HopperKernelConfig) -> EpilogueProgram:
    """:func:`staged_program`, with split-K's workspace bound as output 0, indexed by split
    and batch."""
    if cfg.workspace_splitk:
        em("out0 = ws")
        em("out0_sb = M * N")
        em(f"out0_sm = {'M' if cfg.swap_ab else 'N'}")  # the output's row stride
        em(
            f"{kv.bt} = {kv.sp} * batch + {kv.bt}  "
            "# the workspace's outer index (bt is decoded again per unit)"
        )
    return staged_program(cfg)


def _emit_staged(
    em: Emitter, cfg: HopperKernelConfig, prog: EpilogueProgram, accs: list[str]
) -> None:
    """The consumer's tile through shared memory, a 64-row fragment block's column chunk at a
    time (``STAGED_ROWS`` rows staged whatever the warp tile's height): its registers are
    written at their fragment positions, then the staged-tile epilogue reads it back 4 columns
    per thread and stores coalesced (``mmaplug.codegen.staged_epilogue``). A named barrier per
    consumer warpgroup orders the writes and reads of its chunk buffer.

    The swapped kernel's tile is the output's transpose: its chunk is written transposed,
    kernel column ``c`` (an output row) as staged row ``c`` of ``transposed_stride`` floats,
    so the staged-tile epilogue reads ``chunk`` output rows of ``STAGED_ROWS`` columns and
    stores along the output's rows (the register epilogue stores one 2-byte element at a
    time); ``M`` and ``N`` are exchanged around it, the output's bounds."""
    wn = cfg.warp_tile[1]
    h, swap = cfg.horizontal, cfg.swap_ab
    stride = cfg.transposed_stride if swap else cfg.epilogue_stride
    chunk = cfg.horizontal_chunk if h > 1 else cfg.epilogue_chunk  # columns of each product
    share = wn // h  # columns of each product in the fragment (wn without horizontal fusion)
    chunks = share // chunk
    em(f"{kv.ch} = 0  # row block ch // {chunks}, column chunk ch % {chunks}")
    em(f"while {kv.ch} < {len(accs) * chunks}:")
    with em.indent():
        em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the previous chunk has been read")
        for acc, index in emit_step_branches(em, accs, chunks):
            for q in range(index * chunk // 8, (index + 1) * chunk // 8):
                for half in range(2):
                    for e in range(2):
                        row, col = 8 * half, 8 * q - index * chunk + e  # past the thread's
                        for j in range(h):  # product j's column: share * j further
                            reg = 4 * (q + j * share // 8) + 2 * half + e
                            at = col + j * chunk
                            off = at * stride + row if swap else row * stride + at
                            em(f"{kv.sf}[{kv.wrow} + {off}] = {acc}[{reg}]")
        em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the chunk is written")
        emit_step_origin(em, cfg, chunk, chunks)
        if swap:
            em("M, N = N, M  # the output's extents")
        rows, cols = (chunk, STAGED_ROWS) if swap else (STAGED_ROWS, chunk)
        emit_staged_epilogue(
            em, prog, rows=rows, cols=cols, threads=WARPGROUP, stride=stride,
            tid=kv.t, m0=kv.em0, n0=kv.en0, smem=kv.sf, base=kv.sbase, products=h,
        )  # fmt: skip
        if swap:
            em("M, N = N, M")
        em(f"{kv.ch} += 1")
