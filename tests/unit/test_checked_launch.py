"""The checked launch path (``MMAPLUG_FAST_LAUNCH=0``): each call checks its arguments against
the kernel's Numba signature and launches the cached cubin with a fresh parameter block
through the driver (faked here: the block is read back as the driver would read it)."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy as np
import pytest

from mmaplug.cuda import driver, launching
from mmaplug.cuda.modules import GeneratedKernels
from mmaplug.errors import LaunchError

types = pytest.importorskip("numba.types")

U16 = types.Array(types.uint16, 1, "C")
F32 = types.Array(types.float32, 1, "C")
U64 = types.Array(types.uint64, 1, "C")
SIGNATURE = types.void(U16, U64, F32, types.float32, types.int64, types.int64)


class Array:
    """A device array as the launch path sees one: ``__cuda_array_interface__`` only."""

    def __init__(self, address: int, shape: tuple, typestr: str, strides: Any = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "strides": strides, "typestr": typestr,
            "data": (address, False), "version": 3,
        }  # fmt: skip


def kernel_fn(a, maps, ws, alpha, m, n):  # noqa: ANN001, ANN201 - the parameter names
    pass


class Dispatcher:
    """What launch_checked asks of a dispatcher outside the simulator: its Python function."""

    py_func = staticmethod(kernel_fn)


KERNELS = GeneratedKernels(
    config=None, gemm=Dispatcher(), reduce=None, source="generated source",
    signatures={"ampere_gemm": SIGNATURE}, module="ampere_cfg",
)  # fmt: skip


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every launch the faked driver saw, with its parameter block read back slot by slot."""
    monkeypatch.setattr(launching, "simulating", lambda: False)
    seen: list[dict[str, Any]] = []
    slots: dict[int, int] = {}

    def kernel(module: str, source: str, name: str, smem: int, n: int, build: Any) -> int:
        assert build() == ("built", KERNELS, name, (8, 0))  # a miss: this module, with Numba
        slots[0xC0FFEE] = n
        seen.append({"loaded": (module, source, name, smem, n)})
        return 0xC0FFEE

    def kernel_launcher(
        handle: int, grid: tuple, block: tuple, smem: int, params: int, cluster: int = 1
    ) -> Any:
        def run(stream: int) -> None:
            ptrs = (ctypes.c_void_p * slots[handle]).from_address(params)
            seen[-1].update(
                geometry=(grid, block, smem, cluster), stream=stream,
                values=[ctypes.c_int64.from_address(p).value for p in ptrs],
            )  # fmt: skip

        return run

    monkeypatch.setattr(launching, "kernel_binary", lambda *args: ("built", *args))
    monkeypatch.setattr(launching.cubin, "kernel", kernel)
    monkeypatch.setattr(driver, "kernel_launcher", kernel_launcher)
    monkeypatch.setattr(
        driver, "device_attributes", lambda device=0: {"compute_capability": (8, 0)}
    )
    return seen


def _float_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def test_arguments_are_marshalled_into_the_layout_numba_compiles(
    launched: list[dict[str, Any]],
) -> None:
    """Arrays as seven slots (meminfo, parent, nitems, itemsize, data, shape, stride), the
    float32 scalar as its bits, ints as int64; the cubin is the module's, loaded with the
    block's slot count (what ``numba_binary`` counts) and launched on the raw stream handle."""
    a, maps, ws = (
        Array(0x1000, (6,), "<u2"),
        Array(0x2000, (32,), "<u8"),
        Array(0x3000, (5,), "<f4"),
    )
    args = [a, maps, ws, np.float32(1.5), 7, np.int64(-3)]
    launching.launch_checked(KERNELS, "ampere_gemm", args, (4, 1, 1), (128, 1, 1), 0x99, 65536, 2)
    (launch,) = launched
    assert launch["loaded"] == ("ampere_cfg", "generated source", "ampere_gemm", 65536, 24)
    assert launch["geometry"] == ((4, 1, 1), (128, 1, 1), 65536, 2)
    assert launch["stream"] == 0x99
    assert launch["values"] == [
        *(0, 0, 6, 2, 0x1000, 6, 2),
        *(0, 0, 32, 8, 0x2000, 32, 8),
        *(0, 0, 5, 4, 0x3000, 5, 4),
        _float_bits(1.5), 7, -3,
    ]  # fmt: skip
    launching.launch_checked(KERNELS, "ampere_gemm", args, (4, 1, 1), (128, 1, 1), 0, 0)
    assert len(launched) == 2 and launched[1]["stream"] == 0  # checked again, a block per call


def _args(**changed: Any) -> list[Any]:
    args = {
        "a": Array(0x1000, (6,), "<u2"), "maps": Array(0x2000, (32,), "<u8"),
        "ws": Array(0x3000, (5,), "<f4"), "alpha": np.float32(1.0), "m": 1, "n": 2,
    }  # fmt: skip
    return list({**args, **changed}.values())


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"a": Array(0x1000, (6,), "<f4")}, r"parameter 0 \(a\): given a 1-D float32 array of "
         r"shape \[6\], expected a 1-D C-contiguous uint16 device array"),
        ({"maps": Array(0x2000, (32,), "<i8")}, r"parameter 1 \(maps\): given a 1-D int64 "
         r"array.*expected a 1-D C-contiguous uint64"),
        ({"ws": Array(0x3000, (2, 3), "<f4")}, r"parameter 2 \(ws\): given a 2-D float32"),
        ({"ws": Array(0x3000, (5,), "<f4", (8,))}, r"parameter 2 \(ws\): given a non-contiguous "
         r"\(strides \[8\]\) 1-D float32"),
        ({"a": np.zeros(6, np.uint16)}, r"parameter 0 \(a\): given ndarray.*expected a 1-D "
         r"C-contiguous uint16 device array"),
        ({"alpha": 2}, r"parameter 3 \(alpha\): given int 2, expected a float32 number"),
        ({"m": 1.0}, r"parameter 4 \(m\): given float 1.0, expected an int64 integer"),
        ({"n": True}, r"parameter 5 \(n\): given bool True, expected an int64"),
        ({"n": 1 << 63}, r"parameter 5 \(n\): given 9223372036854775808, outside int64"),
        ({"m": Array(0x1000, (6,), "<u2")}, r"parameter 4 \(m\): given Array.*expected an int64"),
    ],
    ids=["dtype", "maps-dtype", "ndim", "strided", "host", "int-for-float", "float-for-int",
         "bool", "overflow", "array-for-int"],
)  # fmt: skip
def test_a_mismatched_argument_raises_launch_error_and_launches_nothing(
    launched: list[dict[str, Any]], changed: dict[str, Any], message: str
) -> None:
    """Each argument is checked against the signature on every call: the error names the
    kernel, the parameter's position and name, what was given and what it takes."""
    with pytest.raises(LaunchError, match=f"kernel ampere_gemm {message}"):
        launching.launch_checked(
            KERNELS, "ampere_gemm", _args(**changed), (1, 1, 1), (1, 1, 1), 0, 0
        )
    assert launched == []


def test_a_wrong_argument_count_raises_launch_error(launched: list[dict[str, Any]]) -> None:
    """A missing argument is a LaunchError naming both counts."""
    with pytest.raises(LaunchError, match=r"kernel ampere_gemm takes 6 arguments .* got 5"):
        launching.launch_checked(KERNELS, "ampere_gemm", _args()[:5], (1, 1, 1), (1, 1, 1), 0, 0)
    assert launched == []
