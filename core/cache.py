"""The kernel cache: generated modules on disk, verified before use; any fault only warns."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import logging
import os
import stat
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from . import env
from .errors import CacheWarning
from .log import CACHE

_HEADER: Final = "# mmaplug generated kernel; digest {digest}\n"
_ENV_KEYS: Final = ("NUMBA_OPT", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DEFAULT_PTX_CC")
FIX: Final = "set MMAPLUG_CACHE_DIR to a writable directory, or MMAPLUG_DISK_CACHE=off"
_lock: Final = threading.Lock()


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


def kernel_module(key: str, source: str) -> ModuleType | None:
    """*source* as a module stored in the cache directory; None (and a ``CacheWarning``) on a fault.

    The file name is a digest of *key*, *source* and :func:`versions_key`. A file is used only
    when its bytes equal the text this call would write; otherwise it is rewritten atomically
    (temporary file + rename, safe against concurrent writers). The module runs from that
    in-memory text, never from ``__pycache__`` bytecode. Numba's ``cache=True`` kernels keep their
    machine code beside the file; a damaged Numba cache entry is reported, replaced by an empty
    index, and the kernel compiled afresh. On None the caller builds the kernel in memory.
    """
    name = digest(key, source, versions_key())
    module_name = f"mmaplug_kernels.mm_{name}"
    with _lock:
        if (hit := sys.modules.get(module_name)) is not None:
            CACHE.debug("kernel module %s: already loaded in this process", module_name)
            return hit
        text = _HEADER.format(digest=name) + source
        where: Any = "the kernel cache"
        try:
            where = cache_dir() / "kernels" / f"mm_{name}.py"
            wrote = store_file(where, text.encode())
            code = compile(text, str(where), "exec")
            module = ModuleType(module_name)
            module.__file__ = str(where)
            exec(code, vars(module))  # Numba raises RuntimeError when it finds no cache directory
        except (OSError, RuntimeError, UnicodeError) as error:
            warn(
                f"mmaplug's kernel cache cannot be used at {where}: {_describe(error)}; "
                f"building the kernel in memory ({FIX})"
            )
            return None
        CACHE.debug(
            "kernel module %s: %s %s", module_name, "miss, wrote" if wrote else "hit,", where
        )
        _guard_numba_caches(module)
        sys.modules[module_name] = module
        return module


def store_file(path: Path, data: bytes) -> bool:
    """Make *path* hold exactly *data*: keep a matching file, else write it atomically (True)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    if info and stat.S_ISREG(info.st_mode) and info.st_size == len(data):
        if path.read_bytes() == data:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def _guard_numba_caches(module: ModuleType) -> None:
    """Make every Numba dispatcher's disk cache in *module* warn instead of raise."""
    for obj in vars(module).values():
        cache: Any = getattr(obj, "_cache", None) if hasattr(obj, "py_func") else None
        if callable(getattr(cache, "load_overload", None)) and hasattr(cache, "save_overload"):
            cache.load_overload = _guarded_load(cache, cache.load_overload)
            cache.save_overload = _guarded_save(cache, cache.save_overload)


def _guarded_load(cache: Any, load: Any) -> Any:
    def load_overload(sig: Any, target_context: Any) -> Any:
        try:
            loaded = load(sig, target_context)
        except Exception as error:  # a truncated index, corrupt data: Numba does not catch them
            where = _numba_index(cache)
            try:
                cache.flush()  # an empty index replaces the damaged one; the next save refills it
                done = "replaced by an empty index; compiling the kernel afresh"
            except Exception as flush_error:
                cache.disable()
                done = f"could not be reset ({_describe(flush_error)}); compiling in memory"
            warn(
                f"Numba's cache entry {where} (index and .nbc data) is damaged "
                f"({_describe(error)}); {done}"
            )
            return None
        if CACHE.isEnabledFor(logging.DEBUG):
            found = "miss (Numba compiles it)" if loaded is None else "hit"
            CACHE.debug("Numba machine code %s: %s", _numba_index(cache), found)
        return loaded

    return load_overload


def _guarded_save(cache: Any, save: Any) -> Any:
    def save_overload(sig: Any, data: Any) -> None:
        try:
            save(sig, data)
        except Exception as error:  # a full disk, a directory that turned read-only
            cache.disable()
            warn(
                f"Numba's cache file {_numba_index(cache)} cannot be written "
                f"({_describe(error)}); this process keeps the kernel in memory"
            )

    return save_overload


def _numba_index(cache: Any) -> str:
    return str(getattr(getattr(cache, "_cache_file", None), "_index_path", cache.cache_path))


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def warn(message: str) -> None:
    """Report a cache fault as a ``CacheWarning`` (the kernel is then built or kept in memory)."""
    warnings.warn(CacheWarning(message), stacklevel=4)
