"""scripts/epilogue_probe.py (the epilogue cost breakdown the lead runs on the H200), here
without a GPU: each kind's fusion computes what its name says."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import mmaplug as mp

SCRIPT = Path(__file__).parents[2] / "scripts" / "epilogue_probe.py"


@pytest.fixture(scope="module")
def probe(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("epilogue_probe")


def _expected(kind: str, y: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return {
        "bare": y,
        "bias": y,
        "relu": np.maximum(y, 0.0),
        "gelu": 0.5 * y * (1.0 + erf(y / math.sqrt(2.0))),
        "gelu_tanh": 0.5 * y * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3))),
    }[kind]


@pytest.mark.parametrize("kind", ["bare", "bias", "relu", "gelu", "gelu_tanh"])
def test_each_kind_computes_its_epilogue(probe: ModuleType, kind: str) -> None:
    """In float32 the forms are told apart: GELU's tanh and erf forms differ by up to 4.7e-4 on
    these values, 30x the tolerance."""
    m, n, k = 24, 40, 32
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / 4).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    inputs = [x, w] if kind == "bare" else [x, w, b]
    (got,) = mp.evaluate(probe.epilogue_fusion(m, n, k, mp.float32, kind), inputs)
    y = x.astype(np.float64) @ w.astype(np.float64).T + (0.0 if kind == "bare" else b)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, _expected(kind, y), rtol=1e-5, atol=1e-5)
    if kind.startswith("gelu"):
        assert np.abs(_expected("gelu_tanh", y) - _expected("gelu", y)).max() > 3e-4


def test_unknown_kind_is_refused(probe: ModuleType) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        probe.epilogue_fusion(8, 8, 8, mp.float16, "silu")


def test_help_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--variant LABEL=JSON" in done.stdout and "--only MxNxK" in done.stdout
