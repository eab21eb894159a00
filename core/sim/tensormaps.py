"""Tensor maps under Numba's CUDA simulator: ``mmaplug.cuda.tensormap.encode`` registers the
spec and address here and returns a map whose first two words name them (``SIM_MAGIC``, then a
registry id); the emulated TMA looks them up from the map's address (``lookup_at``)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Final, Protocol

import numpy as np

from mmaplug.errors import UsageError

__all__ = ["SIM_MAGIC", "MapSpec", "lookup", "lookup_at", "register"]

SIM_MAGIC: Final = 0x4D4D504C54414D50  # "PMATLPMM"
SIM_WORDS: Final = 2  # the words of a map that name it: SIM_MAGIC, the registry id


class MapSpec(Protocol):
    """What the emulated TMA reads of a map's spec (``mmaplug.cuda.tensormap.TensorMapSpec``)."""

    @property
    def dtype(self) -> Any: ...  # with `itemsize`
    @property
    def dims(self) -> tuple[int, ...]: ...
    @property
    def strides_bytes(self) -> tuple[int, ...]: ...
    @property
    def box(self) -> tuple[int, ...]: ...
    @property
    def swizzle(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def box_bytes(self) -> int: ...


_MAPS: dict[int, tuple[MapSpec, int]] = {}
_IDS: dict[tuple[MapSpec, int], int] = {}
_LOCK = threading.Lock()


def register(spec: MapSpec, address: int) -> tuple[int, int]:
    """The words that name the map of `spec` at `address` (the same for the same pair)."""
    with _LOCK:
        key = (spec, address)
        ident = _IDS.setdefault(key, len(_IDS) + 1)
        _MAPS[ident] = key
    return SIM_MAGIC, ident


def lookup(words: Any) -> tuple[MapSpec, int]:
    """The (spec, address) behind a simulator map's words; UsageError for anything else."""
    magic, ident = int(words[0]), int(words[1])
    if magic != SIM_MAGIC or ident not in _MAPS:
        raise UsageError(
            f"the tensor map starts with {magic:#x}, {ident}: not a map made by "
            "mmaplug.cuda.tensormap.encode under the simulator (pass global_addr of its copy)"
        )
    return _MAPS[ident]


def lookup_at(address: Any) -> tuple[MapSpec, int]:
    """``lookup`` of the map at (host) address `address`."""
    words = (ctypes.c_uint64 * SIM_WORDS).from_address(int(address))
    return lookup(np.frombuffer(memoryview(words), np.uint64))
