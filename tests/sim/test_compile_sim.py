"""mp.compile → execute end to end, the generated kernel running in Numba's CUDA simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sim

# Each case builds a fusion, compiles it for a100 (ampere) with caller overrides (small
# tiles keep the simulator fast), runs it on random host arrays and compares with mp.evaluate.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import mmaplug as mp

    def case_linear_bias_gelu(fd, rng):
        x = fd.define_tensor([40, 48], dtype=mp.float16)
        w = fd.define_tensor([24, 48], dtype=mp.float16)
        b = fd.define_tensor([24], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))
        return {}

    def case_matmul_nn_bf16_alpha_beta(fd, rng):
        a = fd.define_tensor([32, 40], dtype=mp.bfloat16, stride_order=[0, 1])
        b = fd.define_tensor([40, 16], dtype=mp.bfloat16, stride_order=[0, 1])
        c = fd.define_tensor([32, 16], dtype=mp.bfloat16)
        alpha, beta = fd.define_scalar(), fd.define_scalar()
        y = fd.ops.add(fd.ops.mul(fd.ops.matmul(a, b), alpha), fd.ops.mul(c, beta))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
        return {}

    def case_batched_splitk_relu_aux(fd, rng):
        a = fd.define_tensor([2, 16, 64], dtype=mp.float16)
        b = fd.define_tensor([2, 64, 24], dtype=mp.float16, stride_order=[2, 0, 1])
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
        fd.add_output(fd.ops.cast(y, mp.float32))
        return {"splitk_factor": 2}

    def case_odd_shape_tt(fd, rng):
        a = fd.define_tensor([21, 35], dtype=mp.float16)
        b = fd.define_tensor([35, 13], dtype=mp.float16)
        fd.add_output(fd.ops.matmul(a, b))
        return {}

    def case_bias_on_m_silu_sigmoid(fd, rng):
        a = fd.define_tensor([36, 40], dtype=mp.float16)
        b = fd.define_tensor([40, 20], dtype=mp.float16)
        bias = fd.define_tensor([36], dtype=mp.float16)
        y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [36, 20], [0]))
        fd.add_output(fd.ops.cast(fd.ops.silu(y), mp.float16))
        fd.add_output(fd.ops.cast(fd.ops.sigmoid(fd.ops.neg(y)), mp.float16))
        return {}

    def random_inputs(fusion, rng):
        out = []
        for val in fusion.inputs:
            if isinstance(val, mp.TensorView):
                out.append(rng.standard_normal(val.shape).astype(val.dtype.numpy))
            else:
                out.append(float(rng.uniform(-2, 2)))
        return out

    name = sys.argv[1]
    rng = np.random.default_rng(7)
    with mp.FusionDefinition() as fd:
        overrides = globals()["case_" + name](fd, rng)
    overrides.update(cta_tile=(32, 32, 32), warp_tile=(32, 32, 32), stages=2)
    pm = mp.make_plugin_manager(block=["decode"])  # the tiles are ampere's, not decode's
    compiled = mp.compile(fd.fusion, "a100", pm=pm, overrides=overrides)
    inputs = random_inputs(fd.fusion, rng)
    results = compiled.execute(inputs)
    errors = []
    for got, ref in zip(results, mp.evaluate(fd.fusion, inputs)):
        got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
        finite = bool(np.all(np.isfinite(got64)))
        errors.append(float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)) if finite else -1.0)
    print(json.dumps({"errors": errors, "params": compiled.params.name}))
    """  # noqa: E501
)

TOLERANCE = {
    "linear_bias_gelu": 1e-2,
    "matmul_nn_bf16_alpha_beta": 2e-2,
    "batched_splitk_relu_aux": 1e-2,
    "odd_shape_tt": 1e-2,
    "bias_on_m_silu_sigmoid": 1e-2,
}


@pytest.mark.parametrize("case", sorted(TOLERANCE))
def test_compiled_fusion_matches_reference_in_simulator(case: str) -> None:
    """The kernel mp.compile generates computes what mp.evaluate computes, every output written."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, case], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"], "no outputs compared"
    for err in report["errors"]:
        assert 0 <= err < TOLERANCE[case], report
