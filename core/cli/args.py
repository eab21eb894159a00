"""Argument types and output of the ``mmaplug`` subcommands: one-line errors, any-case choices."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

from mmaplug.errors import UsageError
from mmaplug.ir.arguments import MAX_EXTENT

_SHAPE = re.compile(r"^\d+x\d+x\d+$")  # a problem or a tile, MxNxK
_TILE = re.compile(r"^\d+(x\d+){1,2}$")  # a tile MxNxK or a cluster MxN


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``mmaplug explain: error: ... (see --help)``, status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def extent(text: str, *, zero: bool = False) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not (0 if zero else 1) <= value < MAX_EXTENT:
        low = "0 (the default) or 1" if zero else "1"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an extent; extents are ints from {low} to 2**31 - 1"
        )
    return value


def ints_from(low: int, what: str) -> Callable[[str], int]:
    """A type of ints >= *low*, else *what* the value is not."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


positive: Final = ints_from(1, "a positive int")
count: Final = ints_from(0, "a count (an int >= 0)")


def seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def one_of(names: Sequence[str], what: str) -> Callable[[str], str]:
    """A type that takes any case of *names* and gives the canonical spelling."""
    canonical = {name.lower(): name for name in names}

    def parse(text: str) -> str:
        try:
            return canonical[text.strip().lower()]
        except KeyError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {what}; choose from {', '.join(names)} (any case)"
            ) from None

    return parse


def parse_setting(text: str) -> tuple[str, object]:
    """``FIELD=VALUE`` -> (field, value): ``true``/``false``, tiles ``MxNxK`` or ``m,n,k``,
    clusters ``MxN``, Python literals (ints, tuples), else text (enum names, any case)."""
    field, sep, raw = text.partition("=")
    field, raw = field.strip(), raw.strip()
    if not sep or not field or not raw:
        raise UsageError(f"--set {text!r}: expected FIELD=VALUE, e.g. stages=3")
    if raw.lower() in ("true", "false"):
        return field, raw.lower() == "true"
    if _TILE.match(raw.lower()):
        return field, tuple(int(p) for p in raw.lower().split("x"))
    try:
        value: object = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = raw.lower()  # enum values such as column_major
    return field, value


def parse_settings(items: Sequence[str]) -> dict[str, object]:
    """``["stages=3", "cta_tile=128x128x32"]`` -> ``{"stages": 3, "cta_tile": (128, 128, 32)}``."""
    changes: dict[str, object] = {}
    for item in items:
        field, value = parse_setting(item)
        if field in changes:
            raise UsageError(f"--set {field} is given twice; give each field once")
        changes[field] = value
    return changes


def setting(text: str) -> str:
    try:
        parse_setting(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix(f"--set {text!r}: ")) from None
    return text


def shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` -> (m, n, k)."""
    if not _SHAPE.match(text.strip().lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not MxNxK with positive ints")
    m, n, k = (extent(p) for p in text.strip().lower().split("x"))
    return m, n, k


def png(text: str) -> str:
    folder = Path(text).expanduser().absolute().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the folder {folder} does not exist")
    return text


def split_fusion(text: str) -> tuple[str, str]:
    """``FILE`` or ``FILE:NAME`` as (path, name); a file whose own name has a colon is FILE."""
    if Path(text).is_file():
        return text, ""
    path, _, name = text.rpartition(":")
    return (path, name) if path else (text, "")


def fusion_file(text: str) -> str:
    """``FILE`` or ``FILE:NAME``: a Python file that builds a fusion (NAME: which variable)."""
    path, name = split_fusion(text)
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: {path} is not a file")
    if name and not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: {name!r} is not a Python variable name")
    return text


def load_fusion(text: str) -> Any:
    """Run the Python file of ``--fusion FILE[:NAME]`` (not as ``__main__``) and return its
    variable NAME, else the one FusionDefinition or Fusion it defines at top level."""
    import runpy

    from mmaplug.ir.frontend import FusionDefinition
    from mmaplug.ir.fusion import Fusion

    path, name = split_fusion(text)
    try:  # what the file prints goes to stderr: stdout is the command's (--json parses)
        with contextlib.redirect_stdout(sys.stderr):
            namespace = runpy.run_path(path, run_name="__mmaplug_fusion__")
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the user's script; one line
        raise UsageError(
            f"--fusion {text}: running {path} raised {type(error).__name__}: {error}"
        ) from error
    if name:
        if name not in namespace:
            raise UsageError(f"--fusion {text}: {path} defines no variable {name!r}")
        return namespace[name]
    kinds = FusionDefinition | Fusion
    found = sorted(k for k, v in namespace.items() if isinstance(v, kinds) and k[0] != "_")
    if len(found) != 1:
        which = f" ({', '.join(found)})" if found else ""
        raise UsageError(
            f"--fusion {text}: {path} defines {len(found)} fusions{which} at top level; "
            f"name the one to explain: --fusion {path}:NAME"
        )
    return namespace[found[0]]


def requires(module: str, purpose: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"{purpose} needs {module}, which is not installed: {extra}")


def add_json(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--json", action="store_true", help=help_text)


def finite(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no inf/NaN: such floats become null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def print_json(value: object, as_json: bool = True) -> None:
    print(json.dumps(value, indent=2) if as_json else value)
