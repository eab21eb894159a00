"""A fresh process of test_launch_functions.py: launches through ``mmaplug.cuda.driver`` against
the stub libcuda (``stub_libcuda.c`` on LD_LIBRARY_PATH), one scenario per run; prints JSON.

``python launch_child.py [cluster-]SCENARIO``: the launch counts the stub saw (all, through a
``CUfunction``, through ``cuLaunchKernelEx``) and what each scenario reads back.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
from typing import Any

from mmaplug.cuda import driver
from mmaplug.errors import LaunchError

STUB = ctypes.CDLL("libcuda.so.1")
STUB.stub_last_cluster.restype = ctypes.c_uint
OTHER = 0x5678  # a second context the stub accepts


def counts() -> dict[str, int]:
    return {
        "all": STUB.stub_launches(),
        "function": STUB.stub_function_launches(),
        "cluster": STUB.stub_cluster_launches(),
    }


def stream_in(context: int | None) -> int:
    """A stream created while *context* (None: the current one) is current."""
    before, created = driver._current_context(driver._lib()), ctypes.c_void_p()
    if context is not None:
        STUB.cuCtxSetCurrent(ctypes.c_void_p(context))
    assert STUB.cuStreamCreate(ctypes.byref(created), 1) == 0
    STUB.cuCtxSetCurrent(ctypes.c_void_p(before))
    return int(created.value or 0)


def in_thread(fn: Any, context: int | None = None) -> Any:
    """``fn()`` in a new thread (no current context), made current to *context* first if given."""
    out: list[Any] = []

    def body() -> None:
        if context is not None:
            STUB.cuCtxSetCurrent(ctypes.c_void_p(context))
        out.append(fn())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return out[0]


def main(scenario: str) -> dict[str, Any]:
    driver.ensure_context()  # the primary context, current in this thread
    kernel = driver.load_kernel(b"cubin", "_Z4gemm")
    cluster = 2 if scenario.startswith("cluster-") else 1
    scenario = scenario.removeprefix("cluster-")
    run = driver.kernel_launcher(kernel, (4, 1, 1), (384, 1, 1), 100_000, 0, cluster)
    primary = driver._current_context(driver._lib())
    result: dict[str, Any] = {}
    if scenario == "streams":
        for name, stream in (("default", 0), ("created", stream_in(None)), ("foreign", 0x1110)):
            before = counts()
            run(stream)
            run(stream)
            result[name] = {k: v - before[k] for k, v in counts().items()}
        function = driver._functions[(kernel, primary)][0]
        result["function_smem"] = STUB.stub_function_smem(ctypes.c_void_p(function))
        result["last_cluster"] = STUB.stub_last_cluster()
    elif scenario == "contexts":
        other_stream = stream_in(OTHER)
        cases = {
            "no_context_default": lambda: in_thread(lambda: run(0)),
            "other_context_default": lambda: in_thread(lambda: run(0), OTHER),
            "other_context_primary_stream": lambda: in_thread(lambda: run(0x1110), OTHER),
            "primary_thread_other_stream": lambda: run(other_stream),
        }
        for name, case in cases.items():
            before = counts()
            case()
            result[name] = {k: v - before[k] for k, v in counts().items()}
        result["functions_per_context"] = sorted(
            context for (k, context) in driver._functions if k == kernel
        )
        result["contexts"] = sorted((primary, OTHER))
    elif scenario == "refused":  # a stale function (another context's) is refused: the CUkernel
        driver._functions[(kernel, OTHER)] = list(driver._functions[(kernel, primary)])
        before = counts()
        in_thread(lambda: (run(0), run(0)), OTHER)
        result["refused"] = {k: v - before[k] for k, v in counts().items()}
    elif scenario == "threads":  # cluster launches from 4 threads on 4 streams at once
        streams = [stream_in(None) for _ in range(4)]
        run = driver.kernel_launcher(kernel, (4, 1, 1), (384, 1, 1), 100_000, 0, 2)
        before = counts()
        threads = [
            threading.Thread(target=lambda s=s: [run(s) for _ in range(500)]) for s in streams
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result["threads"] = {k: v - before[k] for k, v in counts().items()}
    elif scenario == "error":
        bad = driver.kernel_launcher(kernel, (0, 1, 1), (384, 1, 1), 0, 0, cluster)
        try:
            bad(0)
        except LaunchError as error:
            result["error"] = str(error)
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
