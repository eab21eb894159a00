"""The ``mmaplug`` command (also ``python -m mmaplug``): explain, plugins, demo, bench, targets,
tuning, cache."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from mmaplug import env, log
from mmaplug.analysis.problem import Layout, MatmulProblem, VectorWidths
from mmaplug.cli.args import (
    Parser,
    add_json,
    extent,
    fusion_file,
    load_fusion,
    one_of,
    parse_setting,
    parse_settings,
    print_json,
    requires,
    setting,
)
from mmaplug.cli.cache import add_cache
from mmaplug.cli.report import add_diff, add_report
from mmaplug.cli.run import add_bench, add_demo
from mmaplug.cli.targets import add_targets
from mmaplug.cli.tune import add_db, add_tune
from mmaplug.errors import MatmulError, UsageError
from mmaplug.hooks.manager import get_plugin_manager
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion
from mmaplug.planning.device import PRESET_NAMES, Device, get_device
from mmaplug.planning.plan import explain, plan_problem
from mmaplug.planning.records import plan_record, plugins_record, precedence_text
from mmaplug.progress import Progress

__all__ = ["build_parser", "main", "parse_setting", "parse_settings", "version"]

DESCRIPTION = """\
Compile matmul fusions into tensor-core GPU kernels, and see how each kernel is chosen.

explain and plugins need no GPU; demo runs on a GPU or in Numba's CUDA simulator;
bench and targets need a CUDA GPU and torch (targets --rows judges saved rows without);
tune times on GPUs (--plan-only and --build-only need none); db, report and diff read the
tuning database (docs/tuning.md); cache shows, clears and verifies the kernel cache."""

EPILOG = """\
examples:
  mmaplug explain --m 4096 --n 4096 --k 4096           the plan for the H200 preset
  mmaplug explain --m 128 --n 4096 --k 4096 --device a100 --layout nt --json
  mmaplug explain --m 4096 --n 4096 --k 4096 --emit ptx > kernel.ptx
  mmaplug plugins --json
  mmaplug cache verify                                 check every cached kernel
  mmaplug -v demo                                      with mmaplug's log lines on stderr
  MMAPLUG_DUMP=all python script.py                    every kernel's source, PTX, SASS, plan

exit status: 0 done, 1 a check failed or the output was closed early, 2 a bad argument
or an mmaplug error (one 'mmaplug: error: ...' line on stderr).
More: README.md, docs/debugging.md."""

_VECTOR_BYTES = 16  # widest global load/store (128 bit)
_EMITS = ("plan", "source", "ptx", "sass")


# ------------------------------------------------------------------------------------------------
# explain
# ------------------------------------------------------------------------------------------------


def _vector_width(contiguous: int, dtype: DType) -> int:
    """Widest power-of-two element count up to 16 bytes that divides the contiguous extent."""
    width = _VECTOR_BYTES // dtype.itemsize
    while width > 1 and contiguous % width:
        width //= 2
    return width


def problem_from_args(args: argparse.Namespace) -> MatmulProblem:
    """Build the MatmulProblem that the ``explain`` options describe."""
    layout = Layout(args.layout)
    operand = DType[args.dtype]
    output = DType[args.out_dtype] if args.out_dtype else operand
    return MatmulProblem(
        m=args.m,
        n=args.n,
        k=args.k,
        batch=args.batch,
        a_k_inner=layout.a_k_inner,
        b_k_inner=layout.b_k_inner,
        operand_dtype=operand,
        output_dtype=output,
        vector_widths=VectorWidths(
            a=_vector_width(args.k if layout.a_k_inner else args.m, operand),
            b=_vector_width(args.k if layout.b_k_inner else args.n, operand),
            epilogue=_vector_width(args.n, output),
        ),
    )


def fusion_from_args(args: argparse.Namespace) -> Fusion:
    """``matmul(A, B)`` in the options' layout (cast to ``--out-dtype``), for ``--emit``."""
    from mmaplug.ir.frontend import FusionDefinition

    layout, dtype = Layout(args.layout), DType[args.dtype]
    batch = [args.batch] if args.batch > 1 else []
    outer = list(range(len(batch) + 1, 1, -1))  # batch dims outermost
    with FusionDefinition() as fd:
        a = fd.define_tensor(
            [*batch, args.m, args.k], dtype, [*outer, *([1, 0] if layout.a_k_inner else [0, 1])]
        )
        b = fd.define_tensor(
            [*batch, args.k, args.n], dtype, [*outer, *([0, 1] if layout.b_k_inner else [1, 0])]
        )
        out = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(out, DType[args.out_dtype or args.dtype]))
    return fd.fusion


def cmd_explain(args: argparse.Namespace) -> int:
    """Plan a problem (no GPU needed) and print how every parameter was decided."""
    device = get_device(args.device)
    overrides = parse_settings(args.set)
    extents = [f"--{d}" for d in ("m", "n", "k") if getattr(args, d) is not None]
    if args.fusion:
        return _explain_fusion(args, device, overrides, extents)
    if len(extents) < 3:
        missing = [f"--{d}" for d in ("m", "n", "k") if f"--{d}" not in extents]
        raise UsageError(
            f"the following arguments are required: {', '.join(missing)} (or --fusion FILE)"
        )
    if args.emit == "plan":
        spec = plan_problem(problem_from_args(args), device, overrides=overrides)
        print_json(plan_record(spec) if args.json else explain(spec), args.json)
        return 0
    requires("numba", f"--emit {args.emit}", "pip install 'mmaplug[cu13]' (or [cu12])")
    from mmaplug.runtime.compile import compile as compile_fusion

    compiled = compile_fusion(fusion_from_args(args), device, overrides=overrides)
    with Progress(args.progress).step(
        f"compiling kernel {compiled.kernel_name} ({args.emit}; NVVM takes seconds)"
    ):
        text = getattr(compiled, args.emit)
    _print_emitted(args, compiled, text)
    return 0


def _print_emitted(args: argparse.Namespace, compiled: Any, text: str) -> None:
    """``--emit``'s *text*; with ``--json``, the plan's record with the text under the kind."""
    if args.json:
        print_json(
            {**plan_record(compiled.spec), "kernel_name": compiled.kernel_name, args.emit: text}
        )
    else:
        print(text, end="" if text.endswith("\n") else "\n")


def _explain_fusion(
    args: argparse.Namespace, device: Device, overrides: dict[str, object], extents: list[str]
) -> int:
    """``explain --fusion``: compile the file's fusion (segmented if no kernel takes it
    whole) and print its plan, or each segment and each kernel's plan."""
    if extents:
        raise UsageError(f"--fusion takes the extents from the fusion; drop {', '.join(extents)}")
    requires("numba", "--fusion", "pip install 'mmaplug[cu13]' (or [cu12])")
    from mmaplug.runtime.compile import compile as compile_fusion
    from mmaplug.runtime.segmented_fusion import SegmentedFusion

    compiled = compile_fusion(load_fusion(args.fusion), device, overrides=overrides)
    if args.emit != "plan":  # as without --fusion
        _print_emitted(args, compiled, getattr(compiled, args.emit))
    elif not args.json:
        print(compiled.explain())
    elif not isinstance(compiled, SegmentedFusion):
        print_json({**plan_record(compiled.spec), "kernel_name": compiled.kernel_name})
    else:
        segments = [
            {**attrs.asdict(seg, filter=lambda a, _: a.name != "fusion"),
             "plan": plan_record(compiled.kernels[i].spec) if i in compiled.kernels else None}
            for i, seg in enumerate(compiled.segments)
        ]  # fmt: skip
        print_json({"segmented": compiled.reason, "segments": segments})
    return 0


def _add_explain(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="plan a matmul for a device and say how every parameter was chosen (no GPU)",
        description="Plan C = A @ B for a device preset and print the decision: the scheduler\n"
        "candidates, each parameter with the plugin that chose it, every adjustment.\n"
        "--emit prints the generated kernel instead: its source, or PTX/SASS compiled\n"
        "without a GPU.",
        epilog="examples:\n"
        "  mmaplug explain --m 4096 --n 4096 --k 4096 --dtype bfloat16 --layout nt\n"
        "  mmaplug explain --m 8192 --n 8192 --k 8192 --set stages=3 --set cta_tile=128x256x64\n"
        "  mmaplug explain --m 512 --n 512 --k 512 --device a100 --emit source\n"
        "  mmaplug explain --fusion my_fusion.py:fd    a fusion's plan, or its segments",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        default="h200",
        help=f"device preset ({', '.join(PRESET_NAMES)}; any case; default h200)",
    )
    for dim in ("m", "n", "k"):
        p.add_argument(f"--{dim}", type=extent, help=f"{dim.upper()} extent (unless --fusion)")
    p.add_argument("--fusion", type=fusion_file, metavar="FILE[:NAME]",
                   help="explain the fusion a Python file builds (its variable NAME, else its "
                   "one FusionDefinition): its plan, or its segments and each kernel's plan "
                   "when no kernel takes it whole")  # fmt: skip
    p.add_argument("--batch", type=extent, default=1, help="batch count (default 1)")
    names = [d.name for d in DType]
    dtype = one_of(names, "a dtype")
    p.add_argument("--dtype", type=dtype, default="float16", metavar="DTYPE",
                   help=f"operand dtype: {', '.join(names)} (default float16)")  # fmt: skip
    p.add_argument("--out-dtype", type=dtype, default=None, metavar="DTYPE",
                   help="output dtype (default: --dtype)")  # fmt: skip
    layouts = [lay.value for lay in Layout]
    p.add_argument(
        "--layout",
        type=one_of(layouts, "a layout"),
        default="TN",
        metavar="LAYOUT",
        help=f"nvFuser MmaLayout letters, {', '.join(layouts)} (any case); TN = both operands "
        "K-contiguous (default)",
    )
    p.add_argument(
        "--set",
        action="append",
        type=setting,
        default=[],
        metavar="FIELD=VALUE",
        help="a caller override of a MatmulParams field (repeatable): stages=3, "
        "cta_tile=128x256x64, cta_order=column_major",
    )
    p.add_argument(
        "--emit",
        type=one_of(_EMITS, "an emit kind"),
        default="plan",
        metavar="WHAT",
        help="print the plan (default), or the kernel's source, ptx or sass (sass needs "
        "cuobjdump or nvdisasm on PATH)",
    )
    add_json(p, "the plan as JSON (with --emit: plus the text under that key)")
    p.set_defaults(func=cmd_explain)


# ------------------------------------------------------------------------------------------------
# plugins
# ------------------------------------------------------------------------------------------------


def cmd_plugins(args: argparse.Namespace) -> int:
    """List registered plugins, their hooks and distributions, the schedulers, then the
    heuristics' order, the blocked names and the policy."""
    record = plugins_record(get_plugin_manager())
    if args.json:
        print_json(record)
        return 0
    ranks = {h["name"]: precedence_text(h, record["heuristic"]) for h in record["heuristics"]}
    print("registered plugins:")
    for plugin in record["plugins"]:
        origin = f"{plugin['distribution']} {plugin['version']}".strip()
        print(
            f"  {plugin['name']:<12} {origin or '(registered at run time)':<20} {plugin['module']}"
        )
        print(f"  {'':<12} hooks: {', '.join(plugin['hooks']) or '(none)'}")
        if plugin["later_hooks"]:
            later = ", ".join(plugin["later_hooks"])
            print(f"  {'':<12} not hooks of this mmaplug (optional, never called): {later}")
        if plugin["name"] in ranks:
            print(f"  {'':<12} heuristic: {ranks[plugin['name']]}")
    if record["skipped"]:
        print("skipped plugins (faulty; see the warnings):")
        for skipped in record["skipped"]:
            print(f"  {skipped['name']:<12} {skipped['why']}")
    print("schedulers, highest priority first:")
    for scheduler in record["schedulers"]:
        print(
            f"  {scheduler['name']:<12} priority {scheduler['priority']:<8} "
            f"from plugin {scheduler['plugin']}"
        )
    if not record["schedulers"]:
        print("  (none registered as objects)")
    asked = ", ".join(h["name"] for h in record["heuristics"] if h["rank"] is not None)
    print(f"heuristics asked, in order: {asked} (selected: {record['heuristic'] or 'any'})")
    print(f"blocked: {', '.join(record['blocked']) or '(none)'}")
    print(
        f"policy: {'strict (raise)' if record['strict'] else 'warn and use the default heuristic'}"
    )
    return 0


def _add_plugins(sub: Any) -> None:
    p = sub.add_parser(
        "plugins",
        help="list the registered plugins, their hooks and distributions",
        description="List every registered plugin (built-in and installed through the 'mmaplug' "
        "entry point), its distribution, its hooks, a heuristic's rank and what shadows it, "
        "the scheduler objects (name, priority, plugin), then the selected heuristic, the "
        "blocked names and the policy (MMAPLUG_* apply).",
    )
    add_json(p, "the same as JSON")
    p.set_defaults(func=cmd_plugins)


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------


# Subcommand registry: each entry adds one subparser whose ``func`` runs it.
SUBCOMMANDS: list[Callable[[Any], None]] = [
    add_demo,
    _add_explain,
    _add_plugins,
    add_bench,
    add_targets,
    add_tune,
    add_db,
    add_report,
    add_diff,
    add_cache,
]


def version() -> str:
    """``mmaplug X.Y.Z`` and the versions a bug report needs."""
    own = getattr(sys.modules["mmaplug"], "__version__", None)
    parts = []
    for dist in ("numba", "numba-cuda"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    own = own or importlib.metadata.version("mmaplug")
    return f"mmaplug {own} (Python {sys.version.split()[0]}, {', '.join(parts)})"


def _add_common(p: argparse.ArgumentParser, default: Any) -> None:
    """-v and --progress, before or after the subcommand (a subcommand's only when given)."""
    p.add_argument("-v", "--verbose", action="count", default=default,
                   help="log lines on stderr: -v INFO (plans, builds), -vv DEBUG")  # fmt: skip
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="progress lines on stderr for slow steps (default: when stderr is a terminal)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = Parser(
        prog="mmaplug",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version())
    _add_common(parser, None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    for command in sub.choices.values():
        _add_common(command, argparse.SUPPRESS)
    return parser


def one_line(error: MatmulError) -> str:
    """*error*'s message on one line: its lines joined by "; ", a line ending in a colon by a
    space (it introduces the next), a line's closing period dropped before a "; "."""
    text = ""
    for line in (line.strip() for line in str(error).splitlines()):
        if line:
            joint = " " if text.endswith(":") else "; " if text else ""
            text = text.removesuffix(".") if joint == "; " else text
            text += joint + line
    return text or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mmaplug`` command; returns the exit status (see ``mmaplug --help``)."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # the reader went away (``mmaplug plugins | head -1``): as the Python docs advise,
        # point stdout at devnull so the flush at exit raises nothing, and exit quietly
        _stdout_to_devnull()
        return 1
    except OSError as error:  # the output cannot be written (a full disk), or the like
        _stdout_to_devnull()
        print(f"mmaplug: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mmaplug: interrupted", file=sys.stderr)
        return 130


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error argparse reported
        return exit_.code if isinstance(exit_.code, int) else 2
    handler = None
    if args.verbose:  # None or a count
        handler = log.to_stream(logging.DEBUG if args.verbose > 1 else logging.INFO)
    try:
        env.strict()  # a bad MMAPLUG_STRICT is an error for every command, not only some
        result: int = args.func(args)
        if sys.stdout is not None:  # (None: started with stdout closed; print writes nothing)
            sys.stdout.flush()  # a closed pipe is found here, not at interpreter exit
    except MatmulError as error:
        print(f"mmaplug: error: {one_line(error)}", file=sys.stderr)
        return 2
    finally:
        if handler is not None:
            log.LOGGER.removeHandler(handler)
            log.LOGGER.setLevel(logging.NOTSET)
    return result


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
