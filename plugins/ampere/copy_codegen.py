"""Code generation of the global -> shared copies: per-thread copy slots, swizzled smem, cp.async.

Each operand tile is stored with its contiguous global dimension as the smem row, cut into
16-byte units; unit ``c`` of row ``r`` is stored at ``c ^ f(r)`` (:func:`swizzle_amount`), so the
eight row addresses of every ``ldmatrix`` 8x8 matrix fall in eight different bank groups.

The first k-tile computed (the last of the CTA's K range, the only one that can cross K) takes
the predicated copies (:func:`emit_load_stage` with ``fast=False``); every other k-tile lies
inside K and takes unpredicated copies from loop-invariant per-slot bases
(:func:`emit_load_setup`).
"""

from __future__ import annotations

from mmaplug.codegen.emitter import Emitter

from .config import AmpereKernelConfig
from .kernel_vars import KERNEL_VARS as kv


def swizzle_amount(row: str, units_per_row: int) -> str:
    """XOR mask for the 16-byte units of smem row *row* (see the module docstring).

    The mask is below the largest of 8, 4, 2 dividing *units_per_row*, so ``unit ^ mask`` stays
    inside the unit's aligned group and the row (rows of 12 units take the 4-unit form: an
    8-unit mask would move units 8..11 past the row end).
    """
    if units_per_row % 8 == 0:
        return f"(({row}) & 7)"
    if units_per_row % 4 == 0:
        return f"((({row}) >> 1) & 3)"
    if units_per_row % 2 == 0:
        return f"((({row}) >> 2) & 1)"
    return "0"


def sum_terms(*terms: str | int) -> str:
    """``a + b + ...`` with the integer terms added up into one (left out when 0): Numba types
    and lowers every operator of the source, NVVM folds them all the same."""
    const = sum(t for t in terms if isinstance(t, int))
    names = [t for t in terms if isinstance(t, str)]
    return " + ".join([*names, str(const)] if const or not names else names)


def _dst(stage_base: str | int, so: tuple[str, int]) -> str:
    """A copy's smem offset: its stage's base plus its slot's offset. A constant base folds into
    the slot's constant; a runtime one keeps the grouping NVVM schedules the loop's copies by."""
    if isinstance(stage_base, int):
        return sum_terms(so[0], so[1] + stage_base)
    return f"{stage_base} + ({sum_terms(*so)})" if so[1] else f"{stage_base} + {so[0]}"


def _times(index: int, name: str) -> str:
    """``index * name`` (``name`` alone for 1)."""
    return name if index == 1 else f"{index} * {name}"


class Operand:
    """Geometry of one operand's tile copies and fragment reads."""

    def __init__(self, cfg: AmpereKernelConfig, name: str) -> None:
        bm, bn, bk = cfg.cta_tile
        self.name = name
        self.k_inner = cfg.a_k_inner if name == "a" else cfg.b_k_inner
        self.vec = cfg.vec_a if name == "a" else cfg.vec_b
        self.mn = bm if name == "a" else bn
        self.bk = bk
        self.lim = "M" if name == "a" else "N"
        self.origin = kv.m0 if name == "a" else kv.n0
        # smem rows: the contiguous global dim is the row
        self.rows, self.rowlen = (self.mn, bk) if self.k_inner else (bk, self.mn)
        self.units = self.rowlen // 8
        self.vecs_per_row = self.rowlen // self.vec
        self.nvec = self.rows * self.vecs_per_row
        self.iters = -(-self.nvec // cfg.threads)
        self.elems = self.mn * bk
        # smem offset of the operand's ring of stages: B's stages follow all of A's
        self.ring = 0 if name == "a" else cfg.stages * bm * bk
        # set by emit_load_setup: copy slots are fixed row steps from slot 0 (and the step)
        self.regular = False
        self.step = 0


def emit_load_setup(em: Emitter, op: Operand, threads: int) -> None:
    """Per-thread copy coordinates (loop invariant).

    When the CTA covers whole smem rows per copy slot (``threads % vecs_per_row == 0``), slot
    ``i`` is slot 0 moved down by ``i * threads / vecs_per_row`` rows: only slot 0's coordinates
    are kept in registers and the others are constant offsets from them.
    """
    n = op.name
    step = threads // op.vecs_per_row
    regular = threads % op.vecs_per_row == 0 and (step % 8 == 0 or op.units == 1)
    for i in range(1 if regular else op.iters):
        v = f"({sum_terms(kv.tid, i * threads)})"
        em(f"{n}_r{i} = {v} // {op.vecs_per_row}")
        em(f"{n}_c{i} = ({v} % {op.vecs_per_row}) * {op.vec}")
        em(
            f"{n}_so{i} = {n}_r{i} * {op.rowlen} + "
            f"(({n}_c{i} >> 3) ^ {swizzle_amount(f'{n}_r{i}', op.units)}) * 8 + ({n}_c{i} & 7)"
        )
        if op.k_inner:
            # row = M/N index, col = K index
            em(f"{n}_g{i} = {n}_base + ({op.origin} + {n}_r{i}) * {n}_s1 + {n}_c{i}")
        else:
            # row = K index, col = M/N index; bytes available along the contiguous M/N dim
            em(f"{n}_g{i} = {n}_base + {op.origin} + {n}_c{i} + {n}_r{i} * {n}_s1")
            em(f"{n}_nb{i} = min(max({op.lim} - {op.origin} - {n}_c{i}, 0), {op.vec}) * 2")
    if regular:
        em(f"{n}_gstep = {step} * {n}_s1")
    op.regular, op.step = regular, step
    # Bases of the unpredicated ("fast") copies, used for every k-tile but the first (which
    # holds the K remainder, see the module docstring): K is always in range there, and the M/N
    # edge is handled once here. K-inner: a row past M/N is clamped to the last row (it only
    # feeds output rows that are never stored). M/N-inner: a vector past M/N reads nothing
    # (``nbf`` bytes, zero-filled) from column 0 of its row.
    if op.k_inner:
        for i in range(op.iters):
            row, _g, _so, _nb = _slot(op, i)
            col = f"{n}_c0" if regular else f"{n}_c{i}"
            em(
                f"{n}_gf{i} = {n}_base + ({op.origin} + min({row}, {op.lim} - 1 - {op.origin})) * {n}_s1 + {col}"
            )
    else:
        for i in range(1 if regular else op.iters):
            em(f"{n}_nbf{i} = min(max({op.lim} - {op.origin} - {n}_c{i}, 0), {op.vec}) * 2")
            em(
                f"{n}_gf{i} = {n}_base + ({op.origin} + {n}_c{i}) * min({n}_nbf{i}, 1) + {n}_r{i} * {n}_s1"
            )
        em(f"{n}_kstep = {op.bk} * {n}_s1")


def _fast_slot(op: Operand, i: int) -> tuple[str, str]:
    """(global index without the k offset, src bytes) of fast-path copy slot *i*."""
    n = op.name
    if op.k_inner:
        return f"{n}_gf{i}", str(op.vec * 2)
    if op.regular:
        return (f"{n}_gf0" if i == 0 else f"({n}_gf0 + {_times(i, n + '_gstep')})"), f"{n}_nbf0"
    return f"{n}_gf{i}", f"{n}_nbf{i}"


def _slot(op: Operand, i: int) -> tuple[str, str, tuple[str, int], str]:
    """(row, global index, smem offset as (name, constant), M/N-bytes) of copy slot *i*."""
    n = op.name
    if not op.regular:
        return f"{n}_r{i}", f"{n}_g{i}", (f"{n}_so{i}", 0), f"{n}_nb{i}"
    if i == 0:
        return f"{n}_r0", f"{n}_g0", (f"{n}_so0", 0), f"{n}_nb0"
    # rows move by a multiple of 8, so the swizzle of slot 0 still applies
    return (
        f"({n}_r0 + {i * op.step})",
        f"({n}_g0 + {_times(i, n + '_gstep')})",
        (f"{n}_so0", i * op.step * op.rowlen),
        f"{n}_nb0",
    )


def _emit_load_tile(em: Emitter, op: Operand, stage_base: str | int, k0: str, threads: int) -> None:
    for i in range(op.iters):
        if op.nvec % threads and (i + 1) * threads > op.nvec:
            # this copy slot is idle for some threads: they must not even zero-fill
            em(f"if {kv.tid} + {i * threads} < {op.nvec}:")
            with em.indent():
                _emit_copy(em, op, i, stage_base, k0)
        else:
            _emit_copy(em, op, i, stage_base, k0)


def _emit_load_tile_fast(
    em: Emitter, op: Operand, stage_base: str | int, koff: str, threads: int
) -> None:
    """Copies of a k-tile that lies inside K: no per-tile predicates (see emit_load_setup)."""
    n = op.name
    for i in range(op.iters):
        _row, _g, so, _nb = _slot(op, i)
        g, nb = _fast_slot(op, i)
        dst = _dst(stage_base, so)
        idle = op.nvec % threads and (i + 1) * threads > op.nvec
        if idle:  # this copy slot is idle for some threads
            em(f"if {kv.tid} + {i * threads} < {op.nvec}:")
            em.depth += 1
        if op.vec == 1:
            em(f"{kv.smem}[{dst}] = {n}[{g} + {koff}]")
        else:
            em(f"cp_async_{op.vec * 2}(smem_addr({kv.smem}, {dst}), {n}, {g} + {koff}, {nb})")
        if idle:
            em.depth -= 1


def _emit_copy(em: Emitter, op: Operand, i: int, stage_base: str | int, k0: str) -> None:
    n = op.name
    k0 = f"({k0})"  # an expression such as "k_begin + 32": keep it whole inside - and *
    row, g, so, nbmn = _slot(op, i)
    if op.k_inner:
        em(
            f"nb = min(max(K - {k0} - {n}_c0, 0), {op.vec}) * min(max({op.lim} - {op.origin} - {row}, 0), 1) * 2"
            if op.regular
            else f"nb = min(max(K - {k0} - {n}_c{i}, 0), {op.vec}) * min(max({op.lim} - {op.origin} - {row}, 0), 1) * 2"
        )
        em(f"gi = ({g} + {k0}) & -min(nb, 1)")
    else:
        em(f"nb = {nbmn} * min(max(K - {k0} - {row}, 0), 1)")
        em(f"gi = ({g} + {k0} * {n}_s1) & -min(nb, 1)")
    dst = _dst(stage_base, so)
    if op.vec == 1:
        em(f"{kv.smem}[{dst}] = {n}[gi] * min(nb, 1)")
    else:
        em(f"cp_async_{op.vec * 2}(smem_addr({kv.smem}, {dst}), {n}, gi, nb)")


def emit_load_stage(
    em: Emitter,
    operands: tuple[Operand, Operand],
    stage: str | int,
    k0: str,
    *,
    fast: bool,
    threads: int,
) -> None:
    """Copies of the k-tile at *k0* of both operands into ring stage *stage*: predicated, or
    (*fast*) the unpredicated ones of a k-tile inside K."""
    for op in operands:
        base: str | int
        if isinstance(stage, int):
            base = op.ring + stage * op.elems
        else:
            base = f"{op.ring} + {stage} * {op.elems}" if op.ring else f"{stage} * {op.elems}"
        if not fast:
            _emit_load_tile(em, op, base, k0, threads)
        elif op.k_inner:
            _emit_load_tile_fast(em, op, base, f"({k0})", threads)
        else:
            koff = f"({k0}) * {op.name}_s1" if k0 != kv.kload else f"{op.name}_koff"
            _emit_load_tile_fast(em, op, base, koff, threads)
