"""The ``targets`` subcommand of ``mmaplug``: issues 24 and 25's kernel targets, measured in one
run (``mmaplug.tune.targets``), or judged on rows saved before."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from mmaplug.cli.args import add_json, finite, positive, print_json, requires
from mmaplug.errors import UnsupportedTargetError, UsageError
from mmaplug.progress import Progress


def _saved_rows(path: str, option: str = "--rows") -> tuple[list[dict[str, Any]], str]:
    """The rows of a ``mmaplug targets --json`` or ``mmaplug bench --graph --json`` file, and
    the GPU that measured them where the file names it (``targets --json`` does); *option*
    names the file in an error."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as error:
        raise UsageError(f"{option} {path!r} cannot be read: {error.strerror}") from None
    except (ValueError, RecursionError) as error:  # bad UTF-8, bad JSON, numbers, nesting
        what = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise UsageError(f"{option} {path!r} is not JSON: {what}") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and isinstance(r.get("problem"), str) for r in rows
    ):
        raise UsageError(
            f"{option} {path!r} has no list 'rows' of problem rows: write it with "
            "'mmaplug targets --json' or 'mmaplug bench --graph --json'"
        )
    device = doc.get("device")
    return rows, device if isinstance(device, str) else ""


def cmd_targets(args: argparse.Namespace) -> int:
    """Measure (or, with ``--rows``, read) the targets' problems and print the targets table;
    1 where a problem's output failed its float64 check."""
    from mmaplug.tune import targets

    chosen = [t for t in targets.TARGETS if not args.issue or t.issue in args.issue]
    if not chosen:
        raise UsageError(f"no targets of issue {args.issue}: the targets are issues 24 and 25's")
    if args.rows:
        rows, device = _saved_rows(args.rows)
    else:
        rows, device = _measure(args, targets.problems(chosen))
    verdicts = targets.judge(chosen, rows)
    before, before_device = [], ""
    if args.against:
        old_rows, before_device = _saved_rows(args.against, "--against")
        before = targets.judge(chosen, old_rows)
    if args.json:
        print_json(
            {
                "schema": 1,
                "device": device,
                "targets": [
                    {
                        "issue": v.target.issue,
                        "target": v.target.text,
                        "met": v.met,
                        "mean": v.mean,
                        "values": {p.key: x for p, x in v.values.items()},
                        "cold": {p.key: x for p, x in v.cold.items()},
                        "failing": [p.key for p in v.failing],
                        "missing": [p.key for p in v.missing],
                        "wrong": [p.key for p in v.wrong],
                    }
                    for v in verdicts
                ],
                "rows": [finite(r) for r in rows],
            }
        )
    else:
        print(targets.markdown(verdicts, device, before, before_device))
    return 1 if any(v.wrong for v in verdicts) else 0


def _measure(args: argparse.Namespace, problems: list[Any]) -> tuple[list[dict[str, Any]], str]:
    """``mmaplug bench --graph``'s rows of *problems* on the local GPU (kernels built first),
    and the GPU's name."""
    requires("torch", "mmaplug targets", "pip install 'mmaplug[bench]'")
    from mmaplug.cli import bench
    from mmaplug.cuda.presence import cuda_device_count

    if cuda_device_count() == 0:
        raise UnsupportedTargetError(
            "mmaplug targets needs a CUDA GPU to measure; none was found (--rows FILE judges "
            "rows measured before)"
        )
    progress = Progress(args.progress)
    table = progress.stream if progress.enabled else io.StringIO()
    import torch

    rows = bench.corpus_rows(
        problems, progress, table, workers=args.workers, reps=args.reps, graph=True
    )
    return rows, torch.cuda.get_device_name()


def add_targets(sub: Any) -> None:
    p = sub.add_parser(
        "targets",
        help="measure issues 24 and 25's kernel targets and print their table",
        description="Time every problem of issues 24 and 25's kernel targets (FP8 against\n"
        "cuBLASLt, block scales, fused epilogues, decode at the HBM limit, few rows, deep K,\n"
        "large problems) as CUDA-graph replays beside torch in one run, every output checked\n"
        "against float64 first, and print one markdown table: each target's worst problem,\n"
        "mean and verdict. Needs a CUDA GPU and the 'bench' extra; --rows judges saved rows\n"
        "without one (docs/decisions.md, 'The targets table').",
        epilog="examples:\n  mmaplug targets --workers 14 > targets.md\n"
        "  mmaplug targets --workers 14 --json > targets.json\n"
        "  mmaplug targets --rows targets.json --issue 25\n"
        "  mmaplug targets --rows new.json --against old.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--issue", action="append", type=int, default=[], metavar="N",
                   help="only this issue's targets (24 or 25; repeatable)")  # fmt: skip
    p.add_argument("--rows", default="", metavar="FILE",
                   help="judge the rows of this 'targets --json' or 'bench --graph --json' "
                        "file instead of measuring")  # fmt: skip
    p.add_argument("--against", default="", metavar="FILE",
                   help="a column of the same targets judged on this earlier 'targets --json' "
                        "file: their worst value and mean then")  # fmt: skip
    p.add_argument("--reps", type=positive, default=20, help="timed repetitions (default 20)")
    p.add_argument("--workers", type=positive, default=1,
                   help="build the kernels in this many processes first (disk cache)")  # fmt: skip
    add_json(p, "the verdicts and the measured rows as JSON")
    p.set_defaults(func=cmd_targets)
