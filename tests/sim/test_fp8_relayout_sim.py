"""Simulator tier: an FP8 matmul whose operands are not K-major (FP8 wgmma reads K-major only)
runs as a copy of those operands K-major, then the hopper kernel, and computes what
mp.evaluate computes; explain says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sim

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import attrs
    import numpy as np
    import mmaplug as mp

    a_major, b_major = sys.argv[1], sys.argv[2]  # "k": K-major, else M- / N-major
    block = sys.argv[3] == "block"  # block scales (1x128 of A, 128x128 of B), else per row
    m, n, k = 70, 80, 160
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn,
                             stride_order=[1, 0] if a_major == "k" else [0, 1])
        b = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn,
                             stride_order=[0, 1] if b_major == "k" else [1, 0])
        sa = fd.define_tensor([m, 2] if block else [m, 1], dtype=mp.float32)
        sb = fd.define_tensor([2, 1] if block else [1, n], dtype=mp.float32)
        bias = fd.define_tensor([n], dtype=mp.bfloat16)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=mp.bfloat16))
    device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(fd.fusion, device, pm=pm,
                          overrides={"cta_tile": (64, 64, 128), "warp_tile": (64, 64, 128),
                                     "instruction_tile": (64, 64, 32), "stages": 2})
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]
    (got,) = compiled.execute(inputs)
    (ref,) = mp.evaluate(fd.fusion, inputs)
    got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    print(json.dumps({
        "kind": type(compiled).__name__,
        "segments": [s.kind for s in getattr(compiled, "segments", ())],
        "explain": compiled.explain(),
        "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
        "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
    }))
    """
)


@pytest.mark.parametrize(
    "layout",
    [("k", "n", "row"), ("m", "k", "row"), ("m", "n", "row"), ("k", "n", "block")],
    ids=["TT", "NN", "NT", "TT-block-scaled"],
)
def test_fp8_operands_are_copied_k_major_for_the_kernel(layout: tuple[str, str, str]) -> None:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *layout],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["kind"] == "SegmentedFusion" and report["segments"] == ["pointwise", "matmul"]
    copied = [name for name, major in zip(("T0", "T1"), layout[:2], strict=True) if major != "k"]
    assert (
        f"{', '.join(copied)} {'is' if len(copied) == 1 else 'are'} copied K-major"
        in (report["explain"])
    )
    assert "FP8 wgmma reads K-major operands only" in report["explain"]
    assert "layout=TN" in report["explain"]  # the kernel's problem
    assert report["unwritten"] == 0 and report["error"] < 2e-2, report
