"""The CUDA driver without Numba (docs/decisions.md, "Cold start"): load, launch, allocate."""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from collections.abc import Iterator
from typing import Any, Final

from mmaplug.errors import LaunchError
from mmaplug.log import LAUNCH

__all__ = [
    "device_attributes",
    "ensure_context",
    "ensure_driver",
    "kernel_launcher",
    "load_kernel",
    "max_active_clusters",
    "set_max_dynamic_smem",
]

_SUCCESS: Final = 0
_INVALID_CONTEXT: Final = 201
_MAX_DYNAMIC_SHARED: Final = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_DEFAULT_DYNAMIC_SMEM: Final = 48 * 1024  # what a kernel may take without the attribute
_KEPT: Final = 64  # streams (contexts) a launcher remembers before it starts over
_RELAXED: Final = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
#: cuDeviceGetAttribute codes for what ``mmaplug.planning.device`` reads.
ATTRIBUTES: Final = {
    "MAX_THREADS_PER_BLOCK": 1,
    "MAX_SHARED_MEMORY_PER_BLOCK": 8,
    "WARP_SIZE": 10,
    "MULTIPROCESSOR_COUNT": 16,
    "L2_CACHE_SIZE": 38,
    "COMPUTE_CAPABILITY_MAJOR": 75,
    "COMPUTE_CAPABILITY_MINOR": 76,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 81,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 82,
    "MAX_THREADS_PER_MULTIPROCESSOR": 39,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 106,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 97,
}
_P = ctypes.c_void_p
_U = ctypes.c_uint
_SIGNATURES: Final = {
    "cuInit": (_U,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuCtxGetCurrent": (ctypes.POINTER(_P),),
    "cuCtxSetCurrent": (_P,),
    "cuCtxGetDevice": (ctypes.POINTER(ctypes.c_int),),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_P), ctypes.c_int),
    "cuDeviceGetAttribute": (ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int),
    "cuDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    "cuLibraryLoadData": (ctypes.POINTER(_P), ctypes.c_char_p, _P, _P, _U, _P, _P, _U),
    "cuLibraryGetKernel": (ctypes.POINTER(_P), _P, ctypes.c_char_p),
    "cuKernelSetAttribute": (ctypes.c_int, ctypes.c_int, _P, ctypes.c_int),
    "cuKernelGetFunction": (ctypes.POINTER(_P), _P),
    "cuFuncSetAttribute": (_P, ctypes.c_int, ctypes.c_int),
    "cuStreamGetCtx": (_P, ctypes.POINTER(_P)),
    "cuLaunchKernel": (_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P),
    "cuMemsetD32Async": (ctypes.c_uint64, _U, ctypes.c_size_t, _P),
    "cuThreadExchangeStreamCaptureMode": (ctypes.POINTER(ctypes.c_int),),
}
#: What still works on a machine without a CUDA driver (or GPU): the end of that error.
WITHOUT_DRIVER: Final = (
    "without one mmaplug still plans and emits PTX for a named device "
    '(mp.compile(fusion, device="h200"), mmaplug explain --device h200), computes reference '
    "results (mp.evaluate) and runs kernels in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
)
_lock: Final = threading.Lock()
_state: dict[str, Any] = {}  # "lib": the loaded libcuda
_smem_set: set[tuple[int, int, int]] = set()  # (kernel, device, bytes) already allowed
_functions: dict[tuple[int, int], list[int]] = {}  # (kernel, context) -> [CUfunction, smem]
_clusters: dict[tuple[int, int, int, int, int], int] = {}  # (kernel, context, ...) -> clusters


def _lib() -> Any:
    lib = _state.get("lib")
    if lib is None:
        with _lock:
            lib = _state.get("lib")
            if lib is None:
                try:
                    lib = ctypes.CDLL("libcuda.so.1")
                except OSError as error:
                    raise LaunchError(
                        f"the CUDA driver (libcuda.so.1) cannot be loaded ({error}): there is "
                        "no CUDA driver here; install an NVIDIA driver to run kernels; "
                        f"{WITHOUT_DRIVER}"
                    ) from None
                for name, argtypes in _SIGNATURES.items():
                    try:
                        function = getattr(lib, name)
                    except AttributeError:
                        raise LaunchError(
                            f"the CUDA driver has no {name}: it is older than CUDA 12.0; "
                            "install NVIDIA driver R525 or newer (R580 for CUDA 13)"
                        ) from None
                    function.argtypes, function.restype = argtypes, ctypes.c_int
                if err := lib.cuInit(0):
                    raise LaunchError(
                        f"the CUDA driver finds no usable GPU ({_error_name(lib, err)} from "
                        f"cuInit); {WITHOUT_DRIVER}"
                    )
                _state["lib"] = lib
    return lib


def ensure_driver() -> None:
    """Load and initialise the CUDA driver unless done: call before any ``cuda.bindings`` or
    Numba driver call, so that a machine without one gets a ``LaunchError`` saying so and what
    works without it (cuda.bindings would raise cuda.pathfinder's ``DynamicLibNotFoundError``).
    """
    if "lib" not in _state:
        _lib()


def _error_name(lib: Any, err: int) -> str:
    name = ctypes.c_char_p()
    found = name.value if lib.cuGetErrorName(err, ctypes.byref(name)) == _SUCCESS else None
    return f"{found.decode() if found else 'CUresult'} ({err})"


def _check(lib: Any, err: int, what: str) -> None:
    if err != _SUCCESS:
        raise LaunchError(f"{what} failed: {_error_name(lib, err)}")


def ensure_context() -> int:
    """The device ordinal of this thread's current context; device 0's primary one if none."""
    lib = _lib()
    ctx = _P()
    _check(lib, lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        _check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
        _check(lib, lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    device = ctypes.c_int()
    _check(lib, lib.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
    return device.value


def device_attributes(ordinal: int | None = None) -> dict[str, Any]:
    """Name, compute capability and ``ATTRIBUTES`` of a device (default: the current one)."""
    lib = _lib()
    ordinal = ensure_context() if ordinal is None else ordinal
    value, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    found: dict[str, Any] = {}
    for key, code in ATTRIBUTES.items():
        _check(lib, lib.cuDeviceGetAttribute(ctypes.byref(value), code, ordinal), key)
        found[key] = value.value
    _check(lib, lib.cuDeviceGetName(name, len(name), ordinal), "cuDeviceGetName")
    found["name"] = name.value.decode(errors="replace")
    cc = (found.pop("COMPUTE_CAPABILITY_MAJOR"), found.pop("COMPUTE_CAPABILITY_MINOR"))
    found["compute_capability"] = cc
    return found


def load_kernel(cubin: bytes, entry: str) -> int:
    """Load *cubin* (or NUL-terminated PTX) as a library; the ``CUkernel`` named *entry*.

    Library loading is context-independent: the handle launches in whichever context the
    stream (or the calling thread) is in. Cold calls like this one go through ctypes.
    """
    lib = _lib()
    library, kernel = _P(), _P()
    _check(
        lib,
        lib.cuLibraryLoadData(ctypes.byref(library), cubin, None, None, 0, None, None, 0),
        "cuLibraryLoadData",
    )
    _check(
        lib,
        lib.cuLibraryGetKernel(ctypes.byref(kernel), library, entry.encode()),
        "cuLibraryGetKernel",
    )
    return int(kernel.value or 0)


def set_max_dynamic_smem(kernel: int, smem: int, device: int) -> None:
    """Allow *kernel* *smem* bytes of dynamic shared memory on *device* (once per triple)."""
    if (kernel, device, smem) in _smem_set:
        return
    lib = _lib()
    err = lib.cuKernelSetAttribute(_MAX_DYNAMIC_SHARED, smem, kernel, device)
    _check(lib, err, f"cuKernelSetAttribute(max dynamic shared memory = {smem} bytes)")
    _smem_set.add((kernel, device, smem))


def max_active_clusters(kernel: int, block: tuple, smem: int, cluster: int) -> int:
    """Clusters of *cluster* CTAs of *kernel* (a ``CUkernel`` of *block* threads allowed *smem*
    dynamic bytes) that the current context's device runs at once
    (``cuOccupancyMaxActiveClusters``: whole clusters fit a GPC, so a persistent grid of
    ``sm_count / cluster`` of them may not all be resident); 0 when the driver cannot say."""
    from cuda.bindings import driver as bindings

    lib = _lib()
    ensure_context()
    context = _current_context(lib)
    threads = math.prod(int(v) for v in block)
    key = (kernel, context, threads, smem, cluster)
    if (found := _clusters.get(key)) is not None:
        return found
    function = _context_function(lib, kernel, context, smem)
    if function is None:
        return 0
    config = bindings.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = (int(v) for v in block)
    config.sharedMemBytes = smem
    attr = bindings.CUlaunchAttribute()
    attr.id = bindings.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
    config.attrs, config.numAttrs = [attr], 1
    try:
        err, count = bindings.cuOccupancyMaxActiveClusters(function, config)
    except (AttributeError, TypeError) as error:  # a cuda.bindings without it: no cut
        LAUNCH.debug("cuOccupancyMaxActiveClusters unavailable: %s", error)
        return 0
    found = int(count) if err == bindings.CUresult.CUDA_SUCCESS else 0
    with _lock:
        _clusters[key] = found
    return found


def kernel_launcher(
    kernel: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int = 1
) -> Any:
    """A function ``launch(stream)`` running *kernel* with the parameter block at *params*.

    Each launch is one ``cuLaunchKernelEx`` call through ``cuda.bindings`` (0.22 us of Python
    against a stub libcuda, ``cuLaunchKernel``'s 11 arguments 0.32 us, ctypes 1.2-1.6 us:
    docs/decisions.md) with a ``CUlaunchConfig`` prepared per stream and the ``CUfunction`` of
    the stream's context (``_Launches``). A thread without a current context gets its device's
    primary one and the launch is retried. With *cluster* > 1 the grid runs as clusters of
    that many CTAs along x. ``launch`` changes nothing shared per call: threads may call it.
    """
    from cuda.bindings import driver as bindings

    launches = _Launches(bindings, kernel, grid, block, smem, cluster)
    launches.resolve(0)  # the current context's function, now (binding is not captured)
    by_stream, by_default, current = launches.by_stream, launches.by_default, launches.current
    launch, what = bindings.cuLaunchKernelEx, launches.what

    def run(stream: int) -> None:
        entry = by_stream.get(stream) if stream > 2 else by_default[stream].get(current()[1])
        if entry is None:
            entry = launches.resolve(stream)
        config, function = entry
        (err,) = launch(config, function, params, 0)
        if err:
            launches.recover(int(err), stream, lambda f: launch(config, f, params, 0)[0], what)

    run.launches = launches  # type: ignore[attr-defined]  # what it launched where (scripts)
    return run


class _Launches:
    """What a launcher of one ``CUkernel`` passes to ``cuLaunchKernelEx``, per stream: a
    ``CUlaunchConfig`` naming the stream and the function to launch.

    A ``CUkernel`` launches in the stream's context (the current one for the default-stream
    handles 0, 1 and 2), but the driver finds that context's function on every launch, which
    cost 0.6-1.0 us of host time on the H200 (run 35). The context's own ``CUfunction``
    (``cuKernelGetFunction``) launches only on that context's streams, so it is looked up once
    per created stream (``by_stream``: a stream keeps its context) and per current context for
    the default streams (``by_default[handle]``, keyed by ``cuCtxGetCurrent``: 0.08 us). Where
    the stream's context is not the current one, or the driver gives no function, the launch
    uses the ``CUkernel``; a function the driver refuses falls back to it too (``recover``).
    """

    def __init__(
        self, bindings: Any, kernel: int, grid: tuple, block: tuple, smem: int, cluster: int
    ) -> None:
        self.handle, self.smem, self.cluster, self._bindings = kernel, smem, cluster, bindings
        self.geometry = (*(int(v) for v in grid), *(int(v) for v in block))
        self.kernel = bindings.CUfunction(kernel)  # the CUkernel, launchable as a function
        self.current = bindings.cuCtxGetCurrent
        self.by_stream: dict[int, tuple[Any, Any]] = {}
        self.by_default: tuple[dict[Any, tuple[Any, Any]], ...] = ({}, {}, {})
        clusters = f" in clusters of {cluster}" if cluster > 1 else ""
        self.what = f"cuLaunchKernelEx of {grid} x {block}, {smem} B smem{clusters}"

    def resolve(self, stream: int) -> tuple[Any, Any]:
        """The config and function to launch on *stream* in this thread, kept (the cold path)."""
        lib = _lib()
        with _relaxed_capture(lib):
            context = _current_context(lib)
            if not context:
                ensure_context()
                context = _current_context(lib)
            owner = _P(context)
            if stream > 2 and lib.cuStreamGetCtx(stream, ctypes.byref(owner)):
                owner.value = None
            function = None
            if owner.value == context:
                function = _context_function(lib, self.handle, context, self.smem)
            return self._keep(stream, context, self.kernel if function is None else function)

    def recover(self, err: int, stream: int, relaunch: Any, what: str) -> None:
        """After a launch on *stream* failed with *err*: retry in a fresh context when the
        thread had none, else through the ``CUkernel`` (kept for this stream from then on);
        raise ``LaunchError`` when that fails too."""
        lib = _lib()
        if err == _INVALID_CONTEXT:
            ensure_context()
            err = int(relaunch(self.resolve(stream)[1]))
            if not err:
                return
        err = _in_a_context(lambda: relaunch(self.kernel))
        _check(lib, err, what)
        self._keep(stream, _current_context(lib), self.kernel)

    def _keep(self, stream: int, context: int, function: Any) -> tuple[Any, Any]:
        bindings = self._bindings
        config = bindings.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.geometry[:3]
        config.blockDimX, config.blockDimY, config.blockDimZ = self.geometry[3:]
        config.sharedMemBytes, config.hStream = self.smem, bindings.CUstream(stream)
        if self.cluster > 1:
            attr = bindings.CUlaunchAttribute()
            attr.id = bindings.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y = self.cluster, 1
            attr.value.clusterDim.z = 1
            config.attrs, config.numAttrs = [attr], 1
        table: dict[Any, tuple[Any, Any]]
        if stream > 2:
            table, key = self.by_stream, stream
        else:
            table, key = self.by_default[stream], bindings.CUcontext(context)
        with _lock:
            if len(table) >= _KEPT:
                table.clear()
            table[key] = entry = (config, function)
        return entry


def _context_function(lib: Any, kernel: int, context: int, smem: int) -> Any:
    """The current context's ``CUfunction`` of *kernel* allowed *smem* dynamic bytes (kept per
    kernel and context); None when the driver gives none.

    The function is given the limit itself (``cuFuncSetAttribute``): the driver documents that
    a function's own attribute overrides the one ``cuKernelSetAttribute`` sets per device, and
    ``cuKernelGetFunction``'s documentation does not say the latter carries over.
    """
    from cuda.bindings import driver as bindings

    with _lock:
        entry = _functions.get((kernel, context))
        if entry is None:
            function = _P()
            if lib.cuKernelGetFunction(ctypes.byref(function), kernel) or not function.value:
                LAUNCH.debug("no CUfunction of kernel %#x in context %#x", kernel, context)
                return None
            entry = _functions[(kernel, context)] = [function.value, _DEFAULT_DYNAMIC_SMEM]
        if smem > entry[1]:
            if lib.cuFuncSetAttribute(entry[0], _MAX_DYNAMIC_SHARED, smem):
                LAUNCH.debug("cuFuncSetAttribute(%d bytes) refused for %#x", smem, entry[0])
                return None
            entry[1] = smem
    return bindings.CUfunction(entry[0])


def _current_context(lib: Any) -> int:
    context = _P()
    _check(lib, lib.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    return int(context.value or 0)


@contextlib.contextmanager
def _relaxed_capture(lib: Any) -> Iterator[None]:
    """Relaxed stream-capture mode for this thread: a first launch inside a graph capture may
    look up a function (and the driver load it into the context) without breaking the capture."""
    mode = ctypes.c_int(_RELAXED)
    lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
    try:
        yield
    finally:
        lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))


def memset_d32(address: int, value: int, count: int, stream: int) -> None:
    """Set *count* 32-bit words at device *address* to *value*, ordered on the stream whose raw
    handle is *stream* (``cuMemsetD32Async``: a memset node under graph capture). A thread
    without a current context gets its device's primary one, as a launch does."""
    lib = _lib()
    err = _in_a_context(lambda: lib.cuMemsetD32Async(address, value, count, stream))
    _check(lib, err, "cuMemsetD32Async")


def _in_a_context(call: Any) -> int:
    """*call*'s ``CUresult``; when the thread had no current context, *call* again once in its
    device's primary one (``ensure_context``)."""
    err = int(call())
    if err == _INVALID_CONTEXT:
        ensure_context()
        err = int(call())
    return err
