"""The CUDA driver without Numba (docs/decisions.md, "Cold start"): load, launch, allocate."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Final

from ..errors import LaunchError

__all__ = [
    "DeviceBuffer",
    "copy_to_device",
    "device_attributes",
    "ensure_context",
    "kernel_launcher",
    "load_kernel",
    "set_max_dynamic_smem",
]

_SUCCESS: Final = 0
_INVALID_CONTEXT: Final = 201
_MAX_DYNAMIC_SHARED: Final = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_NON_BLOCKING: Final = 1  # CU_STREAM_NON_BLOCKING
_RELAXED: Final = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
#: cuDeviceGetAttribute codes for what ``mmaplug.device`` reads.
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
    "cuLaunchKernel": (_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P),
    "cuMemAlloc_v2": (ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t),
    "cuMemFree_v2": (ctypes.c_uint64,),
    "cuMemcpyHtoDAsync_v2": (ctypes.c_uint64, _P, ctypes.c_size_t, _P),
    "cuStreamCreate": (ctypes.POINTER(_P), _U),
    "cuStreamSynchronize": (_P,),
    "cuThreadExchangeStreamCaptureMode": (ctypes.POINTER(ctypes.c_int),),
}
_lock: Final = threading.Lock()
_state: dict[str, Any] = {}  # "lib": the loaded libcuda, "upload": a private stream
_smem_set: set[tuple[int, int, int]] = set()  # (kernel, device, bytes) already allowed


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
                        f"the CUDA driver (libcuda.so.1) cannot be loaded ({error}); install an "
                        "NVIDIA driver, or run under Numba's simulator (NUMBA_ENABLE_CUDASIM=1)"
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
                _check(lib, lib.cuInit(0), "cuInit")
                _state["lib"] = lib
    return lib


def _check(lib: Any, err: int, what: str) -> None:
    if err != _SUCCESS:
        name = ctypes.c_char_p()
        found = name.value if lib.cuGetErrorName(err, ctypes.byref(name)) == _SUCCESS else None
        raise LaunchError(f"{what} failed: {found.decode() if found else 'CUresult'} ({err})")


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


def kernel_launcher(
    kernel: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int = 1
) -> Any:
    """A function ``launch(stream)`` running *kernel* with the parameter block at *params*.

    The launch goes through ``cuda.bindings`` (its Cython wrapper costs 0.4 us a call against
    a stub libcuda, ctypes 1.2-1.6 us: docs/decisions.md); a thread without a current context
    gets its device's primary one and the launch is retried once. With *cluster* > 1 the grid
    runs as clusters of that many CTAs along x (``cuLaunchKernelEx``).
    """
    from cuda.bindings import driver as bindings

    if cluster > 1:
        return _cluster_launcher(bindings, kernel, grid, block, smem, params, cluster)
    launch, function = bindings.cuLaunchKernel, bindings.CUfunction(kernel)
    gx, gy, gz, bx, by, bz = (int(v) for v in (*grid, *block))

    def run(stream: int) -> None:
        (err,) = launch(function, gx, gy, gz, bx, by, bz, smem, stream, params, 0)
        if err:
            if int(err) == _INVALID_CONTEXT:
                ensure_context()
                (err,) = launch(function, gx, gy, gz, bx, by, bz, smem, stream, params, 0)
            if err:
                _check(_lib(), int(err), f"cuLaunchKernel of {grid} x {block}, {smem} B smem")

    return run


def _cluster_launcher(
    bindings: Any, kernel: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int
) -> Any:
    """``kernel_launcher`` for clusters of *cluster* CTAs: one prepared ``CUlaunchConfig``."""
    config = bindings.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = (int(v) for v in grid)
    config.blockDimX, config.blockDimY, config.blockDimZ = (int(v) for v in block)
    config.sharedMemBytes = smem
    attr = bindings.CUlaunchAttribute()
    attr.id = bindings.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
    config.attrs, config.numAttrs = [attr], 1
    function, lock = bindings.CUfunction(kernel), threading.Lock()

    def run(stream: int) -> None:
        with lock:  # the prepared config carries the stream
            config.hStream = bindings.CUstream(stream)
            (err,) = bindings.cuLaunchKernelEx(config, function, params, 0)
            if err and int(err) == _INVALID_CONTEXT:
                ensure_context()
                (err,) = bindings.cuLaunchKernelEx(config, function, params, 0)
        if err:
            _check(
                _lib(), int(err), f"cuLaunchKernelEx of {grid} x {block} in clusters of {cluster}"
            )

    return run


class DeviceBuffer:
    """A 1-D array of *size* elements of numpy type *typestr* in device memory (``cuMemAlloc``),
    freed when the object goes; Numba kernels take it (``__cuda_array_interface__``)."""

    def __init__(self, size: int, typestr: str) -> None:
        lib = _lib()
        ensure_context()
        nbytes = size * int(typestr[2:])
        address = ctypes.c_uint64()
        _check(lib, lib.cuMemAlloc_v2(ctypes.byref(address), max(nbytes, 1)), "cuMemAlloc")
        self.address, self.nbytes, self._lib = int(address.value), nbytes, lib
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "strides": None,
            "typestr": typestr,
            "data": (self.address, False),
            "version": 3,
        }

    def __del__(self) -> None:
        """Free it in relaxed capture mode: a graph captured by another thread stays valid."""
        if getattr(self, "address", 0):
            mode = ctypes.c_int(_RELAXED)
            self._lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
            self._lib.cuMemFree_v2(self.address)
            self._lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
            self.address = 0


def copy_to_device(address: int, host: Any) -> None:
    """Copy the contiguous numpy array *host* to *address*, complete when this returns.

    The copy runs on a private non-blocking stream, so no graph capture records it.
    """
    lib = _lib()
    stream = _state.get("upload")
    if stream is None:
        with _lock:
            if (stream := _state.get("upload")) is None:
                created = _P()
                _check(
                    lib, lib.cuStreamCreate(ctypes.byref(created), _NON_BLOCKING), "cuStreamCreate"
                )
                stream = _state["upload"] = created
    _check(
        lib,
        lib.cuMemcpyHtoDAsync_v2(address, host.ctypes.data, host.nbytes, stream),
        "cuMemcpyHtoDAsync",
    )
    _check(lib, lib.cuStreamSynchronize(stream), "cuStreamSynchronize")
