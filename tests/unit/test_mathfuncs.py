"""The epilogues' GELU (mmaplug.cuda.mathfuncs): its float32 arithmetic against the exact value."""

from __future__ import annotations

import math

import numpy as np

from mmaplug.cuda.mathfuncs import gelu_model


def _exact(x: np.ndarray) -> np.ndarray:
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])


def test_gelu_is_accurate_in_absolute_and_relative_terms() -> None:
    """Within 4e-7 absolute and 2.5e-5 relative over [-12, 12]: the erfc form keeps the small
    negative results that 0.5 x (1 + erf(x / sqrt 2)) in float32 cancels to nothing."""
    x = np.linspace(-12.0, 12.0, 48001, dtype=np.float32)
    got, want = gelu_model(x).astype(np.float64), _exact(x)
    assert np.max(np.abs(got - want)) < 4e-7
    nonzero = np.abs(want) > 1e-30
    assert np.max(np.abs(got - want)[nonzero] / np.abs(want)[nonzero]) < 2.5e-5


def test_the_float32_erf_form_it_replaces_cancels_in_the_negative_tail() -> None:
    """Why the erfc form: at x = -6 the erf form's 1 + erf is rounding noise."""
    x = np.float32(-6.0)
    erf_form = np.float32(0.5) * x * (np.float32(1.0) + np.float32(math.erf(x / math.sqrt(2))))
    want = _exact(np.array([x]))[0]
    assert abs(erf_form - want) / abs(want) > 0.1
    assert abs(gelu_model(x) - want) / abs(want) < 2.5e-5


def test_special_values() -> None:
    """inf stays inf (|x| is capped before the erfc term, so no inf * 0), NaN stays NaN, and
    -inf gives 0, GELU's limit there."""
    got = gelu_model(np.array([np.inf, np.nan, -np.inf, 0.0, 3e38, -3e38], np.float32))
    assert got[0] == np.inf and np.isnan(got[1])
    np.testing.assert_array_equal(got[2:], np.array([0.0, 0.0, 3e38, 0.0], np.float32))
