"""The default plan of whichever mmaplug is on the path against torch, on the issue-8 shapes:
one JSON line per problem (BENCHMARKS.md runs 58-60). To A/B two versions, install the other
one beside (``pip install --target /tmp/old <checkout>``) and alternate fresh processes::

    PYTHONPATH=... MMAPLUG_CACHE_DIR=/tmp/c_new python scripts/ab_probe.py new
    PYTHONPATH=/tmp/old:... MMAPLUG_CACHE_DIR=/tmp/c_old python scripts/ab_probe.py old

Every kernel is checked against torch's float64 result before it is timed (interleaved
CUDA-event medians beside ``F.linear`` or eager ``F.gelu(F.linear(...))``).
"""

from __future__ import annotations

import json
import statistics
import sys
import warnings

import mmaplug as mp

PROBLEMS = (  # m, n, k, dtype, with bias + GELU
    (16384, 1024, 512, "float16", False), (16384, 1024, 512, "bfloat16", False),
    (4096, 4096, 4096, "float16", False), (4096, 4096, 4096, "bfloat16", False),
    (4096, 4096, 4096, "float16", True), (4096, 4096, 4096, "bfloat16", True),
    (2048, 14336, 5120, "bfloat16", False), (2048, 14336, 5120, "bfloat16", True),
    (128, 4096, 4096, "float16", False), (8192, 8192, 8192, "bfloat16", False),
)  # fmt: skip


def probe(m: int, n: int, k: int, name: str, fused: bool) -> dict[str, object]:
    """One problem: checked against torch's result in float64, then timed beside it."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from mmaplug.bench import interleaved_ms, linear_fusion, rel_error

    tdt = getattr(torch, name)
    x = torch.randn(m, k, device="cuda", dtype=tdt)
    w = torch.randn(n, k, device="cuda", dtype=tdt) / 64
    b = torch.randn(n, device="cuda", dtype=tdt)
    inputs = [x, w, b] if fused else [x, w]
    ref = (lambda: F.gelu(F.linear(x, w, b))) if fused else (lambda: F.linear(x, w))
    compiled = mp.compile(linear_fusion(m, n, k, getattr(mp, name), fused))
    err = rel_error(compiled.execute(inputs)[0], ref().double())
    times = interleaved_ms(
        {"torch": ref, "ours": lambda: compiled.execute(inputs)}, 3, reps=20, inner=10
    )
    theirs, ours = statistics.median(times["torch"]), statistics.median(times["ours"])
    return {"shape": f"{m}x{n}x{k}", "dtype": name, "fused": fused, "err": err,
            "kernel": compiled.kernel_name, "ours_ms": round(ours, 4),
            "torch_ms": round(theirs, 4), "ratio": round(theirs / ours, 3)}  # fmt: skip


def main() -> None:
    warnings.simplefilter("ignore")
    tag = f"{sys.argv[1] if len(sys.argv) > 1 else 'ours'}:{mp.__file__}"
    for problem in PROBLEMS:
        print(json.dumps({"tag": tag, **probe(*problem)}), flush=True)


if __name__ == "__main__":
    main()
