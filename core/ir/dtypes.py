"""Data types of fusion tensors: names, sizes, precision letters and numpy equivalents."""

from __future__ import annotations

import enum
import functools
from typing import Final

import numpy as np


class DType(enum.Enum):
    """A tensor element type. ``char`` is nvFuser's precision letter (H, T, S, D; Q and R are
    the FP8 formats e4m3fn and e5m2, letters nvFuser reserves for them)."""

    float16 = ("float16", "H", 2)
    bfloat16 = ("bfloat16", "T", 2)
    float32 = ("float32", "S", 4)
    float64 = ("float64", "D", 8)
    float8_e4m3fn = ("float8_e4m3fn", "Q", 1)
    float8_e5m2 = ("float8_e5m2", "R", 1)

    def __init__(self, label: str, char: str, itemsize: int) -> None:
        self.label = label
        self.char = char
        self.itemsize = itemsize

    def __repr__(self) -> str:
        return f"mp.{self.label}"

    __str__ = __repr__

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that stores this type (``ml_dtypes.bfloat16`` for bfloat16)."""
        return _numpy_dtypes()[self]

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype kernels take this type's elements as: the raw bits of 16-bit and FP8
        types (``uint16``, ``uint8``: tensor-core instructions take bits), floats as they are."""
        if self.is_narrow:
            return np.dtype(np.uint16 if self.itemsize == 2 else np.uint8)
        return self.numpy

    @property
    def is_half(self) -> bool:
        """True for the 16-bit tensor-core operand types."""
        return self.itemsize == 2

    @property
    def is_float8(self) -> bool:
        """True for the 8-bit tensor-core operand types (Hopper's FP8 wgmma)."""
        return self.itemsize == 1

    @property
    def is_narrow(self) -> bool:
        """True for types narrower than float32: arithmetic on them computes in float32."""
        return self.itemsize < 4

    @property
    def finite_max(self) -> float:
        """The largest finite value (casts to FP8 saturate to it, as ``cvt...satfinite``)."""
        import ml_dtypes

        return float(ml_dtypes.finfo(self.numpy).max)


@functools.cache
def _numpy_dtypes() -> dict[DType, np.dtype]:
    """Each type's numpy dtype. ml_dtypes (bfloat16 and the FP8 formats) is imported here, on
    first use: its import registers its types with numpy and took 0.54 s of the 0.74 s of
    ``import mmaplug`` (``python -X importtime``), which planning never needs."""
    import ml_dtypes

    return {
        DType.float16: np.dtype(np.float16),
        DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
        DType.float32: np.dtype(np.float32),
        DType.float64: np.dtype(np.float64),
        DType.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
        DType.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    }


float16: Final = DType.float16
bfloat16: Final = DType.bfloat16
float32: Final = DType.float32
float64: Final = DType.float64
float8_e4m3fn: Final = DType.float8_e4m3fn
float8_e5m2: Final = DType.float8_e5m2


def promote(a: DType, b: DType) -> DType:
    """The result type of arithmetic on *a* and *b*: types narrower than float32 compute in
    float32, as nvFuser."""
    if a is b and not a.is_narrow:
        return a
    if DType.float64 in (a, b):
        return DType.float64
    return DType.float32
