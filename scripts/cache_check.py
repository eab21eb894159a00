"""Cold start: one fusion's time to first result in a fresh process, then a cached execute().

Run it twice in fresh processes with the same MMAPLUG_CACHE_DIR: the first builds the kernel
with Numba and stores its cubin; the second loads the cubin through the driver and must not
import Numba (issue 9: first result <= 0.3 s after ``import mmaplug``; first build <= 3 s).

    export MMAPLUG_CACHE_DIR=$(mktemp -d)
    python scripts/cache_check.py [ampere|hopper]   # build
    python scripts/cache_check.py [ampere|hopper]   # disk hit

A cache that cannot be used (a CacheWarning) fails the check instead of timing a build.
"""

from __future__ import annotations

import sys
import time
import warnings

import torch

M, N, K = 1024, 1024, 1024
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
w = torch.randn(N, K, device="cuda", dtype=torch.float16)
b = torch.randn(N, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
t_start = time.perf_counter()
import mmaplug as mp  # noqa: E402
from mmaplug.cli.demo import example_fusion  # noqa: E402
from mmaplug.errors import CacheWarning  # noqa: E402

t_import = time.perf_counter() - t_start
warnings.simplefilter("error", CacheWarning)
scheduler = sys.argv[1] if len(sys.argv) > 1 else None
pm = mp.make_plugin_manager(block=("hopper",)) if scheduler == "ampere" else None
t0 = time.perf_counter()
compiled = mp.compile(example_fusion(M, N, K), pm=pm)
t_plan = time.perf_counter() - t0
out = compiled.execute([x, w, b])[0]
torch.cuda.synchronize()
t_first = time.perf_counter() - t0
numba = "numba" in sys.modules
from mmaplug.tune.measure import host_call_us, rel_error, sample_summary  # noqa: E402 (after timing)

err = rel_error(out, torch.nn.functional.gelu(x.double() @ w.double().T + b.double()))
us = sample_summary(host_call_us(lambda: compiled.execute([x, w, b]), 300, block=300))
print(
    f"{compiled.kernel_name}: import mmaplug {t_import:.3f} s; plan {t_plan:.3f} s; "
    f"first result {t_first:.3f} s after import (numba imported: {numba}); rel.err {err:.1e}; "
    f"cached execute() host time median {us['median']:.1f} us "
    f"(p10 {us['p10']:.1f}, p90 {us['p90']:.1f})",
    flush=True,
)
sys.exit(0 if err < 1e-2 else 1)
