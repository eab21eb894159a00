"""The ``tune``, ``db``, ``report`` and ``diff`` subcommands of ``mmaplug``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from mmaplug.cli.args import (
    add_json,
    count,
    finite,
    one_of,
    positive,
    print_json,
    requires,
    seconds,
    shape,
)
from mmaplug.errors import UnsupportedTargetError, UsageError
from mmaplug.planning.device import get_device
from mmaplug.progress import Progress
from mmaplug.tune import db
from mmaplug.tune.corpus import BUILTIN, TuneProblem, load_all

CORES = max(1, (os.cpu_count() or 2) - 1)
_CORPUS_HELP = f"a built-in corpus ({', '.join(BUILTIN)}) or a .json/.toml file (repeatable)"


def problems_of(args: argparse.Namespace) -> list[TuneProblem]:
    problems = load_all(args.corpus)
    problems += [TuneProblem(m=m, n=n, k=k, dtype=args.dtype) for m, n, k in args.shape]
    if not problems:
        raise UsageError("no problems: give --corpus NAME|FILE or --shape MxNxK")
    return list(dict.fromkeys(problems))


@contextlib.contextmanager
def open_db(args: argparse.Namespace, *, create: bool) -> Iterator[Any]:
    """The database, which heuristics that read one (the tuned table) read meanwhile too."""
    from mmaplug.tune.report import database_file, tuning_db

    conn = db.connect(args.db or db.default_path(), create=create)
    try:
        with tuning_db(database_file(conn)):
            yield conn
    finally:
        conn.close()


def add_problems(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", action="append", default=[], metavar="NAME|FILE", help=_CORPUS_HELP)
    p.add_argument(
        "--shape",
        action="append",
        type=shape,
        default=[],
        metavar="MxNxK",
        help="also this TN problem (repeatable; dtype from --dtype)",
    )
    p.add_argument(
        "--dtype",
        default="bfloat16",
        type=one_of(["float16", "bfloat16"], "a --shape dtype"),
        metavar="DTYPE",
        help="dtype of the --shape problems: float16 or bfloat16 (default bfloat16)",
    )
    p.add_argument(
        "--db",
        default="",
        metavar="PATH",
        help="the tuning database (default: $MMAPLUG_TUNING_DB, else the cache dir)",
    )


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=None,
        help="device preset whose rows to use (default: the local GPU, else h200)",
    )


def device_of(args: argparse.Namespace) -> Any:
    if args.device is not None:
        return get_device(args.device)
    try:
        return get_device(None)
    except UnsupportedTargetError:
        return get_device("h200")


# ------------------------------------------------------------------------------------------------
# tune
# ------------------------------------------------------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    """Plan, build and time the candidates of every problem into the database."""
    from mmaplug.tune import sweep

    for flag in ("ampere", "decode"):
        if (count := getattr(args, flag)) is not None and count < 0:
            raise UsageError(f"--{flag} {count}: give 0 or more candidates per problem")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit {args.time_limit}: give a positive number of seconds")
    problems = problems_of(args)
    progress = Progress(args.progress)
    if args.plan_only or args.build_only:
        device = get_device("h200" if args.device is None else args.device)
        jobs = sweep.plan_jobs(
            problems, device, limit=args.candidates, ampere=args.ampere, decode=args.decode
        )
        if args.plan_only:
            _print_jobs(jobs, args.json)
            guess = sweep.estimate(jobs, build_workers=args.workers, gpus=max(1, args.gpus))
            print(sweep.describe_estimate(guess, len(problems)), file=sys.stderr)
            return 0
        pairs = sweep.run(
            list(sweep.distinct_kernels(jobs).values()),
            "build",
            slots=[{}] * args.workers,
            timeout=args.timeout,
            ray_address=args.ray,
            on_result=lambda j, r: progress.say(
                f"built {j['key']} {j['params_name']}: {r['status']}"
            ),
        )
        failed = [(j, r) for j, r in pairs if r["status"] != "ok"]
        summary: dict[str, Any] = {
            "built": len(pairs) - len(failed),
            "failed": [{"problem": j["key"], "params": j["params_name"], **r} for j, r in failed],
        }
        print_json(summary) if args.json else print(
            f"built {summary['built']} of {len(pairs)} distinct kernels ({len(jobs)} candidates)"
            + "".join(
                f"\n  {f['problem']} {f['params']}: {f['status']} {f['error']}"
                for f in summary["failed"]
            )
        )
        return 1 if failed else 0
    if args.ray and args.time_limit:
        raise UsageError("--time-limit applies to local sweeps; Ray runs every task it is given")
    if not args.ray:  # Ray's workers need torch; the driver does not
        requires("torch", "mmaplug tune (timing)", "pip install 'mmaplug[bench]'")
    from mmaplug.cuda.presence import cuda_device_count

    count = cuda_device_count()
    if count == 0 and not args.ray:
        raise UnsupportedTargetError(
            "mmaplug tune times kernels on a CUDA GPU; none was found "
            "(--plan-only and --build-only need none)"
        )
    gpus = count if args.gpus == 0 else min(args.gpus, max(count, 1))
    device = get_device(args.device)  # None: the local GPU
    from mmaplug.tune.report import installed_heuristics, manager

    managers = [manager(name) for name in installed_heuristics()]
    with open_db(args, create=True) as conn:
        counts = sweep.sweep(
            problems,
            conn,
            limit=args.candidates,
            ampere=args.ampere,
            decode=args.decode,
            gpus=gpus,
            build_workers=args.workers,
            timeout=args.timeout,
            ray_address=args.ray,
            managers=managers,
            progress=progress,
            device=device,
            time_limit=args.time_limit,
        )
    print_json(counts) if args.json else print(
        ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    return 0


def _print_jobs(jobs: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:  # one object, as every --json prints
        candidates = [
            {"problem": j["key"], "scheduler": j["scheduler"], "params": j["params"],
             "name": j["params_name"]}
            for j in jobs
        ]  # fmt: skip
        print_json({"candidates": candidates})
        return
    for job in jobs:
        print(f"{job['key']:<44} {job['scheduler']:<7} {job['params_name']}")


def add_tune(sub: Any) -> None:
    p = sub.add_parser(
        "tune",
        help="time legal kernel configurations of a problem corpus into the tuning database",
        description="For each problem: the hopper and decode (where it takes the problem,\n"
        "M <= 16) schedulers' legal configurations (and --ampere ones), ranked by a cheap\n"
        "model (the heuristics' own choices always included), are built in parallel\n"
        "processes (each distinct kernel once), then timed with CUDA events in one worker\n"
        "process per GPU; a candidate that crashes or hangs is recorded as such. Rows already\n"
        "in the database are skipped, so an interrupted sweep resumes.\n"
        "See docs/tuning.md.",
        epilog="examples:\n"
        "  mmaplug tune --corpus llm --corpus skinny --workers 16 --progress\n"
        "  mmaplug tune --shape 4096x4096x4096 --candidates 50 --db tune.sqlite\n"
        "  mmaplug tune --corpus llm --candidates 16 --ampere 4 --time-limit 300\n"
        "  mmaplug tune --corpus odd --plan-only          (no GPU)\n"
        "  mmaplug tune --corpus odd --build-only --ray local   (PTX builds as Ray tasks)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_problems(p)
    p.add_argument(
        "--candidates", type=positive, default=50, help="hopper ones per problem (default 50)"
    )
    p.add_argument(
        "--ampere",
        type=int,
        default=0,
        metavar="N",
        help="also N ampere-scheduler candidates per problem (default 0)",
    )
    p.add_argument(
        "--decode",
        type=int,
        default=None,
        metavar="N",
        help="decode-scheduler candidates per problem it takes (default: its whole space)",
    )
    p.add_argument(
        "--workers",
        type=positive,
        default=CORES,
        help="build processes (default: the cores less one)",
    )
    p.add_argument("--gpus", type=count, default=0, help="timing workers, one per GPU (0: all)")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        help="seconds a build or a timing may take before its worker is killed",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="start no job after S seconds (builds: the first half); rerun to resume",
    )
    p.add_argument(
        "--ray",
        default="",
        metavar="ADDRESS",
        help="run the jobs as Ray tasks on this cluster ('local': start one)",
    )
    p.add_argument("--plan-only", action="store_true", help="print the candidates (no GPU)")
    p.add_argument(
        "--build-only",
        action="store_true",
        help="build every candidate's PTX, time nothing (no GPU)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="the timing GPUs' preset (default: the local GPU; h200 for --plan-only and "
        "--build-only); name it for a Ray cluster whose driver has no GPU",
    )
    add_json(p, "the summary as JSON")
    p.set_defaults(func=cmd_tune)


# ------------------------------------------------------------------------------------------------
# db
# ------------------------------------------------------------------------------------------------


def cmd_db(args: argparse.Namespace) -> int:
    """List, filter or export the rows of the tuning database."""
    with open_db(args, create=False) as conn:
        found = db.rows(
            conn,
            problem_key=args.problem,
            device=args.device,
            status=args.status,
            best=args.best,
            limit=args.limit,
        )
    if args.format in ("csv", "json"):
        out = db.export([finite(r) for r in found], args.format)
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
        return 0
    for r in found:
        tflops = f"{r['tflops']:7.1f}" if isinstance(r["tflops"], float | int) else "      ?"
        timing = (
            f"{r['time_ms']:.4f} ms {tflops} TF/s"
            if isinstance(r["time_ms"], float | int) and r["time_ms"]
            else f"{r['error'] or ''}"[:60]
        )
        print(
            f"{r['device']:<6} {r['problem_key']:<40} {r['status']:<8} {timing}  {r['params_name']}"
        )
    print(f"{len(found)} rows", file=sys.stderr)
    return 0


def add_db(sub: Any) -> None:
    p = sub.add_parser(
        "db",
        help="list, query and export the tuning database",
        description="The rows of the tuning database, fastest first per problem; "
        "filter them, keep the best per problem, export CSV or JSON.",
    )
    p.add_argument("--db", default="", metavar="PATH", help="the database (default as for tune)")
    p.add_argument("--problem", default=None, metavar="KEY", help="one problem key")
    p.add_argument("--device", default=None, help="one device (h200, ...)")
    p.add_argument("--status", default=None, type=one_of(db.STATUSES, "a row status"),
                   metavar="STATUS", help=f"one status: {', '.join(db.STATUSES)}")  # fmt: skip
    p.add_argument("--best", action="store_true", help="only the fastest ok row per problem")
    p.add_argument("--limit", type=positive, default=None, help="at most this many rows")
    p.add_argument(
        "--format",
        default="table",
        type=one_of(["table", "csv", "json"], "an output format"),
        metavar="FORMAT",
        help="table (default), csv or json",
    )
    p.set_defaults(func=cmd_db)
