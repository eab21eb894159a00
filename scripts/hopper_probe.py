"""Where the hopper kernel's time goes: the default kernel beside variants with a part removed.

On a GPU machine (the device recipe installs the project first):
    MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1 python scripts/hopper_probe.py
Variants (for timing only: their results are wrong by design, so none is checked):
  default      the kernel the default heuristic plans
  no-epilogue  the consumers skip the epilogue (no staging, no global stores)
  no-tma       the producer fills each ring stage once, then only arrives on ``full``: the main
               loop runs on stale shared memory, without global or L2 traffic
  neither      both removed: wgmma issue, mbarrier hand-offs and the tile loop alone
Each variant builds in its own process and cache directory (in parallel), then each is timed in
its own process beside torch.matmul, interleaved rounds of CUDA-event medians.
Writes $OUT/hopper_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

VARIANTS = ("default", "no-epilogue", "no-tma", "neither")
SHAPES = ((4096, 4096, 4096, "float16"), (8192, 8192, 8192, "float16"),
          (4096, 4096, 1024, "float16"), (4096, 4096, 16384, "float16"),
          (16384, 1024, 512, "bfloat16"), (2048, 14336, 5120, "bfloat16"))  # fmt: skip


def _patch(variant: str) -> None:
    """Swap the hopper code generator's parts that *variant* removes."""
    from mmaplug.plugins.hopper import kernel, kernel_codegen

    if variant in ("no-epilogue", "neither"):

        def no_epilogue(em, cfg, accs):  # noqa: ANN001, ANN202
            em(f"if {accs[0]}[0] == float32(-3.0e38):  # never: keeps the output parameter used")
            em("    out0[0] = uint16(1)")

        kernel_codegen.emit_epilogue = no_epilogue
    if variant in ("no-tma", "neither"):
        generate = kernel.generate_source

        def stale_loads(cfg, *, sim):  # noqa: ANN001, ANN202
            return _load_once(generate(cfg, sim=sim), cfg.stages)

        kernel.generate_source = stale_loads


def _load_once(src: str, stages: int) -> str:
    """The producer issues TMA only for its first *stages* loads, then plain arrives."""
    lines = src.splitlines()
    start = next(i for i, line in enumerate(lines) if "mbarrier_arrive_expect_tx(full," in line)
    ind = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = start + 1
    while lines[end].startswith(ind) and lines[end].lstrip().startswith(("dst =", "tma_load_3d")):
        end += 1
    block = [f"{ind}if loads < {stages}:", f"{ind}    loads += 1"]
    block += ["    " + line for line in lines[start:end]]
    block += [f"{ind}else:", f"{ind}    mbarrier_arrive(full)"]
    lines[start:end] = block
    first_u = next(i for i, line in enumerate(lines) if "u = cuda.blockIdx.x" in line)
    ind_u = lines[first_u][: len(lines[first_u]) - len(lines[first_u].lstrip())]
    lines.insert(first_u, f"{ind_u}loads = 0")
    return "\n".join(lines) + "\n"


def _compiled(shape: tuple):  # noqa: ANN202
    import mmaplug as mp
    from mmaplug.cli.bench import linear_fusion

    m, n, k, dtype = shape
    return mp.compile(linear_fusion(m, n, k, getattr(mp, dtype), False))


def _inputs(shape: tuple) -> list:
    import torch

    m, n, k, dtype = shape
    dt = getattr(torch, dtype)
    return [torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)]


def build(variant: str) -> None:
    """Build (into this variant's disk cache) and run once every shape's kernel."""
    import torch

    _patch(variant)
    for shape in SHAPES:
        _compiled(shape).execute(_inputs(shape))
    torch.cuda.synchronize()


def time_variant(variant: str, reps: int, rounds: int) -> list[dict]:
    """*variant* and torch.matmul per shape: *rounds* interleaved rounds of *reps* events."""
    import statistics

    import torch

    from mmaplug.tune.measure import interleaved_ms

    _patch(variant)
    rows = []
    for shape in SHAPES:
        compiled = _compiled(shape)
        ins = _inputs(shape)
        x, w = ins
        fns = {"torch": lambda x=x, w=w: torch.matmul(x, w.T),
               variant: lambda c=compiled, i=ins: c.execute(i)}  # fmt: skip
        samples = interleaved_ms(fns, rounds, reps=reps)
        ms = {name: statistics.median(v) for name, v in samples.items()}
        m, n, k, dtype = shape
        tflops = 2 * m * n * k / 1e9
        print(f"{variant:<12} {m}x{n}x{k} {dtype:<8} {ms[variant]:.4f} ms "
              f"{tflops / ms[variant]:4.0f} TF/s  torch {ms['torch']:.4f} ms "
              f"{tflops / ms['torch']:4.0f} TF/s  ratio {ms['torch'] / ms[variant]:.3f}  "
              f"{compiled.kernel_name}", flush=True)  # fmt: skip
        rows.append({"variant": variant, "shape": shape, "ms": ms, "samples": samples,
                     "kernel": compiled.kernel_name})  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    parser.add_argument("--build", choices=VARIANTS, help="(internal) build one variant")
    parser.add_argument("--time", choices=VARIANTS, help="(internal) time one variant")
    args = parser.parse_args()
    if args.build:
        build(args.build)
        return 0
    if args.time:
        rows = time_variant(args.time, args.reps, args.rounds)
        with open(os.environ["PROBE_JSON"], "w") as fh:
            json.dump(rows, fh)
        return 0
    from probes import save_to_out

    cache_root = tempfile.mkdtemp(prefix="hopper_probe_")
    variants = [v for v in VARIANTS if v in args.variants.split(",")]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--build", v],
            env={**os.environ, "MMAPLUG_CACHE_DIR": os.path.join(cache_root, v)},
        )
        for v in variants
    ]
    if any(p.wait() for p in procs):
        print("a variant failed to build")
        return 1
    rows = []
    for v in variants:  # one at a time: the GPU times one variant's kernels beside torch
        path = os.path.join(cache_root, f"{v}.json")
        env = {**os.environ, "MMAPLUG_CACHE_DIR": os.path.join(cache_root, v), "PROBE_JSON": path}
        cmd = [sys.executable, __file__, "--time", v, "--reps", str(args.reps)]
        if subprocess.run([*cmd, "--rounds", str(args.rounds)], env=env).returncode:
            print(f"timing {v} failed")
            return 1
        with open(path) as fh:
            rows += json.load(fh)
    save_to_out("hopper_probe.json", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
