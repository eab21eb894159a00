"""The decode kernel's source: few activation rows against a weight streamed at the HBM limit.

``out[m, n] = epilogue(sum_k A[m, k] * B[n, k])`` for ``M <= 8 * m_tiles`` (A: the activations,
M x K; B: the weight, N x K; both K-contiguous). The roles of mma.sync m16n8k16 are swapped: its
M is 16 rows of the weight, its N 8 activation rows, so a decode step (M = 1) wastes 7/8 of a
small, cheap instruction instead of 15/16 of a large one, and the weight never passes through
shared memory. FP8 operands (sm_89+) take mma.sync m16n8k32 in its place: in 32-bit words its
fragments are m16n8k16's (a0..a3 and b0, b1 one word each; words t and t + 4 of the 8 words of a
k-step, rows g and g + 8), so everything below holds with K counted in bytes: a chunk is 128
bytes of a row (64 16-bit or 128 FP8 elements) and a lane's vectors start at byte 16 * c.

- **Grid:** one CTA per ``16 * row_tiles`` weight rows (``n0 = 16 * row_tiles * blockIdx.x``)
  and product of the batch (``bt = blockIdx.y``; an operand shared across the batch has batch
  stride 0); rows past N are clamped for the loads and never stored. Each warp takes all the
  CTA's row tiles: the activation words it loads for a chunk serve each of them.
- **Loads:** K is cut into chunks of 64 (16-bit; 128 FP8); warp ``w`` of the CTA takes chunks
  ``w, w + warps, ...`` so a CTA reads ``128 * warps`` contiguous bytes of each of its rows per
  step. Lane ``(g, c) = (lane // 4, lane % 4)`` loads, per chunk and row ``g`` and ``g + 8``, two
  16-byte vectors (``ld.global.nc.v4``) at bytes ``16 * c`` and ``64 + 16 * c`` (elements
  ``8 * c`` and ``32 + 8 * c`` of a 16-bit row), and the same two of activation row ``t * 8 + g``
  per m tile ``t``; row tile ``r``'s rows are ``16 * r + g`` and ``16 * r + g + 8``. The main
  loop loads ``unroll`` chunks, all inside K and unpredicated, before their mmas run (bytes in
  flight); the chunks left then go one at a time, a vector past K being zeros (K is a multiple
  of a vector's elements: it is in or out whole).
- **The K order:** mma ``j`` of a chunk takes each lane's words ``2j`` and ``2j + 1`` as its
  ``a0/a2`` (row g), ``a1/a3`` (row g + 8) and ``b0/b1``. Both operands come from the same
  physical K positions for the same lane and register, so every product pairs ``A[m, k]`` with
  ``B[n, k]``: the sum over K is the same sum in another order (float32 accumulation).
- **Reduction and epilogue:** each warp's float32 16·row_tiles x 8·m_tiles partial goes to
  shared memory; after one barrier each thread sums the warps' partials of one element and
  applies the ``EpilogueProgram`` (``mmaplug.codegen.emitter``) at (``row`` = m, ``col`` = n).
  An amax output takes each thread's running maximum over its elements, then one
  ``red.global.max`` per warp (``mmaplug.codegen.amax_epilogue``; the launch zeroes it first).
- **A horizontal fusion** of h products sharing A (weights ``b``, ``b1``, ...; each with its
  own row and batch strides): the CTA has ``warps`` warps per product; warp ``w`` streams the
  16 rows of weight ``w // warps`` and takes K chunks ``w % warps, ...`` as above, so each warp
  is the one-product kernel's warp with another weight. The sum of product j's warps is the
  epilogue's ``v{j}`` (``v`` for the first). With h = 1 the source is the one-product kernel's.
"""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.codegen.amax_epilogue import amax_flush, amax_imports, amax_init
from mmaplug.codegen.emitter import Emitter, emit_epilogue_body, fp8_imports, jit_options

from .config import COLS_PER_MMA, ROWS, DecodeKernelConfig


@attrs.frozen
class DecodeVars:
    """The names of ``decode_gemm``'s variables that cross the emitters below; each field's value
    is the variable's name in the generated source, its docstring what the variable holds."""

    warp: str = "warp"
    """The warp of the thread in its CTA: it takes K chunks ``warp, warp + warps, ...`` (of a
    horizontal fusion: ``warp % warps, ...``)."""
    product: str = "product"
    """A horizontal fusion's product the warp multiplies (``warp // warps``)."""
    weight: str = "wb"
    """A horizontal fusion's weight of the warp's product; ``wb_sn``, ``wb_sb`` its strides."""
    g: str = "g"
    """The lane's group (lane // 4): weight rows g and g + 8; activation row g of a tile."""
    c: str = "c"
    """The lane's place in its group (lane % 4): its 16-byte vectors start at byte ``16 * c``."""
    n0: str = "n0"
    """The first of the CTA's 16 weight rows."""
    bt: str = "bt"
    """The CTA's product of the batch (``blockIdx.y``): the operands' and the epilogue's."""
    base_w: str = "base_w"
    """``base_w0``, ``base_w1``, ...: element index of weight row ``n0 + g + 8 * i`` (clamped to
    N - 1) of product ``bt`` at the lane's K offset (two a row tile: rows g and g + 8)."""
    base_x: str = "base_x"
    """Per m tile, the element index of the lane's activation row (clamped to M - 1)."""
    acc: str = "acc"
    """The float32 accumulators, 4 per m tile and row tile (the mma's C fragment): row tile
    ``r``'s of m tile ``t`` at ``[r * m_tiles + t]``."""
    w: str = "w"
    """``w0``, ``w1``, ...: loaded words of weight row ``g + 8 * i``: 8 per chunk in flight."""
    xs: str = "xs"
    """Loaded words of the activation rows: 8 per chunk in flight and m tile."""
    first: str = "first"
    """The warp's next K chunk: the first of the chunks the loads take."""
    red: str = "red"
    """Shared float32 partials, ``[warp, weight row, activation row]``."""


DV: Final = DecodeVars()


INTRINSICS = (
    "f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16, ld_global_nc_v4_b32, "
    "mma_m16n8k16_f16, mma_m16n8k16_bf16"
)
#: The FP8 mmas, imported only by kernels of FP8 operands (16-bit kernels are unchanged).
FP8_INTRINSICS = "mma_m16n8k32_e4m3, mma_m16n8k32_e5m2"


def _half_rows(config: DecodeKernelConfig) -> range:
    """The weight rows ``g + 8 * i`` a lane loads, by ``i``: two a row tile."""
    return range(2 * config.row_tiles)


def _acc(r: int, config: DecodeKernelConfig) -> str:
    """The accumulator row of m tile ``t`` in row tile *r*."""
    return f"{r * config.m_tiles} + t" if r else "t"


def _four(array: str, index: str) -> str:
    """The four words ``array[index, 4 * h + q]`` a 16-byte load fills, as assignment targets."""
    return ", ".join(f"{array}[{index}, 4 * h{f' + {q}' if q else ''}]" for q in range(4))


def generate_source(config: DecodeKernelConfig, *, sim: bool) -> str:
    """Python source of the ``decode_gemm`` kernel for *config*."""
    em = Emitter()
    em(f'"""Generated by mmaplug.plugins.decode.kernel_codegen for {config.name}."""')
    em("import math")
    em("from mmaplug.cuda.mathfuncs import gelu")
    em("from numba import cuda, float32, int32, int64, uint16, uint32")
    em(f"from mmaplug.cuda.intrinsics import ({INTRINSICS})")
    if config.operand_dtype.is_float8:
        em(f"from mmaplug.cuda.intrinsics import {FP8_INTRINSICS}")
    if fp8 := fp8_imports(config.epilogue):  # the conversions of FP8 inputs, outputs, casts
        em(fp8)
    if amax := amax_imports(config.epilogue):  # the reductions of amax outputs
        em(amax)
    em()
    emit_kernel(em, config, sim)
    return em.text()


def emit_kernel(em: Emitter, config: DecodeKernelConfig, sim: bool) -> None:
    """``decode_gemm``: loads, mmas, the cross-warp sum and the epilogue."""
    mt, warps, unroll, h = config.m_tiles, config.warps, config.unroll, config.horizontal
    cols = COLS_PER_MMA * mt
    mma, chunk, vec = config.mma, config.chunk_k, config.vector
    em(f"@cuda.jit({jit_options(config.threads, sim)})")
    em(f"def decode_gemm({', '.join(config.parameters())}):")
    with em.indent():
        em(f"{DV.red} = cuda.shared.array(({h * warps}, {config.rows}, {cols}), float32)")
        em("tid = cuda.threadIdx.x")
        em(f"{DV.warp} = tid // 32")
        em(f"{DV.g} = (tid % 32) // 4")
        em(f"{DV.c} = tid % 4")
        em(f"{DV.n0} = cuda.blockIdx.x * {config.rows}")
        em(f"{DV.bt} = cuda.blockIdx.y")
        weight = _emit_weight(em, config)
        for i in _half_rows(config):
            row = f"{DV.n0} + {DV.g}" + (f" + {8 * i}" if i else "")
            em(
                f"{DV.base_w}{i} = {DV.bt} * {weight}_sb + min({row}, N - 1) * {weight}_sn + "
                f"{vec} * {DV.c}"
            )
        em(f"{DV.base_x} = cuda.local.array({mt}, int64)")
        em(f"for t in range({mt}):")
        with em.indent():
            row = f"min(t * {COLS_PER_MMA} + {DV.g}, M - 1)"
            em(f"{DV.base_x}[t] = {DV.bt} * a_sb + {row} * a_sm + {vec} * {DV.c}")
        em(f"{DV.acc} = cuda.local.array(({mt * config.row_tiles}, 4), float32)")
        em(f"for t in range({mt * config.row_tiles}):")
        with em.indent():
            em("for q in range(4):")
            with em.indent():
                em(f"{DV.acc}[t, q] = float32(0.0)")
        for i in _half_rows(config):
            em(f"{DV.w}{i} = cuda.local.array(({unroll}, 8), uint32)")
        em(f"{DV.xs} = cuda.local.array(({unroll}, {mt}, 8), uint32)")
        em(f"full = K // {chunk}")
        em(f"{DV.first} = {DV.warp}" + (f" % {warps}" if h > 1 else ""))
        em(f"while {DV.first} + {(unroll - 1) * warps} < full:")
        with em.indent():
            _emit_loads(em, config, weight, unroll, guarded=False)
            _emit_mmas(em, config, mma, unroll)
            em(f"{DV.first} += {unroll * warps}")
        em(f"while {DV.first} < (K + {chunk - 1}) // {chunk}:")
        with em.indent():
            _emit_loads(em, config, weight, 1, guarded=True)
            _emit_mmas(em, config, mma, 1)
            em(f"{DV.first} += {warps}")
        _emit_reduce_and_epilogue(em, config)
    em()


def _emit_weight(em: Emitter, config: DecodeKernelConfig) -> str:
    """The warp's weight: ``b``, or of a horizontal fusion the one of the warp's product
    (``DV.weight``, with its strides), picked once; returns its name."""
    if config.horizontal == 1:
        return "b"
    w = DV.weight
    em(f"{DV.product} = {DV.warp} // {config.warps}")
    em(f"{w} = b")
    em(f"{w}_sn = b_sn")
    em(f"{w}_sb = b_sb")
    for j in range(1, config.horizontal):
        em(f"if {DV.product} == {j}:")
        with em.indent():
            em(f"{w} = b{j}")
            em(f"{w}_sn = b{j}_sn")
            em(f"{w}_sb = b{j}_sb")
    return w


def _emit_loads(
    em: Emitter, config: DecodeKernelConfig, weight: str, chunks: int, *, guarded: bool
) -> None:
    """*chunks* chunks of both rows of *weight* and every m tile's activation row into
    registers; *guarded*: a vector past K is zeros (the last chunks; the main loop's are all
    inside K)."""
    em(f"for u in range({chunks}):")
    with em.indent():
        em(f"k0 = ({DV.first} + u * {config.warps}) * {config.chunk_k}")
        em("for h in range(2):")
        with em.indent():
            em(f"kk = k0 + {config.chunk_k // 2} * h")
            if guarded:
                em(f"if kk + {config.vector} * {DV.c} < K:")
                em.depth += 1
            for i in _half_rows(config):
                em(f"ld = ld_global_nc_v4_b32({weight}, {DV.base_w}{i} + kk)")
                em(f"{_four(f'{DV.w}{i}', 'u')} = ld")
            em(f"for t in range({config.m_tiles}):")
            with em.indent():
                em(f"ld = ld_global_nc_v4_b32(a, {DV.base_x}[t] + kk)")
                em(f"{_four(DV.xs, 'u, t')} = ld")
            if guarded:
                em.depth -= 1
                em("else:")
                with em.indent():
                    em("for q in range(4):")
                    with em.indent():
                        for i in _half_rows(config):
                            em(f"{DV.w}{i}[u, 4 * h + q] = uint32(0)")
                        em(f"for t in range({config.m_tiles}):")
                        with em.indent():
                            em(f"{DV.xs}[u, t, 4 * h + q] = uint32(0)")


def _emit_mmas(em: Emitter, config: DecodeKernelConfig, mma: str, chunks: int) -> None:
    """Four mmas per loaded chunk, m tile and row tile, in the K order the module docstring
    gives."""
    em(f"for u in range({chunks}):")
    with em.indent():
        em("for j in range(4):")
        with em.indent():
            em(f"for t in range({config.m_tiles}):")
            with em.indent():
                for r in range(config.row_tiles):
                    lo, hi, t = f"{DV.w}{2 * r}", f"{DV.w}{2 * r + 1}", _acc(r, config)
                    acc = ", ".join(f"{DV.acc}[{t}, {q}]" for q in range(4))
                    em(
                        f"d = {mma}({lo}[u, 2 * j], {hi}[u, 2 * j], {lo}[u, 2 * j + 1], "
                        f"{hi}[u, 2 * j + 1], {DV.xs}[u, t, 2 * j], {DV.xs}[u, t, 2 * j + 1], "
                        f"{acc})"
                    )
                    em(f"{acc} = d")


def _emit_reduce_and_epilogue(em: Emitter, config: DecodeKernelConfig) -> None:
    """Each warp's partial to shared memory, then one element per thread: the sum of each
    product's warps (``v``, ``v1``, ...), the epilogue."""
    mt, warps, rows = config.m_tiles, config.warps, config.rows
    em(f"for t in range({mt}):")
    with em.indent():
        em(f"col0 = t * {COLS_PER_MMA} + 2 * {DV.c}")
        for r in range(config.row_tiles):
            t = _acc(r, config)
            for q, (half, col) in enumerate(((0, ""), (0, " + 1"), (8, ""), (8, " + 1"))):
                row = ROWS * r + half
                at = f"{DV.warp}, {DV.g}" + (f" + {row}" if row else "") + f", col0{col}"
                em(f"{DV.red}[{at}] = {DV.acc}[{t}, {q}]")
    em("cuda.syncthreads()")
    for line in amax_init(config.epilogue):
        em(line)
    em("e = tid")
    em(f"while e < {rows * COLS_PER_MMA * mt}:")
    with em.indent():
        em(f"row = e // {rows}")
        em(f"col = {DV.n0} + e % {rows}")
        em("if row < M and col < N:")
        with em.indent():
            for j in range(config.horizontal):
                v = f"v{j}" if j else "v"
                em(f"{v} = {DV.red}[{j * warps}, e % {rows}, row]")
                em(f"for w in range({j * warps + 1}, {(j + 1) * warps}):")
                with em.indent():
                    em(f"{v} += {DV.red}[w, e % {rows}, row]")
            emit_epilogue_body(em, config.epilogue)
        em(f"e += {config.threads}")
    for line in amax_flush(config.epilogue, "tid % 32"):  # every lane: out of the loop
        em(line)
