"""Code generation of the main loop: cp.async copies, swizzled smem, ldmatrix, mma.sync."""

from __future__ import annotations

from mmaplug.codegen.emitter import Emitter, emit_epilogue_body, jit_options
from mmaplug.codegen.staged_epilogue import emit_staged_epilogue
from mmaplug.ir.dtypes import DType

from .config import AmpereKernelConfig, kernel_params
from .epilogue_codegen import c_stride, vector_epilogue
from .prologue_codegen import emit_prologue_stage


def _swizzle_amount(row: str, units_per_row: int) -> str:
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


def _sum(*terms: str | int) -> str:
    """``a + b + ...`` with the integer terms added up into one (left out when 0): Numba types
    and lowers every operator of the source, NVVM folds them all the same."""
    const = sum(t for t in terms if isinstance(t, int))
    names = [t for t in terms if isinstance(t, str)]
    return " + ".join([*names, str(const)] if const or not names else names)


def _dst(stage_base: str | int, so: tuple[str, int]) -> str:
    """A copy's smem offset: its stage's base plus its slot's offset. A constant base folds into
    the slot's constant; a runtime one keeps the grouping NVVM schedules the loop's copies by."""
    if isinstance(stage_base, int):
        return _sum(so[0], so[1] + stage_base)
    return f"{stage_base} + ({_sum(*so)})" if so[1] else f"{stage_base} + {so[0]}"


def _times(index: int, name: str) -> str:
    """``index * name`` (``name`` alone for 1)."""
    return name if index == 1 else f"{index} * {name}"


class _Operand:
    """Geometry of one operand's tile copies and fragment reads."""

    def __init__(self, cfg: AmpereKernelConfig, name: str) -> None:
        bm, bn, bk = cfg.cta_tile
        self.name = name
        self.k_inner = cfg.a_k_inner if name == "a" else cfg.b_k_inner
        self.vec = cfg.vec_a if name == "a" else cfg.vec_b
        self.mn = bm if name == "a" else bn
        self.bk = bk
        self.lim = "M" if name == "a" else "N"
        self.origin = "m0" if name == "a" else "n0"
        # smem rows: the contiguous global dim is the row
        self.rows, self.rowlen = (self.mn, bk) if self.k_inner else (bk, self.mn)
        self.units = self.rowlen // 8
        self.vecs_per_row = self.rowlen // self.vec
        self.nvec = self.rows * self.vecs_per_row
        self.iters = -(-self.nvec // cfg.threads)
        self.elems = self.mn * bk
        # set by _emit_load_setup: copy slots are fixed row steps from slot 0 (and the step)
        self.regular = False
        self.step = 0


def _emit_load_setup(em: Emitter, op: _Operand, threads: int) -> None:
    """Per-thread copy coordinates (loop invariant).

    When the CTA covers whole smem rows per copy slot (``threads % vecs_per_row == 0``), slot
    ``i`` is slot 0 moved down by ``i * threads / vecs_per_row`` rows: only slot 0's coordinates
    are kept in registers and the others are constant offsets from them.
    """
    n = op.name
    step = threads // op.vecs_per_row
    regular = threads % op.vecs_per_row == 0 and (step % 8 == 0 or op.units == 1)
    for i in range(1 if regular else op.iters):
        v = f"({_sum('tid', i * threads)})"
        em(f"{n}_r{i} = {v} // {op.vecs_per_row}")
        em(f"{n}_c{i} = ({v} % {op.vecs_per_row}) * {op.vec}")
        em(
            f"{n}_so{i} = {n}_r{i} * {op.rowlen} + "
            f"(({n}_c{i} >> 3) ^ {_swizzle_amount(f'{n}_r{i}', op.units)}) * 8 + ({n}_c{i} & 7)"
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
    # holds the K remainder, see emit_main_kernel): K is always in range there, and the M/N
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


def _fast_slot(op: _Operand, i: int) -> tuple[str, str]:
    """(global index without the k offset, src bytes) of fast-path copy slot *i*."""
    n = op.name
    if op.k_inner:
        return f"{n}_gf{i}", str(op.vec * 2)
    if op.regular:
        return (f"{n}_gf0" if i == 0 else f"({n}_gf0 + {_times(i, n + '_gstep')})"), f"{n}_nbf0"
    return f"{n}_gf{i}", f"{n}_nbf{i}"


def _slot(op: _Operand, i: int) -> tuple[str, str, tuple[str, int], str]:
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


def _emit_load_tile(
    em: Emitter, op: _Operand, stage_base: str | int, k0: str, threads: int
) -> None:
    for i in range(op.iters):
        if op.nvec % threads and (i + 1) * threads > op.nvec:
            # this copy slot is idle for some threads: they must not even zero-fill
            em(f"if tid + {i * threads} < {op.nvec}:")
            with em.indent():
                _emit_copy(em, op, i, stage_base, k0)
        else:
            _emit_copy(em, op, i, stage_base, k0)


def _emit_load_tile_fast(
    em: Emitter, op: _Operand, stage_base: str | int, koff: str, threads: int
) -> None:
    """Copies of a k-tile that lies inside K: no per-tile predicates (see _emit_load_setup)."""
    n = op.name
    for i in range(op.iters):
        _row, _g, so, _nb = _slot(op, i)
        g, nb = _fast_slot(op, i)
        dst = _dst(stage_base, so)
        idle = op.nvec % threads and (i + 1) * threads > op.nvec
        if idle:  # this copy slot is idle for some threads
            em(f"if tid + {i * threads} < {op.nvec}:")
            em.depth += 1
        if op.vec == 1:
            em(f"smem[{dst}] = {n}[{g} + {koff}]")
        else:
            em(f"cp_async_{op.vec * 2}(smem_addr(smem, {dst}), {n}, {g} + {koff}, {nb})")
        if idle:
            em.depth -= 1


def _emit_copy(em: Emitter, op: _Operand, i: int, stage_base: str | int, k0: str) -> None:
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
        em(f"smem[{dst}] = {n}[gi] * min(nb, 1)")
    else:
        em(f"cp_async_{op.vec * 2}(smem_addr(smem, {dst}), {n}, gi, nb)")


def _offsets(em: Emitter, table: str, tile: str, tiles: int, ks_n: int, expr: str) -> None:
    """``table[tile * ks_n + ks] = expr`` for every (tile, k16 step), in loops NVVM unrolls:
    the local array *table* stays in registers."""
    em(f"for {tile} in range({tiles}):")
    with em.indent():
        em(f"for ks in range({ks_n}):")
        with em.indent():
            em(f"{table}[{tile} * {ks_n} + ks] = {expr}")


def _emit_frag_setup(em: Emitter, cfg: AmpereKernelConfig, a: _Operand, b: _Operand) -> None:
    """Loop-invariant smem offsets of the fragment reads: ``foa[mi * KS + ks]`` for A's m16
    tile ``mi`` at k16 step ``ks``, ``fob[p * KS + ks]`` for B's n16 pair ``p``."""
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    ks_n = bk // 16
    em("lr = lane & 7")
    em("lj = lane >> 3")
    em(f"foa = cuda.local.array({wmt // 16 * ks_n}, int64)")
    em(f"fob = cuda.local.array({wnt // 16 * ks_n}, int64)")
    # A
    if a.k_inner:  # smem [BM][BK]; x4: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
        em("fa_row = wm * %d + lr + (lj & 1) * 8" % wmt)
        em(f"fa_x = {_swizzle_amount('lr + (lj & 1) * 8', a.units)}")
        expr = f"(fa_row + 16 * mi) * {bk} + (((lj >> 1) + 2 * ks) ^ fa_x) * 8"
    else:  # smem [BK][BM]; x4.trans: matrices (k0-7,m0-7) (k0-7,m8-15) (k8-15,m0-7) (k8-15,m8-15)
        em("fa_k = lr + (lj >> 1) * 8")
        em(f"fa_x = {_swizzle_amount('fa_k', a.units)}")
        em(f"fa_u = wm * {wmt // 8} + (lj & 1)")
        expr = f"(fa_k + 16 * ks) * {bm} + ((fa_u + 2 * mi) ^ fa_x) * 8"
    _offsets(em, "foa", "mi", wmt // 16, ks_n, expr)
    # B: x4 per n16 = two n8 tiles: regs (b0 of j, b1 of j, b0 of j+1, b1 of j+1)
    if b.k_inner:  # smem [BN][BK]; matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15)
        em("fb_row = wn * %d + lr + (lj >> 1) * 8" % wnt)
        em(f"fb_x = {_swizzle_amount('lr + (lj >> 1) * 8', b.units)}")
        expr = f"(fb_row + 16 * p) * {bk} + (((lj & 1) + 2 * ks) ^ fb_x) * 8"
    else:  # smem [BK][BN]; x4.trans: matrices (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
        em("fb_k = lr + (lj & 1) * 8")
        em(f"fb_x = {_swizzle_amount('fb_k', b.units)}")
        em(f"fb_u = wn * {wnt // 8} + (lj >> 1)")
        expr = f"(fb_k + 16 * ks) * {bn} + ((fb_u + 2 * p) ^ fb_x) * 8"
    _offsets(em, "fob", "p", wnt // 16, ks_n, expr)


def _frag_sizes(cfg: AmpereKernelConfig) -> tuple[int, int]:
    """uint32 registers of one buffer of A fragments (4 per m16 tile) and of B (2 per n8)."""
    wmt, wnt, _ = cfg.warp_tile
    return wmt // 16 * 4, wnt // 8 * 2


def _emit_frag_load(
    em: Emitter, cfg: AmpereKernelConfig, a: _Operand, b: _Operand, ks: int, buf: int
) -> None:
    """ldmatrix of k16 step *ks* into fragment buffer *buf* of ``fa`` and ``fb``."""
    wmt, wnt, bk = cfg.warp_tile
    na, nb = _frag_sizes(cfg)
    for op, tile, tiles, first in ((a, "mi", wmt // 16, buf * na), (b, "p", wnt // 16, buf * nb)):
        ld = "ldmatrix_x4" if op.k_inner else "ldmatrix_x4_trans"
        frag, table = f"f{op.name}", f"fo{op.name}"
        em(f"for {tile} in range({tiles}):")
        with em.indent():
            em(f"o = {_sum('4 * ' + tile, first)}")
            em(
                f"{frag}[o], {frag}[o + 1], {frag}[o + 2], {frag}[o + 3] = "
                f"{ld}(smem_addr(smem, s{op.name} + {table}[{_sum(f'{tile} * {bk // 16}', ks)}]))"
            )


def _emit_mma(em: Emitter, cfg: AmpereKernelConfig, buf: int) -> None:
    """One k16 step's mma of the warp tile from fragment buffer *buf*: a loop NVVM unrolls,
    the m16 tiles in order, each walking the n8 tiles forwards (even ``mi``) or backwards (odd:
    the B registers of the turn are reused)."""
    wmt, wnt, _ = cfg.warp_tile
    ni_n = wnt // 8
    na, nb = _frag_sizes(cfg)
    fn = "mma_m16n8k16_f16" if cfg.operand_dtype is DType.float16 else "mma_m16n8k16_bf16"
    em(f"for mi in range({wmt // 16}):")
    with em.indent():
        em(f"for j in range({ni_n}):")
        with em.indent():
            em(f"ni = j + (mi & 1) * ({ni_n - 1} - 2 * j)")
            em(f"c = (mi * {ni_n} + ni) * 4")
            em(f"oa = {_sum('4 * mi', buf * na)}")
            em(f"ob = {_sum('2 * ni', buf * nb)}")
            em(
                f"acc[c], acc[c + 1], acc[c + 2], acc[c + 3] = {fn}(fa[oa], fa[oa + 1], "
                "fa[oa + 2], fa[oa + 3], fb[ob], fb[ob + 1], acc[c], acc[c + 1], acc[c + 2], "
                "acc[c + 3])"
            )


def emit_main_kernel(em: Emitter, cfg: AmpereKernelConfig, sim: bool) -> None:
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    warps_m, _warps_n = cfg.warps
    threads = cfg.threads
    stages = cfg.stages
    ks_n = bk // 16
    a, b = _Operand(cfg, "a"), _Operand(cfg, "b")
    b_off = stages * a.elems

    em(f"@cuda.jit({jit_options(threads, sim)})")
    em(f"def ampere_gemm({', '.join(kernel_params(cfg))}):")
    with em.indent():
        em("smem = cuda.shared.array(0, dtype=uint16)")
        em("tid = cuda.threadIdx.x")
        em("lane = tid & 31")
        em("warp = tid >> 5")
        em(f"wm = warp % {warps_m}")
        em(f"wn = warp // {warps_m}")
        # tile order + grouped swizzle
        major, minor = (
            ("tiles_m", "tiles_n") if cfg.cta_order == "row_major" else ("tiles_n", "tiles_m")
        )
        g = cfg.grid_swizzle
        em("pid = cuda.blockIdx.x")
        if g == 1:
            em(f"t_major = pid // {minor}")
            em(f"t_minor = pid % {minor}")
        else:
            em(f"per_group = {g} * {minor}")
            em("group = pid // per_group")
            em(f"first = group * {g}")
            em(f"gsize = min({major} - first, {g})")
            em("rem = pid - group * per_group")
            em("t_major = first + rem % gsize")
            em("t_minor = rem // gsize")
        tm, tn = ("t_major", "t_minor") if cfg.cta_order == "row_major" else ("t_minor", "t_major")
        em(f"m0 = {tm} * {bm}")
        em(f"n0 = {tn} * {bn}")
        if cfg.splitk > 1:
            em(f"bt = cuda.blockIdx.z // {cfg.splitk}")
            em(f"split = cuda.blockIdx.z % {cfg.splitk}")
            em("k_begin = split * k_split")
        else:
            em("bt = cuda.blockIdx.z")
            em("k_begin = 0")
        em("k_end = min(K, k_begin + k_split)")
        em(f"num_kt = max((k_end - k_begin + {bk - 1}) // {bk}, 0)")
        em("a_base = bt * a_sb")
        em("b_base = bt * b_sb")
        _emit_load_setup(em, a, threads)
        _emit_load_setup(em, b, threads)
        _emit_frag_setup(em, cfg, a, b)
        # accumulators [mi][ni][4] and two buffers of fragments: local arrays indexed by the
        # counters of loops NVVM unrolls, so every index is a constant and they stay in
        # registers (Numba types and lowers each statement once, not once per mma). Loops
        # over a whole 64x128 warp tile's accumulators are past NVVM's unroll threshold:
        # those over the accumulators go one m16 row (mi) at a time.
        row = wnt // 8 * 4  # accumulators of one m16 row
        na, nb = _frag_sizes(cfg)
        em(f"acc = cuda.local.array({wmt // 16 * row}, float32)")
        for mi in range(wmt // 16):
            em(f"for i in range({row}):")
            with em.indent():
                em(f"acc[{_sum('i', mi * row)}] = float32(0.0)")
        em(f"fa = cuda.local.array({2 * na}, uint32)")
        em(f"fb = cuda.local.array({2 * nb}, uint32)")

        def load_stage(stage: str | int, k0: str, fast: bool) -> None:
            for op, off in ((a, 0), (b, b_off)):  # B's stages follow all of A's
                base: str | int
                if isinstance(stage, int):
                    base = off + stage * op.elems
                else:
                    base = f"{off} + {stage} * {op.elems}" if off else f"{stage} * {op.elems}"
                if not fast:
                    _emit_load_tile(em, op, base, k0, threads)
                elif op.k_inner:
                    _emit_load_tile_fast(em, op, base, f"({k0})", threads)
                else:
                    _emit_load_tile_fast(
                        em,
                        op,
                        base,
                        f"({k0}) * {op.name}_s1" if k0 != "kload" else f"{op.name}_koff",
                        threads,
                    )

        em("# prologue: fill STAGES - 1 stages. The first tile computed is the LAST k-tile of")
        em("# the range, the only one that can cross K: it alone takes the predicated copies;")
        em("# the others (k_begin, k_begin + BK, ...) take the unpredicated ones.")
        for s in range(stages - 1):
            em(f"if {s} < num_kt:")
            with em.indent():
                if s == 0:
                    em(f"k_last = k_begin + (num_kt - 1) * {bk}")
                    load_stage(0, "k_last", fast=False)
                else:
                    load_stage(s, _sum("k_begin", (s - 1) * bk), fast=True)
            em("cp_async_commit()")
        em(f"cp_async_wait_group({stages - 2})")
        em("cuda.syncthreads()")
        # stage counters: int32 (Numba would widen them to int64); the stage written at k-tile
        # kt is the one read at kt - 1, so one counter drives both
        em("rs = int32(0)")
        em(f"wst = int32({stages - 1})")
        em(f"kload = k_begin + {(stages - 2) * bk}")
        for op in (a, b):
            if not op.k_inner:
                em(f"{op.name}_koff = kload * {op.name}_s1")
        em("sa = 0")
        em(f"sb = {b_off}")
        emit_prologue_stage(em, cfg, (a, b), _swizzle_amount, first=True)
        _emit_frag_load(em, cfg, a, b, 0, 0)
        em("for kt in range(num_kt):")
        with em.indent():
            for ks in range(ks_n):
                buf, nbuf = ks % 2, (ks + 1) % 2
                if ks == 0:
                    em(f"if kt + {stages - 1} < num_kt:")
                    with em.indent():
                        load_stage("wst", "kload", fast=True)
                    em("cp_async_commit()")
                    em(f"kload += {bk}")
                    for op in (a, b):
                        if not op.k_inner:
                            em(f"{op.name}_koff += {op.name}_kstep")
                if ks == ks_n - 1:
                    em(f"cp_async_wait_group({stages - 2})")
                    em("cuda.syncthreads()")
                    em("wst = rs")
                    em(
                        f"rs = int32((rs + 1) * (rs < {stages - 1}))  # (rs + 1) % STAGES, no division"
                    )
                    em(f"sa = rs * {a.elems}")
                    em(f"sb = {b_off} + rs * {b.elems}")
                    emit_prologue_stage(em, cfg, (a, b), _swizzle_amount, first=False)
                _emit_frag_load(em, cfg, a, b, (ks + 1) % ks_n, nbuf)
                _emit_mma(em, cfg, buf)
            if ks_n % 2:
                # odd number of k16 steps: the fragment buffers swap roles; copy back.
                for frag, size in (("fa", na), ("fb", nb)):
                    em(f"for i in range({size}):")
                    with em.indent():
                        em(f"{frag}[i] = {frag}[{size} + i]")
        em("cp_async_wait_all()")
        em("cuda.syncthreads()")
        em("# epilogue: stage the accumulators through smem (float32, padded rows), then")
        em("# every thread walks the tile row-wise: coalesced loads and stores")
        em("cs = cuda.shared.array(0, dtype=float32)")
        em(f"er = wm * {wmt} + (lane >> 2)")
        em(f"ec = wn * {wnt} + (lane & 3) * 2")
        cst = c_stride(cfg)
        # unsigned index: Numba emits no negative-index wraparound (an ISETP + SEL per store)
        em(f"eb = uint32(er * {cst} + ec)")
        for mi in range(wmt // 16):
            em(f"for ni in range({wnt // 8}):")
            with em.indent():
                em("for q in range(4):")
                with em.indent():
                    off = _sum(f"(q >> 1) * {8 * cst} + 8 * ni + (q & 1)", 16 * mi * cst)
                    em(f"cs[eb + uint32({off})] = acc[{_sum('ni * 4 + q', mi * row)}]")
        em("cuda.syncthreads()")
        if cfg.splitk == 1 and vector_epilogue(cfg):
            bm, bn, _ = cfg.cta_tile
            emit_staged_epilogue(
                em, cfg.epilogue, rows=bm, cols=bn, threads=threads, stride=c_stride(cfg)
            )
            em()
            return
        if cfg.splitk > 1:
            em("wbase = (split * batch + bt) * M * N")
        em(f"for it in range({-(-bm * bn // threads)}):")
        with em.indent():
            em(f"e = tid + it * {threads}")
            em(f"lrow = e // {bn}")
            em(f"lcol = e % {bn}")
            em("row = m0 + lrow")
            em("col = n0 + lcol")
            guard = f" and e < {bm * bn}" if (bm * bn) % threads else ""
            em(f"if row < M and col < N{guard}:")
            with em.indent():
                em(f"v = cs[lrow * {cst} + lcol]")
                if cfg.splitk > 1:
                    em("ws[wbase + row * N + col] = v")
                else:
                    emit_epilogue_body(em, cfg.epilogue)
    em()
