"""First build of a kernel, phase by phase, each case in a fresh process (no GPU needed).

The build path of a cubin-cache miss (``mmaplug.cuda.launching.numba_binary``) for the default
kernel of a device preset, with the compute capability given instead of read from a GPU:

    python scripts/build_time.py                        # 4 cases x 3 processes: min and median
    python scripts/build_time.py --cases ampere-mm --repeat 5
    python scripts/build_time.py --profile ampere-mm    # cProfile of one build (top 40)
    python scripts/build_time.py --json
    python scripts/build_time.py --baseline             # the build before the lean pipeline
    python scripts/build_time.py --cpu                  # CPU seconds (a machine under load)

Cases: the ampere (a100 preset, hopper blocked) and hopper (h200) default kernels of a 4096^3
fp16 ``matmul`` (``-mm``) and of ``gelu(linear(x, w, b))`` (``-lg``); decode's (h200), the same
at one row of x (a decode step, 1x4096x4096). Phases: ``import``
(``import numba.cuda``, the first Numba import of a process), ``source`` (generate and exec
the kernel module, in a fresh cache directory), ``frontend`` (Numba: bytecode to LLVM IR),
``nvvm`` (NVVM IR to PTX or LTO IR), ``link`` (nvJitLink: ptxas, with LTO), ``other`` (the
rest of the build). ``build`` sums them: the first build counted from the first Numba import.
``plan`` (``mp.compile`` before any build) is printed apart. ``--baseline`` builds as
``dispatcher.compile`` did before ``mmaplug.cuda.pipeline``: Numba's own pipeline, and PTX made
before the LTO link.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

CASES = ("ampere-mm", "ampere-lg", "hopper-mm", "hopper-lg", "decode-mm", "decode-lg")
PHASES = ("import", "source", "frontend", "nvvm", "link", "other", "build")
PRESET = {"ampere": ("a100", (8, 0)), "hopper": ("h200", (9, 0)), "decode": ("h200", (9, 0))}
M = N = K = 4096
ROWS = {"decode": 1}  # the decode kernel's cases are a decode step: one row of x
clock = time.perf_counter  # --cpu: time.process_time (this process's CPU time, all threads)


def _timed(owner: Any, name: str, spent: dict[str, float], phase: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its wall time to ``spent[phase]``."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[phase] += clock() - start

    setattr(owner, name, wrapper)


def _numbas_own_build() -> None:
    """Build as before ``mmaplug.cuda.pipeline``: Numba's pipeline, and the PTX that
    ``dispatcher.compile`` made (for a search) before the cubin was linked."""
    from numba.cuda import compiler
    from numba.cuda.codegen import CUDACodeLibrary

    from mmaplug.cuda import numba_internals

    # lean() then swaps in Numba's own compiler and resolution (it still names the cc)
    numba_internals.machinery().compiler = compiler.CUDACompiler
    numba_internals._memoised = lambda get_call_type, memo: get_call_type  # type: ignore[assignment]
    get_cubin = CUDACodeLibrary.get_cubin

    def with_ptx(library: Any, cc: Any = None) -> Any:
        library.get_asm_str(cc=cc)
        return get_cubin(library, cc=cc)

    CUDACodeLibrary.get_cubin = with_ptx  # type: ignore[method-assign]


def child(case: str, profile: bool, baseline: bool) -> dict[str, Any]:
    """Plan and build *case* in this (fresh) process; seconds per phase."""
    scheduler, fusion = case.split("-")
    preset, cc = PRESET[scheduler]
    start = clock()
    import mmaplug as mp

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([ROWS.get(scheduler, M), K], mp.float16)
        if fusion == "mm" and scheduler == "decode":  # its weights K-major: x @ w.T
            fd.add_output(fd.ops.linear(x, fd.define_tensor([N, K], mp.float16)))
        elif fusion == "mm":
            fd.add_output(fd.ops.matmul(x, fd.define_tensor([K, N], mp.float16)))
        else:
            w, b = fd.define_tensor([N, K], mp.float16), fd.define_tensor([N], mp.float16)
            fd.add_output(fd.ops.gelu(fd.ops.linear(x, w, b)))
    pm = mp.make_plugin_manager(block=("hopper",)) if scheduler == "ampere" else None
    compiled = mp.compile(fd, device=preset, pm=pm)
    config = compiled._artifact.config
    planned = clock()

    import numba.cuda  # noqa: F401
    from numba.cuda import compiler
    from numba.cuda.cudadrv import driver, nvvm

    from mmaplug.cuda import launching

    kernel = __import__(f"mmaplug.plugins.{scheduler}.kernel", fromlist=["build"])
    spent = dict.fromkeys(("frontend", "nvvm", "link"), 0.0)
    _timed(compiler, "compile_cuda", spent, "frontend")
    _timed(nvvm, "compile_ir", spent, "nvvm")
    _timed(driver._Linker, "complete", spent, "link")
    if baseline:
        _numbas_own_build()
    imported = clock()
    kernels = kernel.build(config)
    sourced = clock()
    name = f"{scheduler}_gemm"
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    binary = launching.kernel_binary(kernels, name, cc)
    if profiler:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumtime").print_stats(40)
    built = clock()
    times = {
        "plan": planned - start,
        "import": imported - planned,
        "source": sourced - imported,
        **spent,
        "other": built - sourced - sum(spent.values()),
        "build": built - planned,
    }
    return {"case": case, "kernel": config.name, "cubin": len(binary.cubin), "s": times}


def run(case: str, flags: list[str], profile: bool = False) -> dict[str, Any]:
    """One fresh process building *case* (its own empty cache directory)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, MMAPLUG_CACHE_DIR=cache, MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        cmd = [sys.executable, __file__, "--child", case]
        cmd += flags + (["--profile", case] if profile else [])
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{case} failed:\n{done.stderr}")
    if profile:
        print(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--profile", choices=CASES, help="cProfile the build of one case")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--baseline", action="store_true", help="Numba's pipeline, as before")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds instead of wall seconds")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    flags = ["--baseline"] * args.baseline + ["--cpu"] * args.cpu
    if args.child:
        if args.cpu:
            global clock
            clock = time.process_time
        print(json.dumps(child(args.child, args.profile == args.child, args.baseline)))
        return
    if args.profile:
        run(args.profile, flags, profile=True)
        return
    report = []
    for case in args.cases:
        runs = [run(case, flags) for _ in range(args.repeat)]
        phases = ("plan", *PHASES)
        summary = {
            phase: {
                "min": min(r["s"][phase] for r in runs),
                "median": statistics.median(r["s"][phase] for r in runs),
            }
            for phase in phases
        }
        report.append({"case": case, "kernel": runs[0]["kernel"], "s": summary})
        if not args.json:
            cells = "  ".join(
                f"{p} {summary[p]['min']:.2f}/{summary[p]['median']:.2f}" for p in phases
            )
            print(f"{case:10s} {runs[0]['kernel']}\n    min/median s: {cells}", flush=True)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
