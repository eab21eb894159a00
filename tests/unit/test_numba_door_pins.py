"""Pure tier: the releases the door to Numba's internals was tested with are the ones the
cu12/cu13 extras allow, and the door decides without Numba until a build asks."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from mmaplug.cuda import numba_internals

ROOT = Path(__file__).resolve().parents[2]


def test_the_extras_pin_the_tested_numba_cuda_releases() -> None:
    """pyproject's upper bound moves with ``TESTED`` (a new numba-cuda: test, then raise both)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = next(s for s in numba_internals.tested().split(", ") if s.startswith("numba-cuda"))
    bounds = spec.removeprefix("numba-cuda")
    for extra in ("cu12", "cu13"):
        (pin,) = [r for r in extras["optional-dependencies"][extra] if r.startswith("numba-cuda")]
        assert pin == f"numba-cuda[{extra}]{bounds}", (pin, spec)


def test_importing_the_doors_imports_no_numba() -> None:
    """Both doors (compiler and simulator) are importable without Numba; nothing is patched."""
    code = (
        "import sys; import mmaplug.cuda.numba_internals, mmaplug.sim.simulator; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
