"""Compiled kernels as cubins, cached on disk with their entry and parameter layout."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from mmaplug.cuda import cache, driver
from mmaplug.errors import KernelBuildError
from mmaplug.log import CACHE

__all__ = [
    "Binary",
    "arch",
    "entry_key",
    "flaw",
    "keep",
    "kernel",
    "lowering_digest",
    "read",
    "stored",
    "target",
    "toolchain_key",
    "write",
]

_DEFAULT_DYNAMIC_SMEM: Final = 48 * 1024
_TOOLCHAIN: Final = ("cuda-bindings", "nvidia-nvjitlink", "nvidia-nvvm", "cuda-python")
_FORMAT: Final = 2  # 2: every entry is listed in the cache manifest (issue 22)
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
    """``cache.versions_key`` plus the versions of the CUDA packages that make the cubin and
    :func:`lowering_digest`."""
    parts = [cache.versions_key()]
    for dist in _TOOLCHAIN:
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    parts.append(f"lowering={lowering_digest()}")
    return ";".join(parts)


@functools.cache
def lowering_digest() -> str:
    """A digest of the source of ``mmaplug.cuda``'s modules: the intrinsics a generated kernel
    imports (their inline PTX, GELU's polynomial) and the patches of Numba that lower it. The
    generated source names an intrinsic, not its body, so without this a cubin built before an
    intrinsic changed would be served after it, under the same mmaplug version (a checkout, an
    editable install)."""
    modules = sorted(Path(__file__).parent.glob("*.py"))
    return cache.digest(*(f"{path.name}\0{path.read_text()}" for path in modules))


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
    when there (no Numba: ``mp.prebuild``, or the first process to need it, stored it
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
    """Whether the kernel under *key* needs no build: loaded, kept, or in the disk cache (a
    file the cache manifest lists, intact: what :func:`read` would load)."""
    if key in _loaded or key in _kept:
        return True
    if not cache.disk_cache_enabled():
        return False
    where = cache.entry(key)
    try:
        found = None if where is None else cache.fetch(where)
    except OSError:  # untrusted: read() would rebuild it
        return False
    return found is not None and flaw(*found) is None


def keep(key: str, binary: Binary) -> None:
    """Hold *binary*, built ahead of its first launch, for :func:`kernel` in this process, and
    store it in the disk cache for later ones (when the cache is on)."""
    with _lock:
        _kept[key] = binary
    if cache.disk_cache_enabled():
        write(key, binary)


def write(key: str, binary: Binary) -> None:
    """Store *binary* under *key*, listed in the cache manifest (atomically; least recently
    used entries past ``MMAPLUG_CACHE_MAX_BYTES`` are evicted); a fault only warns."""
    where = cache.entry(key)
    if where is None:
        return  # the cache directory is not used in this process (it warned once)
    record = _record(binary)
    meta = {"format": _FORMAT, "entry": binary.entry, "slots": binary.slots}
    header = json.dumps({**meta, "sha256": record["sha256"]}).encode()
    try:
        cache.put(where, header + b"\n" + binary.cubin, record)
    except OSError as error:
        cache.warn(f"mmaplug cannot store the compiled kernel at {where}: {error}; {cache.FIX}")
        return
    CACHE.debug("cubin %s: stored (%d bytes)", where, len(binary.cubin))


def read(key: str, slots: int) -> Binary | None:
    """The binary stored under *key*; None when there is none, or (with a ``CacheWarning``)
    when it cannot be trusted (see :func:`flaw`) or is laid out for another parameter block
    than *slots*."""
    where = cache.entry(key)
    if where is None:
        return None
    try:
        found = cache.fetch(where)
    except OSError as error:
        cache.warn(f"mmaplug cannot read the compiled kernel {where}: {error}; rebuilding it")
        return None
    if found is None:
        CACHE.debug("cubin %s: miss", where)
        return None
    try:
        binary = _trusted(*found)
        if binary.slots != slots:
            raise ValueError(f"takes {binary.slots} parameter slots, not {slots}")
    except ValueError as why:
        cache.warn(f"the compiled kernel {where} {why}; rebuilding and replacing it")
        return None
    CACHE.debug("cubin %s: hit", where)
    return binary


def flaw(data: bytes, record: Mapping[str, Any] | None) -> str | None:
    """Why the stored entry *data*, listed in the cache manifest as *record* (None when not
    listed), must not be loaded; None when it is intact and exactly what the manifest lists."""
    try:
        _trusted(data, record)
    except ValueError as why:
        return str(why)
    return None


def _trusted(data: bytes, record: Mapping[str, Any] | None) -> Binary:
    """The binary an entry's *data* holds, checked against its header's sha256 and against
    its manifest *record*.

    :raises ValueError: why it must not be loaded.
    """
    head, _, image = data.partition(b"\n")
    try:
        meta = json.loads(head)
        binary = Binary(image, str(meta["entry"]), int(meta["slots"]))
        layout, intact = meta["format"], meta["sha256"] == hashlib.sha256(image).hexdigest()
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):  # (slots: Infinity)
        raise ValueError("is damaged") from None
    if layout != _FORMAT:
        raise ValueError(f"is of cache format {layout!r}, not {_FORMAT} (another mmaplug's)")
    if not intact:
        raise ValueError("is damaged")
    if record is None:
        raise ValueError("is not listed in the cache manifest (mmaplug's writer did not store it)")
    if record != _record(binary):
        raise ValueError("does not match its record in the cache manifest")
    return binary


def _record(binary: Binary) -> dict[str, Any]:
    """*binary*'s record in the cache manifest."""
    digest = hashlib.sha256(binary.cubin).hexdigest()
    return {
        "sha256": digest,
        "size": len(binary.cubin),
        "entry": binary.entry,
        "slots": binary.slots,
    }
