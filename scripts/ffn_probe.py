"""The fused llama FFN ``silu(x @ W1.T) * (x @ W3.T)`` (one horizontal kernel: hopper's, or
the decode kernel's for up to 16 rows) against torch's two matmuls + ``silu`` + ``mul``, in one
process: issue 10, item 3, and issue 25's decode FFN.

On a GPU machine (after the README's install): ``python scripts/ffn_probe.py``. Per dtype,
each fused variant (the default plan; cooperative consumers; ``hopper``, the default with the
decode scheduler blocked; ``--overrides``) is first checked against a float64 reference on a
smaller ragged shape and on the timed one (outputs poisoned with NaN first); a wrong or
unwritten result is reported and not timed. Then the variants and torch are timed in
interleaved rounds (CUDA-event medians, ``mmaplug.tune.measure.interleaved_ms``), or with
``--graph`` as CUDA-graph replays in turn (``interleaved_graph_us``: a decode step's kernels
are too short for a per-call event pair). One JSON line per dtype: per variant its kernel,
errors, milliseconds, TFLOP/s, TB/s (the weights, x and the output, each moved once) and
speedup over torch.

A decode step of llama 8B: ``python scripts/ffn_probe.py --shape 1 14336 4096 --graph
--variants default hopper``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import mmaplug as mp
from mmaplug.tune.measure import (
    interleaved_graph_us,
    interleaved_ms,
    poison_free_memory,
    rel_error,
)

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2}
#: Plugins blocked for a variant: ``hopper`` is the default plan without the decode scheduler
#: (what a decode FFN ran on before the decode kernel took horizontal fusions).
BLOCKED = {"hopper": ("decode",)}
COOPERATIVE = {  # the default before ping-pong (run 38): two consumers share 128 x 256 tiles
    "cta_tile": (128, 256, 64),
    "warp_tile": (64, 256, 64),
    "instruction_tile": (64, 256, 16),
    "stages": 4,
    "tiling_strategy": "persistent",
}


def ffn_fusion(m: int, n: int, k: int, dtype: mp.DType) -> mp.Fusion:
    """``cast(silu(x @ W1.T) * (x @ W3.T))`` with x [M, K], W1 and W3 [N, K]."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w1, w3 = fd.define_tensor([n, k], dtype=dtype), fd.define_tensor([n, k], dtype=dtype)
        gate = fd.ops.silu(fd.ops.linear(x, w1))
        fd.add_output(fd.ops.cast(fd.ops.mul(gate, fd.ops.linear(x, w3)), dtype))
    return fd.fusion


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The fused llama FFN (one horizontal kernel) against torch's two matmuls + "
        "silu + mul: checked against float64, then timed; one JSON line per dtype."
    )
    parser.add_argument(
        "--shape",
        type=int,
        nargs=3,
        default=(2048, 14336, 5120),
        metavar=("M", "N", "K"),
        help="the timed shape (default: %(default)s)",
    )
    parser.add_argument(
        "--check-shape",
        type=int,
        nargs=3,
        default=None,
        metavar=("M", "N", "K"),
        help="a smaller shape checked first, ragged (default: 300 1000 520, or the timed M "
        "with 1000 520 for M <= 16, so both plan alike)",
    )
    parser.add_argument(
        "--dtypes", nargs="+", default=["bfloat16", "float16"], choices=sorted(TOLERANCE)
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["default", "cooperative"],
        choices=["default", "cooperative", "hopper"],
        help="fused kernels to time (default: %(default)s; hopper: the default plan with the "
        "decode scheduler blocked)",
    )
    parser.add_argument(
        "--graph", action="store_true", help="time CUDA-graph replays of 20 calls (decode sizes)"
    )
    parser.add_argument(
        "--overrides",
        type=json.loads,
        default=None,
        help="one more variant, 'custom': MatmulParams overrides as JSON, e.g. '{\"stages\": 3}'",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--reps", type=int, default=20, help="timings per round")
    parser.add_argument("--inner", type=int, default=5, help="back-to-back calls per timing")
    args = parser.parse_args(argv)
    if args.check_shape is None:
        m = args.shape[0]
        args.check_shape = (m, 1000, 520) if m <= 16 else (300, 1000, 520)
    return args


def _check(compiled: Any, inputs: list, torch: Any) -> float:
    """Relative error of the fused kernel against float64 (NaN if any element is unwritten)."""
    x, w1, w3 = (t.double() for t in inputs)
    gate = x @ w1.T
    ref = gate * torch.sigmoid(gate) * (x @ w3.T)
    poison_free_memory(256 << 20)
    (out,) = compiled.execute(inputs)
    return rel_error(out, ref)


def probe(shape: Sequence[int], check: Sequence[int], name: str, args: argparse.Namespace) -> dict:
    """One dtype: each variant checked on both shapes, then timed against torch."""
    import torch
    import torch.nn.functional as F

    dtype, tdtype = getattr(mp, name), getattr(torch, name)
    row: dict[str, Any] = {"dtype": name, "shape": "x".join(map(str, shape))}

    def operands(m: int, n: int, k: int) -> list:
        x = torch.randn(m, k, device="cuda", dtype=tdtype)
        w1, w3 = (torch.randn(n, k, device="cuda", dtype=tdtype) / k**0.5 for _ in "13")
        return [x, w1, w3]

    checked, timed = operands(*check), operands(*shape)
    x, w1, w3 = timed

    def reference() -> object:
        return F.silu(F.linear(x, w1)) * F.linear(x, w3)

    fns: dict[str, Any] = {"torch": reference}
    for variant, overrides in variants(args).items():
        pm = mp.make_plugin_manager(block=BLOCKED.get(variant, ()))
        for label, (m, n, k), inputs in (("check", check, checked), ("timed", shape, timed)):
            compiled = mp.compile(ffn_fusion(m, n, k, dtype), pm=pm, overrides=overrides)
            err = _check(compiled, inputs, torch)
            row[f"{variant}_{label}_err"] = err
        row[f"{variant}_kernel"] = compiled.kernel_name
        row[f"{variant}_ok"] = ok = all(
            row[f"{variant}_{label}_err"] < TOLERANCE[name] for label in ("check", "timed")
        )  # NaN (unwritten elements) is not ok either
        if ok:  # a wrong kernel is not timed
            fns[variant] = lambda compiled=compiled: compiled.execute(timed)
    if args.graph:
        times = {label: [us / 1e3] for label, us in interleaved_graph_us(fns).items()}
    else:
        times = interleaved_ms(fns, args.rounds, reps=args.reps, inner=args.inner)
    m, n, k = shape
    moved = (2 * n * k + m * k + m * n) * x.element_size()
    for label in fns:
        ms = statistics.median(times[label])
        row[f"{label}_ms"] = round(ms, 4)
        row[f"{label}_tflops"] = round(2 * 2 * m * n * k / ms / 1e9, 1)
        row[f"{label}_tbps"] = round(moved / ms / 1e9, 2)
    for label in fns:
        row[f"{label}_speedup"] = round(row["torch_ms"] / row[f"{label}_ms"], 3)
    return row


def variants(args: argparse.Namespace) -> dict[str, dict[str, Any] | None]:
    """The fused kernels to time: the default plan (ping-pong consumers owning 64 x 256 MMA
    tiles at the timed shape; the decode kernel for up to 16 rows), two cooperative consumers
    sharing 128 x 256 ones, the default plan without the decode scheduler (``BLOCKED``), and
    the caller's ``--overrides``."""
    chosen: dict[str, dict[str, Any] | None] = {
        "default": None, "cooperative": COOPERATIVE, "hopper": None
    }  # fmt: skip
    chosen = {k: v for k, v in chosen.items() if k in args.variants}
    if args.overrides:
        chosen["custom"] = args.overrides
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("ffn_probe needs torch (pip install torch) and a CUDA GPU", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("ffn_probe needs a CUDA GPU (an H100/H200 for the hopper kernel)", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    for name in args.dtypes:
        print(json.dumps(probe(args.shape, args.check_shape, name, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
