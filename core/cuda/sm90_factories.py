"""Typing and codegen factories behind the sm_90a intrinsics declared in sm90.py."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Container
from typing import Any, Final

from llvmlite import ir
from numba.cuda import types
from numba.cuda.core.errors import NumbaTypeError, RequireLiteralValue

from mmaplug.cuda.asm import (
    SHARED_ADDRSPACE,
    casts,
    implements,
    inline_asm,
    validate_integer,
)

# N of wgmma.mma_async m64nNk16 (16-bit inputs) and m64nNk32 (FP8): 8, 16, ..., 256 (N/2 f32
# registers).
WGMMA_N: Final = tuple(range(8, 257, 8))
# setmaxnreg immediates: 24..256 in steps of 8.
SETMAXNREG_COUNTS: Final = tuple(range(24, 257, 8))
# Swizzle bytes -> the 2-bit layout code in bits 62-63 of a wgmma matrix descriptor.
SWIZZLE_CODES: Final = {0: 0, 128: 1, 64: 2, 32: 3}
_FIELD_MASK: Final = 0x3FFFF  # descriptor address fields hold (bytes & 0x3FFFF) >> 4

# Numba cannot type `*args` intrinsics: each arity gets a typer with named parameters.
_ARITY: Final[dict[int, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    0: lambda f: lambda typingctx: f(()),
    1: lambda f: lambda typingctx, a: f((a,)),
    2: lambda f: lambda typingctx, a, b: f((a, b)),
    3: lambda f: lambda typingctx, a, b, c: f((a, b, c)),
    4: lambda f: lambda typingctx, a, b, c, d: f((a, b, c, d)),
    5: lambda f: lambda typingctx, a, b, c, d, e: f((a, b, c, d, e)),
    6: lambda f: lambda typingctx, a, b, c, d, e, g: f((a, b, c, d, e, g)),
    7: lambda f: lambda typingctx, a, b, c, d, e, g, h: f((a, b, c, d, e, g, h)),
}


def _params(stub: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(stub).parameters)


def literal_int(op: str, name: str, ty: Any, allowed: Container[int], accepted: str) -> int:
    """The value of literal-int type `ty`, checked against `allowed` (described by `accepted`)."""
    if not isinstance(ty, types.IntegerLiteral):
        raise RequireLiteralValue(
            f"{op}: {name} must be a compile-time literal int ({accepted}), got {ty}; "
            "compute it in Python and write it into the kernel source or close over it"
        )
    value = int(ty.literal_value)
    if value not in allowed:
        raise NumbaTypeError(f"{op}: {name} must be {accepted}, got {value}")
    return value


def _float_tuple_count(op: str, acc: Any) -> int:
    if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32):
        raise NumbaTypeError(
            f"{op}: the accumulator must be a UniTuple(float32, n) (from wgmma_zeros or a "
            f"previous wgmma), got {acc}"
        )
    return int(acc.count)


def _tied_asm(builder, text: str, acc: list[Any], ins: list[Any], values: list[Any]) -> Any:
    """Inline asm whose float outputs are tied to the float inputs `acc`, then `ins`/`values`."""
    n = len(acc)
    ret = ir.FloatType() if n == 1 else ir.LiteralStructType([ir.FloatType()] * n)
    extra = [ir.IntType(ty.bitwidth) for ty in ins]
    constraints = ["=f"] * n + [str(i) for i in range(n)]
    constraints += [{64: "l", 32: "r"}[ty.bitwidth] for ty in ins] + ["~{memory}"]
    fnty = ir.FunctionType(ret, [ir.FloatType()] * n + extra)
    call = ir.InlineAsm(fnty, text, ",".join(constraints), side_effect=True)
    return builder.call(call, [*acc, *values])


def _unpack(builder, value: Any, count: int) -> list[Any]:
    return [builder.extract_value(value, i) for i in range(count)]


def _repack(context, builder, retty: Any, value: Any) -> Any:
    parts = [value] if retty.count == 1 else _unpack(builder, value, retty.count)
    return context.make_tuple(builder, retty, parts)


# --- Factories -----------------------------------------------------------------------------------


def asm_intrinsic(stub, text: str, ins: tuple[Any, ...], out: Any = None):
    """Intrinsic running PTX `text` ($0 = output if any, then the inputs) on integer arguments."""
    op, names = stub.__name__, _params(stub)

    def type_args(args: tuple[Any, ...]):
        for name, ty in zip(names, args, strict=True):
            validate_integer(op, name, ty)

        def codegen(context, builder, sig, values):
            vals = casts(context, builder, sig, values, list(ins))
            result = inline_asm(builder, [out] if out else [], text, list(ins), vals, effect=True)
            return result if out else context.get_dummy_value()

        return (out or types.void)(*args), codegen

    return implements(stub)(_ARITY[len(ins)](type_args))


def literal_asm_intrinsic(stub, template: str, allowed: Container[int], accepted: str):
    """Intrinsic emitting `template.format(n=n)` for one literal-int argument `n`."""
    op = template.split()[0]

    @implements(stub)
    def typer(typingctx, n):
        value = literal_int(op, _params(stub)[0], n, allowed, accepted)

        def codegen(context, builder, sig, args):
            inline_asm(builder, [], template.format(n=value), [], [], effect=True)
            return context.get_dummy_value()

        return types.void(n), codegen

    return typer


def shared_base_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, arr):
        if not isinstance(arr, types.Array):
            raise NumbaTypeError(f"shared_base: arr must be a shared array, got {arr}")

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            spaced = builder.addrspacecast(
                data, ir.PointerType(data.type.pointee, addrspace=SHARED_ADDRSPACE)
            )
            return builder.ptrtoint(spaced, ir.IntType(32))

        return types.uint32(arr), codegen

    return typer


def st_shared_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, addr, value):
        validate_integer("st.shared.b32", "addr", addr)
        if value == types.float32:
            vty = types.float32
        else:
            validate_integer("st.shared.b32", "value (or a float32)", value)
            vty = types.uint32

        def codegen(context, builder, sig, args):
            vals = casts(context, builder, sig, args, [types.uint32, vty])
            ins = [types.uint32, vty]
            inline_asm(builder, [], "st.shared.b32 [$0], $1;", ins, vals, effect=True)
            return context.get_dummy_value()

        return types.void(addr, value), codegen

    return typer


def wgmma_intrinsic(stub, ab_type: str, k: int = 16, transposes: bool = True):
    """Intrinsic for `wgmma.mma_async.sync.aligned.m64nNk{k}.f32.{ab_type}.{ab_type}` (SS form).

    The 16-bit forms (k 16) end in the literal operands trans_a, trans_b; the FP8 forms (k 32)
    have none, as their operands are K-major only (PTX ISA: the transpose is only supported for
    .f16/.bf16), so their stubs stop at scale_d.
    """
    op = f"wgmma.mma_async.sync.aligned.m64nNk{k}.f32.{ab_type}.{ab_type}"
    allowed = ", ".join(map(str, WGMMA_N[:3])) + ", ..., 256"

    def type_args(args: tuple[Any, ...]):
        acc, desc_a, desc_b, scale_d, *trans = args
        regs = _float_tuple_count(op, acc)
        if 2 * regs not in WGMMA_N:
            raise NumbaTypeError(
                f"{op}: N = 2 * len(acc) must be one of {allowed} (multiples of 8), got "
                f"len(acc) = {regs} (N = {2 * regs}); make the accumulator with wgmma_zeros(N // 2)"
            )
        for name, ty in (("desc_a", desc_a), ("desc_b", desc_b), ("scale_d", scale_d)):
            validate_integer(op, name, ty)
        imms = ""
        if transposes:
            ta = literal_int(op, "trans_a", trans[0], (0, 1), "0 (K-major) or 1 (M-major)")
            tb = literal_int(op, "trans_b", trans[1], (0, 1), "0 (K-major) or 1 (N-major)")
            imms = f", {ta}, {tb}"
        d = ", ".join(f"${i}" for i in range(regs))
        text = (
            "{\n.reg .pred p;\n"
            f"setp.ne.b32 p, ${2 * regs + 2}, 0;\n"
            f"{op.replace('nN', f'n{2 * regs}')} {{{d}}}, ${2 * regs}, ${2 * regs + 1}, "
            f"p, 1, 1{imms};\n}}"
        )

        def codegen(context, builder, sig, args):
            ins = [types.uint64, types.uint64, types.uint32]
            vals = [
                context.cast(builder, v, t, to)
                for v, t, to in zip(args[1:4], sig.args[1:4], ins, strict=True)
            ]
            out = _tied_asm(builder, text, _unpack(builder, args[0], regs), ins, vals)
            return _repack(context, builder, sig.return_type, out)

        return acc(*args), codegen

    return implements(stub)(_ARITY[6 if transposes else 4](type_args))


def fence_operand_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, acc):
        regs = _float_tuple_count("fence_operand", acc)

        def codegen(context, builder, sig, args):
            out = _tied_asm(builder, "", _unpack(builder, args[0], regs), [], [])
            return _repack(context, builder, sig.return_type, out)

        return acc(acc), codegen

    return typer


def _promote_checked(op: str, acc: Any, part: Any, scales: dict[str, Any]) -> int:
    """The registers of *acc*, once *part* is an accumulator like it and *scales* float32."""
    regs = _float_tuple_count(op, acc)
    if part != acc:
        raise NumbaTypeError(
            f"{op}: the partial sums must be an accumulator like acc ({acc}), got {part}"
        )
    for name, ty in scales.items():
        if ty != types.float32:
            raise NumbaTypeError(f"{op}: {name} must be float32, got {ty}")
    return regs


def _promote_fmas(builder, accs: list[Any], parts: list[Any], pairs: list[Any]) -> list[Any]:
    """fma(part, scale, acc) per register, register i taking ``pairs[i]``'s scale of its row
    (16 w + l // 4 + 8 ((i >> 1) & 1))."""
    return [
        builder.fma(p, pair[(i >> 1) & 1], a)
        for i, (a, p, pair) in enumerate(zip(accs, parts, pairs, strict=True))
    ]


def wgmma_promote_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, acc, part, scale_lo, scale_hi):
        scales = {"scale_lo": scale_lo, "scale_hi": scale_hi}
        regs = _promote_checked("wgmma_promote", acc, part, scales)

        def codegen(context, builder, sig, args):
            accs, parts = _unpack(builder, args[0], regs), _unpack(builder, args[1], regs)
            out = _promote_fmas(builder, accs, parts, [args[2:4]] * regs)
            return context.make_tuple(builder, sig.return_type, out)

        return acc(acc, part, scale_lo, scale_hi), codegen

    return typer


def wgmma_promote_split_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, acc, part, scale_lo, scale_hi, next_lo, next_hi, columns):
        scales = {"scale_lo": scale_lo, "scale_hi": scale_hi, "next_lo": next_lo,
                  "next_hi": next_hi}  # fmt: skip
        regs = _promote_checked("wgmma_promote_split", acc, part, scales)
        accepted = f"a multiple of 8 in 8..{regs * 2 - 8} (columns of an m64n{regs * 2} tile)"
        cut = literal_int("wgmma_promote_split", "columns", columns, range(8, regs * 2, 8),
                          accepted)  # fmt: skip

        def codegen(context, builder, sig, args):
            accs, parts = _unpack(builder, args[0], regs), _unpack(builder, args[1], regs)
            pairs = [args[2:4]] * (cut // 2) + [args[4:6]] * (regs - cut // 2)
            out = _promote_fmas(builder, accs, parts, pairs)
            return context.make_tuple(builder, sig.return_type, out)

        sig = acc(acc, part, scale_lo, scale_hi, next_lo, next_hi, columns)
        return sig, codegen

    return typer


def wgmma_zeros_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, count):
        n = literal_int("wgmma_zeros", "count", count, range(1, 129), "1..128")
        retty = types.UniTuple(types.float32, n)

        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, retty, [ir.Constant(ir.FloatType(), 0.0)] * n)

        return retty(count), codegen

    return typer


def wgmma_desc_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, addr, lbo_bytes, sbo_bytes, swizzle):
        for name, ty in (("addr", addr), ("lbo_bytes", lbo_bytes), ("sbo_bytes", sbo_bytes)):
            validate_integer("wgmma_desc", name, ty)
        accepted = "the swizzle span in bytes: 128, 64, 32 or 0 (none)"
        code = SWIZZLE_CODES[literal_int("wgmma_desc", "swizzle", swizzle, SWIZZLE_CODES, accepted)]

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            words = [
                context.cast(builder, v, t, types.uint64)
                for v, t in zip(args[:3], sig.args[:3], strict=True)
            ]
            desc = ir.Constant(i64, code << 62)
            for value, shift in zip(words, (0, 16, 32), strict=True):
                field = builder.lshr(
                    builder.and_(value, ir.Constant(i64, _FIELD_MASK)), ir.Constant(i64, 4)
                )
                desc = builder.or_(desc, builder.shl(field, ir.Constant(i64, shift)))
            return desc

        return types.uint64(addr, lbo_bytes, sbo_bytes, swizzle), codegen

    return typer
