"""What the emulations read of Numba's CUDA simulator: the calling thread's BlockManager, its
block and grid dimensions, and the host arrays behind the simulator's array wrappers.

With ``simulator`` (its patches), this is the door to the simulator's private names: nothing
else under ``mmaplug.sim`` touches an underscored simulator field. It imports nothing of Numba
and nothing of ``mmaplug.sim``.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import numpy as np

from mmaplug.errors import UsageError

__all__ = ["block_dim", "current_manager", "field", "grid_dim", "host_array", "host_of"]


def current_manager() -> Any:
    """The simulator's BlockManager of the calling thread's block (None outside a simulated
    kernel's threads)."""
    return getattr(threading.current_thread(), "_manager", None)


def block_dim(manager: Any) -> tuple[int, ...]:
    """The block dimensions of a simulator BlockManager."""
    return tuple(field(manager, "_block_dim"))


def grid_dim(manager: Any) -> tuple[int, ...]:
    """The grid dimensions of a simulator BlockManager."""
    return tuple(field(manager, "_grid_dim"))


def host_array(obj: Any) -> np.ndarray:
    """Unwrap the simulator's array wrappers (FakeWithinKernelCUDAArray, FakeCUDAArray)."""
    while not isinstance(obj, np.ndarray):
        attrs = getattr(obj, "__dict__", {})
        inner = attrs.get("_item", attrs.get("_ary"))
        if inner is None:
            raise UsageError(f"expected an array, got {type(obj).__name__}")
        obj = inner
    return obj


def host_of(arr: Any) -> np.ndarray | None:
    """The host array behind a device array of Numba's simulator, else None."""
    host = getattr(arr, "_ary", None)
    return host if isinstance(host, np.ndarray) else None


def field(obj: Any, name: str) -> Any:
    """The simulator object's private attribute *name*; a UsageError naming it if missing."""
    value = getattr(obj, name, _MISSING)
    if value is _MISSING:
        raise UsageError(
            f"Numba's CUDA simulator's {type(obj).__name__} has no {name}, which mmaplug's "
            "simulated launches read; use the numba-cuda release the simulator tier tests "
            "(mmaplug.cuda.numba_internals.TESTED)"
        )
    return value


_MISSING: Final = object()
