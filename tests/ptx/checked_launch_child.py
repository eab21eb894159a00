"""A fresh process of test_cache_never_executes.py: the checked launch path
(``MMAPLUG_FAST_LAUNCH=0``) of both schedulers on an empty cubin cache, with the driver faked
(no GPU) and an audit hook recording every file opened and every class a pickle looks up;
prints JSON.

``python checked_launch_child.py``, with ``MMAPLUG_CACHE_DIR`` set: builds an ampere and a
split-K hopper kernel module, launches each kernel once through ``launching.launch_checked``
(each cubin built by Numba on the miss and stored under ``cubins/``) and reports the files it
opened under the cache directory, the pickle lookups, the launches and the modules' sources.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

CACHE = os.path.realpath(os.environ["MMAPLUG_CACHE_DIR"])
OPENED: list[str] = []
UNPICKLED: list[str] = []


def audit(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        path = os.path.realpath(os.fsdecode(args[0]))
        if path == CACHE or path.startswith(CACHE + os.sep):
            OPENED.append(os.path.relpath(path, CACHE))
    elif event == "pickle.find_class":
        UNPICKLED.append(f"{args[0]}.{args[1]}")


sys.addaudithook(audit)

import ctypes  # noqa: E402

from mmaplug.cuda import driver, launching  # noqa: E402
from mmaplug.plugins.ampere.kernel import AmpereKernelConfig  # noqa: E402
from mmaplug.plugins.ampere.launch import run_gemm  # noqa: E402
from mmaplug.plugins.hopper import kernel as hopper  # noqa: E402
from mmaplug.plugins.hopper.config import HopperKernelConfig  # noqa: E402

LAUNCHES: list[dict[str, Any]] = []
LOADED: dict[int, str] = {}  # handle -> entry
SLOTS: dict[int, int] = {}  # handle -> parameter slots


class Array:
    """A device array as the launch path sees one: ``__cuda_array_interface__`` only."""

    def __init__(self, address: int, size: int, typestr: str) -> None:
        self.size = size
        self.__cuda_array_interface__ = {
            "shape": (size,), "strides": None, "typestr": typestr,
            "data": (address, False), "version": 3,
        }  # fmt: skip


def load_kernel(image: bytes, entry: str) -> int:
    assert image[:4] == b"\x7fELF", "a cubin"
    LOADED[len(LOADED) + 1] = entry
    return len(LOADED)


def kernel_launcher(
    kernel: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int = 1
) -> Any:
    def run(stream: int) -> None:
        ptrs = (ctypes.c_void_p * SLOTS[kernel]).from_address(params)
        LAUNCHES.append({
            "entry": LOADED[kernel], "grid": list(grid), "block": list(block), "smem": smem,
            "cluster": cluster, "stream": stream,
            "values": [ctypes.c_int64.from_address(p).value for p in ptrs],
        })  # fmt: skip

    return run


def kernel(module: str, source: str, name: str, smem: int, slots: int, build: Any) -> int:
    handle = real_kernel(module, source, name, smem, slots, build)
    SLOTS[handle] = slots
    return handle


driver.ensure_context = lambda: 0  # type: ignore[assignment]
driver.device_attributes = lambda device=0: {"compute_capability": CC}  # type: ignore[assignment]
driver.load_kernel = load_kernel  # type: ignore[assignment]
driver.set_max_dynamic_smem = lambda *args: None  # type: ignore[assignment]
driver.kernel_launcher = kernel_launcher  # type: ignore[assignment]
real_kernel = launching.cubin.kernel
launching.cubin.kernel = kernel  # type: ignore[assignment]

CC = (8, 0)
ampere = AmpereKernelConfig(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32))
a, b, out = (
    Array(0x10000, 64 * 32, "<u2"),
    Array(0x20000, 64 * 32, "<u2"),
    Array(0x30000, 4096, "<u2"),
)
run_gemm(ampere, (a, 0, 32), (b, 0, 32), [], [], [(out, 0, 64)], m=64, n=64, k=32, batch=1,
         stream=0x77)  # fmt: skip

CC = (9, 0)
launching.cubin.target.cache_clear()  # the faked device changed
config = HopperKernelConfig(cta_tile=(128, 64, 64), warp_tile=(64, 64, 64), splitk=2)
kernels = hopper.build(config)
# the maps go by value (two 128-byte maps, host words), the workspace by address
maps, ws = np.zeros(32, np.uint64), Array(0x50000, 2 * 128 * 64, "<f4")
shape_grid = [128, 64, 64, 1, 0, 0] + [32, 1, 1, 2]
launching.launch_checked(kernels, "hopper_gemm", [maps, ws, *shape_grid], (2, 1, 1),
                         (config.threads, 1, 1), 0x78, config.smem_bytes)  # fmt: skip
out = Array(0x60000, 128 * 64, "<u2")
launching.launch_checked(kernels, "hopper_splitk_reduce", [ws, out, 128, 64, 1, 0, 64],
                         (32, 1, 1), (256, 1, 1), 0x78, 0)  # fmt: skip

from mmaplug.plugins.ampere.kernel import build as ampere_build  # noqa: E402

print(json.dumps({
    "opened": sorted(set(OPENED)),
    "unpickled": sorted(set(UNPICKLED)),
    "launches": LAUNCHES,
    "sources": [ampere_build(ampere).source, kernels.source],
    "files": sorted(str(p.relative_to(CACHE)) for p in Path(CACHE).rglob("*") if p.is_file()),
}))  # fmt: skip
