"""The ``demo`` and ``bench`` subcommands of ``mmaplug`` (they need Numba; bench also torch)."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any

from mmaplug.cli.args import (
    add_json,
    extent,
    finite,
    one_of,
    parse_settings,
    png,
    positive,
    print_json,
    requires,
    setting,
    shape,
)
from mmaplug.errors import UnsupportedTargetError, UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import get_device
from mmaplug.progress import Progress


def cmd_demo(args: argparse.Namespace) -> int:
    """Build the example fusion (linear + bias + GELU), translate, plan, compile and run it."""
    from mmaplug.cli import demo

    if args.device is not None:
        get_device(args.device)  # an unknown preset fails before the demo prints anything
    return demo.run(sys.stdout, device=args.device, m=args.m, n=args.n, k=args.k)


def add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job end to end on an example fusion (linear + bias + GELU)",
        description="Build cast(gelu(linear(x, w, bias))), find and translate its matmul, plan, "
        "compile and run it: on the GPU when there is one, else in Numba's CUDA "
        "simulator at a small shape. Exit status 1 when a check fails.",
    )
    p.add_argument(
        "--device", default=None, help="preset to plan for (default: the local GPU, else h200)"
    )
    for dim in ("m", "n", "k"):
        p.add_argument(f"--{dim}", type=lambda t: extent(t, zero=True), default=0,
                       help=f"{dim.upper()} of the example (default: by machine)")  # fmt: skip
    p.set_defaults(func=cmd_demo)


def cmd_bench(args: argparse.Namespace) -> int:
    """Time our kernels against torch.matmul on the local GPU (CUDA-event medians)."""
    if args.plot and (args.corpus or args.graph):
        raise UsageError("--plot draws the per-call shape table: not with --corpus or --graph")
    requires("torch", "mmaplug bench", "pip install 'mmaplug[bench]'")
    if args.plot:
        requires("matplotlib", "--plot", "pip install 'mmaplug[bench]'")
    from mmaplug.cli import bench
    from mmaplug.cuda.presence import cuda_device_count

    if cuda_device_count() == 0:
        raise UnsupportedTargetError("mmaplug bench needs a CUDA GPU; none was found")
    progress = Progress(args.progress)
    shapes = tuple(args.shape) or (bench.SHAPES[:3] if args.quick else bench.SHAPES)
    dtypes = tuple(DType[name] for name in dict.fromkeys(args.dtype)) or (
        DType.float16,
        DType.bfloat16,
    )
    overrides = parse_settings(args.set) or None
    if args.corpus or args.graph:
        return _bench_problems(args, progress, shapes, dtypes, overrides)
    if args.workers > 1:
        with progress.step(f"building the kernels in {args.workers} processes"):
            done = bench.prewarm(shapes, dtypes, args.workers, overrides)
        progress.say(
            f"built {len(done.built)} kernels in {done.seconds:.1f} s "
            f"({len(done.cached)} were in the disk cache)"
        )
    # with --json the table goes to stderr as progress (or nowhere), never into the JSON
    table = (
        sys.stdout if not args.json else (progress.stream if progress.enabled else io.StringIO())
    )
    rows = bench.run(table, shapes=shapes, dtypes=dtypes, reps=args.reps, overrides=overrides)
    dispatch_us = bench.dispatch_overhead(table)
    if args.plot:
        bench.plot(rows, args.plot)
    if args.json:
        print_json({"schema": 1, "rows": [finite(r) for r in rows], "dispatch_us": dispatch_us})
    return 0


def _bench_problems(
    args: argparse.Namespace,
    progress: Progress,
    shapes: Sequence[tuple[int, int, int]],
    dtypes: Sequence[DType],
    overrides: dict[str, object] | None,
) -> int:
    """``bench --corpus`` / ``--graph``: corpus problems (or the shapes), per call and replays."""
    from mmaplug.cli import bench
    from mmaplug.tune.corpus import load_all

    problems = load_all(args.corpus) if args.corpus else bench.shape_problems(shapes, dtypes)
    table = (
        sys.stdout if not args.json else (progress.stream if progress.enabled else io.StringIO())
    )
    rows = bench.corpus_rows(
        problems, progress, table, workers=args.workers, reps=args.reps, graph=args.graph,
        overrides=overrides,
    )  # fmt: skip
    if args.json:
        print_json({"schema": 1, "rows": [finite(r) for r in rows]})
    return 0 if all(r["rel_err"] <= bench.CORPUS_TOLERANCE for r in rows) else 1


def add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="time the kernels against torch.matmul on the local GPU",
        description="Time each scheduler's kernel beside torch.matmul (cuBLAS) in one run:\n"
        "CUDA-event medians after warm-up; every output is checked against a float64\n"
        "reference first. Needs a CUDA GPU and the 'bench' extra (torch, matplotlib).",
        epilog="example:\n  mmaplug bench --workers 14 --shape 4096x4096x4096 --plot bench.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="only the three smallest squares")
    p.add_argument("--reps", type=positive, default=30, help="timed repetitions (default 30)")
    p.add_argument("--shape", action="append", type=shape, default=[], metavar="MxNxK",
                   help="time this shape (repeatable) instead of the built-in list")  # fmt: skip
    p.add_argument("--set", action="append", type=setting, default=[], metavar="FIELD=VALUE",
                   help="a MatmulParams override for every kernel (repeatable)")  # fmt: skip
    p.add_argument(
        "--dtype",
        action="append",
        type=one_of(["float16", "bfloat16"], "a benchmark dtype"),
        default=[],
        metavar="DTYPE",
        help="float16 or bfloat16 (repeatable; default both)",
    )
    p.add_argument("--corpus", action="append", default=[], metavar="NAME|FILE",
                   help="time a tuning corpus's problems (e.g. serving; repeatable)")  # fmt: skip
    p.add_argument("--graph", action="store_true",
                   help="also time CUDA-graph replays (GPU time; TB/s beside TF/s), on one set "
                        "of operands and 'cold' on copies read in turn past L2")  # fmt: skip
    p.add_argument("--plot", default="", type=png, metavar="PNG",
                   help="also write a bar chart here (needs matplotlib)")  # fmt: skip
    p.add_argument("--workers", type=positive, default=1,
                   help="build the kernels in this many processes first (disk cache)")  # fmt: skip
    add_json(p, "the rows as JSON (the table goes to stderr when progress is shown)")
    p.set_defaults(func=cmd_bench)
