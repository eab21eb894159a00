"""Simulator tier: every event that ends an emulated wait wakes its waiters at once.

The probes run in simulating subprocesses with the waits' periodic scans 30 s apart, so a wait
that only its scan would end (a missed notification: each one cost up to 5 s of a CTA-pair case,
with two busy block managers starving the kernel's threads) shows as a 30-second probe.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from numba import cuda  # a module global: the simulator swaps a kernel module's `cuda`
from numba.cuda import types

from mmaplug.cuda import sm90 as H

pytestmark = pytest.mark.sim

SCAN_S = 30.0  # the probes' scan period: a wait ended by its scan takes this long
FAST_S = 10.0  # what a probe whose waits are all notified stays under, on a loaded machine


def probe_cluster_barrier_across_blocks() -> dict[str, Any]:
    """barrier.cluster twice over a CTA pair: the last arrival, in one block, releases the
    waiters of both blocks."""
    from mmaplug.sim.cluster import clusters_of

    @cuda.jit
    def kernel(out):
        H.cluster_sync()
        H.cluster_sync()
        out[cuda.blockIdx.x * 64 + cuda.threadIdx.x] = 1

    return _launch(lambda out: kernel[2, 64](out), 128, clusters_of(2))


def probe_cluster_barrier_after_exits() -> dict[str, Any]:
    """Half of block 1 exits late without arriving: barrier.cluster releases the others when
    those threads exit (live threads only), not at a waiter's scan."""
    from mmaplug.sim.cluster import clusters_of

    @cuda.jit
    def kernel(out):
        t = cuda.blockIdx.x * 64 + cuda.threadIdx.x
        if t >= 96:
            time.sleep(0.3)  # exit after everyone else arrived
            return
        H.cluster_sync()
        out[t] = 1

    return _launch(lambda out: kernel[2, 64](out), 128, clusters_of(2), writers=96)


def probe_mbarrier_and_named_barrier() -> dict[str, Any]:
    """256 threads wait on an mbarrier that thread 0 completes late, then on named barrier 1
    that thread 128 completes late."""
    import contextlib

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(2, types.uint64)
        bar = H.shared_base(sm)
        t = cuda.threadIdx.x
        if t == 0:
            H.mbarrier_init(bar, 1)
        cuda.syncthreads()
        if t == 0:
            time.sleep(0.3)
            H.mbarrier_arrive(bar)
        H.mbarrier_wait(bar, 0)
        if t == 128:
            time.sleep(0.3)
        H.named_barrier_sync(1, 256)
        out[t] = 1

    return _launch(lambda out: kernel[1, 256](out), 256, contextlib.nullcontext())


def probe_cta_pair_pingpong_kernel() -> dict[str, Any]:
    """The generated CTA-pair ping-pong kernel: TMA bytes completing full barriers in both
    CTAs (multicast), remote arrives on empty barriers, named barriers taking turns and staging
    the epilogue, barrier.cluster at start, the producer's tail at exit."""
    import importlib.util

    path = Path(__file__).with_name("test_hopper_kernel_sim.py")
    spec = importlib.util.spec_from_file_location("_hopper_cases", path)
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    t0 = time.time()
    res = cases.run_case("tn_f16_pingpong_cluster_pairs")
    errors = [out["error"] for out in res["outputs"] if not out["unwritten"]]
    ok = len(errors) == len(res["outputs"]) and max(errors) < 1e-2
    return {"seconds": time.time() - t0, "ok": ok, "result": res}


def _launch(run: Any, threads: int, context: Any, writers: int | None = None) -> dict[str, Any]:
    """Launch `run(out)` in `context`; ok when `writers` (default every thread) wrote 1."""
    import numpy as np

    out = cuda.to_device(np.zeros(threads, np.int32))
    t0 = time.time()
    with context:
        run(out)
    seconds = time.time() - t0
    written = int(out.copy_to_host().sum())
    return {"seconds": seconds, "written": written, "ok": written == (writers or threads)}


PROBES = sorted(name[6:] for name in dir() if name.startswith("probe_"))


@pytest.fixture(scope="module")
def probe_results(simulate: Any) -> dict[str, dict[str, Any]]:
    runs = simulate({name: [__file__, name] for name in PROBES})
    return {name: run.outcome for name, run in runs.items()}


@pytest.mark.parametrize("name", PROBES)
def test_waits_end_when_notified_not_at_their_scan(probe_results: dict, name: str) -> None:
    """The probe ran right, in less than its waits' scan period."""
    res = probe_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["ok"], res
    assert res["seconds"] < FAST_S, res


if __name__ == "__main__":
    from mmaplug.sim import block as B

    B._CHECK_S = B.CLUSTER_SCAN_S = SCAN_S
    print(json.dumps(globals()["probe_" + sys.argv[1]]()), flush=True)
