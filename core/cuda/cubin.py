"""Compiled kernels as cubins, cached on disk with their entry and parameter layout."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import threading
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .. import cache
from ..errors import KernelBuildError
from ..log import CACHE
from . import driver

__all__ = [
    "Binary",
    "arch",
    "entry_key",
    "keep",
    "kernel",
    "read",
    "stored",
    "target",
    "toolchain_key",
    "write",
]

_DEFAULT_DYNAMIC_SMEM: Final = 48 * 1024
_TOOLCHAIN: Final = ("cuda-bindings", "nvidia-nvjitlink", "nvidia-nvvm", "cuda-python")
_FORMAT: Final = 1
_loaded: dict[str, int] = {}  # entry key -> CUkernel, for the life of the process
_kept: dict[str, Binary] = {}  # entry key -> built ahead of its first load (``keep``)
_lock: Final = threading.RLock()


class Binary(NamedTuple):
    """A compiled kernel: the cubin, its entry (mangled) name and its parameter slots."""

    cubin: bytes
    entry: str
    slots: int


@functools.cache
def toolchain_key() -> str:
    """``cache.versions_key`` plus the versions of the CUDA packages that make the cubin."""
    parts = [cache.versions_key()]
    for dist in _TOOLCHAIN:
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return ";".join(parts)


def arch(cc: tuple[int | str, ...]) -> str:
    """The architecture Numba compiles for at compute capability *cc*: ``sm_90a`` on 9.x and
    later, else ``sm_XY`` (the ``a`` suffix as in numba-cuda's ``_ensure_cc``)."""
    major, minor = int(cc[0]), int(cc[1])
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


@functools.cache
def target(device: int) -> str:
    """:func:`arch` of *device*'s compute capability."""
    return arch(driver.device_attributes(device)["compute_capability"])


def entry_key(module: str, source: str, name: str, arch: str) -> str:
    """The cache key of kernel *name* of *module*'s generated *source* built for *arch*."""
    return cache.digest(module, source, name, arch, toolchain_key(), f"format={_FORMAT}")


def kernel(
    module: str, source: str, name: str, smem: int, slots: int, build: Callable[[], Binary]
) -> int:
    """The ``CUkernel`` of kernel *name* in *module*, allowed *smem* dynamic bytes on the
    current device: loaded once per process, from what :func:`keep` holds or the disk cache
    when there (no Numba: ``mmaplug.prebuild``, or the first process to need it, stored it
    under ``cache_dir()/cubins``), else *build()* (Numba), whose cubin the cache keeps.
    *slots*: the parameter block the caller fills.
    """
    device = driver.ensure_context()
    key = entry_key(module, source, name, target(device))
    with _lock:
        handle = _loaded.get(key)
        if handle is None:
            on_disk = cache.disk_cache_enabled()
            binary = _kept.pop(key, None) or (read(key, slots) if on_disk else None)
            fresh = binary is None
            if binary is None:
                binary = build()
            if binary.slots != slots:
                raise KernelBuildError(
                    f"kernel {name} of {module} takes {binary.slots} parameter slots but "
                    f"its bound launch fills {slots}: the plugin's parameter layout and "
                    "its kernel signature disagree (a bug in the scheduler plugin)"
                )
            if fresh and on_disk:
                write(key, binary)
            handle = _loaded[key] = driver.load_kernel(binary.cubin, binary.entry)
    if smem > _DEFAULT_DYNAMIC_SMEM:
        driver.set_max_dynamic_smem(handle, smem, device)
    return handle


def stored(key: str) -> bool:
    """Whether the kernel under *key* needs no build: loaded, kept, or in the disk cache."""
    if key in _loaded or key in _kept:
        return True
    if not cache.disk_cache_enabled():
        return False
    try:
        return (cache.cache_dir() / "cubins" / f"{key}.cubin").is_file()
    except OSError:
        return False


def keep(key: str, binary: Binary) -> None:
    """Hold *binary*, built ahead of its first launch, for :func:`kernel` in this process, and
    store it in the disk cache for later ones (when the cache is on)."""
    with _lock:
        _kept[key] = binary
    if cache.disk_cache_enabled():
        write(key, binary)


def write(key: str, binary: Binary) -> None:
    """Store *binary* under *key* (atomically); a fault only warns (``CacheWarning``)."""
    meta = {
        "format": _FORMAT,
        "entry": binary.entry,
        "slots": binary.slots,
        "sha256": hashlib.sha256(binary.cubin).hexdigest(),
    }
    where: Any = "the kernel cache"
    try:
        where = cache.cache_dir() / "cubins" / f"{key}.cubin"
        cache.store_file(where, json.dumps(meta).encode() + b"\n" + binary.cubin)
    except OSError as error:
        cache.warn(f"mmaplug cannot store the compiled kernel at {where}: {error}; {cache.FIX}")
        return
    CACHE.debug("cubin %s: stored (%d bytes)", where, len(binary.cubin))


def read(key: str, slots: int) -> Binary | None:
    """The binary stored under *key*; None when there is none, or (with a ``CacheWarning``)
    when it is damaged or laid out for another parameter block than *slots*."""
    where: Any = "the kernel cache"
    try:
        where = cache.cache_dir() / "cubins" / f"{key}.cubin"
        data = where.read_bytes()
    except FileNotFoundError:
        CACHE.debug("cubin %s: miss", where)
        return None
    except OSError as error:
        cache.warn(f"mmaplug cannot read the compiled kernel {where}: {error}; rebuilding it")
        return None
    head, _, cubin = data.partition(b"\n")
    try:
        meta = json.loads(head)
        entry, stored = str(meta["entry"]), int(meta["slots"])
        intact = meta["format"] == _FORMAT and meta["sha256"] == hashlib.sha256(cubin).hexdigest()
    except (ValueError, KeyError, TypeError):
        intact, entry, stored = False, "", -1
    if not intact or stored != slots:
        why = "is damaged" if not intact else f"takes {stored} parameter slots, not {slots}"
        cache.warn(f"the compiled kernel {where} {why}; rebuilding and replacing it")
        return None
    CACHE.debug("cubin %s: hit", where)
    return Binary(cubin, entry, stored)
