"""Ampere tensor-core GEMM: a code generator for Numba-CUDA ``mma.sync`` kernels.

Pipeline (one CTA computes a ``BM x BN`` tile of ``D[bt] = A[bt] @ B[bt]^T`` over its K range):

1. **Global -> shared**, ``STAGES``-deep ring: every thread issues ``cp.async`` copies of
   ``vec`` elements (16 bytes: ``.cg``; 8 / 4 bytes: ``.ca``; ``vec == 1``: plain load +
   ``st.shared``) for the A and B tiles ``STAGES - 1`` k-tiles ahead of the math. Rows or
   columns past M, N or K are zero-filled (``src_bytes`` below the copy size, the source
   pointed at element 0 when nothing is read). One ``cp.async.commit_group`` per k-tile, also
   when nothing was issued, so ``cp.async.wait_group(STAGES - 2)`` always means "the tile the
   math needs next has landed".
   K-tile order: the FIRST tile computed is the LAST k-tile of the CTA's K range (the only one
   that can cross K); it alone takes the predicated copies above, in the prologue. Every other
   k-tile (``k_begin``, ``k_begin + BK``, ...) lies inside K and takes unpredicated copies from
   loop-invariant per-slot bases: at an M/N edge a K-inner operand's rows are clamped to the last
   row (they only feed output rows that are never stored) and an M/N-inner operand's vectors
   keep their (loop-invariant) byte counts. So the main loop has no per-tile predicate math:
   ~1.3 non-mma SASS instructions per ``mma`` (see docs/ampere-notes.md).
2. **Shared layout**: each operand tile is stored with its contiguous global dimension as the
   smem row (A ``[BM][BK]`` when K is inner, ``[BK][BM]`` when M is inner; B likewise with N).
   Rows are cut into 16-byte units and unit ``c`` of row ``r`` is stored at ``c ^ f(r)``
   (``f(r) = r & 7`` for rows of >= 8 units, ``(r >> 1) & 3`` for 4, ``(r >> 2) & 1`` for 2),
   so the eight row addresses of every ``ldmatrix`` 8x8 matrix fall in eight different bank
   groups: conflict-free reads.
3. **Shared -> registers**: ``ldmatrix.x4`` (``.trans`` for an M- or N-inner operand) loads an
   A fragment (16x16) per m16 tile and a B fragment pair (16x16 = two n8 tiles) per n16.
   Fragments are double-buffered in registers: the k16 step ``s + 1`` is loaded before the
   ``mma`` of step ``s`` is issued; at the last k16 step of a k-tile the thread waits for the
   next stage, syncs the CTA once and reads the next tile's first fragments.
4. **Math**: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}`` on float32 accumulators that
   are named scalars in the generated text (fully unrolled), so they never leave registers.

Warp roles: all warps do all work (no specialization). Warps form a ``WARPS_M x WARPS_N`` grid
(warp ``w`` at ``(w % WARPS_M, w // WARPS_M)``), each owning a ``WM x WN`` sub-tile; every
thread takes part in the global->shared copies.

CTA scheduling: ``blockIdx.x`` walks the ``tiles_m x tiles_n`` tiles; ``cta_order`` says which
dimension is fastest (``row_major``: N tiles fastest; ``column_major``: M tiles fastest), and
``grid_swizzle = G`` groups ``G`` rows (columns) of tiles so that consecutive CTAs share A and B
panels in L2. ``blockIdx.z = batch_index * splitk + split_index``.

Epilogue: the accumulators are staged through shared memory (float32, rows padded to BN + 8),
then the ``EpilogueProgram`` is applied in ONE copy in the source (a runtime loop; the 109 s
fully-inlined per-fragment version is history, see docs/ampere-notes.md): one float32 SSA line
per instruction (``input`` loads and widens an element at ``bt * sb + row * sm + col * sn``;
``cast`` rounds through the narrow type). With ``splitk == 1`` and a tile where every thread
can own one group of ``EPI_COLS`` (4) consecutive columns (``_emit_vector_epilogue``): per row
of the thread one ``ld.shared.v4``, the program inside a ``for j`` loop NVVM unrolls, and one
8-byte (16-bit output) or 16-byte (float32) store, scalar stores only when the group crosses N
or the output is not aligned (runtime check, once per thread); N-only inputs (a bias) are
loaded once per thread. Otherwise a loop over single elements. With ``splitk > 1`` the main
kernel stores float32 partial sums to a ``[splitk, batch, M, N]`` workspace and a second kernel
sums the partials in a fixed order and applies the epilogue exactly once.
"""

from __future__ import annotations

import linecache
import math
from typing import Any, Final

import attrs

from mmaplug.dtypes import DType
from mmaplug.epilogue import BINARY_OPS, UNARY_OPS, EpilogueOutput, EpilogueProgram, Instr

INTRINSICS_MODULE: Final = "mmaplug.cuda.intrinsics"
CTA_ORDERS: Final = ("row_major", "column_major")
VECTOR_WIDTHS: Final = (8, 4, 2, 1)
REDUCE_THREADS: Final = 256


def _tile3(value: Any) -> tuple[int, int, int]:
    out = tuple(int(v) for v in value)
    if len(out) != 3:
        raise ValueError(f"a tile is (m, n, k), got {value!r}")
    return out  # type: ignore[return-value]


def _default_epilogue() -> EpilogueProgram:
    return EpilogueProgram(
        instrs=(Instr(op="acc"),),
        outputs=(EpilogueOutput(name="out", src=0, dtype=DType.float16),),
    )


def _check_vec(instance: Any, attribute: Any, value: int) -> None:
    if value not in VECTOR_WIDTHS:
        raise ValueError(f"{attribute.name} must be one of {VECTOR_WIDTHS}, got {value}")


@attrs.frozen(kw_only=True)
class AmpereKernelConfig:
    """Everything the generated kernel is specialized on (hashable: the build-cache key)."""

    operand_dtype: DType = DType.float16
    a_k_inner: bool = True
    b_k_inner: bool = True
    cta_tile: tuple[int, int, int] = attrs.field(default=(128, 128, 32), converter=_tile3)
    warp_tile: tuple[int, int, int] = attrs.field(default=(64, 64, 32), converter=_tile3)
    stages: int = 3
    splitk: int = 1
    cta_order: str = "row_major"
    grid_swizzle: int = 1
    vec_a: int = attrs.field(default=8, validator=_check_vec)
    vec_b: int = attrs.field(default=8, validator=_check_vec)
    epilogue: EpilogueProgram = attrs.field(factory=_default_epilogue)

    def __attrs_post_init__(self) -> None:
        bm, bn, bk = self.cta_tile
        wm, wn, wk = self.warp_tile
        problems = []
        if self.operand_dtype not in (DType.float16, DType.bfloat16):
            problems.append(f"operand_dtype must be float16 or bfloat16, got {self.operand_dtype}")
        if wm % 16 or wn % 16 or wm <= 0 or wn <= 0:
            problems.append(
                f"warp_tile m and n must be positive multiples of 16, got {self.warp_tile}"
            )
        elif bm % wm or bn % wn:
            problems.append(
                f"cta_tile {self.cta_tile} is not a multiple of warp_tile {self.warp_tile}"
            )
        if bk % 16 or bk <= 0 or wk != bk:
            problems.append(
                f"cta_tile k must be a multiple of 16 equal to warp_tile k, got {bk}, {wk}"
            )
        if self.stages < 2:
            problems.append(f"stages must be >= 2, got {self.stages}")
        if self.splitk < 1:
            problems.append(f"splitk must be >= 1, got {self.splitk}")
        if self.cta_order not in CTA_ORDERS:
            problems.append(f"cta_order must be one of {CTA_ORDERS}, got {self.cta_order!r}")
        if self.grid_swizzle < 1:
            problems.append(f"grid_swizzle must be >= 1, got {self.grid_swizzle}")
        if not problems and self.threads > 1024:
            problems.append(f"{self.threads} threads per CTA is more than 1024")
        if problems:
            raise ValueError("invalid AmpereKernelConfig: " + "; ".join(problems))

    @property
    def warps(self) -> tuple[int, int]:
        """(WARPS_M, WARPS_N)."""
        return self.cta_tile[0] // self.warp_tile[0], self.cta_tile[1] // self.warp_tile[1]

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        wm, wn = self.warps
        return 32 * wm * wn

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA."""
        bm, bn, bk = self.cta_tile
        return max(self.stages * (bm + bn) * bk * 2, bm * (bn + 8) * 4)

    @property
    def name(self) -> str:
        """A short readable id: dtype, layout, tiles, stages, split-K."""
        bm, bn, bk = self.cta_tile
        wm, wn, _ = self.warp_tile
        lay = ("k" if self.a_k_inner else "m") + ("k" if self.b_k_inner else "n")
        return (
            f"{self.operand_dtype.label}_{lay}_{bm}x{bn}x{bk}_w{wm}x{wn}_s{self.stages}"
            f"_sk{self.splitk}_v{self.vec_a}{self.vec_b}"
        )


# --- text helpers ---------------------------------------------------------------------------------


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self) -> _Indent:
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, em: _Emitter) -> None:
        self.em = em

    def __enter__(self) -> None:
        self.em.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.em.depth -= 1


def _swizzle_amount(row: str, units_per_row: int) -> str:
    """XOR mask for the 16-byte units of smem row *row* (see the module docstring)."""
    if units_per_row >= 8:
        return f"(({row}) & 7)"
    if units_per_row == 4:
        return f"((({row}) >> 1) & 3)"
    if units_per_row == 2:
        return f"((({row}) >> 2) & 1)"
    return "0"


def _f32_literal(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "float32(math.nan)"
    if math.isinf(value):
        return "float32(math.inf)" if value > 0 else "float32(-math.inf)"
    return f"float32({value!r})"


def _is16(dtype: DType) -> bool:
    return dtype in (DType.float16, DType.bfloat16)


def _widen(dtype: DType, expr: str) -> str:
    if dtype is DType.float16:
        return f"f16_to_f32({expr})"
    if dtype is DType.bfloat16:
        return f"bf16_to_f32({expr})"
    return f"float32({expr})"


def _narrow(dtype: DType, expr: str) -> str:
    if dtype is DType.float16:
        return f"f32_to_f16({expr})"
    if dtype is DType.bfloat16:
        return f"f32_to_bf16({expr})"
    return expr


# --- epilogue -----------------------------------------------------------------------------------


def _epi_params(
    prog: EpilogueProgram,
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    ins = [f"in{i}" for i in range(len(prog.inputs))]
    outs = [f"out{j}" for j in range(len(prog.outputs))]
    scal = [f"s{i}" for i in range(len(prog.scalars))]
    in_strides = [f"in{i}_{ax}" for i in range(len(prog.inputs)) for ax in ("sb", "sm", "sn")]
    out_strides = [f"out{j}_{ax}" for j in range(len(prog.outputs)) for ax in ("sb", "sm")]
    return ins, outs, scal, in_strides, out_strides


def _emit_epilogue_body(em: _Emitter, prog: EpilogueProgram) -> None:
    """Epilogue of one element: float32 ``v`` at (``bt``, ``row``, ``col``), already in bounds."""
    used = _live_instrs(prog)
    for idx, ins_ in enumerate(prog.instrs):
        if idx in used:
            em(f"x{idx} = {_instr_expr(prog, ins_)}")
    for j, out in enumerate(prog.outputs):
        em(f"out{j}[bt * out{j}_sb + row * out{j}_sm + col] = {_narrow(out.dtype, f'x{out.src}')}")


def _live_instrs(prog: EpilogueProgram) -> set[int]:
    live: set[int] = set()
    stack = [o.src for o in prog.outputs]
    while stack:
        i = stack.pop()
        if i in live:
            continue
        if not 0 <= i < len(prog.instrs):
            raise ValueError(f"epilogue refers to instruction {i}, which does not exist")
        live.add(i)
        stack.extend(prog.instrs[i].srcs)
    return live


def _instr_expr(prog: EpilogueProgram, ins: Instr, inputs: dict[int, str] | None = None) -> str:
    """One SSA line; *inputs* maps an input index to the (float32) expression that replaces its load."""
    op = ins.op
    s = [f"x{i}" for i in ins.srcs]
    if op == "acc":
        return "v"
    if op == "input":
        i = int(ins.arg)
        if inputs and i in inputs:
            return inputs[i]
        inp = prog.inputs[i]
        return _widen(inp.dtype, f"in{i}[bt * in{i}_sb + row * in{i}_sm + col * in{i}_sn]")
    if op == "scalar":
        return f"float32(s{int(ins.arg)})"
    if op == "const":
        return _f32_literal(ins.arg)
    if op == "cast":
        dtype = ins.arg if isinstance(ins.arg, DType) else DType[str(ins.arg)]
        if _is16(dtype):
            return _widen(dtype, _narrow(dtype, s[0]))
        return s[0]
    if op in UNARY_OPS:
        (x,) = s
        return {
            "neg": f"-{x}",
            "relu": f"max({x}, float32(0.0))",
            "gelu": f"float32(0.5) * {x} * (float32(1.0) + math.erf({x} * float32(0.7071067811865476)))",
            "silu": f"{x} / (float32(1.0) + math.exp(-{x}))",
            "sigmoid": f"float32(1.0) / (float32(1.0) + math.exp(-{x}))",
            "sin": f"math.sin({x})",
        }[op]
    if op in BINARY_OPS:
        x, y = s
        return f"{x} {dict(add='+', sub='-', mul='*')[op]} {y}"
    raise ValueError(f"unknown epilogue op {op!r}")


# --- main kernel --------------------------------------------------------------------------------


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


def _emit_load_setup(em: _Emitter, op: _Operand, threads: int) -> None:
    """Per-thread copy coordinates (loop invariant).

    When the CTA covers whole smem rows per copy slot (``threads % vecs_per_row == 0``), slot
    ``i`` is slot 0 moved down by ``i * threads / vecs_per_row`` rows: only slot 0's coordinates
    are kept in registers and the others are constant offsets from them.
    """
    n = op.name
    step = threads // op.vecs_per_row
    regular = threads % op.vecs_per_row == 0 and (step % 8 == 0 or op.units == 1)
    for i in range(1 if regular else op.iters):
        v = f"(tid + {i * threads})"
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
    # holds the K remainder, see _emit_main_kernel): K is always in range there, and the M/N
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
        return (f"{n}_gf0" if i == 0 else f"({n}_gf0 + {i} * {n}_gstep)"), f"{n}_nbf0"
    return f"{n}_gf{i}", f"{n}_nbf{i}"


def _slot(op: _Operand, i: int) -> tuple[str, str, str, str]:
    """(row, global index, smem offset, M/N-bytes) expressions of copy slot *i*."""
    n = op.name
    if not op.regular:
        return f"{n}_r{i}", f"{n}_g{i}", f"{n}_so{i}", f"{n}_nb{i}"
    if i == 0:
        return f"{n}_r0", f"{n}_g0", f"{n}_so0", f"{n}_nb0"
    # rows move by a multiple of 8, so the swizzle of slot 0 still applies
    return (
        f"({n}_r0 + {i * op.step})",
        f"({n}_g0 + {i} * {n}_gstep)",
        f"({n}_so0 + {i * op.step * op.rowlen})",
        f"{n}_nb0",
    )


def _emit_load_tile(em: _Emitter, op: _Operand, stage_base: str, k0: str, threads: int) -> None:
    for i in range(op.iters):
        if op.nvec % threads and (i + 1) * threads > op.nvec:
            # this copy slot is idle for some threads: they must not even zero-fill
            em(f"if tid + {i * threads} < {op.nvec}:")
            with em.indent():
                _emit_copy(em, op, i, stage_base, k0)
        else:
            _emit_copy(em, op, i, stage_base, k0)


def _emit_load_tile_fast(
    em: _Emitter, op: _Operand, stage_base: str, koff: str, threads: int
) -> None:
    """Copies of a k-tile that lies inside K: no per-tile predicates (see _emit_load_setup)."""
    n = op.name
    for i in range(op.iters):
        _row, _g, so, _nb = _slot(op, i)
        g, nb = _fast_slot(op, i)
        dst = f"{stage_base} + {so}"
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


def _emit_copy(em: _Emitter, op: _Operand, i: int, stage_base: str, k0: str) -> None:
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
    dst = f"{stage_base} + {so}"
    if op.vec == 1:
        em(f"smem[{dst}] = {n}[gi] * min(nb, 1)")
    else:
        em(f"cp_async_{op.vec * 2}(smem_addr(smem, {dst}), {n}, gi, nb)")


def _emit_frag_setup(em: _Emitter, cfg: AmpereKernelConfig, a: _Operand, b: _Operand) -> None:
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    ks_n = bk // 16
    em("lr = lane & 7")
    em("lj = lane >> 3")
    # A
    if a.k_inner:  # smem [BM][BK]; x4: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
        em("fa_row = wm * %d + lr + (lj & 1) * 8" % wmt)
        em(f"fa_x = {_swizzle_amount('lr + (lj & 1) * 8', a.units)}")
        for mi in range(wmt // 16):
            for ks in range(ks_n):
                em(
                    f"fa_{mi}_{ks} = (fa_row + {16 * mi}) * {bk} + (({2 * ks} + (lj >> 1)) ^ fa_x) * 8"
                )
    else:  # smem [BK][BM]; x4.trans: matrices (k0-7,m0-7) (k0-7,m8-15) (k8-15,m0-7) (k8-15,m8-15)
        em("fa_k = lr + (lj >> 1) * 8")
        em(f"fa_x = {_swizzle_amount('fa_k', a.units)}")
        em(f"fa_u = wm * {wmt // 8} + (lj & 1)")
        for mi in range(wmt // 16):
            for ks in range(ks_n):
                em(f"fa_{mi}_{ks} = ({16 * ks} + fa_k) * {bm} + ((fa_u + {2 * mi}) ^ fa_x) * 8")
    # B: x4 per n16 = two n8 tiles: regs (b0 of j, b1 of j, b0 of j+1, b1 of j+1)
    if b.k_inner:  # smem [BN][BK]; matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15)
        em("fb_row = wn * %d + lr + (lj >> 1) * 8" % wnt)
        em(f"fb_x = {_swizzle_amount('lr + (lj >> 1) * 8', b.units)}")
        for p in range(wnt // 16):
            for ks in range(ks_n):
                em(f"fb_{p}_{ks} = (fb_row + {16 * p}) * {bk} + (({2 * ks} + (lj & 1)) ^ fb_x) * 8")
    else:  # smem [BK][BN]; x4.trans: matrices (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
        em("fb_k = lr + (lj & 1) * 8")
        em(f"fb_x = {_swizzle_amount('fb_k', b.units)}")
        em(f"fb_u = wn * {wnt // 8} + (lj >> 1)")
        for p in range(wnt // 16):
            for ks in range(ks_n):
                em(f"fb_{p}_{ks} = ({16 * ks} + fb_k) * {bn} + ((fb_u + {2 * p}) ^ fb_x) * 8")


def _emit_frag_load(
    em: _Emitter, cfg: AmpereKernelConfig, a: _Operand, b: _Operand, ks: int, buf: int
) -> None:
    wmt, wnt, _ = cfg.warp_tile
    lda = "ldmatrix_x4" if a.k_inner else "ldmatrix_x4_trans"
    ldb = "ldmatrix_x4" if b.k_inner else "ldmatrix_x4_trans"
    for mi in range(wmt // 16):
        regs = ", ".join(f"ra{buf}_{mi}_{q}" for q in range(4))
        em(f"{regs} = {lda}(smem_addr(smem, sa + fa_{mi}_{ks}))")
    for p in range(wnt // 16):
        j0, j1 = 2 * p, 2 * p + 1
        regs = f"rb{buf}_{j0}_0, rb{buf}_{j0}_1, rb{buf}_{j1}_0, rb{buf}_{j1}_1"
        em(f"{regs} = {ldb}(smem_addr(smem, sb + fb_{p}_{ks}))")


def _emit_mma(em: _Emitter, cfg: AmpereKernelConfig, buf: int) -> None:
    wmt, wnt, _ = cfg.warp_tile
    fn = "mma_m16n8k16_f16" if cfg.operand_dtype is DType.float16 else "mma_m16n8k16_bf16"
    for mi in range(wmt // 16):
        nis = range(wnt // 8)
        for ni in nis if mi % 2 == 0 else reversed(nis):  # serpentine: reuse B registers
            c = ", ".join(f"c_{mi}_{ni}_{q}" for q in range(4))
            a = ", ".join(f"ra{buf}_{mi}_{q}" for q in range(4))
            em(f"{c} = {fn}({a}, rb{buf}_{ni}_0, rb{buf}_{ni}_1, {c})")


# int64 parameters of the main kernel, in order (the launchers pass them in this order too)
_SHAPE_PARAMS: Final = ("M", "N", "K", "batch", "a_sb", "a_s1", "b_sb", "b_s1")
_GRID_PARAMS: Final = ("k_split", "tiles_m", "tiles_n")


def _kernel_params(cfg: AmpereKernelConfig) -> list[str]:
    if cfg.splitk > 1:
        return ["a", "b", "ws", *_SHAPE_PARAMS, *_GRID_PARAMS]
    ins, outs, scal, in_strides, out_strides = _epi_params(cfg.epilogue)
    return [
        "a", "b", *ins, *outs, *scal, *_SHAPE_PARAMS, *in_strides, *out_strides, *_GRID_PARAMS
    ]  # fmt: skip


def _reduce_params(cfg: AmpereKernelConfig) -> list[str]:
    ins, outs, scal, in_strides, out_strides = _epi_params(cfg.epilogue)
    return ["ws", *ins, *outs, *scal, "M", "N", "batch", *in_strides, *out_strides]


def _jit_options(threads: int, sim: bool, cache: bool) -> str:
    """``cuda.jit`` options: the simulator takes none; ``cache`` only for on-disk modules."""
    if sim:
        return ""
    return f"launch_bounds=({threads}, 1)" + (", cache=True" if cache else "")


def _emit_main_kernel(em: _Emitter, cfg: AmpereKernelConfig, sim: bool, cache: bool) -> None:
    bm, bn, bk = cfg.cta_tile
    wmt, wnt, _ = cfg.warp_tile
    warps_m, _warps_n = cfg.warps
    threads = cfg.threads
    stages = cfg.stages
    ks_n = bk // 16
    a, b = _Operand(cfg, "a"), _Operand(cfg, "b")
    b_off = stages * a.elems

    em(f"@cuda.jit({_jit_options(threads, sim, cache)})")
    em(f"def ampere_gemm({', '.join(_kernel_params(cfg))}):")
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
        for mi in range(wmt // 16):
            for ni in range(wnt // 8):
                em(
                    ", ".join(f"c_{mi}_{ni}_{q}" for q in range(4))
                    + " = "
                    + ", ".join(["float32(0.0)"] * 4)
                )

        def load_stage(stage: str, k0: str, fast: bool) -> None:
            for op, base in ((a, f"{stage} * {a.elems}"), (b, f"{b_off} + {stage} * {b.elems}")):
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
                    load_stage("0", f"k_begin + (num_kt - 1) * {bk}", fast=False)
                else:
                    load_stage(str(s), f"k_begin + {(s - 1) * bk}", fast=True)
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
                _emit_frag_load(em, cfg, a, b, (ks + 1) % ks_n, nbuf)
                _emit_mma(em, cfg, buf)
            if ks_n % 2:
                # odd number of k16 steps: the fragment buffers swap roles; copy back.
                for mi in range(wmt // 16):
                    em(
                        ", ".join(f"ra0_{mi}_{q}" for q in range(4))
                        + " = "
                        + ", ".join(f"ra1_{mi}_{q}" for q in range(4))
                    )
                for ni in range(wnt // 8):
                    em(f"rb0_{ni}_0, rb0_{ni}_1 = rb1_{ni}_0, rb1_{ni}_1")
        em("cp_async_wait_all()")
        em("cuda.syncthreads()")
        em("# epilogue: stage the accumulators through smem (float32, padded rows), then")
        em("# every thread walks the tile row-wise: coalesced loads and stores")
        em("cs = cuda.shared.array(0, dtype=float32)")
        em(f"er = wm * {wmt} + (lane >> 2)")
        em(f"ec = wn * {wnt} + (lane & 3) * 2")
        cst = _c_stride(cfg)
        # unsigned index: Numba emits no negative-index wraparound (an ISETP + SEL per store)
        em(f"eb = uint32(er * {cst} + ec)")
        for mi in range(wmt // 16):
            for ni in range(wnt // 8):
                for q in range(4):
                    off = (16 * mi + 8 * (q // 2)) * cst + 8 * ni + q % 2
                    em(f"cs[eb + uint32({off})] = c_{mi}_{ni}_{q}")
        em("cuda.syncthreads()")
        if cfg.splitk == 1 and _vector_epilogue(cfg):
            _emit_vector_epilogue(em, cfg)
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
                    _emit_epilogue_body(em, cfg.epilogue)
    em()


EPI_COLS: Final = 4  # consecutive output columns per thread and step of the vector epilogue


def _vector_epilogue(cfg: AmpereKernelConfig) -> bool:
    """Whether every thread keeps one column group of EPI_COLS columns for the whole tile."""
    bm, bn, _ = cfg.cta_tile
    groups = bn // EPI_COLS
    return bn % EPI_COLS == 0 and cfg.threads % groups == 0 and bm % (cfg.threads // groups) == 0


def _hoisted_inputs(prog: EpilogueProgram) -> list[int]:
    """Inputs that vary along N only (a bias, maybe per batch): loaded once per thread."""
    return [i for i, inp in enumerate(prog.inputs) if "m" not in {str(a) for a in inp.axes}]


def _emit_vector_epilogue(em: _Emitter, cfg: AmpereKernelConfig) -> None:
    """Epilogue of the staged tile, ``EPI_COLS`` consecutive columns per thread and step.

    Thread ``tid`` owns column group ``tid % groups`` of rows ``tid // groups + it * rpi``: one
    ``ld.shared.v4`` per step, the program once in the source inside a ``for j`` loop over the
    group (NVVM unrolls it; the values rotate through named registers, so nothing is indexed by
    ``j``), the results packed into 8-byte (16-bit outputs) or 16-byte (float32) stores. A store
    is scalar when the group crosses N or the output's base, batch or row stride is not aligned
    to the packed size (checked once per thread). Inputs varying along N only are loaded once
    per thread; loads of other inputs clamp the column to N - 1 in the tail group.
    """
    bm, bn, _ = cfg.cta_tile
    g = EPI_COLS
    assert g == 4, "the register rotations below are written for 4 columns"
    groups = bn // g
    rpi = cfg.threads // groups
    cst = _c_stride(cfg)
    prog = cfg.epilogue
    used = _live_instrs(prog)
    used_inputs = {int(prog.instrs[i].arg) for i in used if prog.instrs[i].op == "input"}
    hoisted = [i for i in _hoisted_inputs(prog) if i in used_inputs]
    em(f"ecol = (tid % {groups}) * {g}")
    em(f"erow = tid // {groups}")
    em("gcol = n0 + ecol")
    em("ncol = N - gcol  # valid columns of this thread's group (>= G: all)")
    em(f"es = erow * {cst} + ecol")
    em(f"cfull = ncol >= {g}")
    em(f"rlim = int32(min(M - m0 - erow, {bm}))  # rows of this thread below M, relative")
    for i in sorted(used_inputs - set(hoisted)):
        em(f"ib{i} = bt * in{i}_sb")
    for i in hoisted:
        em(f"ib{i} = bt * in{i}_sb")
        for j in range(g):
            em(
                f"h{i}_{j} = {_widen(prog.inputs[i].dtype, f'in{i}[ib{i} + min(gcol + {j}, N - 1) * in{i}_sn]')}"
            )
    for k, out in enumerate(prog.outputs):
        size = 2 if _is16(out.dtype) else 4
        nbytes = g * size
        em(f"ob{k} = bt * out{k}_sb + (m0 + erow) * out{k}_sm + gcol")
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
        em("row = m0 + erow + lr")
        em(f"va0, va1, va2, va3 = ld_shared_v4_f32(smem_addr(cs, es + lr * {cst}))")
        for k, out in enumerate(prog.outputs):
            if _is16(out.dtype):
                em(f"w{k} = uint64(0)")
            else:
                em(f"f{k}_0 = f{k}_1 = f{k}_2 = f{k}_3 = float32(0.0)")
        em(f"for j in range({g}):")
        with em.indent():
            em("v = va0")
            em("va0, va1, va2, va3 = va1, va2, va3, v")
            inputs = {}
            for i in sorted(used_inputs):
                if i in hoisted:
                    em(f"hv{i} = h{i}_0")
                    em(f"h{i}_0, h{i}_1, h{i}_2, h{i}_3 = h{i}_1, h{i}_2, h{i}_3, hv{i}")
                    inputs[i] = f"hv{i}"
                else:
                    inputs[i] = _widen(
                        prog.inputs[i].dtype,
                        f"in{i}[ib{i} + row * in{i}_sm + min(gcol + j, N - 1) * in{i}_sn]",
                    )
            for idx, ins_ in enumerate(prog.instrs):
                if idx in used:
                    em(f"x{idx} = {_instr_expr(prog, ins_, inputs)}")
            for k, out in enumerate(prog.outputs):
                if _is16(out.dtype):
                    em(
                        f"w{k} = (w{k} >> uint64(16)) | (uint64({_narrow(out.dtype, f'x{out.src}')}) << uint64(48))"
                    )
                else:
                    em(f"f{k}_0, f{k}_1, f{k}_2, f{k}_3 = f{k}_1, f{k}_2, f{k}_3, x{out.src}")
        for k, out in enumerate(prog.outputs):
            em(f"if wide{k}:")
            with em.indent():
                if _is16(out.dtype):
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
                        if _is16(out.dtype):
                            em(f"out{k}[ob{k} + j] = uint16(w{k} & uint64(0xFFFF))")
                        else:
                            em(f"out{k}[ob{k} + j] = f{k}_0")
                    if _is16(out.dtype):
                        em(f"w{k} = w{k} >> uint64(16)")
                    else:
                        em(f"f{k}_0, f{k}_1, f{k}_2 = f{k}_1, f{k}_2, f{k}_3")
        for k in range(len(prog.outputs)):
            em(f"ob{k} += ostep{k}")
        em(f"lr = int32(lr + {rpi})")


def _c_stride(cfg: AmpereKernelConfig) -> int:
    """Row stride (floats) of the smem accumulator tile: 8 floats of padding against conflicts."""
    return cfg.cta_tile[1] + 8


def _emit_reduce_kernel(em: _Emitter, cfg: AmpereKernelConfig, sim: bool, cache: bool) -> None:
    em(f"@cuda.jit({_jit_options(REDUCE_THREADS, sim, cache)})")
    em(f"def ampere_splitk_reduce({', '.join(_reduce_params(cfg))}):")
    with em.indent():
        em("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x")
        em("mn = M * N")
        em("if i < batch * mn:")
        with em.indent():
            em("col = i % N")
            em("rest = i // N")
            em("row = rest % M")
            em("bt = rest // M")
            em("off = bt * mn + row * N + col")
            em("v = ws[off]")
            for s in range(1, cfg.splitk):
                em(f"v += ws[off + {s} * batch * mn]")
            _emit_epilogue_body(em, cfg.epilogue)
    em()


def generate_source(
    config: AmpereKernelConfig, *, sim: bool | None = None, cache: bool = False
) -> str:
    """Python source of the kernels for *config*: ``ampere_gemm`` (+ ``ampere_splitk_reduce``).

    *sim* (default: whether Numba's CUDA simulator is on) drops the options the simulator's
    ``cuda.jit`` rejects (``launch_bounds``, ``inline``).
    """
    if sim is None:
        from numba import config as nb_config

        sim = bool(nb_config.ENABLE_CUDASIM)
    em = _Emitter()
    em(f'"""Generated by mmaplug.plugins.ampere.kernel for {config.name}."""')
    em("import math")
    em("from numba import cuda, float32, int32, uint16, uint32, uint64")
    em(
        f"from {INTRINSICS_MODULE} import (smem_addr, ldmatrix_x4, ldmatrix_x4_trans, "
        "mma_m16n8k16_f16, mma_m16n8k16_bf16, cp_async_16, cp_async_8, cp_async_4, "
        "cp_async_commit, cp_async_wait_group, cp_async_wait_all, f16_to_f32, f32_to_f16, "
        "bf16_to_f32, f32_to_bf16, global_addr, ld_shared_v4_f32, st_global_v2_b32, "
        "st_global_v4_b32)"
    )
    em()
    _emit_main_kernel(em, config, sim, cache)
    if config.splitk > 1:
        _emit_reduce_kernel(em, config, sim, cache)
    return em.text()


# --- signatures, PTX, build ---------------------------------------------------------------------


def _array_type(dtype: DType) -> Any:
    from numba import types

    return types.Array(types.uint16 if _is16(dtype) else types.float32, 1, "C")


def kernel_signatures(config: AmpereKernelConfig) -> dict[str, Any]:
    """Numba signatures: ``{"ampere_gemm": sig, "ampere_splitk_reduce": sig}`` (the latter with split-K)."""
    from numba import types

    u16 = types.Array(types.uint16, 1, "C")
    f32a = types.Array(types.float32, 1, "C")
    prog = config.epilogue
    ins = [_array_type(i.dtype) for i in prog.inputs]
    outs = [_array_type(o.dtype) for o in prog.outputs]
    scal = [types.float32] * len(prog.scalars)
    i64 = types.int64
    in_strides = [i64] * (3 * len(prog.inputs))
    out_strides = [i64] * (2 * len(prog.outputs))
    if config.splitk > 1:
        main = [u16, u16, f32a] + [i64] * (len(_SHAPE_PARAMS) + len(_GRID_PARAMS))
        red = [f32a, *ins, *outs, *scal, i64, i64, i64, *in_strides, *out_strides]
        return {"ampere_gemm": types.void(*main), "ampere_splitk_reduce": types.void(*red)}
    main = [u16, u16, *ins, *outs, *scal, *[i64] * len(_SHAPE_PARAMS), *in_strides, *out_strides]
    main += [i64] * len(_GRID_PARAMS)
    return {"ampere_gemm": types.void(*main)}


def load_module(
    config: AmpereKernelConfig, *, sim: bool | None = None, on_disk: bool = False
) -> dict[str, Any]:
    """Exec the generated source; return its namespace (Python functions decorated by cuda.jit).

    With *on_disk* the source becomes a module in mmaplug's kernel cache directory, so the
    ``cache=True`` kernels keep their compiled code beside it for the next process.
    """
    source = generate_source(config, sim=sim, cache=on_disk)
    if on_disk:
        from mmaplug.cache import kernel_module

        namespace = dict(vars(kernel_module(config.name, source)))
        namespace["__source__"] = source
        return namespace
    filename = f"<mmaplug-ampere {config.name} #{abs(hash(config)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "mmaplug_ampere_generated"}
    exec(compile(source, filename, "exec"), namespace)
    namespace["__source__"] = source
    return namespace


def compile_ptx(
    config: AmpereKernelConfig, cc: tuple[int, ...] = (8, 0), kernel: str = "ampere_gemm"
) -> str:
    """PTX of one generated kernel for compute capability *cc* (no GPU needed)."""
    from numba import cuda

    ns = load_module(config, sim=False)
    pyfunc = ns[kernel].py_func
    sig = kernel_signatures(config)[kernel]
    threads = config.threads if kernel == "ampere_gemm" else REDUCE_THREADS
    ptx, _ = cuda.compile_ptx(pyfunc, sig.args, cc=cc, launch_bounds=(threads, 1))
    return ptx


@attrs.frozen
class AmpereKernels:
    """Compiled kernels of one config."""

    config: AmpereKernelConfig
    gemm: Any
    reduce: Any | None
    source: str
    signatures: dict[str, Any]


_BUILD_CACHE: dict[AmpereKernelConfig, AmpereKernels] = {}


def build(config: AmpereKernelConfig) -> AmpereKernels:
    """Compiled (lazily, on first launch) kernels for *config*, cached by config."""
    hit = _BUILD_CACHE.get(config)
    if hit is not None:
        return hit
    from numba import config as nb_config

    from mmaplug.cache import disk_cache_enabled

    ns = load_module(config, on_disk=disk_cache_enabled() and not nb_config.ENABLE_CUDASIM)
    kernels = AmpereKernels(
        config=config,
        gemm=ns["ampere_gemm"],
        reduce=ns.get("ampere_splitk_reduce"),
        source=ns["__source__"],
        signatures=kernel_signatures(config),
    )
    _BUILD_CACHE[config] = kernels
    return kernels
