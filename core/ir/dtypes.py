"""Data types of fusion tensors: names, sizes, precision letters and numpy equivalents."""

from __future__ import annotations

import enum
from typing import Final

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """A tensor element type. ``char`` is nvFuser's precision letter (H, T, S, D)."""

    float16 = ("float16", "H", 2)
    bfloat16 = ("bfloat16", "T", 2)
    float32 = ("float32", "S", 4)
    float64 = ("float64", "D", 8)

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
        return _NUMPY[self]

    @property
    def is_half(self) -> bool:
        """True for the 16-bit tensor-core operand types."""
        return self.itemsize == 2


_NUMPY: Final = {
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}

float16: Final = DType.float16
bfloat16: Final = DType.bfloat16
float32: Final = DType.float32
float64: Final = DType.float64


def promote(a: DType, b: DType) -> DType:
    """The result type of arithmetic on *a* and *b*: half types compute in float32, as nvFuser."""
    if a is b and not a.is_half:
        return a
    if DType.float64 in (a, b):
        return DType.float64
    return DType.float32
