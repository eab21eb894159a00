"""What each part of a fused epilogue costs: our kernel bare, + bias, + ReLU, + GELU (erf and
tanh forms), beside cuBLAS bare, ``addmm`` (cuBLASLt's bias epilogue), ``_addmm_activation``
(cuBLASLt's bias + GELU-tanh epilogue) and torch eager (linear, then GELU): BENCHMARKS.md runs
54-55.

On a GPU machine (after the README's install)::

    MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1 python scripts/epilogue_probe.py [--variant LABEL=JSON]

Every kernel is checked against torch's result in float64 before it is timed; all are then
timed in interleaved rounds of CUDA-event medians in one process. One JSON line per problem:
``err_<variant>_<kind>`` and ``<variant>_<kind>`` (ms) for ours, ``t_*`` (ms) for torch's.
``--variant`` adds a plan of MatmulParams overrides beside the default (repeatable).
"""

from __future__ import annotations

import json
import statistics
import warnings
from typing import Any

import mmaplug as mp

KINDS = ("bare", "bias", "relu", "gelu", "gelu_tanh")
SHAPES = ((4096, 4096, 4096, "float16"), (4096, 4096, 4096, "bfloat16"),
          (2048, 14336, 5120, "bfloat16"), (16384, 1024, 512, "bfloat16"))  # fmt: skip
SQRT_2_OVER_PI = 0.7978845608028654


def epilogue_fusion(m: int, n: int, k: int, dtype: mp.DType, kind: str) -> mp.Fusion:
    """``x @ w.T`` with the epilogue *kind* (one of ``KINDS``; all but bare add a bias [n]),
    cast to *dtype*. ``gelu_tanh`` is composed as torch's ``gelu(approximate="tanh")``:
    ``0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3)))``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w = fd.define_tensor([n, k], dtype=dtype)
        if kind == "bare":
            fd.add_output(fd.ops.linear(x, w))
            return fd.fusion
        y = fd.ops.linear(x, w, fd.define_tensor([n], dtype=dtype))
        if kind == "relu":
            y = fd.ops.relu(y)
        elif kind == "gelu":
            y = fd.ops.gelu(y)
        elif kind == "gelu_tanh":
            cube = fd.ops.mul(fd.ops.mul(y, y), y)
            inner = fd.ops.mul(fd.ops.add(y, fd.ops.mul(cube, 0.044715)), SQRT_2_OVER_PI)
            y = fd.ops.mul(fd.ops.mul(y, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def probe(m: int, n: int, k: int, name: str, variants: list[tuple[str, Any]]) -> dict[str, Any]:
    """One problem: every kind of every variant checked, then all timed beside torch's."""
    import torch
    import torch.nn.functional as F

    from mmaplug.tune.measure import interleaved_ms, rel_error

    dtype, tdtype = getattr(mp, name), getattr(torch, name)
    x = torch.randn(m, k, device="cuda", dtype=tdtype)
    w = torch.randn(n, k, device="cuda", dtype=tdtype) / 64
    b = torch.randn(n, device="cuda", dtype=tdtype)
    refs = {
        "bare": lambda: F.linear(x, w),
        "bias": lambda: F.linear(x, w, b),
        "relu": lambda: F.relu(F.linear(x, w, b)),
        "gelu": lambda: F.gelu(F.linear(x, w, b)),
        "gelu_tanh": lambda: F.gelu(F.linear(x, w, b), approximate="tanh"),
    }
    fns = {
        "t_bare": refs["bare"],
        "t_addmm": lambda: torch.addmm(b, x, w.t()),
        "t_lt_gelu_tanh": lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True),
        "t_eager_gelu": refs["gelu"],
    }
    row: dict[str, Any] = {"shape": f"{m}x{n}x{k}", "dtype": name}
    lt = rel_error(fns["t_lt_gelu_tanh"](), refs["gelu_tanh"]().double())
    row["err_t_lt_gelu_tanh"] = round(lt, 6)
    for label, overrides in variants:
        for kind in KINDS:
            compiled = mp.compile(epilogue_fusion(m, n, k, dtype, kind), overrides=overrides)
            inputs = [x, w] if kind == "bare" else [x, w, b]
            out = compiled.execute(inputs)[0]
            row[f"err_{label}_{kind}"] = round(rel_error(out, refs[kind]().double()), 6)
            fns[f"{label}_{kind}"] = lambda c=compiled, i=inputs: c.execute(i)
    for key, times in interleaved_ms(fns, 3, reps=20, inner=10).items():
        row[key] = round(statistics.median(times), 4)
    return row


def main() -> None:
    from probes import probe_arguments, shape_wanted

    args = probe_arguments(__doc__.split("\n\n")[0])
    warnings.simplefilter("ignore")
    for m, n, k, name in SHAPES:
        if shape_wanted(m, n, k, args.only):
            print(json.dumps(probe(m, n, k, name, [("d", None), *args.variants])), flush=True)


if __name__ == "__main__":
    main()
