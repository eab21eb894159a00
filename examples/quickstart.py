"""Quickstart: define a fusion, look at its matmul problem and plan, run it when there is a GPU.

python examples/quickstart.py            # plans for the local GPU, or for an H200 without one
"""

from __future__ import annotations

import numpy as np

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

M, N, K = 512, 384, 256

with mp.FusionDefinition() as fd:
    x = fd.define_tensor([M, K], dtype=mp.float16)
    w = fd.define_tensor([N, K], dtype=mp.float16)
    bias = fd.define_tensor([N], dtype=mp.float16)
    y = fd.ops.gelu(fd.ops.linear(x, w, bias))
    fd.add_output(fd.ops.cast(y, mp.float16))

print(fd.fusion)
print(mp.matmul_problem(fd.fusion).describe())

gpu = cuda_device_count() > 0
compiled = mp.compile(fd.fusion, None if gpu else "h200")
print(mp.explain(compiled.spec))

rng = np.random.default_rng(0)
inputs = [rng.standard_normal(t.shape).astype(np.float16) for t in fd.fusion.inputs]
reference = mp.evaluate(fd.fusion, inputs)[0].astype(np.float64)
if gpu:
    from numba import cuda

    out = compiled.execute([cuda.to_device(a) for a in inputs])[0].copy_to_host()
    error = np.linalg.norm(out.astype(np.float64) - reference) / np.linalg.norm(reference)
    print(f"ran {compiled.kernel_name}: relative error vs mp.evaluate {error:.1e}")
else:
    print(f"no GPU: planned kernel {compiled.kernel_name} for {compiled.spec.device.target}")
