"""The ``report`` and ``diff`` subcommands of ``mmaplug``: heuristics against the database."""

from __future__ import annotations

import argparse
from typing import Any

from mmaplug.cli.args import add_json, png, positive, print_json, requires
from mmaplug.cli.tune import CORES, add_device, add_problems, device_of, open_db, problems_of
from mmaplug.planning.device import get_device
from mmaplug.planning.params import MatmulParams
from mmaplug.progress import Progress
from mmaplug.tune import db
from mmaplug.tune.corpus import TuneProblem


def cmd_report(args: argparse.Namespace) -> int:
    """Each heuristic's choice per problem against the best time in the database."""
    from mmaplug.tune import report

    if args.plot:
        requires("matplotlib", "--plot", "pip install 'mmaplug[bench]'")
    sets = list(dict.fromkeys(["default", *report.installed_heuristics(), *args.heuristic]))
    problems, device = problems_of(args), device_of(args)
    with open_db(args, create=False) as conn:
        if args.measure:
            chosen = report.choices(conn, problems, device, sets, leave_one_out=args.leave_one_out)
            by_key = {p.key: p for p in problems}
            pairs = [(by_key[k], *c) for k, cols in chosen.items() for c in cols.values() if c]
            _measure_choices(conn, pairs, args)
        result = report.report(conn, problems, device, sets, leave_one_out=args.leave_one_out)
    if args.plot:
        report.plot(result, result["columns"], args.plot)
    cols = result["columns"]
    print_json(result) if args.json else print(report.format_report(result, cols))
    return 0


def add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="heuristic quality: each heuristic's time against the best",
        description="For each problem of the corpus: the best time in the tuning "
        "database, and the default heuristic's and every installed heuristic's "
        "choice as a fraction of it (1.0 = the best measured); geometric means.",
    )
    add_problems(p)
    add_device(p)
    p.add_argument(
        "--heuristic",
        action="append",
        default=[],
        metavar="NAME|FILE.py[@SCHEDULER]",
        help="also this plugin set (an installed heuristic or a plugin file), planned as a call "
        "plans it; '@ampere' (or '@hopper', '@decode'): its decisions for that scheduler, the "
        "others blocked; 'default@ampere' too",
    )
    p.add_argument(
        "--leave-one-out",
        action="store_true",
        help="also NAME/loo columns: each heuristic but the default plans every problem with "
        "$MMAPLUG_TUNING_DB naming a copy of the database without that problem's rows",
    )
    _add_measure(p)
    p.add_argument("--plot", default="", type=png, metavar="PNG", help="also a bar chart here")
    add_json(p, "the report as JSON")
    p.set_defaults(func=cmd_report)


def cmd_diff(args: argparse.Namespace) -> int:
    """Which decisions two plugin sets make differently, and their time from the database."""
    from mmaplug.tune import report

    problems, device = problems_of(args), device_of(args)
    with open_db(args, create=args.measure) as conn:
        if args.measure:
            managers = [(name, report.manager(name)) for name in (args.a, args.b)]
            pairs = [
                (problem, *choice)
                for problem in problems
                for name, pm in managers
                if (choice := report.choose(problem, device, name, pm))
            ]
            _measure_choices(conn, pairs, args)
        result = report.diff(conn, problems, device, args.a, args.b)
    print_json(result) if args.json else print(report.format_diff(result))
    return 0


def _measure_choices(
    conn: Any, pairs: list[tuple[TuneProblem, str, MatmulParams]], args: argparse.Namespace
) -> None:
    """Build and time the (problem, scheduler, params) the database lacks, on the local GPU."""
    requires("torch", "--measure", "pip install 'mmaplug[bench]'")
    from mmaplug.tune import sweep

    device = get_device(None)
    jobs = {
        (p.key, c.name): sweep.make_job(p, c, device, scheduler=scheduler)
        for p, scheduler, c in pairs
    }
    todo = sweep.pending(list(jobs.values()), conn, db.device_key(device))
    progress = Progress(None)
    progress.say(f"measuring {len(todo)} choices the database lacks")
    sweep.build_and_time(
        todo,
        conn,
        db.device_key(device),
        build_workers=args.workers,
        timeout=args.timeout,
        progress=progress,
    )


def _add_measure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--measure",
        action="store_true",
        help="build and time the choices the database lacks first (local GPU, torch)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per build or timing")
    p.add_argument(
        "--workers", type=positive, default=CORES, help="build processes (default: cores - 1)"
    )


def add_diff(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="decisions two plugin sets make differently, and their cost",
        description="Plan every corpus problem with plugin set A and with B "
        "('default', an installed heuristic, or a plugin .py file: two versions of "
        "a plugin); list the changed decisions with their times from the database "
        "and the geometric-mean speedup of B over A.",
    )
    p.add_argument("a", metavar="A", help="default | installed heuristic name | plugin.py")
    p.add_argument("b", metavar="B", help="the same kinds")
    add_problems(p)
    add_device(p)
    _add_measure(p)
    add_json(p, "the diff as JSON")
    p.set_defaults(func=cmd_diff)
