"""Host-side TMA tensor maps: the cuTensorMapEncodeTiled limits as messages, and encoding."""

from __future__ import annotations

from typing import Any, Final

import attrs
import numpy as np

from mmaplug.cuda.launching import simulating
from mmaplug.errors import LaunchError, UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.sim.tensormaps import SIM_MAGIC
from mmaplug.sim.tensormaps import lookup as sim_lookup
from mmaplug.sim.tensormaps import register as sim_register

# SIM_MAGIC and sim_lookup: the simulator's maps, which encode makes there (mmaplug.sim.tensormaps)
__all__ = ["MAP_WORDS", "SIM_MAGIC", "TensorMapSpec", "device_address", "encode", "sim_lookup"]

MAP_WORDS: Final = 16  # a CUtensorMap is 128 bytes = 16 uint64, 64-byte aligned in memory
SWIZZLE_BYTES: Final = (0, 32, 64, 128)
MAX_RANK: Final = 5
MAX_DIM: Final = 1 << 32
MAX_STRIDE: Final = 1 << 40
MAX_BOX: Final = 256
ALIGN: Final = 16
# DType -> CUtensorMapDataType value (UINT8 0, FLOAT16 6, FLOAT32 7, FLOAT64 8, BFLOAT16 9);
# TMA copies FP8 bytes as UINT8 (it has no FP8 type and converts nothing).
DATA_TYPES: Final = {
    DType.float16: 6,
    DType.float32: 7,
    DType.float64: 8,
    DType.bfloat16: 9,
    DType.float8_e4m3fn: 0,
    DType.float8_e5m2: 0,
}
# Swizzle bytes -> CUtensorMapSwizzle value.
SWIZZLE_ENUM: Final = {0: 0, 32: 1, 64: 2, 128: 3}
# bytes L2 fetches per request of a box row (CU_TENSOR_MAP_L2_PROMOTION_L2_<n>B); 256 changed
# nothing (BENCHMARKS.md run 227, where scripts/config_probe.py's " l2=256" jobs patch it)
L2_PROMOTION = 128


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@attrs.frozen
class TensorMapSpec:
    """What cuTensorMapEncodeTiled needs besides the address; every array innermost first.

    `dims` are element counts, `strides_bytes` the byte strides of dims 1.. (dim 0 is
    contiguous), `box` the elements copied per dimension, `swizzle` the shared-memory swizzle
    span in bytes (0, 32, 64 or 128; the wgmma descriptor must use the same).
    """

    dtype: DType
    dims: tuple[int, ...] = attrs.field(converter=_ints)
    strides_bytes: tuple[int, ...] = attrs.field(converter=_ints)
    box: tuple[int, ...] = attrs.field(converter=_ints)
    swizzle: int = attrs.field(converter=int)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_bytes(self) -> int:
        """Bytes one box copy moves (what mbarrier_arrive_expect_tx counts, edges included)."""
        return int(np.prod(self.box)) * self.dtype.itemsize

    def violations(self, address: int | None = None) -> tuple[str, ...]:
        """Why TMA cannot use this map (empty when it can); `address` is checked when given."""
        size, found = self.dtype.itemsize, []
        if not 2 <= self.rank <= MAX_RANK:
            found.append(f"rank {self.rank} (dims {self.dims}) is not in 2..{MAX_RANK}")
        if len(self.strides_bytes) != self.rank - 1:
            found.append(
                f"{len(self.strides_bytes)} strides for {self.rank} dims: give the byte strides "
                f"of dims 1..{self.rank - 1} (dim 0 is contiguous)"
            )
        if len(self.box) != self.rank:
            found.append(f"box {self.box} has {len(self.box)} entries for {self.rank} dims")
        for i, d in enumerate(self.dims):
            if not 1 <= d <= MAX_DIM:
                found.append(f"dim {i} has {d} elements; TMA needs 1..2**32")
        for i, s in enumerate(self.strides_bytes, start=1):
            if s % ALIGN or not 0 < s < MAX_STRIDE:
                found.append(
                    f"dim {i} has a stride of {s} bytes; TMA needs a positive multiple of 16 "
                    f"below 2**40 (a leading dimension that is a multiple of {ALIGN // size} "
                    f"{self.dtype.label} elements)"
                )
        for i, b in enumerate(self.box):
            if not 1 <= b <= MAX_BOX:
                found.append(f"box dim {i} is {b} elements; TMA boxes take 1..{MAX_BOX}")
        if self.box and (inner := self.box[0] * size) % ALIGN:
            found.append(f"the inner box row is {inner} bytes; TMA needs a multiple of 16 bytes")
        if self.swizzle not in SWIZZLE_BYTES:
            found.append(f"swizzle {self.swizzle} is not one of {SWIZZLE_BYTES} bytes")
        elif self.swizzle and self.box and self.box[0] * size > self.swizzle:
            found.append(
                f"the inner box row is {self.box[0] * size} bytes, more than the "
                f"{self.swizzle}-byte swizzle span: use at most {self.swizzle // size} elements "
                "per box row"
            )
        if address is not None and int(address) % ALIGN:
            found.append(
                f"the base address {int(address):#x} is not 16-byte aligned, as TMA requires"
            )
        return tuple(found)

    def check(self, address: int | None = None) -> None:
        """Raise UsageError listing every violation."""
        if found := self.violations(address):
            raise UsageError(f"invalid TMA tensor map {self}: " + "; ".join(found))


def encode(spec: TensorMapSpec, address: int) -> np.ndarray:
    """The 128-byte tensor map of the tensor at global `address`, as uint64[16].

    Tiled, interleave none, out-of-bounds elements read as zero, L2 promotion
    ``L2_PROMOTION`` bytes. Copy it to device memory (64-byte aligned) and hand the kernel its
    address. Under Numba's simulator it returns a map the emulated TMA understands (the same
    kernel text runs there): the tensor is then read and written at `address` directly, so it
    must stay alive (a device array).
    """
    if found := spec.violations(address):
        raise LaunchError(f"cannot encode a TMA tensor map for {spec}: " + "; ".join(found))
    if simulating():
        words = np.zeros(MAP_WORDS, dtype=np.uint64)
        named = sim_register(spec, int(address))  # SIM_MAGIC, the registry id
        words[: len(named)] = named
        return words
    return _driver_encode(spec, int(address))


def _driver_encode(spec: TensorMapSpec, address: int) -> np.ndarray:
    from cuda.bindings import driver as drv

    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    err, tmap = drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType(DATA_TYPES[spec.dtype]),
        spec.rank,
        address,
        [u64(d) for d in spec.dims],
        [u64(s) for s in spec.strides_bytes],
        [u32(b) for b in spec.box],
        [u32(1)] * spec.rank,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle(SWIZZLE_ENUM[spec.swizzle]),
        getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_L2_{L2_PROMOTION}B"),
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != drv.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"cuTensorMapEncodeTiled failed with {err!r} for {spec} at {address:#x}")
    return np.array([int(w) for w in tmap.opaque], dtype=np.uint64)


def device_address(arr: Any) -> int:
    """The global address of a device array's first element, for encode.

    Anything with `__cuda_array_interface__` (Numba device arrays, torch CUDA tensors), or a
    device array of Numba's simulator, whose memory is a host numpy array.
    """
    iface = getattr(arr, "__cuda_array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    from mmaplug.sim.threads import host_of

    host = host_of(arr)
    if host is not None:
        return int(host.__array_interface__["data"][0])
    raise UsageError(f"expected a CUDA device array, got {type(arr).__name__}")
