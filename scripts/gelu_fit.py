"""The polynomial of the epilogues' GELU (``mmaplug.cuda.mathfuncs.LOG2_COEFFS``), fitted again.

erfc(z) = t 2^(P(t) - z^2 log2 e) with t = 1 / (1 + z / 2): P(t) = log2(erfc(z) / t) + z^2 log2 e
is smooth in t over the t of 0 <= z <= ``MAGNITUDE_CAP`` / sqrt 2. This fits P of a degree by
Lawson's iteration (least squares on Chebyshev nodes, each node's weight raised where the error
is largest, which tends to the minimax polynomial) and prints, per degree, the fit's largest
error and the float32 GELU's against the exact value on [-12, 12], the bounds of
``tests/unit/test_mathfuncs.py``; numpy and the standard library only::

    python scripts/gelu_fit.py        # degrees 5-9
    python scripts/gelu_fit.py 7      # the coefficients of degree 7, t^0 first
"""

from __future__ import annotations

import math
import sys

import numpy as np

from mmaplug.cuda import mathfuncs

LOG2_E = mathfuncs.LOG2_E


def target(t: np.ndarray) -> np.ndarray:
    """log2(erfc(z) / t) + z^2 log2 e at z = 2 (1 / t - 1)."""
    z = 2.0 * (1.0 / t - 1.0)
    erfc = np.array([math.erfc(v) for v in z])
    return (np.log(erfc) - np.log(t)) * LOG2_E + z * z * LOG2_E


def fit(degree: int, cap: float = mathfuncs.MAGNITUDE_CAP) -> tuple[np.ndarray, float]:
    """P's coefficients (t^0 first) and its largest error in log2 over the t of |x| <= *cap*."""
    t_min = 1.0 / (1.0 + cap * 0.5 * mathfuncs.RSQRT2)
    nodes = np.cos(np.pi * (np.arange(3000) + 0.5) / 3000)
    t = t_min + (1.0 - t_min) * (nodes + 1.0) / 2.0
    want, powers = target(t), np.vander(t, degree + 1, increasing=True)
    weights = np.ones_like(t)
    for _ in range(80):
        coeffs = np.linalg.lstsq(powers * weights[:, None], want * weights, rcond=None)[0]
        error = np.abs(powers @ coeffs - want)
        weights = weights * np.sqrt(error / error.max()) + 1e-12
        weights /= weights.max()
    dense = np.linspace(t_min, 1.0, 20001)
    worst = np.abs(np.vander(dense, degree + 1, increasing=True) @ coeffs - target(dense)).max()
    return coeffs, float(worst)


def gelu_errors(log2_coeffs: tuple[float, ...]) -> tuple[float, float]:
    """The float32 GELU's largest absolute and relative error over [-12, 12] with *log2_coeffs*
    (``LOG2_COEFFS``' form: the constant less 1)."""
    x = np.linspace(-12.0, 12.0, 48001, dtype=np.float32)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    kept = mathfuncs.LOG2_COEFFS
    try:
        mathfuncs.LOG2_COEFFS = log2_coeffs
        got = mathfuncs.gelu_model(x).astype(np.float64)
    finally:
        mathfuncs.LOG2_COEFFS = kept
    error, nonzero = np.abs(got - want), np.abs(want) > 1e-30
    return float(error.max()), float((error[nonzero] / np.abs(want[nonzero])).max())


def main(args: list[str]) -> None:
    if args:
        coeffs, worst = fit(int(args[0]))
        print(f"# within {worst:.2e} in log2 ({worst / LOG2_E:.2e} relative in erfc)")
        print(", ".join(repr(float(c)) for c in coeffs))
        return
    for degree in range(5, 10):
        coeffs, worst = fit(degree)
        absolute, relative = gelu_errors((coeffs[0] - 1.0, *coeffs[1:]))
        print(f"degree {degree}: fit {worst:.2e} (log2), GELU absolute {absolute:.2e}, "
              f"relative {relative:.2e}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
