"""GPU tier: a fresh process that finds its kernel in the disk cache runs it without Numba.

Each case runs one child process with an empty cache directory (it builds the kernel with
Numba and stores the cubin) and a second one with that directory (it loads the cubin through
the driver). Both check their result against float64; the second must not import Numba and
must get its first result within 0.3 s of ``import mmaplug`` (issue 9, item 4), in one of two
tries: the GPU tier's twelve shards share the machine's CPUs, and one hit of run 341 took 0.311
s among them (the file passed alone on the same machine right after). The timings are in the
assertion messages; ``scripts/cache_check.py`` prints them for any fusion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mmaplug.cuda.presence import cuda_device_count

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

FIRST_RESULT_S = 0.3
CHILD = """
import json, sys, time
import torch

scheduler, splitk = sys.argv[1], int(sys.argv[2])
M, N, K = 200, 264, 256
gen = torch.Generator(device="cuda").manual_seed(0)
x, w, b = (torch.randn(s, device="cuda", dtype=torch.float16, generator=gen)
           for s in ((M, K), (N, K), (N,)))
torch.cuda.synchronize()
t0 = time.perf_counter()
import mmaplug as mp
t1 = time.perf_counter()
pm = mp.make_plugin_manager(load_entrypoints=False, strict=True,
                            block=("hopper",) if scheduler == "ampere" else ())
with mp.FusionDefinition() as fd:
    xs, ws, bs = (fd.define_tensor(s, dtype=mp.float16) for s in ([M, K], [N, K], [N]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(xs, ws, bs)), mp.float16))
compiled = mp.compile(fd, pm=pm, overrides={"splitk_factor": splitk} if splitk > 1 else None)
out = compiled.execute([x, w, b])[0]
torch.cuda.synchronize()
t2 = time.perf_counter()
ref = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
err = float((out.double() - ref).norm() / ref.norm())
again = compiled.execute([x, w, b])[0]
torch.cuda.synchronize()
print(json.dumps({
    "scheduler": compiled.spec.scheduler, "splitk": compiled.params.splitk_factor,
    "import_s": t1 - t0, "first_result_s": t2 - t1, "numba": "numba" in sys.modules,
    "rel_error": err, "same_again": bool(torch.equal(out, again)),
}))
"""


SCHEDULERS = ["ampere", pytest.param("hopper", marks=pytest.mark.sm90)]


def _run(cache: Path, scheduler: str, splitk: int) -> dict[str, Any]:
    env = dict(os.environ, MMAPLUG_CACHE_DIR=str(cache), MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    for name in ("NUMBA_ENABLE_CUDASIM", "MMAPLUG_DISK_CACHE", "MMAPLUG_FAST_LAUNCH"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, scheduler, str(splitk)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("splitk", [1, 2])
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_disk_hit_first_result_without_numba(tmp_path: Path, scheduler: str, splitk: int) -> None:
    built = _run(tmp_path, scheduler, splitk)
    assert (built["scheduler"], built["splitk"]) == (scheduler, splitk)
    assert built["numba"] and built["rel_error"] < 1e-2 and built["same_again"], built
    assert list((tmp_path / "cubins").glob("*.cubin")), "the build stored no cubin"
    hits = [_run(tmp_path, scheduler, splitk)]
    if hits[0]["first_result_s"] > FIRST_RESULT_S:  # a second try: the tier's shards share CPUs
        hits.append(_run(tmp_path, scheduler, splitk))
    note = f"built: {built}; from the disk cache: {hits}"
    for hit in hits:
        assert hit["numba"] is False, f"a disk-cache hit imported numba; {note}"
        assert hit["rel_error"] < 1e-2 and hit["same_again"], note
    assert min(hit["first_result_s"] for hit in hits) <= FIRST_RESULT_S, note


PREBUILD_CHILD = """
import json, sys, time
import torch
import mmaplug as mp

M, N, K = 200, 264, 256


def fusions():
    pms = {s: mp.make_plugin_manager(load_entrypoints=False, strict=True,
                                     block=("hopper",) if s == "ampere" else ())
           for s in ("hopper", "ampere")}
    for scheduler, m, splitk in (("hopper", M, 1), ("hopper", M, 2), ("ampere", M, 1),
                                 ("hopper", -1, 1)):
        with mp.FusionDefinition() as fd:
            xs, ws, bs = (fd.define_tensor(s, dtype=mp.float16) for s in ([m, K], [N, K], [N]))
            fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(xs, ws, bs)), mp.float16))
        yield mp.compile(fd, pm=pms[scheduler],
                         overrides={"splitk_factor": splitk} if splitk > 1 else None)


def main():
    compiled = list(fusions())
    decode = [(1, K), (N, K), (N,)]
    done = mp.prebuild([*compiled[:3], (compiled[3], decode)], workers=4)
    numba_after_prebuild = "numba" in sys.modules
    gen = torch.Generator(device="cuda").manual_seed(0)
    errors, start = [], time.perf_counter()
    for c, m in zip(compiled, (M, M, M, 1)):
        x, w, b = (torch.randn(s, device="cuda", dtype=torch.float16, generator=gen)
                   for s in ((m, K), (N, K), (N,)))
        out = c.execute([x, w, b])[0]
        ref = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
        errors.append(float((out.double() - ref).norm() / ref.norm()))
    torch.cuda.synchronize()
    print(json.dumps({
        "built": list(done.built), "cached": list(done.cached), "prebuild_s": done.seconds,
        "first_results_s": time.perf_counter() - start, "rel_errors": errors,
        "numba_after_prebuild": numba_after_prebuild, "numba": "numba" in sys.modules,
    }))


if __name__ == "__main__":
    main()
"""


@pytest.mark.sm90
@pytest.mark.parametrize("disk", ["on", "off"])
def test_prebuilt_kernels_run_without_numba_here(tmp_path: Path, disk: str) -> None:
    """``mp.prebuild`` builds five kernels in worker processes (hopper, hopper split-K gemm +
    reduce, ampere, and the decode kernel of a symbolic fusion's M <= 16 shape class); this
    process runs all four fusions against float64 without importing Numba, with the disk cache
    on or off."""
    script = tmp_path / "prebuild_child.py"  # spawned workers re-import the main module
    script.write_text(PREBUILD_CHILD)
    env = dict(os.environ, MMAPLUG_CACHE_DIR=str(tmp_path / "cache"), MMAPLUG_DISK_CACHE=disk)
    env["MMAPLUG_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("NUMBA_ENABLE_CUDASIM", "MMAPLUG_FAST_LAUNCH"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(run["built"]) == 5 and run["cached"] == [], run
    assert sum(".decode_gemm " in name for name in run["built"]) == 1, run
    assert run["numba_after_prebuild"] is False and run["numba"] is False, run
    assert all(err < 1e-2 for err in run["rel_errors"]), run
    cubins = list((tmp_path / "cache" / "cubins").glob("*.cubin")) if disk == "on" else []
    assert len(cubins) == (5 if disk == "on" else 0), run
