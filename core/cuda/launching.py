"""Launching generated kernels, shared by the schedulers: compiled overloads with their dynamic
shared-memory limit raised, parameter blocks prepared once, and the driver's launch called directly.

Numba's own launch path re-checks and re-wraps every argument on every call, which costs
hundreds of microseconds of host time; a bound launch patches data pointers into a prepared
parameter block instead. Numba passes a 1-D C-contiguous array argument as seven kernel
parameters (meminfo, parent, nitems, itemsize, data, shape[0], strides[0]) and an int64 or
float32 scalar as one parameter each. Every launch takes the raw handle of the caller's stream.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from ..errors import KernelBuildError
from . import cubin, driver
from .cubin import Binary

__all__ = [
    "ARRAY_SLOTS",
    "BoundKernels",
    "DriverLaunch",
    "KernelJob",
    "KernelParams",
    "compiled_kernel",
    "generated_kernel_jobs",
    "kernel_binary",
    "launch_checked",
    "numba_binary",
]

ARRAY_SLOTS: Final = 7
_DATA: Final = 4
_DEFAULT_DYNAMIC_SMEM: Final = 48 * 1024
_COMPILED: dict[Any, Any] = {}
_compile_lock: Final = threading.RLock()


def simulating() -> bool:
    """Whether Numba's CUDA simulator is on (before Numba is imported: whether it will be)."""
    config = getattr(sys.modules.get("numba"), "config", None)
    if config is None:  # Numba not imported (a disk-cache hit never imports it)
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")
    return bool(config.ENABLE_CUDASIM)


def compiled_kernel(dispatcher: Any, signature: Any, smem: int) -> Any:
    """The compiled overload of *dispatcher* for *signature*, allowed *smem* dynamic bytes.

    None in the simulator (launch through the dispatcher there).
    """
    if simulating():
        return None
    from numba import cuda

    from .pipeline import lean

    device = cuda.get_current_device()
    key = (id(dispatcher), signature, device.id)
    kern = _COMPILED.get(key)
    if kern is None:
        with _compile_lock:  # two threads binding at once compile and configure it once
            kern = _COMPILED.get(key)
            if kern is None:
                with lean(dispatcher.py_func, device.compute_capability):
                    kern = dispatcher.compile(signature)
                if smem > _DEFAULT_DYNAMIC_SMEM:
                    from numba.cuda.cudadrv.driver import binding, driver

                    cufunc = kern._codelibrary.get_cufunc()
                    attrs = binding.CUfunction_attribute
                    attr = attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    driver.cuKernelSetAttribute(attr, smem, cufunc.handle, cufunc.device.id)
                _COMPILED[key] = kern
    return kern


def launch_checked(
    dispatcher: Any, signature: Any, args: list, grid: tuple, block: tuple, stream: int, smem: int
) -> None:
    """Launch through Numba (argument checks on every call; the simulator's path).

    *stream* is a raw ``CUstream`` handle (0: the legacy default stream).
    """
    kern = compiled_kernel(dispatcher, signature, smem)
    if kern is None:
        dispatcher[grid, block, 0, smem](*args)  # the simulator runs every launch in order
        return
    # numba-cuda 0.30 launches through cuda.core, which wants a Stream object, not a handle
    from numba.cuda.cudadrv import driver as nb_driver

    kern.launch(args, grid, block, nb_driver.ExperimentalStream.from_handle(int(stream)), smem)


class KernelParams:
    """A kernel's parameter block: one 8-byte slot per parameter and the void** to them.

    *values*: ints (int64 slots), floats (float32 slots) and ``(address, nitems, itemsize)``
    tuples for 1-D arrays, whose data slots (``pointer_slots``) a ``BoundKernels`` rewrites.
    """

    def __init__(self, values: Sequence[int | float | tuple[int, int, int]]) -> None:
        flat: list[int] = []
        self.pointer_slots: list[int] = []
        for value in values:
            if isinstance(value, tuple):
                address, nitems, itemsize = value
                self.pointer_slots.append(len(flat) + _DATA)
                flat.extend((0, 0, nitems, itemsize, address, nitems, itemsize))
            elif isinstance(value, float):
                flat.append(struct.unpack("<I", struct.pack("<f", value))[0])
            else:
                flat.append(int(value))
        self.slots = (ctypes.c_int64 * len(flat))(*[_signed(v) for v in flat])
        base = ctypes.addressof(self.slots)
        self.ptrs = (ctypes.c_void_p * len(flat))(*[base + 8 * i for i in range(len(flat))])
        self.address = ctypes.addressof(self.ptrs)

    def float_slot(self, slot: int) -> ctypes.c_float:
        """A float32 view of *slot*'s low bytes: ``view.value = x`` writes a scalar parameter."""
        self.slots[slot] = 0
        return ctypes.c_float.from_buffer(self.slots, 8 * slot)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def numba_binary(dispatcher: Any, signature: Any, cc: tuple[int, int]) -> Binary:
    """Compile *dispatcher* for *signature* and compute capability *cc* with Numba: its cubin,
    entry name and parameter slots (``ARRAY_SLOTS`` per array, one per scalar), for the cubin
    cache (``mmaplug.cuda.pipeline.compile_cubin``: no device needed)."""
    from numba import types

    from .pipeline import compile_cubin

    image, entry = compile_cubin(dispatcher, signature, cc)
    slots = sum(ARRAY_SLOTS if isinstance(t, types.Array) else 1 for t in signature.args)
    return Binary(image, entry, slots)


def kernel_binary(kernels: Any, name: str, cc: tuple[int, int]) -> Binary:
    """Kernel *name* (a ``*_gemm`` or split-K reduce kernel) of *kernels* (a scheduler's
    ``GeneratedKernels``) compiled for *cc* as :func:`generated_kernel` loads it (no GPU
    needed): what a kernel dump disassembles, so its SASS is the SASS that runs."""
    return numba_binary(kernels.dispatcher(name), kernels.signatures[name], cc)


class KernelJob(NamedTuple):
    """One generated kernel to build before its first launch (``mmaplug.prebuild``): plain
    values and module-level functions, so it pickles into a worker process. Called, it
    compiles the kernel with Numba for *cc* (no GPU needed) into the cubin that
    :func:`generated_kernel` then loads for the same module, source and name."""

    module: str  # the generated module's name, as the scheduler passes it to generated_kernel
    source: str  # its source, part of the cache key
    name: str  # the ``*_gemm`` or split-K reduce kernel
    cc: tuple[int, int]
    build: Callable[[Any], Any]  # config -> the scheduler's GeneratedKernels
    config: Any

    @property
    def key(self) -> str:
        """The cubin cache's key of the kernel (``cubin.entry_key``)."""
        return cubin.entry_key(self.module, self.source, self.name, cubin.arch(self.cc))

    def __call__(self) -> Binary:
        return kernel_binary(self.build(self.config), self.name, self.cc)


def generated_kernel_jobs(
    scheduler: str, config: Any, source: str, build: Callable[[Any], Any], cc: tuple[int, int]
) -> list[KernelJob]:
    """The kernels a scheduler's launches of *config* load through :func:`generated_kernel`
    (module ``<scheduler>_<config.name>``: ``<scheduler>_gemm`` and, with split-K,
    ``<scheduler>_splitk_reduce``) as jobs building them for *cc* from *source*; none in the
    simulator, which builds no cubin."""
    if simulating():
        return []
    names = [f"{scheduler}_gemm"] + ([f"{scheduler}_splitk_reduce"] if config.splitk > 1 else [])
    module = f"{scheduler}_{config.name}"
    return [KernelJob(module, source, name, cc, build, config) for name in names]


def generated_kernel(
    module: str, source: str, build: Callable[[], Any], name: str, smem: int, slots: int
) -> int:
    """Kernel *name* of a generated module (its ``*_gemm`` or split-K reduce kernel) as a driver
    ``CUkernel`` allowed *smem* bytes: from the cubin cache (no Numba), else compiled by Numba
    from *build()* (the scheduler's ``GeneratedKernels``) and cached. *slots*: its parameter
    block. Both schedulers load their kernels through it."""

    def compile_it() -> Binary:
        return kernel_binary(build(), name, driver.device_attributes()["compute_capability"])

    return cubin.kernel(module, source, name, smem, slots, compile_it)


class DriverLaunch:
    """One loaded kernel (a ``CUkernel`` handle) with fixed grid, block, shared memory,
    parameter block and cluster size; called with a raw stream handle, it is one launch
    (through the ``CUfunction`` of the stream's context: ``driver.kernel_launcher``)."""

    def __init__(
        self,
        kernel: int,
        grid: tuple,
        block: tuple,
        smem: int,
        params: KernelParams,
        cluster: int = 1,
    ) -> None:
        self.params, self.kernel, self.geometry = params, kernel, (grid, block, smem, cluster)
        #: ``run(stream)``: the launch itself (``BoundKernels`` calls it directly)
        self.run = driver.kernel_launcher(kernel, grid, block, smem, params.address, cluster)

    def __call__(self, stream: int) -> None:
        """Launch on the stream whose raw ``CUstream`` handle is *stream*."""
        self.run(stream)


class BoundKernels:
    """Kernel launches bound to one input signature; called with data addresses and scalars.

    *order* says which of the call's addresses go into each parameter block's pointer slots;
    *scalar_slots* which block and slot takes each scalar. *workspace* is the float32 elements
    of scratch the launches need: the caller allocates it (with the framework of the tensors,
    so streams and graph capture order it) and passes its address last. A lock keeps two
    threads from interleaving their patches of the shared parameter blocks.
    """

    def __init__(
        self,
        launches: Sequence[DriverLaunch],
        order: Sequence[tuple[KernelParams, Sequence[int]]],
        scalar_slots: Sequence[tuple[KernelParams, int]],
        workspace: int = 0,
    ) -> None:
        self.launches = tuple(launches)
        self._runs = tuple(getattr(launch, "run", launch) for launch in self.launches)
        self.workspace = workspace
        self._writes: tuple[tuple[Any, slice, slice], ...] = tuple(
            (params.slots, *run)
            for params, which in order
            for run in _runs_of(params.pointer_slots, which)
        )
        self._floats = tuple(params.float_slot(slot) for params, slot in scalar_slots)
        self._lock = threading.Lock()

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float], stream: int) -> None:
        """Launch on data at *addresses* with *scalars* on the stream with handle *stream*."""
        with self._lock:
            for slots, where, taken in self._writes:
                slots[where] = addresses[taken]
            if self._floats:
                for view, value in zip(self._floats, scalars, strict=True):
                    view.value = value
            for run in self._runs:
                run(stream)


def _runs_of(slots: Sequence[int], indices: Sequence[int]) -> list[tuple[slice, slice]]:
    """``(slots, addresses)`` slice pairs writing ``addresses[indices[i]]`` to ``slots[i]``:
    one pair per run of arrays that are adjacent both in the block and in the addresses."""
    if len(slots) != len(indices):
        raise KernelBuildError(
            f"a bound launch maps {len(indices)} addresses to a parameter block with "
            f"{len(slots)} array parameters; the scheduler plugin must give one per array"
        )
    runs: list[tuple[slice, slice]] = []
    start = 0
    for i in range(1, len(slots) + 1):
        if (
            i == len(slots)
            or slots[i] != slots[i - 1] + ARRAY_SLOTS
            or indices[i] != indices[i - 1] + 1
        ):
            first, last = slots[start], slots[i - 1]
            runs.append(
                (slice(first, last + 1, ARRAY_SLOTS), slice(indices[start], indices[i - 1] + 1))
            )
            start = i
    return runs
