"""The hopper default plan beside the same plan with CTA pairs (``cluster_dims=(2, 1)``) and
cuBLAS, interleaved in one process: BENCHMARKS.md runs 34-35.

On a GPU machine (after the README's install): ``python scripts/cluster_probe.py``; one JSON
line per problem with each variant's error against torch in float64, kernel name, median ms and
ratio to torch (``F.linear``, or ``F.gelu(F.linear(x, w, b))`` for the fused rows).
``--variant LABEL=JSON`` replaces the variants with MatmulParams overrides of your own
(repeatable; ``default`` is always first); ``--only 4096x4096x4096`` keeps the shapes whose
name starts so (repeatable).
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

import mmaplug as mp
from mmaplug.bench import (
    interleaved_ms,
    linear_fusion,
    probe_arguments,
    rel_error,
    shape_wanted,
)

SHAPES = (
    (4096, 4096, 4096, "float16", False), (4096, 4096, 4096, "float16", True),
    (4096, 4096, 4096, "bfloat16", False), (8192, 8192, 8192, "float16", False),
    (8192, 8192, 8192, "bfloat16", False), (4096, 4096, 16384, "float16", False),
    (8192, 8192, 4096, "float16", False), (16384, 1024, 512, "float16", False),
    (16384, 1024, 512, "bfloat16", False), (2048, 14336, 5120, "bfloat16", False),
    (2048, 14336, 5120, "bfloat16", True), (128, 4096, 4096, "float16", False),
)  # fmt: skip
VARIANTS = (("default", None), ("c2", {"cluster_dims": (2, 1)}))


def probe(
    m: int, n: int, k: int, name: str, fused: bool, variants: tuple = VARIANTS
) -> dict[str, object]:
    """One problem: each variant checked against torch in float64, then timed beside it."""
    dtype, tdtype = getattr(mp, name), getattr(torch, name)
    x = torch.randn(m, k, device="cuda", dtype=tdtype)
    w = torch.randn(n, k, device="cuda", dtype=tdtype) / 64
    bias = torch.randn(n, device="cuda", dtype=tdtype)
    inputs = [x, w, bias] if fused else [x, w]

    def reference() -> torch.Tensor:
        return F.gelu(F.linear(x, w, bias)) if fused else F.linear(x, w)

    ref = reference().double()
    row: dict[str, object] = {"shape": f"{m}x{n}x{k}", "dtype": name, "fused": fused}
    fns: dict[str, Callable[[], object]] = {"torch": reference}
    for label, overrides in variants:
        compiled = mp.compile(linear_fusion(m, n, k, dtype, fused), overrides=overrides)
        out = compiled.execute(inputs)[0]
        row[f"{label}_err"] = rel_error(out, ref)
        row[f"{label}_kernel"] = compiled.kernel_name
        fns[label] = lambda compiled=compiled: compiled.execute(inputs)
    times = interleaved_ms(fns, 2, reps=20, inner=10)
    torch_ms = statistics.median(times["torch"])
    row["torch_ms"] = round(torch_ms, 4)
    for label, _ in variants:
        ms = statistics.median(times[label])
        row[f"{label}_ms"], row[f"{label}_ratio"] = round(ms, 4), round(torch_ms / ms, 3)
    return row


def main() -> None:
    args = probe_arguments(__doc__.split("\n\n")[0])
    variants = (("default", None), *args.variants) if args.variants else VARIANTS
    warnings.simplefilter("ignore")
    for shape in SHAPES:
        if not shape_wanted(*shape[:3], args.only):
            continue
        try:
            print(json.dumps(probe(*shape, variants=variants)), flush=True)
        except Exception as exc:  # a variant limits refuse: say so and go on
            print(json.dumps({"shape": shape, "error": f"{type(exc).__name__}: {exc}"}), flush=True)


if __name__ == "__main__":
    main()
