"""The kernel cache: generated kernel modules on disk (Numba caches their machine code beside
them) and the compiled fusions of this process in memory."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Final

_HEADER: Final = "# mmaplug generated kernel; digest {digest}\n"
_ENV_KEYS: Final = ("NUMBA_OPT", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_DEFAULT_PTX_CC")


def cache_dir() -> Path:
    """``$MMAPLUG_CACHE_DIR``, else ``$XDG_CACHE_HOME/mmaplug``, else ``~/.cache/mmaplug``."""
    if explicit := os.environ.get("MMAPLUG_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mmaplug"


def disk_cache_enabled() -> bool:
    """False when ``MMAPLUG_DISK_CACHE=0``: kernels are then rebuilt in every process."""
    return os.environ.get("MMAPLUG_DISK_CACHE", "1") != "0"


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


def kernel_module(key: str, source: str) -> ModuleType:
    """Import *source* as a module stored under the cache directory.

    The file name is a digest of *key*, *source* and :func:`versions_key`, so any change makes a
    new entry. The file is written atomically; an entry whose text does not match its digest
    (a corrupt or truncated file) is rewritten, never trusted. Numba's ``cache=True`` kernels in
    the module keep their compiled code in ``__pycache__`` beside it, so a fresh process that
    builds the same kernel skips compilation.
    """
    name = digest(key, source, versions_key())
    path = cache_dir() / "kernels" / f"mm_{name}.py"
    text = _HEADER.format(digest=name) + source
    if not path.is_file() or path.read_text(errors="replace") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    module_name = f"mmaplug_kernels.mm_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module
    return module
