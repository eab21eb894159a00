"""Code generation of the ``ampere_gemm`` kernel: the main loop (the copies of
``copy_codegen``, ldmatrix into double-buffered fragments, mma.sync) and its staged epilogue."""

from __future__ import annotations

from mmaplug.codegen.emitter import EPILOGUE_VARS as ev
from mmaplug.codegen.emitter import Emitter, emit_epilogue_body, jit_options
from mmaplug.codegen.grid import emit_tile_decode
from mmaplug.codegen.staged_epilogue import emit_staged_epilogue, fits_staged
from mmaplug.ir.dtypes import DType

from .config import AmpereKernelConfig, kernel_params
from .copy_codegen import Operand, emit_load_setup, emit_load_stage, sum_terms, swizzle_amount
from .kernel_vars import KERNEL_VARS as kv
from .prologue_codegen import emit_prologue_stage


def _offsets(em: Emitter, table: str, tile: str, tiles: int, ks_n: int, expr: str) -> None:
    """``table[tile * ks_n + ks] = expr`` for every (tile, k16 step), in loops NVVM unrolls:
    the local array *table* stays in registers."""
    em(f"for {tile} in range({tiles}):")
    with em.indent():
        em(f"for ks in range({ks_n}):")
        with em.indent():
            em(f"{table}[{tile} * {ks_n} + ks] = {expr}")


def _emit_frag_setup(em: Emitter, cfg: AmpereKernelConfig, a: Operand, b: Operand) -> None:
    """Loop-invariant smem offsets of the fragment reads: ``foa[mi * KS + ks]`` for A's m16
    tile ``mi`` at k16 step ``ks``, ``fob[p * KS + ks]`` for B's n16 pair ``p``."""
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    ks_n = bk // 16
    em(f"lr = {kv.lane} & 7")
    em(f"lj = {kv.lane} >> 3")
    em(f"{kv.foa} = cuda.local.array({wmt // 16 * ks_n}, int64)")
    em(f"{kv.fob} = cuda.local.array({wnt // 16 * ks_n}, int64)")
    # A
    if a.k_inner:  # smem [BM][BK]; x4: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
        em(f"fa_row = {kv.wm} * {wmt} + lr + (lj & 1) * 8")
        em(f"fa_x = {swizzle_amount('lr + (lj & 1) * 8', a.units)}")
        expr = f"(fa_row + 16 * mi) * {bk} + (((lj >> 1) + 2 * ks) ^ fa_x) * 8"
    else:  # smem [BK][BM]; x4.trans: matrices (k0-7,m0-7) (k0-7,m8-15) (k8-15,m0-7) (k8-15,m8-15)
        em("fa_k = lr + (lj >> 1) * 8")
        em(f"fa_x = {swizzle_amount('fa_k', a.units)}")
        em(f"fa_u = {kv.wm} * {wmt // 8} + (lj & 1)")
        expr = f"(fa_k + 16 * ks) * {bm} + ((fa_u + 2 * mi) ^ fa_x) * 8"
    _offsets(em, kv.foa, "mi", wmt // 16, ks_n, expr)
    # B: x4 per n16 = two n8 tiles: regs (b0 of j, b1 of j, b0 of j+1, b1 of j+1)
    if b.k_inner:  # smem [BN][BK]; matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15)
        em(f"fb_row = {kv.wn} * {wnt} + lr + (lj >> 1) * 8")
        em(f"fb_x = {swizzle_amount('lr + (lj >> 1) * 8', b.units)}")
        expr = f"(fb_row + 16 * p) * {bk} + (((lj & 1) + 2 * ks) ^ fb_x) * 8"
    else:  # smem [BK][BN]; x4.trans: matrices (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
        em("fb_k = lr + (lj & 1) * 8")
        em(f"fb_x = {swizzle_amount('fb_k', b.units)}")
        em(f"fb_u = {kv.wn} * {wnt // 8} + (lj >> 1)")
        expr = f"(fb_k + 16 * ks) * {bn} + ((fb_u + 2 * p) ^ fb_x) * 8"
    _offsets(em, kv.fob, "p", wnt // 16, ks_n, expr)


def _frag_sizes(cfg: AmpereKernelConfig) -> tuple[int, int]:
    """uint32 registers of one buffer of A fragments (4 per m16 tile) and of B (2 per n8)."""
    wmt, wnt, _ = cfg.warp_tile
    return wmt // 16 * 4, wnt // 8 * 2


def _emit_frag_load(
    em: Emitter, cfg: AmpereKernelConfig, a: Operand, b: Operand, ks: int, buf: int
) -> None:
    """ldmatrix of k16 step *ks* into fragment buffer *buf* of ``fa`` and ``fb``."""
    wmt, wnt, bk = cfg.warp_tile
    na, nb = _frag_sizes(cfg)
    for op, tile, tiles, first in ((a, "mi", wmt // 16, buf * na), (b, "p", wnt // 16, buf * nb)):
        ld = "ldmatrix_x4" if op.k_inner else "ldmatrix_x4_trans"
        frag, table, stage = (kv.fa, kv.foa, kv.sa) if op.name == "a" else (kv.fb, kv.fob, kv.sb)
        em(f"for {tile} in range({tiles}):")
        with em.indent():
            em(f"o = {sum_terms('4 * ' + tile, first)}")
            em(
                f"{frag}[o], {frag}[o + 1], {frag}[o + 2], {frag}[o + 3] = "
                f"{ld}(smem_addr({kv.smem}, {stage} + {table}[{sum_terms(f'{tile} * {bk // 16}', ks)}]))"
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
            em(f"oa = {sum_terms('4 * mi', buf * na)}")
            em(f"ob = {sum_terms('2 * ni', buf * nb)}")
            em(
                f"{kv.acc}[c], {kv.acc}[c + 1], {kv.acc}[c + 2], {kv.acc}[c + 3] = "
                f"{fn}({kv.fa}[oa], {kv.fa}[oa + 1], {kv.fa}[oa + 2], {kv.fa}[oa + 3], "
                f"{kv.fb}[ob], {kv.fb}[ob + 1], "
                f"{kv.acc}[c], {kv.acc}[c + 1], {kv.acc}[c + 2], {kv.acc}[c + 3])"
            )


def emit_main_kernel(em: Emitter, cfg: AmpereKernelConfig, sim: bool) -> None:
    """``ampere_gemm`` for *cfg*: its tile (``mmaplug.codegen.grid``), the ring's prologue, the
    main loop and the epilogue (the staged one, or one element at a time; split-K partials)."""
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    warps_m, _warps_n = cfg.warps
    threads = cfg.threads
    stages = cfg.stages
    ks_n = bk // 16
    a, b = Operand(cfg, "a"), Operand(cfg, "b")
    operands = (a, b)

    em(f"@cuda.jit({jit_options(threads, sim)})")
    em(f"def ampere_gemm({', '.join(kernel_params(cfg))}):")
    with em.indent():
        em(f"{kv.smem} = cuda.shared.array(0, dtype=uint16)")
        em(f"{kv.tid} = cuda.threadIdx.x")
        em(f"{kv.lane} = {kv.tid} & 31")
        em(f"warp = {kv.tid} >> 5")
        em(f"{kv.wm} = warp % {warps_m}")
        em(f"{kv.wn} = warp // {warps_m}")
        em("pid = cuda.blockIdx.x")
        tm, tn = emit_tile_decode(em, "pid", cta_order=cfg.cta_order, grid_swizzle=cfg.grid_swizzle)
        em(f"{kv.m0} = {tm} * {bm}")
        em(f"{kv.n0} = {tn} * {bn}")
        if cfg.splitk > 1:
            em(f"{ev.bt} = cuda.blockIdx.z // {cfg.splitk}")
            em(f"split = cuda.blockIdx.z % {cfg.splitk}")
            em(f"{kv.k_begin} = split * k_split")
        else:
            em(f"{ev.bt} = cuda.blockIdx.z")
            em(f"{kv.k_begin} = 0")
        em(f"{kv.k_end} = min(K, {kv.k_begin} + k_split)")
        em(f"{kv.num_kt} = max(({kv.k_end} - {kv.k_begin} + {bk - 1}) // {bk}, 0)")
        em(f"a_base = {ev.bt} * a_sb")
        em(f"b_base = {ev.bt} * b_sb")
        emit_load_setup(em, a, threads)
        emit_load_setup(em, b, threads)
        _emit_frag_setup(em, cfg, a, b)
        # accumulators [mi][ni][4] and two buffers of fragments: local arrays indexed by the
        # counters of loops NVVM unrolls, so every index is a constant and they stay in
        # registers (Numba types and lowers each statement once, not once per mma). Loops
        # over a whole 64x128 warp tile's accumulators are past NVVM's unroll threshold:
        # those over the accumulators go one m16 row (mi) at a time.
        row = wnt // 8 * 4  # accumulators of one m16 row
        na, nb = _frag_sizes(cfg)
        em(f"{kv.acc} = cuda.local.array({wmt // 16 * row}, float32)")
        for mi in range(wmt // 16):
            em(f"for i in range({row}):")
            with em.indent():
                em(f"{kv.acc}[{sum_terms('i', mi * row)}] = float32(0.0)")
        em(f"{kv.fa} = cuda.local.array({2 * na}, uint32)")
        em(f"{kv.fb} = cuda.local.array({2 * nb}, uint32)")

        em("# prologue: fill STAGES - 1 stages. The first tile computed is the LAST k-tile of")
        em("# the range, the only one that can cross K: it alone takes the predicated copies;")
        em("# the others (k_begin, k_begin + BK, ...) take the unpredicated ones.")
        for s in range(stages - 1):
            em(f"if {s} < {kv.num_kt}:")
            with em.indent():
                if s == 0:
                    em(f"k_last = {kv.k_begin} + ({kv.num_kt} - 1) * {bk}")
                    emit_load_stage(em, operands, 0, "k_last", fast=False, threads=threads)
                else:
                    k0 = sum_terms(kv.k_begin, (s - 1) * bk)
                    emit_load_stage(em, operands, s, k0, fast=True, threads=threads)
            em("cp_async_commit()")
        em(f"cp_async_wait_group({stages - 2})")
        em("cuda.syncthreads()")
        # stage counters: int32 (Numba would widen them to int64); the stage written at k-tile
        # kt is the one read at kt - 1, so one counter drives both
        em("rs = int32(0)")
        em(f"{kv.wst} = int32({stages - 1})")
        em(f"{kv.kload} = {kv.k_begin} + {(stages - 2) * bk}")
        for op in operands:
            if not op.k_inner:
                em(f"{op.name}_koff = {kv.kload} * {op.name}_s1")
        em(f"{kv.sa} = 0")
        em(f"{kv.sb} = {b.ring}")
        emit_prologue_stage(em, cfg, operands, swizzle_amount, first=True)
        _emit_frag_load(em, cfg, a, b, 0, 0)
        em(f"for {kv.kt} in range({kv.num_kt}):")
        with em.indent():
            for ks in range(ks_n):
                buf, nbuf = ks % 2, (ks + 1) % 2
                if ks == 0:
                    em(f"if {kv.kt} + {stages - 1} < {kv.num_kt}:")
                    with em.indent():
                        emit_load_stage(em, operands, kv.wst, kv.kload, fast=True, threads=threads)
                    em("cp_async_commit()")
                    em(f"{kv.kload} += {bk}")
                    for op in operands:
                        if not op.k_inner:
                            em(f"{op.name}_koff += {op.name}_kstep")
                if ks == ks_n - 1:
                    em(f"cp_async_wait_group({stages - 2})")
                    em("cuda.syncthreads()")
                    em(f"{kv.wst} = rs")
                    em(
                        f"rs = int32((rs + 1) * (rs < {stages - 1}))  # (rs + 1) % STAGES, no division"
                    )
                    em(f"{kv.sa} = rs * {a.elems}")
                    em(f"{kv.sb} = {b.ring} + rs * {b.elems}")
                    emit_prologue_stage(em, cfg, operands, swizzle_amount, first=False)
                _emit_frag_load(em, cfg, a, b, (ks + 1) % ks_n, nbuf)
                _emit_mma(em, cfg, buf)
            if ks_n % 2:
                # odd number of k16 steps: the fragment buffers swap roles; copy back.
                for frag, size in ((kv.fa, na), (kv.fb, nb)):
                    em(f"for i in range({size}):")
                    with em.indent():
                        em(f"{frag}[i] = {frag}[{size} + i]")
        em("cp_async_wait_all()")
        em("cuda.syncthreads()")
        em("# epilogue: stage the accumulators through smem (float32, padded rows), then")
        em("# every thread walks the tile row-wise: coalesced loads and stores")
        em("cs = cuda.shared.array(0, dtype=float32)")
        em(f"er = {kv.wm} * {wmt} + ({kv.lane} >> 2)")
        em(f"ec = {kv.wn} * {wnt} + ({kv.lane} & 3) * 2")
        cst = cfg.epilogue_stride
        # unsigned index: Numba emits no negative-index wraparound (an ISETP + SEL per store)
        em(f"eb = uint32(er * {cst} + ec)")
        for mi in range(wmt // 16):
            em(f"for ni in range({wnt // 8}):")
            with em.indent():
                em("for q in range(4):")
                with em.indent():
                    off = sum_terms(f"(q >> 1) * {8 * cst} + 8 * ni + (q & 1)", 16 * mi * cst)
                    em(f"cs[eb + uint32({off})] = {kv.acc}[{sum_terms('ni * 4 + q', mi * row)}]")
        em("cuda.syncthreads()")
        if cfg.splitk == 1 and fits_staged(bm, bn, threads):
            emit_staged_epilogue(em, cfg.epilogue, rows=bm, cols=bn, threads=threads, stride=cst)
            em()
            return
        if cfg.splitk > 1:
            em(f"wbase = (split * batch + {ev.bt}) * M * N")
        em(f"for it in range({-(-bm * bn // threads)}):")
        with em.indent():
            em(f"e = {kv.tid} + it * {threads}")
            em(f"lrow = e // {bn}")
            em(f"lcol = e % {bn}")
            em(f"{ev.row} = {kv.m0} + lrow")
            em(f"{ev.col} = {kv.n0} + lcol")
            guard = f" and e < {bm * bn}" if (bm * bn) % threads else ""
            em(f"if {ev.row} < M and {ev.col} < N{guard}:")
            with em.indent():
                em(f"{ev.v} = cs[lrow * {cst} + lcol]")
                if cfg.splitk > 1:
                    em(f"ws[wbase + {ev.row} * N + {ev.col}] = {ev.v}")
                else:
                    emit_epilogue_body(em, cfg.epilogue)
    em()
