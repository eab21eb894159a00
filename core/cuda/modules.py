"""Generated kernel modules: source this process generated, executed from memory.

Nothing of a kernel module is read from the disk cache: no module file, no bytecode, and no
Numba ``cache=True`` index (which Numba unpickles). Compiled kernels are cached as cubins
(``mmaplug.cuda.cubin``), which the driver loads as data.
"""

from __future__ import annotations

import importlib.util
import linecache
from typing import Any, Final

import attrs

from mmaplug.errors import KernelBuildError

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
    #: the module name the scheduler loads the kernels' cubins under (``generated_kernel``)
    module: str

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


def load_generated(key: str, source: str) -> dict[str, Any]:
    """Exec generated *source* from memory as module *key* (the kernel's name, so its PTX
    ``.entry`` demangles to ``<key>::<kernel>``); return its namespace, the source under
    ``__source__``. It runs under a ``linecache`` name made of *key* (tracebacks show the
    generated lines), never as a file: nothing of it is written to or read from the disk.
    """
    try:  # the first Numba import on the way to a built kernel
        import numba.cuda  # noqa: F401
    except ImportError as missing:
        raise KernelBuildError(_NO_NUMBA.format(why=missing)) from missing
    filename = f"<mmaplug {key} #{abs(hash(source)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": key}
    exec(compile(source, filename, "exec"), namespace)
    namespace["__source__"] = source
    return namespace
