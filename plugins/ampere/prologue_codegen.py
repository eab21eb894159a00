"""Code generation of operand prologues: element-wise ops on a landed smem stage, before ldmatrix.

The tile reaches shared memory unchanged (cp.async, zero-filled past M, N and K). Once a stage
has landed (after the ``cp.async.wait_group`` + barrier that precede its first ``ldmatrix``),
the CTA rewrites it in place: each thread takes every ``threads``-th element, widens it, runs
the prologue in float32 and stores the mma dtype; a second barrier publishes the stage. One
copy of the prologue's code per operand (a runtime loop), not one per fragment register: a
``cos`` inlined per fragment made a 570 KB PTX that took 43 s to compile.

Only the first k-tile computed (the last of the CTA's K range, see ``kernel``) can cross K;
its elements at or past the range's end become 0 after the prologue, since the zero-filled
padding would otherwise contribute ``op(0)`` (``cos``, ``exp``, ``+ c``). Every later tile lies
inside K and is rewritten unmasked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from mmaplug.analysis.epilogue import Prologue
from mmaplug.codegen.emitter import Emitter, instr_expr, live_instrs, narrow, widen

from .config import AmpereKernelConfig
from .kernel_vars import KERNEL_VARS as kv

_RENAME = re.compile(r"\b(x\d+|v)\b")  # instr_expr's names of SSA values and of the element


class Geometry(Protocol):
    """What the stage rewrite needs of an operand's geometry (``copy_codegen.Operand``)."""

    name: str
    k_inner: bool
    rowlen: int
    units: int
    elems: int


def prologues(cfg: AmpereKernelConfig) -> list[tuple[str, Prologue]]:
    """The ``("a" | "b", prologue)`` pairs of *cfg*."""
    return [(side, p) for side, p in (("a", cfg.prologue_a), ("b", cfg.prologue_b)) if p]


def emit_prologue_stage(
    em: Emitter,
    cfg: AmpereKernelConfig,
    operands: tuple[Geometry, Geometry],
    swizzle: Callable[[str, int], str],
    *,
    first: bool,
) -> None:
    """Rewrite the stage at ``sa`` / ``sb`` in place, then a barrier (nothing without a
    prologue). *first*: the first k-tile computed, masked past the K range's end."""
    found = dict(prologues(cfg))
    if not found:
        return
    threads, bk = cfg.threads, cfg.cta_tile[2]
    # only a loaded stage (none in an empty split-K range, none after the last tile); the
    # branch is uniform over the CTA, so the barrier inside it is legal
    em(f"if {kv.num_kt} > 0:" if first else f"if {kv.kt} + 1 < {kv.num_kt}:")
    em.depth += 1
    if first:
        em(f"klim = {kv.k_end} - {kv.k_begin} - ({kv.num_kt} - 1) * {bk}  # valid K of this tile")
    for op in operands:
        pro = found.get(op.name)
        if pro is None:
            continue
        base = kv.sa if op.name == "a" else kv.sb
        em(f"for pi in range({-(-op.elems // threads)}):")
        with em.indent():
            em(f"po = {kv.tid} + pi * {threads}")
            if op.elems % threads:
                em(f"if po >= {op.elems}:")
                with em.indent():
                    em("break")
            value = _emit_program(em, pro, f"{kv.smem}[{base} + po]")
            if not first:
                em(f"{kv.smem}[{base} + po] = {value}")
                continue
            if op.k_inner:  # row = M/N index; undo the unit swizzle to find the K index
                em(f"pr = po // {op.rowlen}")
                unit = f"(((po % {op.rowlen}) >> 3) ^ {swizzle('pr', op.units)})"
                em(f"pkk = {unit} * 8 + (po & 7)")
            else:  # row = K index
                em(f"pkk = po // {op.rowlen}")
            em(f"{kv.smem}[{base} + po] = {value} if pkk < klim else uint16(0)")
    em("cuda.syncthreads()")
    em.depth -= 1


def _emit_program(em: Emitter, pro: Prologue, load: str) -> str:
    """Lines computing *pro* on the element *load*; returns the rounded result's expression.

    The temporaries (``pv``, ``px<i>``) keep clear of the epilogue's names (``v``, ``x<i>``).
    """
    prog = pro.program
    em(f"pv = {widen(pro.source, load)}")
    used = live_instrs(prog)
    for idx, ins in enumerate(prog.instrs):
        if idx in used:
            expr = _RENAME.sub(lambda m: "p" + m.group(0), instr_expr(prog, ins))
            em(f"px{idx} = {expr}")
    out = prog.outputs[0]
    return narrow(out.dtype, f"px{out.src}")
