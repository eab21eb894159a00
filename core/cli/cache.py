"""``mmaplug cache info|clear|verify``: where the kernel cache is, whether it is used, upkeep."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmaplug.cli.args import add_json, print_json
from mmaplug.cuda import cache
from mmaplug.errors import UsageError


def info() -> dict[str, Any]:
    """Where the cache is, whether it is trusted (else why not), its entries and their bound."""
    root = _root()
    problem = next(filter(None, map(_problem, (root, root / cache.ENTRIES))), None)
    entries = cache.entries(root) if problem is None else []
    return {
        "directory": str(root),
        "exists": os.path.lexists(root),
        "trusted": problem is None,
        "problem": problem,
        "enabled": cache.disk_cache_enabled(),
        "entries": len(entries),
        "bytes": sum(info.st_size for _, info in entries),
        "max_bytes": cache.max_bytes(),
    }


def clear() -> list[Path]:
    """Remove the cache's own files: the entries, the manifest and stale temporary files;
    nothing else (the tuning database and other files stay). Returns the paths removed.

    :raises UsageError: the cache directory is not to be trusted.
    """
    root = _trusted_root()
    if root is None:
        return []
    with cache.locked(root, exclusive=True):
        removed = cache.remove_stale(root)
        for path in [*cache.named(root / cache.ENTRIES, cache.SUFFIX), root / cache.MANIFEST]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def verify() -> tuple[int, list[str]]:
    """Check every entry as a load would (a regular file of the user's that only they can
    write, under the size cap, intact and as the manifest lists it) and remove stale temporary
    files. Returns the number of entries checked and the problems found.

    :raises UsageError: the cache directory is not to be trusted.
    """
    from mmaplug.cuda.cubin import flaw

    root = _trusted_root()
    if root is None:
        return 0, []
    problems = []
    with cache.locked(root, exclusive=True):
        cache.remove_stale(root)
        try:
            records = cache.manifest(root)
        except OSError as error:
            problems.append(str(error))
            records = {}
        paths = cache.named(root / cache.ENTRIES, cache.SUFFIX)
        for path in paths:
            try:
                why = flaw(cache.read_file(path, cache.MAX_ENTRY_BYTES), records.get(path.stem))
            except OSError as error:
                why = f"cannot be used: {error}"
            if why:
                problems.append(f"{path} {why}")
    return len(paths), problems


def _root() -> Path:
    try:
        return cache.cache_dir()
    except OSError as error:
        raise UsageError(f"mmaplug has no kernel cache directory ({error}); {cache.FIX}") from None


def _problem(path: Path) -> str | None:
    """:func:`cache.distrust` of a directory that exists; None for one not created yet."""
    return cache.distrust(path) if os.path.lexists(path) else None


def _trusted_root() -> Path | None:
    """The cache directory, None when it does not exist yet.

    :raises UsageError: it, or its entries folder, is not to be trusted.
    """
    root = _root()
    if not os.path.lexists(root):
        return None
    for path in (root, root / cache.ENTRIES):
        if why := _problem(path):
            raise UsageError(f"the kernel cache directory {path} {why}")
    return root


def cmd_info(args: argparse.Namespace) -> int:
    record = info()
    if args.json:
        print_json(record)
        return 0
    trusted = "yes" if record["trusted"] else f"no: it {record['problem']}"
    print(f"directory: {record['directory']}{'' if record['exists'] else ' (not created yet)'}")
    print(f"trusted:   {trusted}")
    print(f"enabled:   {'yes' if record['enabled'] else 'no (MMAPLUG_DISK_CACHE=off)'}")
    print(f"entries:   {record['entries']:,} ({record['bytes']:,} bytes)")
    print(f"bound:     {record['max_bytes']:,} bytes (MMAPLUG_CACHE_MAX_BYTES)")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    removed = clear()
    print(f"removed {len(removed):,} files from {_root()}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    checked, problems = verify()
    for problem in problems:
        print(problem)
    print(f"{checked:,} entries checked, {len(problems):,} problems")
    return 1 if problems else 0


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """*command*, with a file-system fault as one ``mmaplug: error:`` line."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except OSError as error:
            raise UsageError(f"mmaplug cache {args.action}: {error}") from error

    return run


def add_cache(sub: Any) -> None:
    p = sub.add_parser(
        "cache",
        help="the kernel cache: where it is, whether it is used; clear or verify it",
        description="The on-disk kernel cache (MMAPLUG_CACHE_DIR): compiled kernels listed in "
        "its manifest, used only while the directory is yours and only you can write it "
        "(docs/threat-model.md).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "info", help="the directory, whether it is trusted (else why not), entries, bound"
    )
    add_json(show, "the same as JSON")
    show.set_defaults(func=_guarded(cmd_info))
    actions.add_parser(
        "clear", help="remove the cached kernels, the manifest and stale temporary files"
    ).set_defaults(func=_guarded(cmd_clear))
    actions.add_parser(
        "verify", help="check every entry (type, mode, sha256, manifest); status 1 on a problem"
    ).set_defaults(func=_guarded(cmd_verify))
