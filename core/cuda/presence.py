"""Whether this machine has a usable CUDA GPU, found without importing Numba."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports (0 when there is no driver or no GPU)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    return 0
