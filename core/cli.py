"""The ``mmaplug`` command: ``explain`` a plan, list ``plugins``; room for ``demo``/``bench``."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Sequence

from .arguments import MAX_EXTENT
from .device import PRESET_NAMES, get_device
from .dtypes import DType
from .errors import MatmulError, UsageError
from .manager import get_plugin_manager
from .plan import explain, plan_problem
from .problem import Layout, MatmulProblem, VectorWidths

_VECTOR_BYTES = 16  # widest global load/store (128 bit)


def _vector_width(contiguous: int, dtype: DType) -> int:
    """Widest power-of-two element count up to 16 bytes that divides the contiguous extent."""
    width = _VECTOR_BYTES // dtype.itemsize
    while width > 1 and contiguous % width:
        width //= 2
    return width


def problem_from_args(args: argparse.Namespace) -> MatmulProblem:
    """Build the MatmulProblem that the ``explain`` options describe."""
    for option in ("m", "n", "k", "batch"):
        value = getattr(args, option)
        if not 1 <= value < MAX_EXTENT:
            raise UsageError(
                f"--{option} {value}: extents must be ints from 1 to 2**31 - 1 ({MAX_EXTENT - 1})"
            )
    layout = Layout(args.layout.upper())
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


def parse_settings(items: Sequence[str]) -> dict[str, object]:
    """``["stages=3", "cta_tile=128,128,32"]`` -> ``{"stages": 3, "cta_tile": (128, 128, 32)}``."""
    changes: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE, e.g. stages=3")
        try:
            value: object = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()  # enum values such as column_major
        changes[key.strip()] = value
    return changes


def cmd_explain(args: argparse.Namespace) -> int:
    """Plan a problem (no GPU needed) and print how every parameter was decided."""
    spec = plan_problem(
        problem_from_args(args), get_device(args.device), overrides=parse_settings(args.set)
    )
    print(explain(spec))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """List registered plugins, their hooks and distributions, then the blocked names."""
    pm = get_plugin_manager()
    print("registered plugins:")
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        info = pm.plugin_info.get(name)
        origin = f"{info.distribution} {info.version}".strip() if info else ""
        module = info.module if info else type(plugin).__module__
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())
        print(f"  {name:<12} {origin or '(registered at run time)':<20} {module}")
        print(f"  {'':<12} hooks: {', '.join(hooks) or '(none)'}")
    print(f"selected heuristic: {pm.heuristic or '(any; default last)'}")
    print(f"blocked: {', '.join(pm.blocked) or '(none)'}")
    print(f"policy: {'strict (raise)' if pm.strict else 'warn and use the default heuristic'}")
    return 0


def _add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help=cmd_explain.__doc__, description=cmd_explain.__doc__)
    p.add_argument("--device", default="h200", help=f"preset: {', '.join(PRESET_NAMES)}")
    for dim in ("m", "n", "k"):
        p.add_argument(f"--{dim}", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    names = [d.name for d in DType]
    p.add_argument("--dtype", default="float16", choices=names, help="operand dtype")
    p.add_argument("--out-dtype", default=None, choices=names, help="default: --dtype")
    p.add_argument(
        "--layout",
        default="TN",
        choices=[lay.value for lay in Layout],
        help="nvFuser MmaLayout letters; TN = both operands K-contiguous",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="caller override, e.g. stages=3 or cta_tile=128,128,32",
    )
    p.set_defaults(func=cmd_explain)


def _add_plugins(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plugins", help=cmd_plugins.__doc__, description=cmd_plugins.__doc__)
    p.set_defaults(func=cmd_plugins)


def cmd_demo(args: argparse.Namespace) -> int:
    """Build the example fusion (linear + bias + GELU), translate, plan, compile and run it."""
    from . import demo

    return demo.run(sys.stdout, device=args.device, m=args.m, n=args.n, k=args.k)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help=cmd_demo.__doc__, description=cmd_demo.__doc__)
    p.add_argument("--device", default=None, help="preset to plan for (default: the local GPU)")
    for dim in ("m", "n", "k"):
        p.add_argument(f"--{dim}", type=int, default=0, help=f"{dim.upper()} of the example")
    p.set_defaults(func=cmd_demo)


def cmd_bench(args: argparse.Namespace) -> int:
    """Time our kernels against torch.matmul on the local GPU (CUDA-event medians)."""
    from . import bench
    from .dtypes import DType
    from .errors import UnsupportedTargetError
    from .gpu import cuda_device_count

    if cuda_device_count() == 0:
        raise UnsupportedTargetError("mmaplug bench needs a CUDA GPU; none was found")
    shapes = bench.SHAPES if not args.quick else bench.SHAPES[:3]
    if args.shape:
        shapes = tuple(args.shape)
    dtypes = tuple(DType[name] for name in args.dtype) or (DType.float16, DType.bfloat16)
    overrides = dict(args.set) or None
    if args.workers > 1:
        bench.prewarm(shapes, dtypes, args.workers, overrides)
    rows = bench.run(sys.stdout, shapes=shapes, dtypes=dtypes, reps=args.reps, overrides=overrides)
    bench.dispatch_overhead(sys.stdout)
    if args.plot:
        bench.plot(rows, args.plot)
    return 0


def _shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` -> (m, n, k)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK with positive integers, got {text!r}")
    m, n, k = (int(p) for p in parts)
    return m, n, k


def _override(text: str) -> tuple[str, object]:
    """``FIELD=VALUE`` -> (field, value): integers, booleans (true/false), tiles (MxNxK) or
    text."""
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return field.strip(), lowered == "true"
    parts = lowered.split("x")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return field.strip(), tuple(int(p) for p in parts)
    try:
        return field.strip(), int(value)
    except ValueError:
        return field.strip(), value.strip()


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help=cmd_bench.__doc__, description=cmd_bench.__doc__)
    p.add_argument("--quick", action="store_true", help="only the three smallest squares")
    p.add_argument("--reps", type=int, default=30, help="timed repetitions per kernel")
    p.add_argument(
        "--shape",
        action="append",
        type=_shape,
        default=[],
        metavar="MxNxK",
        help="time this shape (repeatable) instead of the built-in list",
    )
    p.add_argument(
        "--set",
        action="append",
        type=_override,
        default=[],
        metavar="FIELD=VALUE",
        help="a MatmulParams override for every kernel (repeatable), e.g. use_smem_epilogue=true",
    )
    p.add_argument(
        "--dtype",
        action="append",
        choices=["float16", "bfloat16"],
        default=[],
        help="time this operand type (repeatable; default both)",
    )
    p.add_argument("--plot", default="", metavar="PNG", help="also write a bar chart here")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="build the kernels in this many processes first (disk cache)",
    )
    p.set_defaults(func=cmd_bench)


# Subcommand registry: each entry adds one subparser whose ``func`` runs it.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _add_demo,
    _add_explain,
    _add_plugins,
    _add_bench,
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="mmaplug", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mmaplug`` command; a ``MatmulError`` prints one ``error: ...`` line, returns 2."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse reports usage errors itself
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        result: int = args.func(args)
    except MatmulError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        print(f"error: {'; '.join(lines) or type(error).__name__}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
