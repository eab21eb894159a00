"""Inline-PTX intrinsics for Ampere tensor-core kernels: ldmatrix, mma.sync, cp.async and cvt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from llvmlite import ir
from numba.cuda import cgutils, types
from numba.cuda.core import config
from numba.cuda.core.errors import NumbaTypeError, RequireLiteralValue
from numba.cuda.extending import intrinsic

# Docs references (PTX ISA):
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-ldmatrix
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-mma
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async-wait-group
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cvt
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-ld
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-st

__all__ = [
    "bf16_to_f32",
    "cp_async_4",
    "cp_async_8",
    "cp_async_16",
    "cp_async_commit",
    "cp_async_wait_all",
    "cp_async_wait_group",
    "ex2_approx",
    "f16_to_f32",
    "f32_to_bf16",
    "f32_to_f16",
    "global_addr",
    "ld_shared_v4_f32",
    "ldmatrix_x1",
    "ldmatrix_x1_trans",
    "ldmatrix_x2",
    "ldmatrix_x2_trans",
    "ldmatrix_x4",
    "ldmatrix_x4_trans",
    "mma_m16n8k16_bf16",
    "mma_m16n8k16_f16",
    "rcp_approx",
    "smem_addr",
    "st_global_v2_b32",
    "st_global_v4_b32",
]

WARP_SIZE: Final = 32
# m, n, k of one mma.sync; 32-bit registers per lane for A, B and C/D.
MMA_SHAPE: Final = (16, 8, 16)
MMA_FRAGMENT_REGS: Final = {"a": 4, "b": 2, "c": 4}
# Numba type -> inline-asm register constraint.
CONSTRAINT_MAP: Final = {
    types.uint16: "h",
    types.uint32: "r",
    types.uint64: "l",
    types.float32: "f",
}
# Shared state-space pointers are 32-bit; see "Generic Addressing" in the PTX ISA.
SHARED_ADDRSPACE: Final = 3
GLOBAL_ADDRSPACE: Final = 1


# --- Stubs: the public names; each is replaced by its intrinsic (or emulation) below. ----------


def smem_addr(arr, i):
    """Return the 32-bit shared-state-space byte address of element `i` of 1-D shared array `arr`.

    Pass the final flat index: never do arithmetic on the result (the simulator returns a handle).
    """


def ldmatrix_x1(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x1.shared.b16`; return one uint32.

    Lanes 0-7 pass the addresses of rows 0-7 (16 bytes each) of the 8x8 b16 matrix. Lane `l`
    receives row `l >> 2`, columns `2 * (l % 4)` (low half) and `2 * (l % 4) + 1` (high half).
    """


def ldmatrix_x2(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x2.shared.b16`; return a 2-tuple of uint32.

    Lanes `8 * j + r` pass row `r` of matrix `j`; register `j` holds matrix `j` as in ldmatrix_x1.
    """


def ldmatrix_x4(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x4.shared.b16`; return a 4-tuple of uint32.

    Lanes `8 * j + r` pass row `r` of matrix `j`; register `j` holds matrix `j` as in ldmatrix_x1.
    For an mma A tile (16x16, row-major) pass rows `lane % 16`, column block `8 * (lane // 16)`.
    """


def ldmatrix_x1_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`: ldmatrix_x1 of the transpose.

    Lane `l` receives stored rows `2 * (l % 4)` (low half) and `2 * (l % 4) + 1`, column `l >> 2`.
    """


def ldmatrix_x2_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`: ldmatrix_x2 of the transposes.

    For an mma B tile stored k-major (16x8, row = k) pass rows `lane % 16` from lanes 0-15.
    """


def ldmatrix_x4_trans(addr):
    """Generate `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: ldmatrix_x4 of the transposes."""


def mma_m16n8k16_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`; return (d0, d1, d2, d3).

    With `g = lane >> 2`, `t = lane % 4`, each uint32 packing two values, low half = lower index:
    A (16x16): a0 = (row g, cols 2t, 2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..).
    B (16x8, k x n): b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g).
    C, D (16x8, float32): c0, c1 = (row g, cols 2t, 2t+1); c2, c3 = (row g+8, cols 2t, 2t+1).
    """


def mma_m16n8k16_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """Generate `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`; layout as for f16."""


def cp_async_16(dst, src, index, src_bytes):
    """Generate `cp.async.cg.shared.global [dst], [&src[index]], 16, src_bytes`.

    `dst` comes from smem_addr; `src_bytes` (0..16) bytes are read and the rest zero-filled.
    With `src_bytes == 0` nothing is read but the address is still formed: pass a valid index (0).
    """


def cp_async_8(dst, src, index, src_bytes):
    """Generate `cp.async.ca.shared.global [dst], [&src[index]], 8, src_bytes`; see cp_async_16."""


def cp_async_4(dst, src, index, src_bytes):
    """Generate `cp.async.ca.shared.global [dst], [&src[index]], 4, src_bytes`; see cp_async_16."""


def cp_async_commit():
    """Generate `cp.async.commit_group`: close the group of cp.async issued so far."""


def cp_async_wait_group(n):
    """Generate `cp.async.wait_group n`: wait until at most `n` groups are pending (`n` literal)."""


def cp_async_wait_all():
    """Generate `cp.async.wait_all`: wait for every cp.async issued by this thread."""


def f16_to_f32(bits):
    """Generate `cvt.f32.f16`: widen the float16 held in uint16 `bits` (exact)."""


def f32_to_f16(x):
    """Generate `cvt.rn.f16.f32`: round float32 `x` to float16 (nearest-even); return its bits."""


def bf16_to_f32(bits):
    """Widen the bfloat16 held in uint16 `bits` (exact: a 16-bit shift; `cvt.f32.bf16` is sm_90)."""


def f32_to_bf16(x):
    """Generate `cvt.rn.bf16.f32` (sm_80+): round float32 `x` to bfloat16; return its bits."""


def ex2_approx(x):
    """Generate `ex2.approx.ftz.f32`: 2 ** float32 `x` (one MUFU op, ~2 ulp)."""


def rcp_approx(x):
    """Generate `rcp.approx.ftz.f32`: 1 / float32 `x` (one MUFU op, ~1 ulp)."""


def global_addr(arr, i):
    """Return the 64-bit global-state-space byte address of element `i` of 1-D array `arr`.

    Meant for alignment tests (`global_addr(a, 0) & 15`); index arrays with flat indices.
    """


def ld_shared_v4_f32(addr):
    """Generate `ld.shared.v4.f32`: four consecutive float32 at 16-byte aligned `addr`.

    `addr` comes from smem_addr; return a 4-tuple of float32 (lowest address first).
    """


def st_global_v2_b32(arr, index, w0, w1):
    """Generate `st.global.v2.b32 [&arr[index]], {w0, w1}`: one 8-byte store.

    The words (all uint32 or all float32) land lowest address first; a uint16 array takes two
    elements per word, low half first. The byte address must be a multiple of 8.
    """


def st_global_v4_b32(arr, index, w0, w1, w2, w3):
    """Generate `st.global.v4.b32 [&arr[index]], {w0, w1, w2, w3}`: 16 bytes, like v2."""


# --- Validation (typing time) --------------------------------------------------------------------


def validate_integer(instruction: str, name: str, ty: Any) -> None:
    if not isinstance(ty, types.Integer):
        raise NumbaTypeError(f"{instruction}: {name} must be an integer, got {ty}")


def _validate_float(instruction: str, name: str, ty: Any) -> None:
    if not isinstance(ty, types.Float):
        raise NumbaTypeError(f"{instruction}: {name} must be a float, got {ty}")


def _validate_array(instruction: str, name: str, ty: Any) -> None:
    if not isinstance(ty, types.Array) or ty.ndim != 1:
        raise NumbaTypeError(f"{instruction}: {name} must be a 1-D array, got {ty}")


def _validate_literal_count(instruction: str, ty: Any) -> int:
    if not isinstance(ty, types.IntegerLiteral):
        raise RequireLiteralValue(
            f"{instruction}: the group count must be a compile-time literal int, got {ty}; "
            "compute it in Python and close over it"
        )
    if ty.literal_value < 0:
        raise NumbaTypeError(f"{instruction}: the group count must be >= 0, got {ty.literal_value}")
    return int(ty.literal_value)


# --- Codegen helpers -----------------------------------------------------------------------------


def _ir_type(ty: Any) -> ir.Type:
    return ir.FloatType() if ty == types.float32 else ir.IntType(ty.bitwidth)


def inline_asm(
    builder, out: list[Any], text: str, ins: list[Any], values: list[Any], *, effect: bool
):
    """Call inline asm `text` with outputs of Numba types `out` and inputs `values` (of `ins`)."""
    outs = [_ir_type(ty) for ty in out]
    ret = ir.VoidType() if not outs else outs[0] if len(outs) == 1 else ir.LiteralStructType(outs)
    constraints = [f"={CONSTRAINT_MAP[ty]}" for ty in out] + [CONSTRAINT_MAP[ty] for ty in ins]
    if effect:
        constraints.append("~{memory}")
    fnty = ir.FunctionType(ret, [_ir_type(ty) for ty in ins])
    asm = ir.InlineAsm(fnty, text, ",".join(constraints), side_effect=effect)
    return builder.call(asm, values)


def casts(context, builder, sig, args, targets) -> list[Any]:
    return [
        context.cast(builder, v, t, to) for v, t, to in zip(args, sig.args, targets, strict=True)
    ]


def _item_address(context, builder, aryty, ary, index, idxty, addrspace: int, bits: int):
    """Integer `bits`-wide address of `ary[index]` in state space `addrspace` (cvta.to.*)."""
    array = context.make_array(aryty)(context, builder, value=ary)
    idx = context.cast(builder, index, idxty, types.intp)
    ptr = cgutils.get_item_pointer(context, builder, aryty, array, [idx], wraparound=False)
    spaced = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace=addrspace))
    return builder.ptrtoint(spaced, ir.IntType(bits))


def _tuple(context, builder, retty, values):
    if not isinstance(retty, types.UniTuple):
        return values
    parts = [builder.extract_value(values, i) for i in range(retty.count)]
    return context.make_tuple(builder, retty, parts)


def implements(stub: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    """Make an intrinsic from `typer` that carries the name and docstring of `stub`."""

    def wrap(typer: Callable[..., Any]) -> Any:
        typer.__name__, typer.__qualname__, typer.__doc__ = (
            stub.__name__,
            stub.__name__,
            stub.__doc__,
        )
        return intrinsic(typer)

    return wrap


# --- Factories, one per instruction family -------------------------------------------------------


def _smem_addr_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, arr, i):
        _validate_array("smem_addr", "arr", arr)
        validate_integer("smem_addr", "i", i)

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args
            return _item_address(
                context, builder, aryty, args[0], args[1], idxty, SHARED_ADDRSPACE, 32
            )

        return types.uint32(arr, i), codegen

    return typer


def _ldmatrix_intrinsic(stub, count: int, trans: bool):
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
            return _tuple(context, builder, sig.return_type, out)

        return retty(addr), codegen

    return typer


def _mma_intrinsic(stub, ab_type: str):
    text = f"mma.sync.aligned.m16n8k16.row.col.f32.{ab_type}.{ab_type}.f32"
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
            _validate_float(text, f"c{i}", ty)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, ins)
            out = inline_asm(builder, [types.float32] * regs[0], asm, ins, values, effect=False)
            return _tuple(context, builder, sig.return_type, out)

        sig = types.UniTuple(types.float32, regs[0])(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        return sig, codegen

    return typer


def _cp_async_intrinsic(stub, size: int, cache: str):
    text = f"cp.async.{cache}.shared.global"
    asm = f"{text} [$0], [$1], {size}, $2;"

    @implements(stub)
    def typer(typingctx, dst, src, index, src_bytes):
        validate_integer(text, "dst", dst)
        _validate_array(text, "src", src)
        validate_integer(text, "index", index)
        validate_integer(text, "src_bytes", src_bytes)

        def codegen(context, builder, sig, args):
            dstty, srcty, idxty, nty = sig.args
            dst_v = context.cast(builder, args[0], dstty, types.uint32)
            src_v = _item_address(
                context, builder, srcty, args[1], args[2], idxty, GLOBAL_ADDRSPACE, 64
            )
            n_v = context.cast(builder, args[3], nty, types.uint32)
            ins = [types.uint32, types.uint64, types.uint32]
            inline_asm(builder, [], asm, ins, [dst_v, src_v, n_v], effect=True)
            return context.get_dummy_value()

        return types.void(dst, src, index, src_bytes), codegen

    return typer


def _cp_async_sync_intrinsic(stub, text: str):
    @implements(stub)
    def typer(typingctx):
        def codegen(context, builder, sig, args):
            inline_asm(builder, [], f"{text};", [], [], effect=True)
            return context.get_dummy_value()

        return types.void(), codegen

    return typer


def _cp_async_wait_group_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, n):
        count = _validate_literal_count("cp.async.wait_group", n)

        def codegen(context, builder, sig, args):
            inline_asm(builder, [], f"cp.async.wait_group {count};", [], [], effect=True)
            return context.get_dummy_value()

        return types.void(n), codegen

    return typer


def _global_addr_intrinsic(stub):
    @implements(stub)
    def typer(typingctx, arr, i):
        _validate_array("global_addr", "arr", arr)
        validate_integer("global_addr", "i", i)

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args
            return _item_address(
                context, builder, aryty, args[0], args[1], idxty, GLOBAL_ADDRSPACE, 64
            )

        return types.uint64(arr, i), codegen

    return typer


def _ld_shared_v_intrinsic(stub, count: int, ty: Any):
    text = f"ld.shared.v{count}.{'f' if ty == types.float32 else 'b'}32"
    asm = f"{text} {{{', '.join(f'${i}' for i in range(count))}}}, [${count}];"

    @implements(stub)
    def typer(typingctx, addr):
        validate_integer(text, "addr", addr)

        def codegen(context, builder, sig, args):
            values = casts(context, builder, sig, args, [types.uint32])
            out = inline_asm(builder, [ty] * count, asm, [types.uint32], values, effect=True)
            return _tuple(context, builder, sig.return_type, out)

        return types.UniTuple(ty, count)(addr), codegen

    return typer


def _st_global_v_intrinsic(stub, count: int):
    text = f"st.global.v{count}.b32"
    asm = f"{text} [$0], {{{', '.join(f'${i + 1}' for i in range(count))}}};"

    def type_words(arr, index, words):
        _validate_array(text, "arr", arr)
        validate_integer(text, "index", index)
        wty = words[0]
        if wty not in (types.uint32, types.float32) or any(w != wty for w in words):
            raise NumbaTypeError(
                f"{text}: the words must be all uint32 or all float32, got {words}"
            )

        def codegen(context, builder, sig, args):
            aryty, idxty = sig.args[:2]
            addr = _item_address(
                context, builder, aryty, args[0], args[1], idxty, GLOBAL_ADDRSPACE, 64
            )
            inline_asm(
                builder, [], asm, [types.uint64] + [wty] * count, [addr, *args[2:]], effect=True
            )
            return context.get_dummy_value()

        return types.void(arr, index, *words), codegen

    if count == 2:

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


def _cvt_intrinsic(stub, src: Any, dst: Any, text: str | None):
    validate = _validate_float if src == types.float32 else validate_integer

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


# --- Variant tables and instantiation ------------------------------------------------------------

LDMATRIX_VARIANTS: Final = {
    ldmatrix_x1: (1, False),
    ldmatrix_x2: (2, False),
    ldmatrix_x4: (4, False),
    ldmatrix_x1_trans: (1, True),
    ldmatrix_x2_trans: (2, True),
    ldmatrix_x4_trans: (4, True),
}
MMA_VARIANTS: Final = {mma_m16n8k16_f16: "f16", mma_m16n8k16_bf16: "bf16"}
# cp-size -> cache operator: .cg (L2 only) is allowed for 16 bytes only.
CP_ASYNC_VARIANTS: Final = {cp_async_16: (16, "cg"), cp_async_8: (8, "ca"), cp_async_4: (4, "ca")}
CP_ASYNC_SYNC_VARIANTS: Final = {
    cp_async_commit: "cp.async.commit_group",
    cp_async_wait_all: "cp.async.wait_all",
}
# stub -> 32-bit words per access (and the loaded type).
LD_SHARED_VARIANTS: Final = {ld_shared_v4_f32: (4, types.float32)}
ST_GLOBAL_VARIANTS: Final = {st_global_v2_b32: 2, st_global_v4_b32: 4}
# stub -> (argument type, result type, mnemonic (cvt, MUFU) or None for the bf16 shift).
CVT_VARIANTS: Final = {
    f16_to_f32: (types.uint16, types.float32, "cvt.f32.f16"),
    f32_to_f16: (types.float32, types.uint16, "cvt.rn.f16.f32"),
    bf16_to_f32: (types.uint16, types.float32, None),
    f32_to_bf16: (types.float32, types.uint16, "cvt.rn.bf16.f32"),
    ex2_approx: (types.float32, types.float32, "ex2.approx.ftz.f32"),
    rcp_approx: (types.float32, types.float32, "rcp.approx.ftz.f32"),
}


def _instantiate() -> dict[str, Any]:
    stub: Any  # the stubs of the variant tables have different signatures
    text: Any
    made = {smem_addr.__name__: _smem_addr_intrinsic(smem_addr)}
    made[cp_async_wait_group.__name__] = _cp_async_wait_group_intrinsic(cp_async_wait_group)
    made[global_addr.__name__] = _global_addr_intrinsic(global_addr)
    for stub, (count, ty) in LD_SHARED_VARIANTS.items():
        made[stub.__name__] = _ld_shared_v_intrinsic(stub, count, ty)
    for stub, count in ST_GLOBAL_VARIANTS.items():
        made[stub.__name__] = _st_global_v_intrinsic(stub, count)
    for stub, (count, trans) in LDMATRIX_VARIANTS.items():
        made[stub.__name__] = _ldmatrix_intrinsic(stub, count, trans)
    for stub, ab_type in MMA_VARIANTS.items():
        made[stub.__name__] = _mma_intrinsic(stub, ab_type)
    for stub, (size, cache) in CP_ASYNC_VARIANTS.items():
        made[stub.__name__] = _cp_async_intrinsic(stub, size, cache)
    for stub, text in CP_ASYNC_SYNC_VARIANTS.items():
        made[stub.__name__] = _cp_async_sync_intrinsic(stub, text)
    for stub, (src, dst, text) in CVT_VARIANTS.items():
        made[stub.__name__] = _cvt_intrinsic(stub, src, dst, text)
    return made


if config.ENABLE_CUDASIM:
    # The simulator cannot run inline PTX: the same names bind to Python emulations.
    from mmaplug.sim import intrinsics as _emulation

    globals().update({name: getattr(_emulation, name) for name in __all__})
else:
    globals().update(_instantiate())
