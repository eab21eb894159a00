"""The consumer's epilogue in its accumulator fragment: results packed into shared memory in
the output dtype by column chunks, then stored as coalesced 16-byte vectors, or with
``tma_stores`` by one TMA tensor store per chunk and output."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final, NamedTuple

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.amax_epilogue import amax_update
from mmaplug.codegen.emitter import (
    Emitter,
    cast_dtype,
    casts_only,
    fp8_name,
    inline_exprs,
    invariant_inputs,
    is16,
    live_instrs,
    m_only_inputs,
    n_only_inputs,
    narrow,
    widen,
)
from mmaplug.ir.dtypes import DType

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS
from .maps import MAP_WORDS
from .smem import (
    COLUMN_ROWS,
    STAGED_ROWS,
    VECTOR_ALIGN,
    packed_row_bytes,
    staging_row_bytes,
    tma_row_bytes,
    tma_swizzle,
)
from .tiles import WARPGROUP

__all__ = [
    "TileInputs",
    "tile_inputs",
    "emit_input_prefetch",
    "emit_packed_epilogue",
    "emit_packed_setup",
    "emit_packed_step_function",
    "steps_called",
    "emit_step_branches",
    "emit_step_origin",
]


kv = KERNEL_VARS  # the f-strings' short name

_PAIRS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (row half h, column e) of a fragment's 8x8 group


def emit_packed_setup(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Per-consumer names the chunk loop uses (before the loop over work units)."""
    wn = cfg.warp_tile[1]
    em(f"{kv.su} = cuda.shared.array(0, dtype=uint32)  # the same bytes, as words")
    em(f"{kv.sf} = cuda.shared.array(0, dtype=float32)")
    if any(d.is_float8 for d in cfg.epilogue_outputs):
        em(f"{kv.sh} = cuda.shared.array(0, dtype=uint16)  # as half-words (FP8 byte pairs)")
    staging = STAGED_ROWS * staging_row_bytes(wn)
    em(f"{kv.sreg} = {kv.stg} + {kv.c} * {staging}  # this consumer's staging")
    em(
        f"{kv.frow} = 16 * {kv.w} + {kv.lane} // 4  # the thread's fragment row (and row + 8) "
        "in a 64-row block"
    )
    em(f"{kv.fcol} = 2 * ({kv.lane} % 4)  # its first column in each 8-column group")
    em(f"{kv.ebuf} = 0  # the chunk buffer written next (with two, they alternate across tiles)")
    if cfg.tma_stores:
        for p, j in enumerate(cfg.tma_outputs):  # after A's and the Bs' maps
            em(f"{_store_map(j)} = generic_addr(maps, {MAP_WORDS * (1 + cfg.horizontal + p)})")
        em(f"if {kv.t} == 0:  # the consumer's thread that issues its TMA stores")
        with em.indent():
            for j in cfg.tma_outputs:  # (grid-constant maps: no proxy fence)
                em(f"prefetch_tensormap({_store_map(j)})")
    if tile_inputs(cfg).staged:
        regions = cfg.consumers * STAGED_ROWS * staging_row_bytes(wn)
        em(
            f"{kv.scol} = ({kv.stg} - {kv.base} + {regions}) // 4 + {kv.c} * {wn}  "
            "# this consumer's column row"
        )


class TileInputs(NamedTuple):
    """The epilogue inputs the packed epilogue reads once per tile (:func:`tile_inputs`)."""

    staged: list[int]  # N-only, in column rows
    once: list[int]  # along neither M nor N, in registers (``pv{i}``)
    by_row: list[int]  # along M only, in registers (``pr{i}_{k}``)


def tile_inputs(cfg: HopperKernelConfig) -> TileInputs:
    """The epilogue inputs the packed epilogue loads once per tile, before the main loop (see
    :func:`emit_input_prefetch`). *staged*: the first ``COLUMN_ROWS`` N-only inputs it reads
    that vary along N (a bias; FP8's per-column scale of B beside it), written into column
    rows; a further N-only input is loaded once a column of each step. With arithmetic
    (:func:`steps_called`; a casts-only epilogue reads no input) *once*: those along neither
    M nor N (a per-tensor scale), and *by_row*: those along M only (a per-row scale of A).
    Unchanged from step to step of a row block, they were loaded at every step, whose first
    instructions then waited for them (runs 139-140)."""
    if not cfg.packed_stores or cfg.workspace_splitk:
        return TileInputs([], [], [])
    prog, used = cfg.epilogue, _used_inputs(cfg.epilogue)
    once = [i for i in invariant_inputs(prog) if i in used]
    staged = [i for i in n_only_inputs(prog) if i in used and i not in once][:COLUMN_ROWS]
    if not steps_called(prog):
        return TileInputs(staged, [], [])
    return TileInputs(staged, once, [i for i in m_only_inputs(prog) if i in used and i not in once])


def _store_map(j: int) -> str:
    """The variable holding output *j*'s tensor map address (``tma_stores``)."""
    return f"tmap_o{j}"


def _column_row(cfg: HopperKernelConfig, k: int) -> str:
    """The word offset (expression) of this consumer's column row of staged input *k*."""
    return f"{kv.scol} + {k * cfg.consumers * cfg.warp_tile[1]}" if k else kv.scol


def _prefetched(k: int, j: int) -> str:
    """The register holding load *j* of staged input *k* (:func:`emit_input_prefetch`)."""
    return f"{kv.pc}{j}_{k}" if k else f"{kv.pc}{j}"


def emit_input_prefetch(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Before a unit's main loop (its origin decoded), load what its epilogue reads once a
    tile, as stored, so the loads are in flight during the main loop: this consumer's columns
    of each staged N-only input (``WARPGROUP`` columns a load; the epilogue widens them into
    the column rows), each per-tensor input (``pv{i}``) and, for each of the thread's two
    fragment rows of each 64-row block, each input along M only (``pr{i}_{2 * block + h}``)."""
    wm, wn, _ = cfg.warp_tile
    staged, once, by_row = tile_inputs(cfg)
    for k, i in enumerate(staged):
        for j in range(-(-wn // WARPGROUP)):
            col = f"min({kv.n0} + {kv.cn} * {wn} + {kv.t} + {j * WARPGROUP}, N - 1)"
            em(f"{_prefetched(k, j)} = in{i}[{kv.bt} * in{i}_sb + {col} * in{i}_sn]")
    for i in once:
        em(f"{kv.pv}{i} = in{i}[{kv.bt} * in{i}_sb]")
    for i in by_row:
        for r in range(wm // STAGED_ROWS):
            for h in (0, 1):
                row = f"{kv.m0} + {kv.cm} * {wm} + {STAGED_ROWS * r + 8 * h} + {kv.frow}"
                at = f"{kv.bt} * in{i}_sb + min({row}, M - 1) * in{i}_sm"
                em(f"{kv.pr}{i}_{2 * r + h} = in{i}[{at}]")


def emit_step_branches(em: Emitter, accs: list[str], chunks: int) -> Iterator[tuple[str, int]]:
    """The branches of the step loop both smem epilogues walk (``ch``: one 64-row block's
    column chunk a step): yields (the block's accumulator, the chunk's index) with the emitter
    inside that step's ``if ch == ...`` branch."""
    for r, acc in enumerate(accs):
        for index in range(chunks):
            em(f"{'if' if r == index == 0 else 'elif'} {kv.ch} == {r * chunks + index}:")
            with em.indent():
                yield acc, index


def emit_step_origin(em: Emitter, cfg: HopperKernelConfig, chunk: int, chunks: int) -> None:
    """The output origin of step ``ch`` (*chunks* column chunks of *chunk* columns per row
    block): rows from ``em0``, columns from ``en0``. The swapped kernel's tile is the output's
    transpose, so there the kernel's columns give the output's rows and its rows the
    columns."""
    wm, wn, _ = cfg.warp_tile
    rows = f"{kv.m0} + {kv.cm} * {wm} + {STAGED_ROWS} * ({kv.ch} // {chunks})"
    cols = f"{kv.n0} + {kv.cn} * {wn} + ({kv.ch} % {chunks}) * {chunk}"
    if cfg.swap_ab:
        rows, cols = cols, rows
    em(f"{kv.em0} = {rows}")
    em(f"{kv.en0} = {cols}")


def _used_inputs(prog: EpilogueProgram) -> list[int]:
    """The inputs the packed outputs read, in order."""
    live = live_instrs(prog, _roots(prog))
    return sorted({int(prog.instrs[i].arg) for i in live if prog.instrs[i].op == "input"})


def _roots(prog: EpilogueProgram) -> list[int]:
    """Per output, the instruction whose value it narrows: a cast to the output's own 16-bit
    or FP8 dtype is skipped (narrowing its source gives the same bits)."""
    roots = []
    for out in prog.outputs:
        src = prog.instrs[out.src]
        same = src.op == "cast" and out.dtype.is_narrow and cast_dtype(src) is out.dtype
        roots.append(src.srcs[0] if same else out.src)
    return roots


STEP_FUNCTION: Final = "packed_step"


def emit_packed_epilogue(
    em: Emitter, cfg: HopperKernelConfig, prog: EpilogueProgram, accs: list[str]
) -> None:
    """This consumer's tile, a 64-row block's column chunk a step: before the steps the column
    rows are written (see :func:`tile_inputs`, from the registers :func:`emit_input_prefetch`
    loaded before the main loop). With arithmetic (:func:`steps_called`) each step is a call
    of :func:`emit_packed_step_function`'s device function with the step's accumulator
    registers by constant index: a step loop picks them through a branch chain, 16 register
    moves a step, and LLVM does not unroll a loop that large; one function typed once and
    inlined by NVVM keeps Numba's front end to one step's code. Casts alone stay a loop over
    the same step code (LLVM unrolls it; a function would only cost build time)."""
    wn = cfg.warp_tile[1]
    chunks, groups = wn // cfg.epilogue_chunk, cfg.epilogue_chunk // 8
    staged, once, by_row = tile_inputs(cfg)
    for i in _used_inputs(prog):
        if i not in staged + once + by_row:
            em(f"ib{i} = {kv.bt} * in{i}_sb")
    for k, i in enumerate(staged):
        for j in range(-(-wn // WARPGROUP)):
            value = widen(prog.inputs[i].dtype, _prefetched(k, j))
            store = f"{kv.sf}[{_column_row(cfg, k)} + {kv.t} + {j * WARPGROUP}] = {value}"
            if (j + 1) * WARPGROUP > wn:
                em(f"if {kv.t} + {j * WARPGROUP} < {wn}:")
                em(f"    {store}")
            else:
                em(store)
    if staged and cfg.packed_buffers == 2:  # (with one buffer each step's first barrier orders it)
        em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the column row is written")
    body, params = _step_source(cfg, prog)
    if not steps_called(prog):
        em(f"{kv.ch} = 0  # row block ch // {chunks}, column chunk ch % {chunks}")
        em(f"while {kv.ch} < {len(accs) * chunks}:")
        with em.indent():
            for acc, index in emit_step_branches(em, accs, chunks):
                for k in range(4 * groups):
                    em(f"a{k} = {acc}[{4 * index * groups + k}]")
            for line in body:
                em(line)
            if cfg.packed_buffers == 2:
                em(f"{kv.ebuf} ^= 1")
            em(f"{kv.ch} += 1")
        return
    for step, (acc, index) in enumerate((acc, index) for acc in accs for index in range(chunks)):
        first = 4 * index * groups  # the step's first register in the block's fragment
        args = [_step_arg(p, step, f"{acc}[{{}}]", first, step // chunks) for p in params]
        call = f"{_maxima(prog)} = " if prog.amaxes else ""  # the step returns them
        call += f"{STEP_FUNCTION}({', '.join(args)})"
        em(f"{call}  # row block {step // chunks}, chunk {index}")
        if cfg.packed_buffers == 2:
            em(f"{kv.ebuf} ^= 1")


def steps_called(prog: EpilogueProgram) -> bool:
    """Whether the packed epilogue calls a step function (its program computes more than
    casts of the accumulator), which :func:`emit_packed_step_function` then defines."""
    return not casts_only(prog)


def emit_packed_step_function(
    em: Emitter, cfg: HopperKernelConfig, prog: EpilogueProgram, sim: bool
) -> None:
    """The module-level device function one step of :func:`emit_packed_epilogue` calls."""
    body, params = _step_source(cfg, prog)
    em("@cuda.jit(device=True)" if sim else "@cuda.jit(device=True, forceinline=True)")
    em(f"def {STEP_FUNCTION}({', '.join(params)}):")
    with em.indent():
        for line in body:
            em(line)
        if prog.amaxes:
            em(f"return {_maxima(prog)}")
    em()


def _maxima(prog: EpilogueProgram) -> str:
    """The running maxima of *prog*'s amax outputs, as a step function takes and returns them."""
    return ", ".join(f"amx{j}" for j, _ in prog.amaxes)


def _is_value(name: str) -> bool:
    """Whether *name* is a step's accumulator value (``a0`` ... ``a15``)."""
    return name[0] == "a" and name[1:].isdigit()


def _step_arg(name: str, step: int, register: str, first: int, block: int) -> str:
    """The argument of step *step*'s call for parameter *name*: the step's index, its
    accumulator register (*register* formatted with the index; *first* the step's first), its
    row block *block*'s prefetched row of an input along M, or the kernel's variable."""
    if name == kv.ch:
        return str(step)
    if _is_value(name):
        return register.format(first + int(name[1:]))
    if row := _row_param(name):  # the step's row h of input i: the block's register
        i, h = row
        return f"{kv.pr}{i}_{2 * block + h}"
    return name


def _row_param(name: str) -> tuple[int, int] | None:
    """(input, h) when *name* is the step's parameter ``pr{i}_{h}``: row h (0: frow, 1: frow +
    8) of input i along M, which each call binds to its row block's prefetched register."""
    head, _, h = name.partition("_")
    if head.startswith(kv.pr) and head[len(kv.pr) :].isdigit() and h in ("0", "1"):
        return int(head[len(kv.pr) :]), int(h)
    return None


def _step_source(cfg: HopperKernelConfig, prog: EpilogueProgram) -> tuple[list[str], list[str]]:
    """One step's code and its parameters, the free names it reads (first use first).

    Step ``ch`` (row block ``ch // chunks``, column chunk ``ch % chunks``): each thread
    applies *prog* to its fragment values of the chunk, ``a0`` ... (inputs clamped into
    bounds; one that varies along N only is read once a column, a staged one from its
    column row; one along M only (parameters ``pr{i}_0``, ``pr{i}_1``: the thread's two rows
    of the step's row block) and one along neither (``pv{i}``) come loaded with the tile),
    and packs the results into the chunk buffer ``ebuf`` in the output dtype
    (``packed_row_bytes`` a row). One 64-row block a step keeps 16 values in flight whatever
    ``wm`` is (a 128-row tile's two blocks at once spilled 288 bytes with bias + GELU: ptxas
    scheduled all 32 chains together). After a warpgroup barrier every thread loads 16-byte
    vectors of whole rows back and stores them coalesced, skipping rows past M and vectors past
    N (N * itemsize is a multiple of 16). With two buffers the next step writes the other one,
    so one barrier a step orders it all; with one, a second barrier waits for the reads. Global
    stores do not stall the thread: they drain while the warpgroup goes on. With
    ``tma_stores`` the rows are unpadded and swizzled as TMA boxes (:func:`_emit_swizzled_pair`)
    and one thread stores each chunk (:func:`_emit_tma_stores`). The outputs are
    ``out{j}`` with strides ``out{j}_sb`` / ``out{j}_sm`` and batch ``bt``. An amax output
    ``j`` folds the values inside M and N into ``amx{j}`` (a parameter of the step function,
    which returns it).
    """
    em = Emitter()
    wn = cfg.warp_tile[1]
    chunk = cfg.epilogue_chunk
    chunks, groups = wn // chunk, chunk // 8
    dtypes: dict[int, DType] = {j: o.dtype for j, o in prog.stored}  # by output index
    tma = cfg.tma_stores
    row_bytes = tma_row_bytes if tma else packed_row_bytes
    rows = {j: row_bytes(d, wn) for j, d in dtypes.items()}
    offsets = {j: STAGED_ROWS * sum(list(rows.values())[:p]) for p, j in enumerate(rows)}
    buf_bytes = STAGED_ROWS * sum(rows.values())
    buffers = cfg.packed_buffers
    roots = _roots(prog)
    used_inputs = _used_inputs(prog)
    hoisted = [i for i in n_only_inputs(prog) if i in used_inputs]
    staged, once, by_row = tile_inputs(cfg)  # prefetched once a tile (the step widens them)
    if buffers == 1:
        if tma:
            em(f"if {kv.t} == 0:")
            em("    bulk_wait_group_read(0)  # the previous chunk's store has read the buffer")
        em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the previous chunk has been read")
    emit_step_origin(em, cfg, chunk, chunks)
    em(f"sw = ({kv.sreg} - {kv.base} + {kv.ebuf} * {buf_bytes}) // 4  # the buffer, in words")
    for j, dtype in dtypes.items():  # the thread's first word (FP8: half-word) in j's rows
        if tma:  # its row's first byte, and the XOR of its row's 16-byte units
            em(f"rb{j} = {_plus('4 * sw', offsets[j])} + {kv.frow} * {rows[j]}")
            em(f"xb{j} = {_swizzle_xor(f'{kv.frow} * {rows[j]}', tma_swizzle(rows[j]))}")
            continue
        if dtype.is_float8:
            em(f"hw{j} = 2 * sw + {kv.frow} * {rows[j] // 2} + {kv.fcol} // 2")
            continue
        em(f"pw{j} = sw + {kv.frow} * {rows[j] // 4} + {dtype.itemsize} * {kv.fcol} // 4")
    for k, _ in enumerate(staged):  # the thread's first column in each staged input's row
        cw = _column_row(cfg, k)
        em(f"cw{k or ''} = {cw} + ({kv.ch} % {chunks}) * {chunk} + {kv.fcol}")
    for i in once:
        em(f"h{i} = {widen(prog.inputs[i].dtype, f'{kv.pv}{i}')}")
    for i in (i for i in hoisted if i not in once):
        for q in range(groups):
            for e in (0, 1):
                if i in staged:
                    k = staged.index(i)
                    em(f"h{i}_{q}_{e} = {kv.sf}[uint64(cw{k or ''} + {8 * q + e})]")
                    continue
                col = f"min({kv.en0} + {8 * q + e} + {kv.fcol}, N - 1)"
                load = f"in{i}[ib{i} + {col} * in{i}_sn]"
                em(f"h{i}_{q}_{e} = {widen(prog.inputs[i].dtype, load)}")
    for i in by_row:  # the thread's two rows (frow and frow + 8) of the step's row block
        for h in (0, 1):
            em(f"g{i}_{h} = {widen(prog.inputs[i].dtype, f'{kv.pr}{i}_{h}')}")
    for q, h, e in [(q, h, e) for q in range(groups) for h, e in _PAIRS]:
        row = f"{kv.em0} + {8 * h} + {kv.frow}"
        col = f"{kv.en0} + {8 * q + e} + {kv.fcol}"
        inputs = {}
        for i in used_inputs:
            if i in once:
                inputs[i] = f"h{i}"
            elif i in hoisted:
                inputs[i] = f"h{i}_{q}_{e}"
            elif i in by_row:
                inputs[i] = f"g{i}_{h}"
            else:
                at = f"min({row}, M - 1) * in{i}_sm + min({col}, N - 1) * in{i}_sn"
                inputs[i] = widen(prog.inputs[i].dtype, f"in{i}[ib{i} + {at}]")
        lines, values = inline_exprs(prog, roots, inputs, f"a{4 * q + 2 * h + e}")
        for line in lines:
            em(line)
        for j, dtype in dtypes.items():  # FP8: float32 until the pair's one conversion
            em(f"o{j}_{e} = {values[j] if dtype.is_float8 else narrow(dtype, values[j])}")
        if prog.amaxes:  # (values past M or N are computed from clamped inputs: not the output)
            em(f"if {row} < M and {col} < N:")
            with em.indent():
                for j, _ in prog.amaxes:
                    em(amax_update(j, values[j]))
        if e == 0:
            continue
        for j, dtype in dtypes.items():
            lrow = 8 * h
            if tma:
                _emit_swizzled_pair(em, j, dtype, _plus(f"rb{j}", lrow * rows[j]), q)
                continue
            if dtype.is_float8:  # column fcol in the low byte: it comes first
                off = offsets[j] + lrow * rows[j] + 8 * q
                em(
                    f"{kv.sh}[uint64(hw{j} + {off // 2})] = "
                    f"f32x2_to_{fp8_name(dtype)}x2(o{j}_1, o{j}_0)"
                )
            elif is16(dtype):
                off = offsets[j] + lrow * rows[j] + 16 * q
                em(
                    f"{kv.su}[uint64(pw{j} + {off // 4})] = "
                    f"uint32(o{j}_0) | (uint32(o{j}_1) << uint32(16))"
                )
            else:
                off = offsets[j] + lrow * rows[j] + 32 * q
                em(f"{kv.sf}[uint64(pw{j} + {off // 4})] = o{j}_0")
                em(f"{kv.sf}[uint64(pw{j} + {off // 4 + 1})] = o{j}_1")
    if tma:
        _emit_tma_stores(em, offsets, buffers)
    else:
        _emit_vector_stores(em, chunk, dtypes, rows, offsets)
    # a step function takes and returns the running maxima it folds its values into
    return em.lines, _free_names(em.lines) + [f"amx{j}" for j, _ in prog.amaxes]


def _emit_vector_stores(
    em: Emitter, chunk: int, dtypes: dict[int, DType], rows: dict[int, int], offsets: dict[int, int]
) -> None:
    """The end of a step without TMA stores: after the warpgroup barrier every thread loads
    16-byte vectors of whole packed rows (output *j*'s ``rows[j]`` bytes a row, from byte
    ``offsets[j]`` of the buffer) and stores them, skipping rows past M and vectors past N."""
    em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the chunk is written")
    for j, dtype in dtypes.items():
        per_row = chunk * dtype.itemsize // VECTOR_ALIGN  # vectors in a chunk row
        lanes = VECTOR_ALIGN // dtype.itemsize  # columns in a vector
        total = STAGED_ROWS * per_row  # the row block's vectors
        rows_per_part = WARPGROUP // per_row  # (per_row divides the warpgroup)
        # the thread's first vector: row t // per_row, column (t % per_row) * lanes; each
        # further part is rows_per_part rows down (one 64-bit address step)
        em(f"vr = {kv.t} // {per_row}")
        em(f"vc = {kv.en0} + ({kv.t} % {per_row}) * {lanes}")
        em(f"vw = uint64(sw + {offsets[j] // 4} + vr * {rows[j] // 4} + ({kv.t} % {per_row}) * 4)")
        em(f"at = {kv.bt} * out{j}_sb + ({kv.em0} + vr) * out{j}_sm + vc")
        for part in range(-(-total // WARPGROUP)):
            cond = f"{kv.em0} + vr + {part * rows_per_part} < M and vc < N"
            if (part + 1) * WARPGROUP > total:
                cond = f"{kv.t} + {part * WARPGROUP} < {total} and {cond}"
            em(f"if {cond}:")
            with em.indent():
                word = f"vw + uint64({part * rows_per_part * rows[j] // 4})" if part else "vw"
                em(f"p0, p1, p2, p3 = ld_shared_v4_f32(smem_addr({kv.su}, {word}))")
                dst = f"at + {part * rows_per_part} * out{j}_sm" if part else "at"
                em(f"st_global_v4_b32(out{j}, {dst}, p0, p1, p2, p3)")


def _plus(expr: str, const: int) -> str:
    """*expr* + *const*, the sum left out when *const* is 0."""
    return f"{expr} + {const}" if const else expr


def _swizzle_xor(row_byte: str, span: int) -> str:
    """The XOR a TMA box of *span*-byte swizzle applies to the byte offsets of the row starting
    at byte *row_byte* of a 1024-aligned box: bits 7 and up of the offset onto its 16-byte unit
    index (bits 4 and up, ``log2(span / 16)`` bits); "0" without a swizzle."""
    if not span:
        return "0"
    return f"((({row_byte}) >> 7) & {span // 16 - 1}) << 4"


def _emit_swizzled_pair(em: Emitter, j: int, dtype: DType, row: str, q: int) -> None:
    """Store the pair ``o{j}_0``, ``o{j}_1`` at the thread's columns of 8-column group *q* in
    the row starting at byte *row* of output *j*'s swizzled box: its 16-byte unit XOR
    ``xb{j}`` (the pair never straddles a unit: it starts at an even column of the group)."""
    size = dtype.itemsize
    at = f"{row} + (({_plus(f'{kv.fcol} * {size}', 8 * q * size)}) ^ xb{j})"
    if dtype.is_float8:  # column fcol in the low byte: it comes first
        em(f"{kv.sh}[uint64(({at}) >> 1)] = f32x2_to_{fp8_name(dtype)}x2(o{j}_1, o{j}_0)")
    elif is16(dtype):
        em(f"{kv.su}[uint64(({at}) >> 2)] = uint32(o{j}_0) | (uint32(o{j}_1) << uint32(16))")
    else:
        em(f"w{j} = uint64(({at}) >> 2)")
        em(f"{kv.sf}[w{j}] = o{j}_0")
        em(f"{kv.sf}[w{j} + uint64(1)] = o{j}_1")


def _emit_tma_stores(em: Emitter, offsets: dict[int, int], buffers: int) -> None:
    """The end of a ``tma_stores`` step: every writer fences its shared stores for the async
    proxy; after the warpgroup barrier one thread stores each output's box (rows past M and
    columns past N clipped by the map) and commits them as one bulk group. With two buffers
    that thread first waits until the previous step's stores have read theirs, before the
    barrier that lets the warpgroup write it again at the next step; with one, the step's first
    barrier does (:func:`_step_source`)."""
    em("fence_proxy_async()  # the chunk's shared stores, before the TMA stores read them")
    if buffers == 2:
        em(f"if {kv.t} == 0:")
        em("    bulk_wait_group_read(0)  # the other buffer's stores have read it")
    em(f"named_barrier_sync(1 + {kv.c}, {WARPGROUP})  # the chunk is written")
    em(f"if {kv.t} == 0 and {kv.em0} < M and {kv.en0} < N:")
    with em.indent():
        for j, off in offsets.items():
            src = f"uint32({_plus(f'{kv.base} + 4 * sw', off)})"
            em(
                f"tma_store_3d({_store_map(j)}, int32({kv.en0}), int32({kv.em0}), "
                f"int32({kv.bt}), {src})"
            )
        em("bulk_commit_group()")


def _free_names(lines: list[str]) -> list[str]:
    """The variables *lines* read and never assign, first use first: names called or whose
    attributes are taken (functions, modules) are the module's, not these."""
    tree = ast.parse("\n".join(lines))
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    owners = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    stored = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    loads = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    free = [n.id for n in loads if id(n) not in callees | owners and n.id not in stored]
    return list(dict.fromkeys(free))
