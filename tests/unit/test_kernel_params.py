"""The bound launcher's parameter block: Numba's kernel ABI, laid out without its launch path."""

from __future__ import annotations

import ctypes
import struct

from mmaplug.cuda.launching import BoundKernels, KernelParams


def test_array_becomes_numbas_seven_parameters() -> None:
    """A 1-D array is meminfo, parent, nitems, itemsize, data, shape[0], strides[0] (bytes)."""
    params = KernelParams([(0xDEAD00, 1000, 2)])
    assert list(params.slots) == [0, 0, 1000, 2, 0xDEAD00, 1000, 2]
    assert params.pointer_slots == [4]


def test_scalars_follow_in_order_and_floats_are_float32_bits() -> None:
    """int64 scalars are stored as is; float32 scalars as their 4-byte pattern in the low bytes."""
    params = KernelParams([(16, 8, 4), 7, -1.5, 3])
    assert params.slots[7] == 7
    assert struct.unpack("<f", struct.pack("<I", params.slots[8] & 0xFFFFFFFF))[0] == -1.5
    assert params.slots[9] == 3


def test_bound_kernels_rewrite_only_data_pointers_and_scalars() -> None:
    """A bound launch writes the call's addresses into the data slots and the scalar in float32."""
    params = KernelParams([(0, 10, 2), 5, (0, 20, 4), 0.0])
    seen = []
    launch = type("Launch", (), {"__call__": lambda self, stream: seen.append(list(params.slots))})
    BoundKernels([launch()], [(params, [1, 0])], [(params, 15)])([0x1000, 0x2000], [2.5], 7)
    slots = seen[0]
    assert slots[4] == 0x2000 and slots[12] == 0x1000
    assert slots[2] == 10 and slots[10] == 20 and slots[7] == 5
    assert struct.unpack("<f", struct.pack("<I", slots[15] & 0xFFFFFFFF))[0] == 2.5


def test_pointer_table_points_at_each_slot() -> None:
    """The void** handed to cuLaunchKernel lists the address of every 8-byte slot in order."""
    params = KernelParams([(0, 1, 2), 9])
    base = ctypes.addressof(params.slots)
    assert [params.ptrs[i] for i in range(8)] == [base + 8 * i for i in range(8)]
