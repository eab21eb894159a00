"""Times one fusion's compile + first launch, then the host cost of a cached execute().

Run it twice in fresh processes with the same MMAPLUG_CACHE_DIR: the second run shows the
disk-cache hit (Numba loads the kernel's machine code instead of compiling it). A cache that
cannot be used (a CacheWarning) fails the check instead of timing an in-memory build.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

t_start = time.perf_counter()
import torch  # noqa: E402

import mmaplug as mp  # noqa: E402
from mmaplug.demo import example_fusion  # noqa: E402
from mmaplug.errors import CacheWarning  # noqa: E402

warnings.simplefilter("error", CacheWarning)

M, N, K = 1024, 1024, 1024
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
w = torch.randn(N, K, device="cuda", dtype=torch.float16)
b = torch.randn(N, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
t0 = time.perf_counter()
compiled = mp.compile(example_fusion(M, N, K))
t_plan = time.perf_counter() - t0
out = compiled.execute([x, w, b])[0]
torch.cuda.synchronize()
t_first = time.perf_counter() - t0
ref = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
err = ((out.double() - ref).norm() / ref.norm()).item()
samples = []
for _ in range(300):
    t1 = time.perf_counter()
    compiled.execute([x, w, b])
    samples.append((time.perf_counter() - t1) * 1e6)
torch.cuda.synchronize()
print(
    f"plan {t_plan:.2f} s; compile+first launch {t_first:.2f} s; rel.err {err:.1e}; "
    f"cached execute() host time median {statistics.median(samples):.1f} us "
    f"(p10 {sorted(samples)[30]:.1f}, p90 {sorted(samples)[270]:.1f}); "
    f"process {time.perf_counter() - t_start:.1f} s",
    flush=True,
)
sys.exit(0 if err < 1e-2 else 1)
