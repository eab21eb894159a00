"""Typing and codegen factories behind the sm_80 intrinsics declared in intrinsics.py."""

from __future__ import annotations

from typing import Any, Final

from llvmlite import ir
from numba.cuda import types
from numba.cuda.core.errors import NumbaTypeError

from mmaplug.cuda.asm import (
    GLOBAL_ADDRSPACE,
    as_tuple,
    casts,
    implements,
    inline_asm,
    item_address,
    validate_array,
    validate_float,
    validate_integer,
    validate_literal_count,
)

# m, n, k of one mma.sync; 32-bit registers per lane for A, B and C/D.
MMA_SHAPE: Final = (16, 8, 16)
MMA_FRAGMENT_REGS: Final = {"a": 4, "b": 2, "c": 4}


def address_intrinsic(stub, addrspace: int, bits: int):
    """``stub(arr, i)``: the address of ``arr[i]`` in *addrspace* as a *bits*-bit integer
    (``smem_addr``: shared, 32; ``global_addr``: global, 64)."""
    name = stub.__name__
    retty = types.uint32 if bits == 32 else types.uint64

    @implements(stub)
    def typer(typingctx, arr, i):
        validate_array(name, "arr", arr)
        validate_integer(name, "i", i)

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args
            return item_address(context, builder, aryty, args[0], args[1], idxty, addrspace, bits)

        return retty(arr, i), codegen

    return typer


def ldmatrix_intrinsic(stub, count: int, trans: bool):
    text = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    operands = ", ".join(f"${i}" for i in range(count))
    asm = f"{text} {{{operands}}}, [${count}];"
    retty = types.uint32 if count == 1 else types.UniTuple(types.uint32, count)

    @implements(stub)
    def typer(typingctx, addr):
        validate_integer(text, "addr", addr)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, [types.uint32])
            out = inline_asm(
                builder, [types.uint32] * count, asm, [types.uint32], values, effect=True
            )
            return as_tuple(context, builder, sig.return_type, out)

        return retty(addr), codegen

    return typer


def mma_intrinsic(stub, ab_type: str, k: int):
    """mma.sync m16n8k*k* with float32 accumulators: *k* 16 for 16-bit *ab_type*, 32 for FP8
    (``e4m3``, ``e5m2``: sm_89+); either way A is four 32-bit registers and B two."""
    text = f"mma.sync.aligned.m16n8k{k}.row.col.f32.{ab_type}.{ab_type}.f32"
    regs = [MMA_FRAGMENT_REGS[k] for k in ("c", "a", "b", "c")]  # d, a, b, c operand groups
    starts = [sum(regs[:i]) for i in range(len(regs))]
    groups = [
        "{" + ", ".join(f"${s + j}" for j in range(n)) + "}"
        for s, n in zip(starts, regs, strict=True)
    ]
    asm = f"{text} {', '.join(groups)};"
    ins = [types.uint32] * (regs[1] + regs[2]) + [types.float32] * regs[3]

    @implements(stub)
    def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        for i, ty in enumerate((a0, a1, a2, a3, b0, b1)):
            validate_integer(text, f"operand {i}", ty)
        for i, ty in enumerate((c0, c1, c2, c3)):
            validate_float(text, f"c{i}", ty)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, ins)
            out = inline_asm(builder, [types.float32] * regs[0], asm, ins, values, effect=False)
            return as_tuple(context, builder, sig.return_type, out)

        sig = types.UniTuple(types.float32, regs[0])(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        return sig, codegen

    return typer


def cp_async_intrinsic(stub, size: int, cache: str):
    text = f"cp.async.{cache}.shared.global"
    asm = f"{text} [$0], [$1], {size}, $2;"

    @implements(stub)
    def typer(typingctx, dst, src, index, src_bytes):
        validate_integer(text, "dst", dst)
        validate_array(text, "src", src)
        validate_integer(text, "index", index)
        validate_integer(text, "src_bytes", src_bytes)

        def codegen(context, builder, sig, args):
            dstty, srcty, idxty, nty = sig.args
            dst_v = context.cast(builder, args[0], dstty, types.uint32)
            src_v = item_address(
                context, builder, srcty, args[1], args[2], idxty, GLOBAL_ADDRSPACE, 64
            )
            n_v = context.cast(builder, args[3], nty, types.uint32)
            ins = [types.uint32, types.uint64, types.uint32]
            inline_asm(builder, [], asm, ins, [dst_v, src_v, n_v], effect=True)
            return context.get_dummy_value()

        return types.void(dst, src, index, src_bytes), codegen

    return typer


def cp_async_sync_intrinsic(stub, text: str):
    @implements(stub)
    def typer(typingctx):
        def codegen(context, builder, sig, args):
            inline_asm(builder, [], f"{text};", [], [], effect=True)
            return context.get_dummy_value()

        return types.void(), codegen

    return typer


def cp_async_wait_group_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, n):
        count = validate_literal_count("cp.async.wait_group", n)

        def codegen(context, builder, sig, args):
            inline_asm(builder, [], f"cp.async.wait_group {count};", [], [], effect=True)
            return context.get_dummy_value()

        return types.void(n), codegen

    return typer


def ld_global_v4_intrinsic(stub, text: str, ty: Any):
    """A 16-byte global load *text* (``ld.global.nc.v4.u32``, ``ld.global.cg.v4.f32``) of
    ``&arr[index]`` as a 4-tuple of *ty*."""
    asm = f"{text} {{$0, $1, $2, $3}}, [$4];"

    @implements(stub)
    def typer(typingctx, arr, index):
        validate_array(text, "arr", arr)
        validate_integer(text, "index", index)

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args
            addr = item_address(
                context, builder, aryty, args[0], args[1], idxty, GLOBAL_ADDRSPACE, 64
            )
            out = inline_asm(builder, [ty] * 4, asm, [types.uint64], [addr], effect=True)
            return as_tuple(context, builder, sig.return_type, out)

        return types.UniTuple(ty, 4)(arr, index), codegen

    return typer


def ld_shared_v_intrinsic(stub, count: int, ty: Any):
    text = f"ld.shared.v{count}.{'f' if ty == types.float32 else 'b'}32"
    asm = f"{text} {{{', '.join(f'${i}' for i in range(count))}}}, [${count}];"

    @implements(stub)
    def typer(typingctx, addr):
        validate_integer(text, "addr", addr)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, [types.uint32])
            out = inline_asm(builder, [ty] * count, asm, [types.uint32], values, effect=True)
            return as_tuple(context, builder, sig.return_type, out)

        return types.UniTuple(ty, count)(addr), codegen

    return typer


def st_global_v_intrinsic(stub, count: int):
    if count == 1:
        text = "st.global.b32"
        asm = f"{text} [$0], $1;"
    else:
        text = f"st.global.v{count}.b32"
        asm = f"{text} [$0], {{{', '.join(f'${i + 1}' for i in range(count))}}};"

    def type_words(arr, index, words):
        validate_array(text, "arr", arr)
        validate_integer(text, "index", index)
        wty = words[0]
        if wty not in (types.uint32, types.float32) or any(w != wty for w in words):
            raise NumbaTypeError(
                f"{text}: the words must be all uint32 or all float32, got {words}"
            )

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args[:2]
            addr = item_address(
                context, builder, aryty, args[0], args[1], idxty, GLOBAL_ADDRSPACE, 64
            )
            inline_asm(
                builder, [], asm, [types.uint64] + [wty] * count, [addr, *args[2:]], effect=True
            )
            return context.get_dummy_value()

        return types.void(arr, index, *words), codegen

    if count == 1:

        @implements(stub)
        def typer(typingctx, arr, index, w0):
            return type_words(arr, index, (w0,))

    elif count == 2:

        @implements(stub)
        def typer(typingctx, arr, index, w0, w1):
            return type_words(arr, index, (w0, w1))

    else:

        @implements(stub)
        def typer(typingctx, arr, index, w0, w1, w2, w3):
            return type_words(arr, index, (w0, w1, w2, w3))

    return typer


def _bf16_widen(builder, bits):
    wide = builder.shl(builder.zext(bits, ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
    return builder.bitcast(wide, ir.FloatType())


def cvt_intrinsic(stub, src: Any, dst: Any, text: str | None):
    validate = validate_float if src == types.float32 else validate_integer

    @implements(stub)
    def typer(typingctx, x):
        validate(stub.__name__, "argument", x)

        def codegen(context, builder, sig, args):
            (value,) = casts(context, builder, sig, args, [src])
            if text is None:
                return _bf16_widen(builder, value)
            return inline_asm(builder, [dst], f"{text} $0, $1;", [src], [value], effect=False)

        return dst(x), codegen

    return typer


def fp8_narrow_intrinsic(stub, fmt: str, pair: bool):
    """float32 to FP8 *fmt* (``e4m3``, ``e5m2``) with ``cvt.rn.satfinite.{fmt}x2.f32``: a pair
    packed into a uint16 (first argument in the upper byte), or one value (converted twice, the
    low byte kept) as a uint8."""
    text = f"cvt.rn.satfinite.{fmt}x2.f32"
    f32 = types.float32

    def codegen(context, builder, sig, args):
        values = casts(context, builder, sig, args, [f32] * len(args))
        operands = "$1, $2" if pair else "$1, $1"
        packed = inline_asm(
            builder, [types.uint16], f"{text} $0, {operands};", [f32] * len(args), values,
            effect=False,
        )  # fmt: skip
        return packed if pair else builder.trunc(packed, ir.IntType(8))

    if pair:

        @implements(stub)
        def typer(typingctx, hi, lo):
            validate_float(stub.__name__, "hi", hi)
            validate_float(stub.__name__, "lo", lo)
            return types.uint16(hi, lo), codegen

    else:

        @implements(stub)
        def typer(typingctx, x):
            validate_float(stub.__name__, "argument", x)
            return types.uint8(x), codegen

    return typer


def fp8_widen_intrinsic(stub, fmt: str):
    """The FP8 *fmt* value in an integer's low byte to float32: ``cvt.rn.f16x2.{fmt}x2`` widens
    the byte pair to two float16 (exact), ``cvt.f32.f16`` the low one."""
    asm = (
        "{ .reg .b32 pair; .reg .b16 lo, hi; "
        f"cvt.rn.f16x2.{fmt}x2 pair, $1; mov.b32 {{lo, hi}}, pair; cvt.f32.f16 $0, lo; }}"
    )

    @implements(stub)
    def typer(typingctx, bits):
        validate_integer(stub.__name__, "argument", bits)

        def codegen(context, builder, sig, args):
            (byte,) = casts(context, builder, sig, args, [types.uint8])
            wide = builder.zext(byte, ir.IntType(16))  # the high byte zero
            return inline_asm(builder, [types.float32], asm, [types.uint16], [wide], effect=False)

        return types.float32(bits), codegen

    return typer


def abs_bits_intrinsic(stub):
    """float32 ``x`` to the uint32 bits of ``|x|``: a bitcast and an ``and`` clearing the sign
    (plain LLVM IR, no asm: NVVM folds it into whatever reads it)."""

    @implements(stub)
    def typer(typingctx, x):
        validate_float(stub.__name__, "argument", x)

        def codegen(context, builder, sig, args):
            (value,) = casts(context, builder, sig, args, [types.float32])
            bits = builder.bitcast(value, ir.IntType(32))
            return builder.and_(bits, ir.Constant(ir.IntType(32), 0x7FFFFFFF))

        return types.uint32(x), codegen

    return typer


def redux_intrinsic(stub, op: str):
    """``redux.sync.{op}.u32`` over the full warp: every lane gets the result (sm_80+). Marked
    with side effects so that LLVM neither moves it into divergent code nor merges it."""
    text = f"redux.sync.{op}.u32"

    @implements(stub)
    def typer(typingctx, x):
        validate_integer(text, "argument", x)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, [types.uint32])
            asm = f"{text} $0, $1, 0xffffffff;"
            return inline_asm(builder, [types.uint32], asm, [types.uint32], values, effect=True)

        return types.uint32(x), codegen

    return typer


def red_global_intrinsic(stub, op: str):
    """``red.global.{op}.u32 [&arr[index]], w``: a reduction into global memory that returns
    nothing (cheaper than ``atom``); *arr*'s element is taken as its 32 bits."""
    text = f"red.global.{op}.u32"

    @implements(stub)
    def typer(typingctx, arr, index, w):
        validate_array(text, "arr", arr)
        validate_integer(text, "index", index)
        validate_integer(text, "w", w)
        if arr.dtype.bitwidth != 32:
            raise NumbaTypeError(f"{text}: arr must hold 32-bit elements, got {arr.dtype}")

        def codegen(context, builder, sig, args):
            aryty, idxty, wty = sig.args
            addr = item_address(
                context, builder, aryty, args[0], args[1], idxty, GLOBAL_ADDRSPACE, 64
            )
            word = context.cast(builder, args[2], wty, types.uint32)
            asm = f"{text} [$0], $1;"
            inline_asm(builder, [], asm, [types.uint64, types.uint32], [addr, word], effect=True)
            return context.get_dummy_value()

        return types.void(arr, index, w), codegen

    return typer
