"""Generated kernel modules: executed from memory, or from the disk cache beside Numba's code."""

from __future__ import annotations

import importlib.util
import linecache
from collections.abc import Callable
from typing import Any, Final

import attrs

from ..errors import KernelBuildError

__all__ = ["GeneratedKernels", "load_generated", "require_numba"]

_NO_NUMBA: Final = (
    "building or running a kernel needs Numba-CUDA, which cannot be imported ({why}); install "
    "mmaplug[cu13] (CUDA 13, NVIDIA driver R580 or newer) or mmaplug[cu12] (CUDA 12, driver "
    "R525 or newer)"
)


@attrs.frozen
class GeneratedKernels:
    """The compiled kernels of one scheduler config (dispatchers compile on first launch)."""

    config: Any
    gemm: Any
    reduce: Any | None
    source: str
    signatures: dict[str, Any]

    def dispatcher(self, name: str) -> Any:
        """The dispatcher of kernel *name*: the ``*_gemm`` kernel, else the split-K reduce."""
        return self.gemm if name.endswith("_gemm") else self.reduce


def require_numba() -> None:
    """Raise ``KernelBuildError`` (naming the extra to install) unless Numba can be imported.

    It is looked up, not imported: a kernel found in the disk cache never imports it, but a
    plan-only install must fail at ``mp.compile``, not at the first ``execute``.
    """
    if importlib.util.find_spec("numba") is None:
        raise KernelBuildError(_NO_NUMBA.format(why="No module named 'numba'"))


def load_generated(key: str, render: Callable[[bool], str], *, on_disk: bool) -> dict[str, Any]:
    """Exec generated source; return its namespace, with the source under ``__source__``.

    *render(cache)* gives the source, with ``cache=True`` kernels when it will be a module in
    the disk cache (*on_disk*, named after *key*), so Numba keeps their compiled code beside it
    for the next process. When the cache cannot be used (a ``CacheWarning`` says why), or
    without *on_disk*, the source runs from memory under a ``linecache`` name for tracebacks.
    """
    try:  # the first Numba import on the way to a built kernel
        import numba.cuda  # noqa: F401
    except ImportError as missing:
        raise KernelBuildError(_NO_NUMBA.format(why=missing)) from missing
    if on_disk:
        from ..cache import kernel_module

        source = render(True)
        if (module := kernel_module(key, source)) is not None:
            return {**vars(module), "__source__": source}
    source = render(False)
    filename = f"<mmaplug {key} #{abs(hash(source)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"mmaplug_generated_{key}"}
    exec(compile(source, filename, "exec"), namespace)
    namespace["__source__"] = source
    return namespace
