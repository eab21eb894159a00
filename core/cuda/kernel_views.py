"""Device tensors in and out of kernels: torch, CuPy and Numba arrays as flat 1-D views
with element strides (allocation of the caller's kind: ``frameworks``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

import attrs
import numpy as np

from mmaplug.analysis.matmul_analysis import TensorBinding
from mmaplug.analysis.patterns import DimRole
from mmaplug.cuda.frameworks import allocate, kind_of, probe
from mmaplug.cuda.launching import simulating
from mmaplug.errors import LaunchError
from mmaplug.ir.dtypes import DType

__all__ = [
    "DeviceTensor",
    "adapt",
    "allocate",
    "kind_of",
    "probe",
    "require_unit_stride",
    "to_host",
]

_TYPESTR: Final = {
    DType.float16: ("<f2",),
    DType.float32: ("<f4",),
    DType.bfloat16: ("<u2", "<i2"),
    DType.float8_e4m3fn: ("|u1", "|i1"),
    DType.float8_e5m2: ("|u1", "|i1"),
}
# torch dtype names the CUDA array interface has no code for -> the raw type to view them as
_TORCH_BITS: Final = {
    "bfloat16": "int16",
    "float8_e4m3fn": "uint8",
    "float8_e5m2": "uint8",
}


@attrs.frozen(kw_only=True)
class DeviceTensor:
    """A tensor as kernels see it: a 1-D view of its storage and its element strides.

    16-bit types are viewed as ``uint16`` and FP8 as ``uint8`` (the tensor-core instructions
    take raw bits).
    ``role_strides`` maps batch/M/N/K to the element stride of that role's merged dims (0 for a
    role the tensor does not have: it is broadcast along it).
    """

    array: Any = attrs.field(eq=False)
    address: int
    role_strides: dict[DimRole, int] = attrs.field(eq=False)


def _interface(obj: object, binding: TensorBinding) -> dict[str, Any]:
    if kind_of(obj) == "torch":
        torch = sys.modules["torch"]
        if not obj.is_cuda:  # type: ignore[attr-defined]
            raise LaunchError(f"{binding.name}: the torch tensor is on the CPU; move it to CUDA")
        bits = _TORCH_BITS.get(str(obj.dtype).removeprefix("torch."))  # type: ignore[attr-defined]
        if bits is not None:  # CAI has no bf16 or FP8 code
            obj = obj.view(getattr(torch, bits))  # type: ignore[attr-defined]
    try:
        return dict(obj.__cuda_array_interface__)  # type: ignore[attr-defined]
    except (AttributeError, TypeError) as error:
        raise LaunchError(f"{binding.name}: not a CUDA array ({error})") from None


def _adapt_host(obj: np.ndarray, binding: TensorBinding) -> DeviceTensor:
    """Numba's CUDA simulator runs kernels on host arrays: view them the same way."""
    if not simulating():
        raise LaunchError(
            f"{binding.name}: numpy arrays live on the host; pass device tensors (torch CUDA "
            "tensors, CuPy arrays or Numba device arrays)"
        )
    if obj.shape != binding.shape:
        raise LaunchError(
            f"{binding.name}: expected shape {list(binding.shape)}, got {list(obj.shape)}"
        )
    accepted = (
        (binding.dtype.numpy, binding.dtype.storage)
        if binding.dtype.is_narrow
        else (binding.dtype.numpy,)
    )
    if obj.dtype not in accepted:
        raise LaunchError(f"{binding.name}: declared {binding.dtype.label}, got {obj.dtype}")
    # Lay the copy out as the fusion declared it (stride_order), like a device tensor would be.
    stored = np.ascontiguousarray(obj.transpose(binding.alloc_order))  # (the same buffer when
    stored = stored.reshape(obj.shape) if obj.ndim == 0 else stored  # contiguous; 0-d stays 0-d)
    flat = stored.view(binding.dtype.storage).reshape(-1)
    stored_strides = [
        int(np.prod(stored.shape[i + 1 :], dtype=np.int64)) for i in range(stored.ndim)
    ]
    elems = [0] * stored.ndim
    for pos, dim in enumerate(binding.alloc_order):
        elems[dim] = stored_strides[pos]
    return DeviceTensor(
        array=flat, address=stored.ctypes.data, role_strides=_role_strides(binding, elems)
    )


def adapt(obj: object, binding: TensorBinding) -> DeviceTensor:
    """Check *obj* against *binding* (shape, dtype, strides) and view it for a kernel."""
    if kind_of(obj) == "numpy":
        return _adapt_host(obj, binding)  # type: ignore[arg-type]
    desc = _interface(obj, binding)
    shape = tuple(desc["shape"])
    if shape != binding.shape:
        raise LaunchError(
            f"{binding.name}: expected shape {list(binding.shape)}, got {list(shape)}"
        )
    typestr = desc["typestr"]
    if typestr not in _TYPESTR[binding.dtype]:
        raise LaunchError(
            f"{binding.name}: declared {binding.dtype.label}, got an array of type {typestr} "
            f"(accepted: {', '.join(_TYPESTR[binding.dtype])}; bfloat16 and FP8 also as torch "
            "tensors of those dtypes)"
        )
    itemsize = binding.dtype.itemsize
    strides = desc.get("strides")
    if strides is None:
        strides = tuple(
            int(np.prod(shape[i + 1 :], dtype=np.int64)) * itemsize for i in range(len(shape))
        )
    elems = [s // itemsize for s in strides]
    if any(s < 0 or s % itemsize for s in strides):
        raise LaunchError(f"{binding.name}: negative or unaligned strides {list(strides)}")
    address = int(desc["data"][0])
    span = 1 + sum((e - 1) * s for e, s in zip(shape, elems, strict=True))
    flat = {
        "shape": (span,),
        "strides": None,
        "typestr": binding.dtype.storage.str,
        "data": (address, False),
        "version": 3,
    }
    array = FlatView(flat, obj)
    return DeviceTensor(array=array, address=address, role_strides=_role_strides(binding, elems))


class FlatView:
    """The 1-D storage of a device tensor as ``__cuda_array_interface__`` (Numba kernels take
    it as an array argument); it keeps *owner* alive and imports no GPU library."""

    __slots__ = ("__cuda_array_interface__", "_owner", "size")

    def __init__(self, interface: dict[str, Any], owner: object) -> None:
        self.__cuda_array_interface__ = interface
        self.size = int(interface["shape"][0])
        self._owner = owner


def _role_strides(binding: TensorBinding, strides: Sequence[int]) -> dict[DimRole, int]:
    """Merge each role's adjacent dims into one stride; refuse layouts that do not merge."""
    result = {role: 0 for role in DimRole}
    dims = [(r, e, s) for r, e, s in zip(binding.dim_roles, binding.shape, strides, strict=True)]
    for role in DimRole:
        mine = [(e, s) for r, e, s in dims if r is role and e > 1]
        if not mine:
            continue
        for (_, outer_s), (inner_e, inner_s) in zip(mine, mine[1:], strict=False):
            if outer_s != inner_s * inner_e:
                raise LaunchError(
                    f"{binding.name}: its {role.value.upper()} dims are not contiguous with each "
                    f"other (strides {list(strides)}); pass a contiguous tensor"
                )
        result[role] = mine[-1][1]
    return result


def to_host(obj: object) -> np.ndarray:
    """Copy a device tensor of any accepted kind back to a numpy array (tests, demo)."""
    kind = kind_of(obj)
    if kind == "torch":
        torch = sys.modules["torch"]
        name = str(obj.dtype).removeprefix("torch.")  # type: ignore[attr-defined]
        if name in _TORCH_BITS:
            bits = obj.view(getattr(torch, _TORCH_BITS[name])).cpu().numpy()  # type: ignore[attr-defined]
            return bits.view(DType[name].numpy)
        return obj.cpu().numpy()  # type: ignore[attr-defined]
    if kind == "cupy":
        return obj.get()  # type: ignore[attr-defined]
    if kind == "numpy":
        return obj  # type: ignore[return-value]
    return obj.copy_to_host()  # type: ignore[attr-defined]


def require_unit_stride(what: str, tensor: DeviceTensor, role: DimRole) -> None:
    """Raise LaunchError unless *tensor* is contiguous along *role* (as its fusion declared)."""
    if tensor.role_strides[role] not in (0, 1):
        raise LaunchError(
            f"{what} has stride {tensor.role_strides[role]} along {role.value.upper()}, which "
            "the fusion declared innermost; pass a tensor with that dim contiguous (as declared "
            "by stride_order), e.g. .contiguous()"
        )
