"""Launching generated kernels, shared by the schedulers: cubins loaded with their dynamic
shared-memory limit raised, parameter blocks prepared once, and the driver's launch called directly.

Numba's own launch path re-checks and re-wraps every argument on every call, which costs
hundreds of microseconds of host time; a bound launch patches data pointers into a prepared
parameter block instead. Numba passes a 1-D C-contiguous array argument as seven kernel
parameters (meminfo, parent, nitems, itemsize, data, shape[0], strides[0]) and an int64 or
float32 scalar as one parameter each. Every launch takes the raw handle of the caller's stream.
The checked path (``MMAPLUG_FAST_LAUNCH=0``) launches the same cubins with a parameter block
made per call from arguments checked against the kernel's Numba signature.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import numpy as np

from mmaplug.cuda import cubin, driver
from mmaplug.cuda.cubin import Binary
from mmaplug.cuda.grid_constant import ARRAY_SLOTS, DATA_SLOT, argument_names
from mmaplug.errors import KernelBuildError, LaunchError

__all__ = [
    "ARRAY_SLOTS",
    "DATA_SLOT",
    "BoundKernels",
    "ByValue",
    "Value",
    "DriverLaunch",
    "KernelJob",
    "KernelParams",
    "generated_kernel_jobs",
    "kernel_arguments",
    "kernel_binary",
    "launch_checked",
    "numba_binary",
    "resident_grid",
    "zero_words",
]


class ByValue(NamedTuple):
    """An array argument the kernel takes by value (``mmaplug.cuda.grid_constant``): its
    *nbytes* bytes go into the parameter space where its data pointer would be. *words*: a
    C-contiguous host array of those bytes; None where each call points at its own
    (``BoundKernels``: a bound launch's tensor maps)."""

    nbytes: int
    words: Any = None


_INT64: Final = (-(1 << 63), 1 << 63)


def simulating() -> bool:
    """Whether Numba's CUDA simulator is on (before Numba is imported: whether it will be)."""
    config = getattr(sys.modules.get("numba"), "config", None)
    if config is None:  # Numba not imported (a disk-cache hit never imports it)
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")
    return bool(config.ENABLE_CUDASIM)


def launch_checked(
    kernels: Any,
    name: str,
    args: Sequence[Any],
    grid: tuple,
    block: tuple,
    stream: int,
    smem: int,
    cluster: int = 1,
    persistent: bool = False,
) -> None:
    """Launch kernel *name* of *kernels* (a scheduler's ``GeneratedKernels``) once on *args*,
    each checked against the kernel's Numba signature (:func:`kernel_arguments`): the path of
    ``MMAPLUG_FAST_LAUNCH=0`` and of the simulator.

    Outside the simulator the kernel is the cubin the bound launches load
    (:func:`generated_kernel`: the cubin cache, else built with Numba) and the arguments go into
    a fresh parameter block, launched through the driver on the raw ``CUstream`` handle
    *stream* (0: the legacy default stream) in clusters of *cluster* CTAs along x (a
    *persistent* grid of clusters cut to those the device runs at once:
    :func:`resident_grid`). The simulator launches the dispatcher (every launch runs in order;
    the caller arranges its clusters).
    """
    dispatcher = kernels.dispatcher(name)
    names = argument_names(getattr(dispatcher, "py_func", None))
    by_value = kernels.by_value.get(name)
    values = kernel_arguments(name, kernels.signatures[name], args, names, by_value)
    if simulating():
        from mmaplug.sim.simulator import in_place, simulated_launch

        with simulated_launch():  # the simulator's patches, for this launch only
            dispatcher[grid, block, 0, smem](*in_place(list(args)))
        return
    params = KernelParams(values)
    kernel = generated_kernel(
        kernels.module, kernels.source, lambda: kernels, name, smem, len(params.slots)
    )
    if persistent:
        grid = resident_grid(kernel, grid, block, smem, cluster)
    DriverLaunch(kernel, grid, block, smem, params, cluster)(stream)


def resident_grid(kernel: int, grid: tuple, block: tuple, smem: int, cluster: int) -> tuple:
    """*grid* of a persistent kernel launched in clusters of *cluster* CTAs, cut to the
    clusters the device runs at once (``driver.max_active_clusters``): the clusters stride
    over the work units, so fewer of them do all the work, where a cluster past the resident
    ones would run its units after the others finished theirs (a second wave)."""
    if cluster == 1:
        return grid
    resident = driver.max_active_clusters(kernel, block, smem, cluster)
    if not resident or grid[0] // cluster <= resident:
        return grid
    return (resident * cluster, *grid[1:])


def zero_words(tensors: Sequence[Any], stream: int) -> None:
    """Zero the first 32-bit word of each of *tensors* (``DeviceTensor`` views) on the stream
    with raw handle *stream*, before a kernel reduces into it (an amax output: kernels fold
    their maxima in with ``red.global.max``, so it must start at 0.0 whatever the allocator
    left there). The simulator's host arrays are written at once (its launches are in order)."""
    for tensor in tensors:
        if simulating():
            np.asarray(tensor.array).view(np.uint32)[0] = 0
        else:
            driver.memset_d32(tensor.address, 0, 1, stream)


def kernel_arguments(
    kernel: str,
    signature: Any,
    args: Sequence[Any],
    names: Sequence[str] = (),
    by_value: Mapping[str, int] | None = None,
) -> list[Value]:
    """*args* of *kernel* as :class:`KernelParams` values, each checked against *signature*
    (its Numba ``void(...)``): an array parameter takes a 1-D C-contiguous device array of its
    dtype (``__cuda_array_interface__``; a host array under the simulator) as ``(address,
    nitems, itemsize)``, an int64 one a Python or numpy integer, a float32 one a Python or
    numpy float; an array the kernel takes *by_value* (name -> bytes) a C-contiguous host
    array of those bytes, passed as :class:`ByValue`. ``LaunchError`` names the parameter
    (position, and name from *names*), what was given and what it takes."""
    from numba import types

    params = signature.args
    if len(args) != len(params):
        raise LaunchError(
            f"kernel {kernel} takes {len(params)} arguments ({signature}), got {len(args)}; the "
            "scheduler plugin must pass one per parameter"
        )
    values: list[Value] = []
    by_value = by_value or {}
    for i, (value, param) in enumerate(zip(args, params, strict=True)):
        where = f"kernel {kernel} parameter {i}" + (f" ({names[i]})" if i < len(names) else "")
        if i < len(names) and names[i] in by_value and not simulating():
            values.append(_by_value_argument(where, value, by_value[names[i]]))
        elif isinstance(param, types.Array) and param.ndim == 1:
            values.append(_array_argument(where, value, param))
        elif isinstance(param, types.Integer) and param.bitwidth == 64 and param.signed:
            if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_):
                raise LaunchError(f"{where}: given {_given(value)}, expected an int64 integer")
            if not _INT64[0] <= int(value) < _INT64[1]:
                raise LaunchError(f"{where}: given {int(value)}, outside int64's range")
            values.append(int(value))
        elif isinstance(param, types.Float) and param.bitwidth == 32:
            if not isinstance(value, float | np.floating):
                raise LaunchError(f"{where}: given {_given(value)}, expected a float32 number")
            values.append(float(value))
        else:
            raise KernelBuildError(
                f"{where} is of type {param}; the checked launch passes 1-D arrays, int64 and "
                "float32 only (generate kernels with those parameter types)"
            )
    return values


def _by_value_argument(where: str, value: Any, nbytes: int) -> ByValue:
    """*value*, a host array of the *nbytes* bytes a kernel takes by value, as :class:`ByValue`."""
    if not isinstance(value, np.ndarray) or not value.flags.c_contiguous or value.nbytes != nbytes:
        raise LaunchError(
            f"{where}: given {_given(value)}, expected a C-contiguous host array of {nbytes} "
            "bytes (the kernel takes them by value)"
        )
    return ByValue(nbytes, value)


def _array_argument(where: str, value: Any, param: Any) -> tuple[int, int, int]:
    """``(address, nitems, itemsize)`` of *value*, checked against Numba array type *param*."""
    from numba.np.numpy_support import as_dtype

    dtype = as_dtype(param.dtype)
    layout = {"C": "C-contiguous ", "F": "F-contiguous "}.get(param.layout, "")
    expected = f"a {param.ndim}-D {layout}{dtype} device array"
    face = getattr(value, "__cuda_array_interface__", None)
    if face is None and simulating():  # the simulator's arrays live on the host
        face = getattr(value, "__array_interface__", None)
    if face is None:
        raise LaunchError(f"{where}: given {_given(value)}, expected {expected}")
    shape, given_dtype = tuple(face["shape"]), np.dtype(face["typestr"])
    strides = face.get("strides")
    contiguous = strides is None or all(
        n <= 1 or s == given_dtype.itemsize * int(np.prod(shape[j + 1 :], dtype=np.int64))
        for j, (n, s) in enumerate(zip(shape, strides, strict=True))
    )
    if given_dtype != dtype or len(shape) != param.ndim or (param.layout == "C" and not contiguous):
        kind = "" if contiguous else " non-contiguous (strides " + str(list(strides)) + ")"
        raise LaunchError(
            f"{where}: given a{kind} {len(shape)}-D {given_dtype} array of shape {list(shape)}, "
            f"expected {expected}"
        )
    nitems = int(np.prod(shape, dtype=np.int64))
    return int(face["data"][0] or 0), nitems, given_dtype.itemsize


def _given(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


#: A kernel argument as :class:`KernelParams` takes it.
Value = int | float | tuple[int, int, int] | ByValue


class KernelParams:
    """A kernel's parameter block: one 8-byte slot per parameter and the void** to them.

    *values*: ints (int64 slots), floats (float32 slots), ``(address, nitems, itemsize)``
    tuples for 1-D arrays, whose data slots (``pointer_slots``) a ``BoundKernels`` rewrites,
    and :class:`ByValue` arrays, whose data slot's pointer points at their bytes instead
    (``by_value_slots``; until a call points it elsewhere, at zeroed bytes of their size).
    """

    def __init__(self, values: Sequence[Value]) -> None:
        flat: list[int] = []
        self.pointer_slots: list[int] = []
        self.by_value_slots: list[int] = []
        held: list[tuple[int, Any]] = []
        for value in values:
            if isinstance(value, ByValue):
                words = value.nbytes // 8
                self.by_value_slots.append(len(flat) + DATA_SLOT)
                own = np.zeros(words, np.uint64) if value.words is None else value.words
                held.append((len(flat) + DATA_SLOT, own))
                flat.extend((0, 0, words, 8, 0, words, 8))
            elif isinstance(value, tuple):
                address, nitems, itemsize = value
                self.pointer_slots.append(len(flat) + DATA_SLOT)
                flat.extend((0, 0, nitems, itemsize, address, nitems, itemsize))
            elif isinstance(value, float):
                flat.append(struct.unpack("<I", struct.pack("<f", value))[0])
            else:
                flat.append(int(value))
        self.slots = (ctypes.c_int64 * len(flat))(*[_signed(v) for v in flat])
        base = ctypes.addressof(self.slots)
        self.ptrs = (ctypes.c_void_p * len(flat))(*[base + 8 * i for i in range(len(flat))])
        self.address = ctypes.addressof(self.ptrs)
        self._held = held  # the bytes the by-value pointers point at, alive with the block
        for slot, words in held:
            self.ptrs[slot] = words.ctypes.data

    def float_slot(self, slot: int) -> ctypes.c_float:
        """A float32 view of *slot*'s low bytes: ``view.value = x`` writes a scalar parameter."""
        self.slots[slot] = 0
        return ctypes.c_float.from_buffer(self.slots, 8 * slot)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def numba_binary(
    dispatcher: Any, signature: Any, cc: tuple[int, int], by_value: dict[str, int] | None = None
) -> Binary:
    """Compile *dispatcher* for *signature* and compute capability *cc* with Numba (its
    *by_value* arguments passed so): its cubin, entry name and parameter slots
    (``ARRAY_SLOTS`` per array, one per scalar), for the cubin cache
    (``mmaplug.cuda.pipeline.compile_cubin``: no device needed)."""
    from numba import types

    from mmaplug.cuda.pipeline import compile_cubin

    image, entry = compile_cubin(dispatcher, signature, cc, by_value)
    slots = sum(ARRAY_SLOTS if isinstance(t, types.Array) else 1 for t in signature.args)
    return Binary(image, entry, slots)


def kernel_binary(kernels: Any, name: str, cc: tuple[int, int]) -> Binary:
    """Kernel *name* (a ``*_gemm`` or split-K reduce kernel) of *kernels* (a scheduler's
    ``GeneratedKernels``) compiled for *cc* as :func:`generated_kernel` loads it (no GPU
    needed): what a kernel dump disassembles, so its SASS is the SASS that runs."""
    by_value = kernels.by_value.get(name)
    return numba_binary(kernels.dispatcher(name), kernels.signatures[name], cc, by_value)


class KernelJob(NamedTuple):
    """One generated kernel to build before its first launch (``mp.prebuild``): plain
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
    (module ``config.kernel_name``: ``<scheduler>_gemm`` and, with split-K through a
    workspace (``config.workspace_splitk``), ``<scheduler>_splitk_reduce``) as jobs building
    them for *cc* from *source*; none in the simulator, which builds no cubin."""
    if simulating():
        return []
    names = [f"{scheduler}_gemm"] + (
        [f"{scheduler}_splitk_reduce"] if config.workspace_splitk else []
    )
    return [KernelJob(config.kernel_name, source, name, cc, build, config) for name in names]


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
    so streams and graph capture order it) and passes its address last. *zeroed*: which of
    the call's addresses get their first 32-bit word zeroed on the stream before the launches
    (amax outputs, see :func:`zero_words`); *workspace_zeroed*: how many 32-bit words at the
    workspace's start are zeroed so (stream-K's counters). A lock keeps two threads from
    interleaving their patches of the shared parameter blocks.
    """

    def __init__(
        self,
        launches: Sequence[DriverLaunch],
        order: Sequence[tuple[KernelParams, Sequence[int]]],
        scalar_slots: Sequence[tuple[KernelParams, int]],
        workspace: int = 0,
        zeroed: Sequence[int] = (),
        workspace_zeroed: int = 0,
    ) -> None:
        self.launches = tuple(launches)
        self._zeroed = tuple(zeroed)
        self._workspace_zeroed = workspace_zeroed
        self._runs = tuple(getattr(launch, "run", launch) for launch in self.launches)
        self.workspace = workspace
        self._writes: tuple[tuple[Any, slice, slice], ...] = tuple(
            (params.slots, *run)
            for params, which in order
            for run in _runs_of(params.pointer_slots, which)
        )
        self._floats = tuple(params.float_slot(slot) for params, slot in scalar_slots)
        #: the by-value slots of every block, in launch order: a call's *by_value* host
        #: addresses, one each
        blocks = [getattr(launch, "params", None) for launch in self.launches]
        self._by_value = tuple(
            (params.ptrs, slot) for params in blocks if params for slot in params.by_value_slots
        )
        self._lock = threading.Lock()

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float], stream: int) -> None:
        """Launch on data at *addresses* with *scalars* on the stream with handle *stream*."""
        self._launch(addresses, scalars, stream, ())

    def _launch(
        self,
        addresses: Sequence[int],
        scalars: Sequence[float],
        stream: int,
        by_value: Sequence[int],
    ) -> None:
        """``__call__``, the by-value arguments' bytes at the host addresses *by_value*, one
        per by-value slot of the blocks (read when the launch is queued: the caller keeps them
        alive until this returns)."""
        with self._lock:
            for (ptrs, slot), address in zip(self._by_value, by_value, strict=True):
                ptrs[slot] = address
            for slots, where, taken in self._writes:
                slots[where] = addresses[taken]
            if self._floats:
                for view, value in zip(self._floats, scalars, strict=True):
                    view.value = value
            for i in self._zeroed:
                driver.memset_d32(addresses[i], 0, 1, stream)
            if self._workspace_zeroed:  # (the workspace's address comes last)
                driver.memset_d32(addresses[-1], 0, self._workspace_zeroed, stream)
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
