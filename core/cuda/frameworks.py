"""The caller's tensor framework on execute's hot path: probing tensors, allocating like them.

Imports no GPU library: torch and CuPy are taken from ``sys.modules`` (a caller passing their
tensors has imported them), Numba only when a Numba device array is allocated.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from mmaplug.cuda.streams import current_stream
from mmaplug.errors import LaunchError
from mmaplug.ir.dtypes import DType

__all__ = ["allocate", "allocator", "kind_of", "probe", "probe_all", "stream_reader"]

_TORCH_TYPES: Final[set[type]] = set()  # tensor classes of torch seen so far (probe's fast check)


def kind_of(obj: object) -> str:
    """``"torch"``, ``"cupy"``, ``"numba"`` or ``"numpy"`` (simulator only)."""
    module = type(obj).__module__.split(".")[0]
    if module in ("torch", "cupy"):
        return module
    if module == "numpy":
        return "numpy"
    if hasattr(obj, "__cuda_array_interface__"):
        return "numba"
    raise LaunchError(
        "inputs must be torch tensors, CuPy arrays or Numba device arrays; "
        f"got {type(obj).__name__}"
    )


def probe(obj: object) -> tuple[int, tuple]:
    """*obj*'s data address and what a launch bound to it depends on (its signature).

    The signature holds kind, shape, strides, dtype, device and the address modulo 16; it
    costs a few attribute reads, so ``execute`` looks up its bound launch with it every call.
    """
    cls = type(obj)
    if cls in _TORCH_TYPES or cls.__module__.startswith("torch"):
        _TORCH_TYPES.add(cls)
        t: Any = obj
        ptr = t.data_ptr()
        return ptr, (t.shape, t.stride(), t.dtype, t.get_device(), ptr & 15)
    desc = getattr(obj, "__cuda_array_interface__", None)
    if desc is None:
        return 0, (type(obj), id(obj))  # never bound: the slow path validates and reports it
    ptr = desc["data"][0]
    return ptr, (type(obj), desc["shape"], desc.get("strides"), desc["typestr"], ptr & 15)


def probe_all(inputs: Sequence[object], positions: Sequence[int]) -> tuple[tuple, list[int]]:
    """``probe`` of ``inputs[i]`` for each of *positions*: the signatures as one tuple (the
    bound launch's key) and the data addresses (execute's hot path: torch tensors inline)."""
    signatures: list[tuple] = []
    addresses: list[int] = []
    for i in positions:
        t: Any = inputs[i]
        if type(t) in _TORCH_TYPES:
            ptr = t.data_ptr()
            signatures.append((t.shape, t.stride(), t.dtype, t.get_device(), ptr & 15))
        else:
            ptr, signature = probe(t)
            signatures.append(signature)
        addresses.append(ptr)
    return tuple(signatures), addresses


def allocator(like: object, shape: Sequence[int], dtype: DType) -> Callable[[], object]:
    """A function allocating a tensor like :func:`allocate` on the framework's current stream.

    Built once per bound launch; it holds *like*'s framework and device, never *like* itself.
    """
    kind, shape = kind_of(like), tuple(shape)
    if kind == "torch":
        # empty_strided with the device's index: 2.3 us a call on the H200 against 4.8 us for
        # torch.empty(shape, device=<torch.device>) (run 37, scripts/host_overhead.py)
        torch = sys.modules["torch"]
        index = like.get_device()  # type: ignore[attr-defined]
        where = index if index >= 0 else like.device  # type: ignore[attr-defined]
        return functools.partial(
            torch.empty_strided, shape, contiguous_strides(shape),
            dtype=_torch_dtype(torch, dtype), device=where,
        )  # fmt: skip
    if kind == "cupy":
        return functools.partial(sys.modules["cupy"].empty, shape, dtype=_numpy_dtype(dtype))
    if kind == "numpy":  # the simulator: host arrays, poisoned so unwritten elements show
        return functools.partial(np.full, shape, np.nan, dtype=dtype.numpy)
    from numba import cuda

    return functools.partial(cuda.device_array, shape, dtype=_numpy_dtype(dtype))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of *shape*, as torch gives a contiguous tensor (a size-0 or
    size-1 dim counts as 1)."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


def allocate(like: object, shape: Sequence[int], dtype: DType, stream: int | None = None) -> object:
    """A new uninitialised tensor of the caller's kind (``like``'s), on its device.

    torch and CuPy allocate from their own pools on their current stream, or on *stream* (a raw
    handle the launch will use) when that is another one, so their stream-ordered reuse and
    graph-capture pools see the kernel's stream.
    """
    kind = kind_of(like)
    shape = tuple(shape)
    if stream is None or kind in ("numpy", "numba") or stream == current_stream(kind, like):
        return allocator(like, shape, dtype)()
    if kind == "torch":
        torch = sys.modules["torch"]
        device = like.device  # type: ignore[attr-defined]
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device)):
            return torch.empty(shape, dtype=_torch_dtype(torch, dtype), device=device)
    cupy = sys.modules["cupy"]
    with cupy.cuda.ExternalStream(stream):
        return cupy.empty(shape, dtype=_numpy_dtype(dtype))


def stream_reader(kind: str, like: object) -> Callable[[], int]:
    """A function returning the handle of the framework's current stream for tensors like *like*.

    torch's is read per device (*like*'s); built once per bound launch.
    """
    if kind == "torch":
        torch = sys.modules["torch"]
        index = like.get_device()  # type: ignore[attr-defined]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return functools.partial(raw, index)
        return lambda: int(torch.cuda.current_stream(index).cuda_stream)
    return functools.partial(current_stream, kind, None)


def _torch_dtype(torch: Any, dtype: DType) -> Any:
    return getattr(torch, dtype.label)  # torch names every mmaplug dtype alike


def _numpy_dtype(dtype: DType) -> Any:
    """CuPy and Numba arrays hold float16 as float16, bfloat16 as its uint16 bits and FP8 as
    its uint8 bits."""
    return np.float16 if dtype is DType.float16 else dtype.storage
