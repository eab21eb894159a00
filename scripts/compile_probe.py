"""Ours against torch.compile on fused problems (the aim "faster than torch.compile on
fusions"; BENCHMARKS.md run 216). Run from the repo root on a GPU machine after the install:

    python scripts/compile_probe.py [--autotune]

Each problem: ours (mp.compile of the fusion), torch eager (``torch_call``: cuBLAS/cuBLASLt then
torch's GELU), torch.compile of the same eager function (default mode; with --autotune also
mode="max-autotune-no-cudagraphs"), every output checked against float64 first, then CUDA-graph
replays (``graph_us``). Prints one line a problem; writes $OUT/compile_probe.json where $OUT
is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

import mmaplug as mp
from mmaplug.cli.bench import CORPUS_TOLERANCE, torch_call
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.measure import graph_us, rel_error
from mmaplug.tune.work import problem_inputs, reference

PROBLEMS = [
    TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16", epilogue="bias_gelu"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float16", epilogue="bias_gelu"),
    TuneProblem(m=2048, n=14336, k=5120, dtype="bfloat16", epilogue="bias_gelu"),
    TuneProblem(m=512, n=4096, k=4096, dtype="bfloat16", epilogue="bias_gelu"),
    TuneProblem(m=16, n=14336, k=4096, dtype="bfloat16", epilogue="bias_gelu"),
    TuneProblem(m=1, n=14336, k=4096, dtype="bfloat16", epilogue="bias_gelu"),
    *(
        TuneProblem(
            m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale=scale, epilogue="bias_gelu"
        )
        for scale in ("tensor", "row")
    ),
]


def main(autotune: bool) -> None:
    rows = []
    modes = [None] + (["max-autotune-no-cudagraphs"] if autotune else [])
    for problem in PROBLEMS:
        inputs = problem_inputs(problem)
        ref = reference(problem, inputs)
        row: dict = {"problem": problem.key}
        compiled = mp.compile(problem.fusion())
        row["kernel"] = compiled.kernel_name
        sides = {"ours": lambda c=compiled, i=inputs: c.execute(i)[0]}
        eager = torch_call(problem, inputs)
        sides["eager"] = eager
        for mode in modes:
            label = f"compile:{mode or 'default'}"
            t0 = time.perf_counter()
            try:
                fn = torch.compile(eager, mode=mode, dynamic=False)
                fn()
                torch.cuda.synchronize()
                sides[label] = fn
                row[f"{label}_compile_s"] = round(time.perf_counter() - t0, 1)
            except Exception as error:  # noqa: BLE001 (a probe: record and go on)
                row[f"{label}_error"] = f"{type(error).__name__}: {error}"[:400]
                traceback.print_exc()
        for label, fn in sides.items():
            try:
                out = fn()
                out = out[0] if isinstance(out, (list, tuple)) else out
                row[f"{label}_err"] = err = rel_error(out, ref)
                if not err <= CORPUS_TOLERANCE:
                    row[f"{label}_wrong"] = True
                    continue
                row[f"{label}_us"] = graph_us(fn)
            except Exception as error:  # noqa: BLE001
                row[f"{label}_error"] = f"{type(error).__name__}: {error}"[:400]
        base = row.get("ours_us")
        line = [problem.key]
        for label in sides:
            us = row.get(f"{label}_us")
            line.append(
                f"{label} {us:.1f} us ({us / base:.3f}x ours)" if us and base else f"{label} -"
            )
        print("  ".join(line), flush=True)
        rows.append(row)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "compile_probe.json"), "w") as fh:
            json.dump(rows, fh, indent=1, default=str)


if __name__ == "__main__":
    main("--autotune" in sys.argv[1:])
