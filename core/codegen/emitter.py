"""Kernel-source emission shared by the schedulers: the line emitter, the epilogue, split-K reduce.

Every scheduler generates Python source for Numba-CUDA; what they have in common lives here so
that no plugin imports another plugin's private helpers. Nothing here imports Numba: the text
names the intrinsics (``f16_to_f32``, ``f32_to_f16``, ...) that the generated module imports.

Names used by the generated epilogue code (the launch ABI both schedulers follow): epilogue
input ``i`` is the array ``in{i}`` with strides ``in{i}_sb``, ``in{i}_sm``, ``in{i}_sn``
(elements; 0 = does not vary); output ``j`` is ``out{j}`` with ``out{j}_sb``, ``out{j}_sm``
(n contiguous); scalar ``i`` is ``s{i}``; the element is float32 ``v`` at (``bt``, ``row``,
``col``), the names :data:`EPILOGUE_VARS` holds: a kernel binds them, :func:`emit_epilogue_body`
reads them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

import attrs

from mmaplug.analysis.epilogue import (
    BINARY_OPS,
    UNARY_OPS,
    EpilogueInput,
    EpilogueOutput,
    EpilogueProgram,
    Instr,
)
from mmaplug.codegen.amax_epilogue import amax_flush, amax_init, amax_update
from mmaplug.ir.dtypes import DType

__all__ = [
    "cast_dtype",
    "casts_only",
    "REDUCE_THREADS",
    "REDUCE_VECTOR",
    "REDUCE_VECTOR_MIN",
    "EPILOGUE_VARS",
    "Emitter",
    "EpilogueVars",
    "emit_epilogue_body",
    "emit_splitk_reduce",
    "epilogue_params",
    "cast_epilogue",
    "f32_literal",
    "fp8_imports",
    "fp8_name",
    "inline_exprs",
    "instr_expr",
    "invariant_inputs",
    "is16",
    "jit_options",
    "live_instrs",
    "m_only_inputs",
    "n_only_inputs",
    "narrow",
    "reduce_grid",
    "reduce_params",
    "reduce_vector",
    "tile3",
    "widen",
]

REDUCE_THREADS: Final = 256
#: Consecutive output elements one thread of the split-K reduce kernel sums (a 16-byte load of
#: float32 partials a split), from REDUCE_VECTOR_MIN outputs: below, a thread an element keeps
#: more SMs busy (run 203: 64x512 outputs 11.1 -> 12.1 us with 4 a thread, 1024x1024 63.0 ->
#: 56.1; 512x512 58.2 -> 56.4).
REDUCE_VECTOR: Final = 4
REDUCE_VECTOR_MIN: Final = 1 << 18


@attrs.frozen
class EpilogueVars:
    """The generated variables of one epilogue element: the kernel that emits the epilogue binds
    them, :func:`emit_epilogue_body` (and any inlined program) reads them."""

    v: str = "v"
    """The element's float32 accumulator value (``v{j}``: product j > 0 of a horizontal fusion)."""
    bt: str = "bt"
    """The element's batch index."""
    row: str = "row"
    """The element's row in the output, below M."""
    col: str = "col"
    """The element's column in the output, below N."""


EPILOGUE_VARS: Final = EpilogueVars()


class Emitter:
    """Collects lines of generated source at the current indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self) -> _Indent:
        """``with em.indent():`` emits the block one level deeper."""
        return _Indent(self)

    def text(self) -> str:
        """The source so far, newline-terminated."""
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, em: Emitter) -> None:
        self.em = em

    def __enter__(self) -> None:
        self.em.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.em.depth -= 1


def tile3(value: Any) -> tuple[int, int, int]:
    """A kernel config's ``(m, n, k)`` tile from any 3-sequence of ints."""
    out = tuple(int(v) for v in value)
    if len(out) != 3:
        raise ValueError(f"a tile is (m, n, k), got {value!r}")
    return out  # type: ignore[return-value]


def cast_epilogue() -> EpilogueProgram:
    """The plain epilogue a kernel config defaults to: the accumulator stored as float16."""
    return EpilogueProgram(
        instrs=(Instr(op="acc"),),
        outputs=(EpilogueOutput(name="out", src=0, dtype=DType.float16),),
    )


def jit_options(threads: int, sim: bool, lto: bool = False) -> str:
    """``cuda.jit`` options: the simulator takes none; ``lto`` links NVVM IR through nvJitLink
    as one whole program (docs/decisions.md: PTX input is compiled as a separate compilation
    unit by recent nvJitLink, which ignores setmaxnreg). Never ``cache``: Numba's cache
    unpickles its index, and kernels are cached as cubins (``mmaplug.cuda.cubin``)."""
    if sim:
        return ""
    return f"launch_bounds=({threads}, 1)" + (", lto=True" if lto else "")


def f32_literal(value: float) -> str:
    """A float32 literal expression, NaN and infinities included."""
    value = float(value)
    if math.isnan(value):
        return "float32(math.nan)"
    if math.isinf(value):
        return "float32(math.inf)" if value > 0 else "float32(-math.inf)"
    return f"float32({value!r})"


def is16(dtype: DType) -> bool:
    """Whether *dtype* travels as uint16 bits (float16, bfloat16)."""
    return dtype in (DType.float16, DType.bfloat16)


def fp8_name(dtype: DType) -> str:
    """The short name of FP8 *dtype* in the conversion intrinsics (``e4m3``, ``e5m2``)."""
    return {DType.float8_e4m3fn: "e4m3", DType.float8_e5m2: "e5m2"}[dtype]


def widen(dtype: DType, expr: str) -> str:
    """Expression converting *expr* (stored as *dtype*) to float32."""
    if dtype is DType.float16:
        return f"f16_to_f32({expr})"
    if dtype is DType.bfloat16:
        return f"bf16_to_f32({expr})"
    if dtype.is_float8:
        return f"{fp8_name(dtype)}_to_f32({expr})"
    return f"float32({expr})"


def narrow(dtype: DType, expr: str) -> str:
    """Expression converting float32 *expr* to what a *dtype* array stores (FP8: its uint8
    bits, saturated as ``cvt.rn.satfinite`` and ``mp.evaluate`` do)."""
    if dtype is DType.float16:
        return f"f32_to_f16({expr})"
    if dtype is DType.bfloat16:
        return f"f32_to_bf16({expr})"
    if dtype.is_float8:
        return f"f32_to_{fp8_name(dtype)}({expr})"
    return expr


def fp8_imports(prog: EpilogueProgram) -> str:
    """The import of the FP8 intrinsics the epilogue of *prog* may name: for its FP8 outputs
    and casts narrow, widen, the pair form and the 4-byte store; for the FP8 inputs it reads
    (loaded as bytes) widen; ``""`` when it has none. The 16-bit conversions are in every
    generated module's imports."""
    written = {o.dtype for o in prog.outputs} | {
        cast_dtype(i) for i in prog.instrs if i.op == "cast"
    }
    read = {i.dtype for i in prog.inputs}
    names = []
    for d in sorted((d for d in written | read if d.is_float8), key=lambda d: d.label):
        fmt = fp8_name(d)
        if d in written:
            names += [f"f32_to_{fmt}", f"{fmt}_to_f32", f"f32x2_to_{fmt}x2"]
        else:
            names.append(f"{fmt}_to_f32")
    if not names:
        return ""
    store = ", st_global_b32" if any(d.is_float8 for d in written) else ""
    return f"from mmaplug.cuda.intrinsics import {', '.join(names)}{store}"


def epilogue_params(
    prog: EpilogueProgram,
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """Parameter names of *prog*: inputs, outputs, scalars, input strides, output strides."""
    ins = [f"in{i}" for i in range(len(prog.inputs))]
    outs = [f"out{j}" for j in range(len(prog.outputs))]
    scal = [f"s{i}" for i in range(len(prog.scalars))]
    in_strides = [f"in{i}_{ax}" for i in range(len(prog.inputs)) for ax in ("sb", "sm", "sn")]
    out_strides = [f"out{j}_{ax}" for j in range(len(prog.outputs)) for ax in ("sb", "sm")]
    return ins, outs, scal, in_strides, out_strides


def reduce_params(prog: EpilogueProgram) -> list[str]:
    """Parameters of the split-K reduce kernel: workspace, epilogue arrays, shape, strides."""
    ins, outs, scal, in_strides, out_strides = epilogue_params(prog)
    return ["ws", *ins, *outs, *scal, "M", "N", "batch", *in_strides, *out_strides]


def live_instrs(prog: EpilogueProgram, roots: Iterable[int] | None = None) -> set[int]:
    """Indices of the instructions the outputs (or the instructions *roots*) depend on."""
    live: set[int] = set()
    stack = [o.src for o in prog.outputs] if roots is None else list(roots)
    while stack:
        i = stack.pop()
        if i in live:
            continue
        if not 0 <= i < len(prog.instrs):
            raise ValueError(f"epilogue refers to instruction {i}, which does not exist")
        live.add(i)
        stack.extend(prog.instrs[i].srcs)
    return live


def cast_dtype(ins: Instr) -> DType:
    """The dtype a ``cast`` instruction rounds through (its arg: a DType or its name)."""
    return ins.arg if isinstance(ins.arg, DType) else DType[str(ins.arg)]


def casts_only(prog: EpilogueProgram) -> bool:
    """Whether *prog* computes nothing but casts of the accumulator."""
    return all(ins.op in ("acc", "cast") for ins in prog.instrs)


def _grid_axes(inp: EpilogueInput) -> set[str]:
    """Which of ``m`` and ``n`` epilogue input *inp* varies along."""
    return {str(a) for a in inp.axes} & {"m", "n"}


def n_only_inputs(prog: EpilogueProgram) -> list[int]:
    """Inputs that do not vary along M (a bias, maybe per batch): loadable once per column."""
    return [i for i, inp in enumerate(prog.inputs) if "m" not in _grid_axes(inp)]


def m_only_inputs(prog: EpilogueProgram) -> list[int]:
    """Inputs that vary along M and not N (a per-row scale of A, maybe per batch): loadable
    once per row."""
    return [i for i, inp in enumerate(prog.inputs) if _grid_axes(inp) == {"m"}]


def invariant_inputs(prog: EpilogueProgram) -> list[int]:
    """Inputs that vary along neither M nor N (a per-tensor scale, maybe per batch): loadable
    once."""
    return [i for i, inp in enumerate(prog.inputs) if not _grid_axes(inp)]


def instr_expr(prog: EpilogueProgram, ins: Instr, inputs: dict[int, str] | None = None) -> str:
    """One SSA line; *inputs* maps an input index to the (float32) expression that replaces its load."""
    ev = EPILOGUE_VARS
    op = ins.op
    s = [f"x{i}" for i in ins.srcs]
    if op == "acc":
        return f"{ev.v}{ins.arg}" if ins.arg else ev.v
    if op == "input":
        i = int(ins.arg)
        if inputs and i in inputs:
            return inputs[i]
        inp = prog.inputs[i]
        at = f"{ev.bt} * in{i}_sb + {ev.row} * in{i}_sm + {ev.col} * in{i}_sn"
        return widen(inp.dtype, f"in{i}[{at}]")
    if op == "scalar":
        return f"float32(s{int(ins.arg)})"
    if op == "const":
        return f32_literal(ins.arg)
    if op == "cast":
        dtype = cast_dtype(ins)
        if dtype.is_narrow:  # rounded through the narrow type (FP8 saturating)
            return widen(dtype, narrow(dtype, s[0]))
        return s[0]
    if op in UNARY_OPS:
        (x,) = s
        return {
            "neg": f"-{x}",
            "relu": f"max({x}, float32(0.0))",
            "gelu": f"gelu({x})",
            "silu": f"{x} / (float32(1.0) + math.exp(-{x}))",
            "sigmoid": f"float32(1.0) / (float32(1.0) + math.exp(-{x}))",
            "sin": f"math.sin({x})",
            "cos": f"math.cos({x})",
            "exp": f"math.exp({x})",
            "log": f"math.log({x})",
            "tanh": f"math.tanh({x})",
            "abs": f"abs({x})",
            "reciprocal": f"float32(1.0) / {x}",
            "sqrt": f"math.sqrt({x})",
            "rsqrt": f"float32(1.0) / math.sqrt({x})",
            "erf": f"math.erf({x})",
        }[op]
    if op in BINARY_OPS:
        x, y = s
        if op in ("maximum", "minimum"):
            return f"{op[:3]}({x}, {y})"
        return f"{x} {dict(add='+', sub='-', mul='*', div='/')[op]} {y}"
    raise ValueError(f"unknown epilogue op {op!r}")


def inline_exprs(
    prog: EpilogueProgram,
    roots: list[int],
    inputs: dict[int, str] | None = None,
    acc: str = EPILOGUE_VARS.v,
) -> tuple[list[str], list[str]]:
    """*prog*'s values for *roots* with every value used once written into its one user: the
    lines (``x{i} = ...``) for values used more than once, and each root's expression. *acc*
    replaces accumulator 0's ``v``. Fewer statements for Numba's front end to type, where an
    unrolled epilogue repeats them for every element."""
    live = sorted(live_instrs(prog, roots))
    uses = Counter(src for i in live for src in prog.instrs[i].srcs) + Counter(roots)
    exprs: dict[int, str] = {}
    lines = []
    for i in live:
        ins = prog.instrs[i]
        text = acc if ins.op == "acc" and not ins.arg else instr_expr(prog, ins, inputs)
        text = re.sub(r"\bx(\d+)\b", lambda m: exprs[int(m.group(1))], text)
        if uses[i] > 1:
            lines.append(f"x{i} = {text}")
            exprs[i] = f"x{i}"
        else:
            exprs[i] = text if _atomic(text) else f"({text})"
    return lines, [exprs[r] for r in roots]


def _atomic(text: str) -> bool:
    """Whether *text* is a name, an element or a call: nothing an operator could bind into."""
    head = re.match(r"[\w.]+", text)
    if head is None:
        return False
    depth = 0
    for pos in range(head.end(), len(text)):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(text[pos], 0)
        if depth == 0 and pos < len(text) - 1:
            return False  # a bracket closed before the end: more follows
    return depth == 0


def emit_epilogue_body(em: Emitter, prog: EpilogueProgram) -> None:
    """Epilogue of one element: float32 ``v`` at (``bt``, ``row``, ``col``), already in bounds
    (accumulator j > 0 of a horizontal fusion: ``v{j}``), the names of :data:`EPILOGUE_VARS`;
    amax outputs fold it into their running maxima (started by ``amax_init``)."""
    ev = EPILOGUE_VARS
    used = live_instrs(prog)
    for idx, ins_ in enumerate(prog.instrs):
        if idx in used:
            em(f"x{idx} = {instr_expr(prog, ins_)}")
    for j, out in prog.stored:
        at = f"{ev.bt} * out{j}_sb + {ev.row} * out{j}_sm + {ev.col}"
        em(f"out{j}[{at}] = {narrow(out.dtype, f'x{out.src}')}")
    for j, out in prog.amaxes:
        em(amax_update(j, f"x{out.src}"))


def reduce_vector(total: int) -> int:
    """Consecutive elements each thread of the split-K reduce kernel sums for *total* outputs:
    ``REDUCE_VECTOR`` where that many stay 16-byte aligned in every split's slice and the
    outputs are ``REDUCE_VECTOR_MIN`` or more, else 1 (fewer threads would leave SMs idle)."""
    vector = total >= REDUCE_VECTOR_MIN and total % REDUCE_VECTOR == 0
    return REDUCE_VECTOR if vector else 1


def reduce_grid(batch: int, m: int, n: int) -> tuple[int, int, int]:
    """The split-K reduce kernel's grid for a ``batch`` x ``m`` x ``n`` output:
    ``REDUCE_THREADS`` threads a block, each summing ``reduce_vector`` elements."""
    total = batch * m * n
    return -(-total // (REDUCE_THREADS * reduce_vector(total))), 1, 1


def emit_splitk_reduce(
    em: Emitter, prog: EpilogueProgram, splitk: int, name: str, sim: bool
) -> None:
    """Kernel *name*: sum the ``[splitk, batch, M, N]`` float32 partials in a fixed order and
    apply *prog* once per element (``REDUCE_THREADS`` threads per block, each on
    ``reduce_vector`` consecutive elements: one 16-byte load a split and the column, row and
    batch stepped, or one element and its indices divided out; amax outputs reduced per warp,
    every thread of the block taking part). The kernel reads which from its grid, the one
    :func:`reduce_grid` launched: fewer threads than outputs means four a thread."""
    ev, vec = EPILOGUE_VARS, REDUCE_VECTOR
    em("from mmaplug.cuda.intrinsics import ld_global_cg_v4_f32")
    em()
    em(f"@cuda.jit({jit_options(REDUCE_THREADS, sim)})")
    em(f"def {name}({', '.join(reduce_params(prog))}):")
    with em.indent():
        em("t = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x")
        em("mn = M * N")
        em("total = batch * mn")
        for line in amax_init(prog):
            em(line)
        em(f"if cuda.gridDim.x * cuda.blockDim.x < total:  # reduce_grid chose {vec} a thread")
        with em.indent():
            em(f"i = t * {vec}")
            em("if i < total:")
            with em.indent():
                _emit_reduce_vector(em, prog, splitk)
        em("elif t < total:  # one element")
        with em.indent():
            _emit_indices(em, "t")
            em(f"{ev.v} = ws[t]")
            for s in range(1, splitk):
                em(f"{ev.v} += ws[t + {s} * total]")
            emit_epilogue_body(em, prog)
        for line in amax_flush(prog, "cuda.threadIdx.x % 32"):
            em(line)
    em()


def _emit_indices(em: Emitter, flat: str) -> None:
    """The column, row and batch of the output element at flat index *flat* of ``[batch, M,
    N]``."""
    ev = EPILOGUE_VARS
    em(f"{ev.col} = {flat} % N")
    em(f"rest = {flat} // N")
    em(f"{ev.row} = rest % M")
    em(f"{ev.bt} = rest // M")


def _emit_reduce_vector(em: Emitter, prog: EpilogueProgram, splitk: int) -> None:
    """Elements ``i .. i + REDUCE_VECTOR - 1``: a 16-byte load of each split's partials, summed
    in split order, then the epilogue on each, stepping the column (and row, and batch)."""
    ev, vec = EPILOGUE_VARS, REDUCE_VECTOR
    sums = [f"s{e}" for e in range(vec)]
    em(f"{', '.join(sums)} = ld_global_cg_v4_f32(ws, i)")
    for s in range(1, splitk):
        em(f"{', '.join(f'p{e}' for e in range(vec))} = ld_global_cg_v4_f32(ws, i + {s} * total)")
        for e in range(vec):
            em(f"s{e} += p{e}")
    _emit_indices(em, "i")
    for e in range(vec):
        if e:  # the next element: step the column, carrying into the row and the batch
            em(f"{ev.col} += 1")
            em(f"if {ev.col} == N:")
            with em.indent():
                em(f"{ev.col} = 0")
                em(f"{ev.row} += 1")
                em(f"if {ev.row} == M:")
                with em.indent():
                    em(f"{ev.row} = 0")
                    em(f"{ev.bt} += 1")
        em(f"{ev.v} = s{e}")
        emit_epilogue_body(em, prog)
