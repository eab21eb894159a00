"""GELU for the generated epilogues: x * erfc(-x / sqrt 2) / 2 on two MUFU ops (an intrinsic)."""

from __future__ import annotations

from typing import Final

import numpy as np
from llvmlite import ir
from numba.core.errors import TypingError
from numba.cuda import types
from numba.cuda.core import config

from .intrinsics import implements, inline_asm

__all__ = ["gelu"]

# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0, with fractional error below 1.2e-7
# everywhere (Numerical Recipes' erfcc, a Chebyshev fit). P's coefficients, t^0 first.
ERFC_COEFFS: Final = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip
LOG2_E: Final = 1.4426950408889634
RSQRT2: Final = 0.7071067811865476


def gelu(x):
    """GELU, exact form x * Phi(x) = x * erfc(-x / sqrt 2) / 2, for float32 `x`.

    About 20 instructions with one `rcp.approx` and one `ex2.approx` (libdevice's erff costs 32
    in x * (1 + erf(x / sqrt 2)) / 2), and no cancellation for negative x, where 1 + erf loses
    the relative accuracy of small results: within 4e-7 absolute and 2e-5 relative of the
    exact value over [-12, 12] (the float32 model in tests/unit/test_mathfuncs.py).
    """


def gelu_model(x: np.ndarray | float) -> np.ndarray:
    """The float32 arithmetic of ``gelu`` in numpy (the simulator's emulation)."""
    x = np.asarray(x, np.float32)
    z = np.abs(x) * np.float32(RSQRT2)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * z)
        p = np.full_like(t, np.float32(ERFC_COEFFS[-1]))
        for coeff in ERFC_COEFFS[-2::-1]:
            p = p * t + np.float32(coeff)
        half = np.float32(0.5) * t * np.exp2((p - z * z) * np.float32(LOG2_E))
    return np.where(x >= 0, x * (np.float32(1.0) - half), x * half).astype(np.float32)


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

            def mufu(text: str, arg: ir.Value) -> ir.Value:
                return inline_asm(
                    builder, [types.float32], f"{text} $0, $1;", [types.float32], [arg],
                    effect=False,
                )  # fmt: skip

            # NVVM (LLVM 7 IR) has no llvm.fabs and no fneg: |x| as a select of -0.0 - x
            magnitude = builder.select(
                builder.fcmp_ordered("<", v, const(-0.0)), builder.fsub(const(-0.0), v), v
            )
            z = builder.fmul(magnitude, const(RSQRT2))
            t = mufu("rcp.approx.ftz.f32", builder.fadd(const(1.0), builder.fmul(const(0.5), z)))
            p = const(ERFC_COEFFS[-1])
            for coeff in ERFC_COEFFS[-2::-1]:
                p = builder.fadd(builder.fmul(p, t), const(coeff))
            e = mufu(
                "ex2.approx.ftz.f32",
                builder.fmul(builder.fsub(p, builder.fmul(z, z)), const(LOG2_E)),
            )
            half = builder.fmul(builder.fmul(const(0.5), t), e)
            positive = builder.fcmp_ordered(">=", v, const(0.0))
            phi = builder.select(positive, builder.fsub(const(1.0), half), half)
            return builder.fmul(v, phi)

        return types.float32(x), codegen

    return typer


if config.ENABLE_CUDASIM:

    def gelu(x):  # noqa: ANN001, ANN201, F811 - the simulator's emulation
        return np.float32(gelu_model(x))

else:
    gelu = _gelu_intrinsic(gelu)  # noqa: F811
