"""Simulator tier: tensors the hopper kernel declines at launch (a 2-byte-misaligned operand)
run on an ampere kernel planned without hopper, with a FallbackWarning; aligned ones stay on
hopper. Runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (the simulator must be on before
numba.cuda is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.sim

SCRIPT = """
import json, warnings
import attrs
import numpy as np
import mmaplug as mp

pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
m, n, k = {m}, 48, 64
with mp.FusionDefinition() as fd:
    x = fd.define_tensor([m, k], dtype=mp.float16)
    w = fd.define_tensor([n, k], dtype=mp.float16)
    fd.add_output(fd.ops.linear(x, w))
compiled = mp.compile(fd.fusion, device, pm=pm, overrides={overrides})
rng = np.random.default_rng(3)
buf = np.empty(m * k + 8, np.float16)
xs = buf[1 : 1 + m * k].reshape(m, k)  # 2 bytes past an aligned address
xs[...] = rng.standard_normal((m, k))
ws = rng.standard_normal((n, k)).astype(np.float16)
ref = mp.evaluate(fd.fusion, [xs, ws])[0].astype(np.float64)
out = {{"scheduler": compiled.spec.scheduler}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = compiled.execute([xs, ws])[0]
    again = compiled.execute([xs, ws])[0]
out["warnings"] = [f"{{type(c.message).__name__}}: {{c.message}}" for c in caught]
out["errors"] = [float(np.linalg.norm(g.astype(np.float64) - ref) / np.linalg.norm(ref))
                 for g in (got, again)]
aligned = np.ascontiguousarray(xs)
out["aligned_error"] = float(np.linalg.norm(
    compiled.execute([aligned, ws])[0].astype(np.float64) - ref) / np.linalg.norm(ref))
print(json.dumps(out))
"""
#: hopper's plan of small tiles (its default would be decode's at 4 rows)
HOPPER = {"cta_tile": (64, 64, 64), "warp_tile": (64, 64, 64), "instruction_tile": (64, 64, 16),
          "stages": 2}  # fmt: skip


def _run(m: int, overrides: dict | None) -> dict:
    """SCRIPT for *m* rows and *overrides* in a simulating subprocess: its JSON line."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    script = SCRIPT.format(m=m, overrides=overrides)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_declined_tensors_run_on_the_fallback_kernel() -> None:
    """One FallbackWarning naming hopper's TMA rule and the ampere kernel; both results right."""
    res = _run(40, HOPPER)
    assert res["scheduler"] == "hopper"
    assert len(res["warnings"]) == 1, res["warnings"]
    assert res["warnings"][0].startswith("FallbackWarning: the hopper kernel declines")
    assert "not 16-byte aligned" in res["warnings"][0] and "ampere kernel" in res["warnings"][0]
    assert max(res["errors"]) < 1e-2 and res["aligned_error"] < 1e-2


def test_a_declined_fallback_falls_back_again() -> None:
    """A decode plan (4 rows) given a misaligned view: decode declines, its fallback hopper
    declines too (TMA), and ampere runs it (before: hopper's refusal was raised); each step is
    one FallbackWarning, the chain is kept for the next call."""
    res = _run(4, None)
    assert res["scheduler"] == "decode"
    assert [w.split(" kernel ")[0] for w in res["warnings"]] == [
        "FallbackWarning: the decode",
        "FallbackWarning: the hopper",
    ], res["warnings"]
    assert "run on the ampere kernel" in res["warnings"][1]
    assert max(res["errors"]) < 1e-2 and res["aligned_error"] < 1e-2
