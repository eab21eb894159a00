"""The kernel cache: a directory only its owner can write, whose files are checked before use.

Under :func:`cache_dir`: ``cubins/<key>.cubin`` (one compiled kernel each, laid out by
``mmaplug.cuda.cubin``), ``manifest.json`` (each key's record: sha256, size, entry, slots) and
``manifest.lock`` (``flock``ed: shared to read an entry, exclusive to change anything).
docs/threat-model.md says what is trusted and why. Any fault only warns (``CacheWarning``);
the kernel is then built or kept in memory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from mmaplug import env
from mmaplug.errors import CacheWarning
from mmaplug.log import CACHE

_ENV_KEYS: Final = ("NUMBA_OPT", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DEFAULT_PTX_CC")
FIX: Final = (
    "set MMAPLUG_CACHE_DIR to a directory of your own (created 0700 when missing), "
    "or MMAPLUG_DISK_CACHE=off"
)
ENTRIES: Final = "cubins"
SUFFIX: Final = ".cubin"
MANIFEST: Final = "manifest.json"
LOCK: Final = "manifest.lock"
MAX_ENTRY_BYTES: Final = 256 << 20
MAX_MANIFEST_BYTES: Final = 16 << 20
DEFAULT_MAX_BYTES: Final = 2 << 30
STALE_SECONDS: Final = 3600  # a temporary file this old was left by a killed writer
_MANIFEST_FORMAT: Final = 1
_SIZE: Final = re.compile(r"(\d+)\s*(?:([kmgt])i?)?b?")
_UNITS: Final = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_KINDS: Final = {"d": "a directory", "p": "a FIFO", "c": "a character device",
                 "b": "a block device", "s": "a socket"}  # fmt: skip
_refused: set[str] = set()  # directories refused in this process (warned once)


def cache_dir() -> Path:
    """``$MMAPLUG_CACHE_DIR``, else ``$XDG_CACHE_HOME/mmaplug``, else ``~/.cache/mmaplug``.

    Raises ``OSError`` when none of them gives an absolute directory (no usable home).
    """
    if (explicit := env.path("MMAPLUG_CACHE_DIR")) is not None:
        return explicit
    if xdg := env.text("XDG_CACHE_HOME"):
        if Path(xdg).is_absolute():
            return Path(xdg) / "mmaplug"
        env.complain(f"XDG_CACHE_HOME={xdg!r} is not an absolute path; ignored (XDG spec)")
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise OSError(errno.ENOENT, "no absolute home directory (HOME unset or relative)", home)
    return Path(home) / ".cache" / "mmaplug"


def disk_cache_enabled() -> bool:
    """``MMAPLUG_DISK_CACHE`` (a switch, default on); off rebuilds kernels in every process."""
    return env.flag("MMAPLUG_DISK_CACHE", default=True)


def max_bytes() -> int:
    """``MMAPLUG_CACHE_MAX_BYTES``: the bound on the entries' total size (default 2 GiB).

    A positive integer with an optional ``K``/``M``/``G``/``T`` suffix (powers of 1024; ``KiB``,
    ``MB``... also read so); anything else is an ``EnvWarning`` and the default.
    """
    value = env.text("MMAPLUG_CACHE_MAX_BYTES")
    if not value:
        return DEFAULT_MAX_BYTES
    found = _SIZE.fullmatch(value.lower())
    with contextlib.suppress(ValueError):  # (past Python's 4,300 digits: no size either)
        if found and int(found[1]) > 0:
            return int(found[1]) * _UNITS[found[2]]
    env.complain(
        f"MMAPLUG_CACHE_MAX_BYTES={value!r} is not a size; it accepts a positive number of "
        "bytes with an optional K, M, G or T suffix (powers of 1024); using the default (2G)"
    )
    return DEFAULT_MAX_BYTES


def versions_key() -> str:
    """Versions and environment every compiled artifact depends on."""
    parts = []
    for dist in ("mmaplug", "numba", "numba-cuda", "llvmlite"):
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    parts.extend(f"{k}={os.environ.get(k, '')}" for k in _ENV_KEYS)
    return ";".join(parts)


def digest(*parts: str) -> str:
    """A short stable hex digest of *parts*."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


# ------------------------------------------------------------------------------------------------
# trust: directories and files
# ------------------------------------------------------------------------------------------------


def trusted_dir(*parts: str) -> Path | None:
    """The cache directory, or its subfolder *parts*, ready for use: each level created 0700
    when missing, then checked by :func:`distrust` (as ssh checks ``~/.ssh``).

    None when a level cannot be created or is not trusted: one ``CacheWarning`` per directory
    and process names it and the fix, and the caller keeps its kernels in memory.
    """
    try:
        path = cache_dir()
    except OSError as error:
        warn(f"mmaplug has no kernel cache directory ({_describe(error)}); {FIX}")
        return None
    for level, part in enumerate(("", *parts)):
        path = path / part
        if str(path) in _refused:
            return None
        if why := _prepare(path, parents=level == 0):
            _refused.add(str(path))
            warn(f"mmaplug does not use the kernel cache directory {path}: it {why}; "
                 "this process builds its kernels in memory")  # fmt: skip
            return None
    return path


def _prepare(path: Path, *, parents: bool) -> str | None:
    """Create *path* 0700 when missing; then why it is not to be trusted, or None."""
    try:
        path.mkdir(mode=0o700, parents=parents)
        os.chmod(path, 0o700)  # the umask may have taken the owner's own bits
    except FileExistsError:
        pass
    except OSError as error:
        return f"cannot be created ({_describe(error)}); {FIX}"
    return distrust(path)


def distrust(path: Path) -> str | None:
    """Why the directory *path* is not to be used, with the fix; None when it is a directory
    (not a symlink) that the current user owns and that neither group nor others can write."""
    try:
        info = os.lstat(path)
    except OSError as error:
        return f"cannot be inspected ({_describe(error)}); {FIX}"
    quoted, me = shlex.quote(str(path)), os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink; set MMAPLUG_CACHE_DIR to the directory itself"
    if not stat.S_ISDIR(info.st_mode):
        return f"is not a directory; {FIX}"
    if info.st_uid != me:
        return (f"is owned by uid {info.st_uid}, not by you (uid {me}); fix: "
                f"chown {me} {quoted}, or {FIX}")  # fmt: skip
    if info.st_mode & 0o022:
        return (f"is writable by {_writers(info.st_mode)} (mode {info.st_mode & 0o7777:04o}); "
                f"fix: chmod 700 {quoted}")  # fmt: skip
    return None


def read_file(path: Path, limit: int, *, touch: bool = False) -> bytes:
    """The bytes of *path*, a regular file that the current user owns, that neither group nor
    others can write and that holds at most *limit* bytes; *touch* sets its mtime to now (a
    use, for eviction). Never blocks: a FIFO is refused before anything is read.

    :raises FileNotFoundError: there is no such file.
    :raises OSError: it cannot be read, or is not such a file (a symlink, a FIFO, a device,
        another user's, writable by others, too large).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError("it is a symlink, not a regular file") from None
        raise
    with open(fd, "rb") as handle:
        _check_file(os.fstat(fd), limit)
        data = handle.read(limit + 1)
        if len(data) > limit:
            raise OSError(f"it grew past the {limit:,}-byte limit while read")
        if touch:
            os.utime(fd)
    return data


def _check_file(info: os.stat_result, limit: int) -> None:
    """Raise ``OSError`` saying why a file with *info* is not to be read."""
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.filemode(info.st_mode)[0], "not a regular file")
        raise OSError(f"it is {kind}, not a regular file")
    if info.st_uid != os.geteuid():
        raise OSError(f"it is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})")
    if info.st_mode & 0o022:
        raise OSError(f"it is writable by {_writers(info.st_mode)}")
    if info.st_size > limit:
        raise OSError(f"it holds {info.st_size:,} bytes, over the {limit:,}-byte limit")


def _writers(mode: int) -> str:
    return " and ".join(who for who, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)


def store_file(path: Path, data: bytes) -> None:
    """Make *path* hold *data*, atomically: a temporary file (mode 0600) renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with open(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(root: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the cache's ``flock``: shared to read an entry, exclusive to change the cache."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(root / LOCK, flags, 0o600)  # flock needs no write access
    except OSError as error:
        raise OSError(f"the cache lock {root / LOCK} cannot be used: {error}") from None
    try:
        try:
            _check_file(os.fstat(fd), sys.maxsize)  # never read: any size
        except OSError as why:  # (the fix is the lock's, not the entry's being read)
            raise OSError(f"the cache lock {root / LOCK} cannot be used: {why}") from None
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# entries and the manifest
# ------------------------------------------------------------------------------------------------


def entry(key: str) -> Path | None:
    """The path of entry *key*; None when the cache cannot be used (:func:`trusted_dir`)."""
    folder = trusted_dir(ENTRIES)
    return None if folder is None else folder / f"{key}{SUFFIX}"


def fetch(path: Path) -> tuple[bytes, dict[str, Any] | None] | None:
    """The bytes of the entry at *path* (from :func:`entry`; read as a use) and its manifest
    record (None when unlisted); None when there is no such entry.

    :raises OSError: the entry or the manifest cannot be read or trusted.
    """
    with locked(path.parent.parent, exclusive=False):
        try:
            data = read_file(path, MAX_ENTRY_BYTES, touch=True)
        except FileNotFoundError:
            return None
        return data, manifest(path.parent.parent).get(path.stem)


def put(path: Path, data: bytes, record: Mapping[str, Any]) -> None:
    """Store *data* at *path* (from :func:`entry`) and *record* in the manifest, then evict the
    least recently used entries past :func:`max_bytes` (all under the exclusive lock).

    :raises OSError: the entry or the manifest cannot be written.
    """
    root, bound = path.parent.parent, max_bytes()
    with locked(root, exclusive=True):
        store_file(path, data)
        try:
            records = manifest(root)
        except OSError as error:  # damaged: replaced; the entries it listed are rebuilt
            CACHE.debug("%s; writing a new one", error)
            records = {}
        records[path.stem] = dict(record)
        _sweep(root, records, bound)
        document = {"format": _MANIFEST_FORMAT, "entries": records}
        store_file(root / MANIFEST, json.dumps(document, indent=1, sort_keys=True).encode())


def manifest(root: Path) -> dict[str, Any]:
    """The manifest's records by key; empty when there is none.

    :raises OSError: it cannot be read or trusted, or is damaged.
    """
    try:
        data = read_file(root / MANIFEST, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise OSError(f"the cache manifest {root / MANIFEST} cannot be used: {error}") from None
    try:
        document = json.loads(data)
        records = document["entries"]
        if document["format"] == _MANIFEST_FORMAT and isinstance(records, dict):
            return records
    except (ValueError, KeyError, TypeError, RecursionError):
        pass
    raise OSError(f"the cache manifest {root / MANIFEST} is damaged")


def _sweep(root: Path, records: dict[str, Any], bound: int) -> None:
    """Remove stale temporary files, the entries *records* (the manifest) does not list (from
    another cache format, or not mmaplug's), then the least recently used entries while their
    total passes *bound*; *records* keeps only the keys of the entries left."""
    remove_stale(root)
    found = sorted(entries(root), key=lambda pair: pair[1].st_mtime)
    total, kept = sum(info.st_size for _, info in found), set()
    for path, info in found:  # oldest first
        if path.stem in records and total <= bound:
            kept.add(path.stem)
            continue
        path.unlink()
        total -= info.st_size
        CACHE.debug("cubin %s: removed (unlisted, or the cache past %d bytes)", path, bound)
    for key in set(records) - kept:
        del records[key]


def entries(root: Path) -> list[tuple[Path, os.stat_result]]:
    """Each regular ``*.cubin`` file under ``root/cubins`` with its ``lstat``."""
    found = []
    for path in named(root / ENTRIES, SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG((info := os.lstat(path)).st_mode):
                found.append((path, info))
    return found


def named(folder: Path, suffix: str, prefix: str = "") -> list[Path]:
    """The names in *folder* with *prefix* and *suffix* that are not directories."""
    try:
        with os.scandir(folder) as listing:
            return sorted(
                folder / item.name
                for item in listing
                if item.name.startswith(prefix) and item.name.endswith(suffix)
                and not item.is_dir(follow_symlinks=False)
            )  # fmt: skip
    except FileNotFoundError:
        return []


def remove_stale(root: Path) -> list[Path]:
    """Remove the temporary files a killed writer left (older than an hour); the paths removed."""
    removed = []
    for path in [*named(root, ".tmp", "."), *named(root / ENTRIES, ".tmp", ".")]:
        with contextlib.suppress(FileNotFoundError):
            if time.time() - os.lstat(path).st_mtime > STALE_SECONDS:
                path.unlink()
                removed.append(path)
    return removed


def _describe(error: BaseException) -> str:
    """``ExceptionName: message``."""
    return f"{type(error).__name__}: {error}"


def warn(message: str) -> None:
    """Report a cache fault as a ``CacheWarning`` (the kernel is then built or kept in memory)."""
    warnings.warn(CacheWarning(message), stacklevel=4)
