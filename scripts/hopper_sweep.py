"""Sweep hopper tile / stage / swizzle candidates against the default heuristic's choice.

On a GPU machine (the device recipe installs the project first):
    MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1 python scripts/hopper_sweep.py [--workers 14]
Prints, per benchmark shape, every candidate's CUDA-event median beside torch.matmul's, marks
the default heuristic's plan and the sweep's best, and writes $OUT/hopper_sweep.json when $OUT
is set. Every kernel's output is checked against torch (relative error) before it is timed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120), (16384, 1024, 512),
          (128, 4096, 4096))  # fmt: skip


def _tiles(cta: tuple, warp: tuple, stages: int, swizzle: int = 1) -> dict:
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], 16),
            "stages": stages, "grid_swizzle_factor": swizzle}  # fmt: skip


CANDIDATES = {
    "128x256 s4": _tiles((128, 256, 64), (64, 256, 64), 4),
    "128x256 s4 sw4": _tiles((128, 256, 64), (64, 256, 64), 4, 4),
    "128x256 s4 sw8": _tiles((128, 256, 64), (64, 256, 64), 4, 8),
    "128x256 s3": _tiles((128, 256, 64), (64, 256, 64), 3),
    "256x128 s3": _tiles((256, 128, 64), (128, 128, 64), 3),
    "128x192 s4": _tiles((128, 192, 64), (64, 192, 64), 4),
    "128x128 s6": _tiles((128, 128, 64), (64, 128, 64), 6),
    "64x256 s5": _tiles((64, 256, 64), (64, 256, 64), 5),
    "64x128 s6": _tiles((64, 128, 64), (64, 128, 64), 6),
}


def _compile(shape: tuple, name: str | None):  # noqa: ANN202
    import mmaplug as mp
    from mmaplug.cli.bench import linear_fusion

    overrides = CANDIDATES[name] if name else None
    return mp.compile(linear_fusion(*shape, mp.float16, False), overrides=overrides)


def _warm(job: tuple) -> str:
    """Build one candidate (fills the disk cache for the timed run)."""
    import torch

    shape, name = job
    m, n, k = shape
    compiled = _compile(shape, name)
    x = torch.zeros(m, k, device="cuda", dtype=torch.float16)
    w = torch.zeros(n, k, device="cuda", dtype=torch.float16)
    compiled.execute([x, w])
    torch.cuda.synchronize()
    return compiled.kernel_name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    jobs = [(s, c) for s in SHAPES for c in [None, *CANDIDATES]]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        pool.map(_warm, jobs)

    import torch
    from probes import save_to_out

    from mmaplug.tune.measure import cuda_median_ms, rel_error

    rows = []
    for shape in SHAPES:
        m, n, k = shape
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) / k**0.5
        ref = x.double() @ w.double().T
        torch_ms = cuda_median_ms(lambda x=x, w=w: torch.matmul(x, w.T), reps=args.reps)
        results = []
        for name in [None, *CANDIDATES]:
            compiled = _compile(shape, name)
            err = rel_error(compiled.execute([x, w])[0], ref)
            ms = cuda_median_ms(lambda c=compiled, i=[x, w]: c.execute(i), reps=args.reps)
            ok = err < 1e-2
            results.append({"candidate": name or "default", "params": compiled.params.name,
                            "ms": ms if ok else None, "rel_err": err})  # fmt: skip
        timed = [r for r in results if r["ms"] is not None]
        best = min(timed, key=lambda r: r["ms"])
        default = results[0]
        print(f"== {m}x{n}x{k} fp16, torch {torch_ms:.3f} ms")
        for r in results:
            mark = " <- best" if r is best else ""
            ms = f"{r['ms']:.3f} ms {torch_ms / r['ms']:.2f}x" if r["ms"] else "WRONG"
            print(f"  {r['candidate']:<16} {ms:<18} {r['params']}{mark}")
        quality = best["ms"] / default["ms"] if default["ms"] else 0.0
        print(f"  default / best: {quality:.2f}")
        rows.append({"shape": shape, "torch_ms": torch_ms, "results": results,
                     "default_vs_best": quality})  # fmt: skip
    save_to_out("hopper_sweep.json", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
