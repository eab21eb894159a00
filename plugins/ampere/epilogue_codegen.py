"""Code generation of the fused epilogue: accumulator staging, EpilogueProgram, split-K reduce."""

from __future__ import annotations

import math
from typing import Final

from mmaplug.dtypes import DType
from mmaplug.epilogue import BINARY_OPS, UNARY_OPS, EpilogueProgram, Instr

from .config import REDUCE_THREADS, AmpereKernelConfig, _jit_options, _reduce_params


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
