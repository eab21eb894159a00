"""GELU for the generated epilogues: x * erfc(-x / sqrt 2) / 2 on two MUFU ops (an intrinsic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba.core.errors import TypingError
from numba.cuda import types

from mmaplug.cuda.asm import implements, inline_asm
from mmaplug.cuda.binding import bind

__all__ = ["gelu"]

# erfc(z) = t 2^(P(t) - z^2 log2 e), t = 1 / (1 + z / 2), z >= 0: the form of Numerical
# Recipes' erfcc, with P our own degree-7 fit (scripts/gelu_fit.py: an iteratively reweighted
# least-squares minimax fit of log2(erfc(z) / t) + z^2 log2 e over the t of 0 <= z <= 14 /
# sqrt 2), within 9.2e-7 of it in log2, 6.4e-7 relative in erfc. P's coefficients, t^0 first,
# the first less 1: the erfc term's factor 1/2 taken into the exponent.
LOG2_COEFFS: Final = (
    -1.8257693565698514 - 1.0, 1.4417966433054432, 0.5611574291503737, -0.033573930524358975,
    0.4606355080854153, -1.3971869155750007, 1.057606687578597, -0.2646669833297655,
)  # fmt: skip
LOG2_E: Final = 1.4426950408889634
RSQRT2: Final = 0.7071067811865476
# |x| is capped at the end of P's range: past it the erfc term is below float32's normal range
# (|x| erfc(14 / sqrt 2) / 2 < 1e-43), and an infinite x makes that term 0 * finite, not inf * 0
MAGNITUDE_CAP: Final = 14.0


def gelu(x):
    """GELU, exact form x * Phi(x) = x * erfc(-x / sqrt 2) / 2, for float32 `x`.

    Computed as ``max(x, 0) - |x| erfc(|x| / sqrt 2) / 2`` (the same value for either sign),
    which needs no sign test: 16 instructions with one `rcp.approx` and one `ex2.approx`
    (libdevice's erff costs 32 in x * (1 + erf(x / sqrt 2)) / 2), and no cancellation for
    negative x, where 1 + erf loses the relative accuracy of small results: within 4e-7
    absolute and 2.5e-5 relative of the exact value over [-12, 12] (the float32 model in
    tests/unit/test_mathfuncs.py). gelu(inf) = inf and NaN stays NaN; gelu(-inf) is 0, the
    limit (torch's erf form gives NaN there).
    """


def gelu_model(x: np.ndarray | float) -> np.ndarray:
    """The float32 arithmetic of ``gelu`` in numpy (the simulator's emulation)."""
    f32 = np.float32
    x = np.asarray(x, f32)
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        relu = np.where(np.isnan(x), x, np.maximum(x, f32(0.0)))
        a = np.fmin(np.abs(x), f32(MAGNITUDE_CAP))
        t = f32(1.0) / (a * f32(0.5 * RSQRT2) + f32(1.0))
        p = np.full_like(t, f32(LOG2_COEFFS[-1]))
        for coeff in LOG2_COEFFS[-2::-1]:
            p = p * t + f32(coeff)
        half_erfc = np.exp2(a * a * f32(-0.5 * LOG2_E) + p)  # erfc(a / sqrt 2) / 2, over t
        half_erfc = np.where(half_erfc < f32(2.0**-126), f32(0.0), half_erfc)  # (.ftz)
        return (relu - (a * t) * half_erfc).astype(f32)


def _hex(value: float) -> str:
    """A float32 PTX literal (0fXXXXXXXX)."""
    return f"0f{int(np.float32(value).view(np.uint32)):08X}"


def _gelu_intrinsic(stub):  # noqa: ANN001, ANN202
    @implements(stub)
    def typer(typingctx, x):  # noqa: ANN001, ANN202
        if not isinstance(x, types.Float):
            raise TypingError(f"gelu takes a float, got {x}")

        def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
            f32 = ir.FloatType()
            v = context.cast(builder, args[0], sig.args[0], types.float32)

            def const(value: float) -> ir.Constant:
                return ir.Constant(f32, float(np.float32(value)))

            def fma(x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
                return builder.fadd(builder.fmul(x, y), z)  # (ptxas contracts it)

            def pure(text: str, *operands: ir.Value) -> ir.Value:
                return inline_asm(
                    builder, [types.float32], text, [types.float32] * len(operands),
                    list(operands), effect=False,
                )  # fmt: skip

            relu = pure("max.NaN.f32 $0, $1, 0f00000000;", v)  # NaN stays NaN
            a = pure(f"min.f32 $0, $1, {_hex(MAGNITUDE_CAP)};", pure("abs.f32 $0, $1;", v))
            t = pure("rcp.approx.ftz.f32 $0, $1;", fma(a, const(0.5 * RSQRT2), const(1.0)))
            p = const(LOG2_COEFFS[-1])
            for coeff in LOG2_COEFFS[-2::-1]:
                p = fma(p, t, const(coeff))
            u = fma(builder.fmul(a, a), const(-0.5 * LOG2_E), p)
            half_erfc = pure("ex2.approx.ftz.f32 $0, $1;", u)  # erfc(a / sqrt 2) / 2, over t
            return builder.fsub(relu, builder.fmul(builder.fmul(a, t), half_erfc))  # one FFMA

        return types.float32(x), codegen

    return typer


def _instantiate() -> dict[str, Any]:
    return {gelu.__name__: _gelu_intrinsic(gelu)}


def _emulations() -> Mapping[str, Any]:
    def gelu(x: Any) -> np.float32:
        """Emulate gelu: ``gelu_model``, its float32 arithmetic in numpy."""
        return np.float32(gelu_model(x))

    return {gelu.__name__: gelu}


bind(globals(), _instantiate, _emulations)
