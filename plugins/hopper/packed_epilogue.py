"""The consumer's epilogue in its accumulator fragment: results packed into shared memory in
the output dtype by column chunks, then stored as coalesced 16-byte vectors."""

from __future__ import annotations

from mmaplug.codegen import Emitter, instr_expr, is16, narrow, widen
from mmaplug.dtypes import DType
from mmaplug.epilogue import EpilogueProgram

from .config import (
    VECTOR_ALIGN,
    WARPGROUP,
    HopperKernelConfig,
    packed_row_bytes,
    staging_row_bytes,
)

__all__ = ["emit_packed_epilogue", "emit_packed_prefetch", "emit_packed_setup", "hoisted_inputs"]

_PAIRS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (row half h, column e) of a fragment's 8x8 group


def emit_packed_setup(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Per-consumer names the chunk loop uses (before the loop over work units)."""
    wm, wn, _ = cfg.warp_tile
    em("su = cuda.shared.array(0, dtype=uint32)  # the same bytes, as words")
    em("sf = cuda.shared.array(0, dtype=float32)")
    em(f"sreg = stg + c * {wm * staging_row_bytes(wn)}  # this consumer's staging region")
    em("frow = 16 * w + lane // 4  # the thread's fragment row (and row + 8) in a 64-row block")
    em("fcol = 2 * (lane % 4)  # its first column in each 8-column group")
    em("ebuf = 0  # the chunk buffer written next (with two, they alternate across tiles)")


def _roots(prog: EpilogueProgram) -> list[int]:
    """Per output, the instruction whose value it narrows: a cast to the output's own 16-bit
    dtype is skipped (narrowing its source gives the same bits)."""
    roots = []
    for out in prog.outputs:
        src = prog.instrs[out.src]
        same = src.op == "cast" and is16(out.dtype) and _cast_dtype(src.arg) is out.dtype
        roots.append(src.srcs[0] if same else out.src)
    return roots


def _cast_dtype(arg: object) -> DType:
    return arg if isinstance(arg, DType) else DType[str(arg)]


def _live(prog: EpilogueProgram, roots: list[int]) -> set[int]:
    live: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(prog.instrs[i].srcs)
    return live


def hoisted_inputs(prog: EpilogueProgram) -> list[int]:
    """Inputs the epilogue reads that vary along N only (a bias): loaded per column, a chunk
    ahead of their use."""
    used = _live(prog, _roots(prog))
    inputs = {int(prog.instrs[i].arg) for i in used if prog.instrs[i].op == "input"}
    return sorted(i for i in inputs if "m" not in {str(a) for a in prog.inputs[i].axes})


def emit_packed_prefetch(em: Emitter, cfg: HopperKernelConfig, prog: EpilogueProgram) -> None:
    """Issue the first chunk's loads of N-only inputs (before the main loop's last wait, so
    their latency hides behind the tile's final wgmmas); nothing without such inputs."""
    hoisted = hoisted_inputs(prog)
    if not hoisted:
        return
    for i in hoisted:
        em(f"ib{i} = bt * in{i}_sb")
    em("ch = 0")
    _load_hoisted(em, prog, hoisted, cfg.epilogue_chunk // 8, f"n0 + cn * {cfg.warp_tile[1]}")


def _load_hoisted(
    em: Emitter, prog: EpilogueProgram, hoisted: list[int], groups: int, col0: str
) -> None:
    """``h{i}_{q}_{e}``: input *i* at this thread's chunk columns from *col0*, clamped to N, as
    stored (widened only at use, so nothing waits for the load before then)."""
    for i in hoisted:
        for q in range(groups):
            for e in (0, 1):
                col = f"min({col0} + {8 * q + e} + fcol, N - 1)"
                em(f"h{i}_{q}_{e} = in{i}[ib{i} + {col} * in{i}_sn]")


def emit_packed_epilogue(
    em: Emitter, cfg: HopperKernelConfig, prog: EpilogueProgram, accs: list[str]
) -> None:
    """This consumer's tile, chunk by chunk: each thread applies *prog* to its fragment
    registers of the chunk (inputs clamped into bounds) and packs the results into the chunk
    buffer in the output dtype (``packed_row_bytes`` a row); after a warpgroup barrier every
    thread loads 16-byte vectors of whole rows back and stores them coalesced, skipping rows
    past M and vectors past N (N * itemsize is a multiple of 16). With two buffers the next
    chunk writes the other one, so one barrier per chunk orders it all; with one, a second
    barrier waits for the reads. Global stores do not stall the thread: they drain while the
    warpgroup goes on to the next chunk and tile.

    The outputs are ``out{j}`` with strides ``out{j}_sb`` / ``out{j}_sm`` and batch ``bt``.
    """
    wm, wn, _ = cfg.warp_tile
    chunk = cfg.epilogue_chunk
    nbuf = cfg.packed_buffers
    dtypes: list[DType] = [o.dtype for o in prog.outputs]
    rows = [packed_row_bytes(d, wn) for d in dtypes]
    offsets = [wm * sum(rows[:j]) for j in range(len(rows))]
    buf_bytes = wm * sum(rows)
    roots = _roots(prog)
    live = _live(prog, roots)
    used_inputs = sorted({int(prog.instrs[i].arg) for i in live if prog.instrs[i].op == "input"})
    hoisted = hoisted_inputs(prog)
    blocks, groups = wm // 64, chunk // 8

    em(f"em0 = m0 + cm * {wm}")
    for i in used_inputs:
        em(f"ib{i} = bt * in{i}_sb")
    if not hoisted_inputs(prog):
        em("ch = 0")  # (emit_packed_prefetch set ch otherwise)
    em(f"while ch < {wn // chunk}:")
    with em.indent():
        if nbuf == 1:
            em(f"named_barrier_sync(1 + c, {WARPGROUP})  # the previous chunk has been read")
        names = [(r, q, h, e) for r in range(blocks) for q in range(groups) for h, e in _PAIRS]
        for index in range(wn // chunk):
            em(f"{'if' if index == 0 else 'elif'} ch == {index}:")
            with em.indent():
                for r, q, h, e in names:
                    reg = 4 * (index * groups + q) + 2 * h + e
                    em(f"f{r}_{q}_{h}_{e} = {accs[r]}[{reg}]")
        em(f"en0 = n0 + cn * {wn} + ch * {chunk}")
        em(f"sw = (sreg - base + ebuf * {buf_bytes}) // 4  # the buffer, in words")
        for i in hoisted:  # this chunk's, loaded a chunk ahead; then the next chunk's
            for q in range(groups):
                for e in (0, 1):
                    em(f"c{i}_{q}_{e} = {widen(prog.inputs[i].dtype, f'h{i}_{q}_{e}')}")
        _load_hoisted(em, prog, hoisted, groups, f"en0 + {chunk}")
        for r, q, h, e in names:
            row = f"em0 + {64 * r + 8 * h} + frow"
            col = f"en0 + {8 * q + e} + fcol"
            inputs = {}
            for i in used_inputs:
                if i in hoisted:
                    inputs[i] = f"c{i}_{q}_{e}"
                else:
                    at = f"min({row}, M - 1) * in{i}_sm + min({col}, N - 1) * in{i}_sn"
                    inputs[i] = widen(prog.inputs[i].dtype, f"in{i}[ib{i} + {at}]")
            em(f"v = f{r}_{q}_{h}_{e}")
            for idx, ins in enumerate(prog.instrs):
                if idx in live:
                    em(f"x{idx} = {instr_expr(prog, ins, inputs)}")
            for j, dtype in enumerate(dtypes):
                em(f"o{j}_{e} = {narrow(dtype, f'x{roots[j]}')}")
            if e == 0:
                continue
            for j, dtype in enumerate(dtypes):
                lrow = 64 * r + 8 * h
                if is16(dtype):
                    off = offsets[j] + lrow * rows[j] + 16 * q
                    em(
                        f"su[sw + ({off} + frow * {rows[j]} + 2 * fcol) // 4] = "
                        f"uint32(o{j}_0) | (uint32(o{j}_1) << uint32(16))"
                    )
                else:
                    off = offsets[j] + lrow * rows[j] + 32 * q
                    em(f"sfw = sw + ({off} + frow * {rows[j]} + 4 * fcol) // 4")
                    em(f"sf[sfw] = o{j}_0")
                    em(f"sf[sfw + 1] = o{j}_1")
        em(f"named_barrier_sync(1 + c, {WARPGROUP})  # the chunk is written")
        for j, dtype in enumerate(dtypes):
            per_row = chunk * dtype.itemsize // VECTOR_ALIGN  # vectors in a chunk row
            lanes = VECTOR_ALIGN // dtype.itemsize  # columns in a vector
            total = wm * per_row
            for part in range(-(-total // WARPGROUP)):
                em(f"vi = t + {part * WARPGROUP}")
                em(f"vr = vi // {per_row}")
                em(f"vc = en0 + (vi % {per_row}) * {lanes}")
                cond = "em0 + vr < M and vc < N"
                if (part + 1) * WARPGROUP > total:
                    cond = f"vi < {total} and {cond}"
                em(f"if {cond}:")
                with em.indent():
                    word = f"sw + {offsets[j] // 4} + vr * {rows[j] // 4} + (vi % {per_row}) * 4"
                    em(f"p0, p1, p2, p3 = ld_shared_v4_f32(smem_addr(su, {word}))")
                    at = f"bt * out{j}_sb + (em0 + vr) * out{j}_sm + vc"
                    em(f"st_global_v4_b32(out{j}, {at}, p0, p1, p2, p3)")
        if nbuf == 2:
            em("ebuf ^= 1")
        em("ch += 1")
