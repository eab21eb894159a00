"""A fresh process of test_cold_start.py: compile and execute one fusion against a fake driver.

``python cold_start_child.py MODE SCHEDULER``. torch is ``test_streams.FakeTorch``; the CUDA
driver is faked in Python (``mmaplug.cuda.driver``'s functions and the tensor-map encoder
replaced) or, for MODEs starting with ``stub-``, is ``stub_libcuda.c`` built as libcuda.so.1
(the real ctypes and cuda.bindings calls run), so the whole ``mp.compile`` + ``execute`` path
runs without a GPU. MODE ``prepare`` builds the kernel (Numba imported; its cubin replaced by
fake bytes named after the kernel; ``stub-prepare`` keeps Numba's real cubin) and stores it in
the disk cache; ``hit`` must find it there; ``stub-prebuild`` builds it with ``mp.prebuild``
in worker processes before the first call. Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: test_streams
from test_streams import FakeTorch  # noqa: E402

M, N, K = 256, 128, 64
PRESET = {"hopper": "h200", "ampere": "a100"}


def fake_driver(preset: Any, loads: list, launches: list, allowed: list) -> None:
    """Replace the driver's functions, the map encoder and capture checks with recorders."""
    from mmaplug.cuda import driver, streams
    from mmaplug.plugins.hopper import maps

    compile_module = sys.modules["mmaplug.runtime.compiled_fusion"]
    driver.ensure_context = lambda: 0
    driver.device_attributes = lambda ordinal=None: {
        "name": f"fake {preset.name}",
        "compute_capability": tuple(preset.cc),
        "MULTIPROCESSOR_COUNT": preset.sm_count,
        "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": preset.smem_per_block_optin,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": preset.smem_per_sm,
        "MAX_REGISTERS_PER_MULTIPROCESSOR": preset.regs_per_sm,
        "MAX_THREADS_PER_MULTIPROCESSOR": preset.threads_per_sm,
        "MAX_BLOCKS_PER_MULTIPROCESSOR": preset.ctas_per_sm,
        "MAX_THREADS_PER_BLOCK": preset.max_threads_per_block,
        "L2_CACHE_SIZE": preset.l2_bytes,
        "WARP_SIZE": preset.warp_size,
    }

    def load_kernel(cubin: bytes, entry: str) -> int:
        loads.append((cubin.decode(), entry))
        return 1000 + len(loads)

    def kernel_launcher(
        kernel: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int = 1
    ) -> Any:
        return lambda stream: launches.append(
            {"kernel": kernel, "grid": list(grid), "smem": smem, "stream": stream}
        )

    driver.load_kernel = load_kernel
    driver.set_max_dynamic_smem = lambda kernel, smem, device: allowed.append(
        (kernel, smem, device)
    )
    driver.kernel_launcher = kernel_launcher
    maps.encode = lambda spec, address: np.zeros(16, np.uint64)
    streams.relaxed_capture = contextlib.nullcontext
    compile_module.relaxed_capture = contextlib.nullcontext


def main(mode: str, scheduler: str) -> None:
    torch = FakeTorch()
    sys.modules["torch"] = torch
    start = time.perf_counter()
    import mmaplug as mp
    from mmaplug.planning.device import get_device

    imported = time.perf_counter()
    preset = get_device(PRESET[scheduler])
    loads: list[tuple[str, str]] = []
    launches: list[dict[str, Any]] = []
    allowed: list[tuple[int, int, int]] = []
    stub = mode.startswith("stub-")
    if not stub:
        fake_driver(preset, loads, launches, allowed)
    if mode == "prepare":  # (stub-prepare builds for real: Numba compiles and nvJitLink links)
        from mmaplug.cuda import launching
        from mmaplug.cuda.cubin import Binary
        from mmaplug.cuda.launching import ARRAY_SLOTS

        def fake_binary(dispatcher: Any, signature: Any, cc: Any, by_value: Any = None) -> Binary:
            from numba import types

            name = dispatcher.py_func.__name__
            slots = sum(ARRAY_SLOTS if isinstance(t, types.Array) else 1 for t in signature.args)
            return Binary(f"cubin of {name}".encode(), f"_Z{name}", slots)

        launching.numba_binary = fake_binary  # what generated_kernel compiles with

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([M, K], mp.float16)
        w = fd.define_tensor([N, K], mp.float16)
        bias = fd.define_tensor([N], mp.float16)
        fd.add_output(fd.ops.linear(x, w, bias))
    pm = mp.make_plugin_manager(block=("hopper",)) if scheduler == "ampere" else None
    compiled = mp.compile(fd, pm=pm)  # the local GPU: the fake driver's
    prebuilt = None
    if mode == "stub-prebuild":  # two worker processes build for real; this one loads
        report = mp.prebuild([compiled, compiled], workers=2)
        prebuilt = {"built": list(report.built), "numba": "numba" in sys.modules}
    inputs = [torch.tensor((M, K)), torch.tensor((N, K)), torch.tensor((N,))]
    (out,) = compiled.execute(inputs)
    first = time.perf_counter()
    compiled.execute(inputs)
    print(json.dumps({
        "scheduler": compiled.spec.scheduler,
        "numba": "numba" in sys.modules,
        "ml_dtypes": "ml_dtypes" in sys.modules,
        "prebuilt": prebuilt,
        "loads": loads,
        "launches": launches,
        "allowed": allowed,
        "stub_launches": ctypes.CDLL("libcuda.so.1").stub_launches() if stub else None,
        "device": compiled.spec.device.name,
        "out_shape": list(out.shape),
        "stream": torch.current,
        "import_s": imported - start,
        "first_result_s": first - imported,
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
