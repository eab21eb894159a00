"""Launches bound to one input signature: kernel parameters prepared once, pointers patched
per call, and ``cuLaunchKernel`` called directly (Numba's launch path re-checks and re-wraps
every argument on every call, which costs hundreds of microseconds of host time).

Numba passes a 1-D C-contiguous array argument as seven kernel parameters: meminfo, parent,
nitems, itemsize, data, shape[0], strides[0]; int64 and float32 scalars as one parameter each.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any, Final

from mmaplug.errors import LaunchError

from .kernel import REDUCE_THREADS, AmpereKernelConfig, build
from .launch import _prepared, grid_for, k_per_split

_ARRAY_SLOTS: Final = 7
_DATA: Final = 4


class _Params:
    """A kernel's parameter block: one 8-byte slot per parameter and the void** to them."""

    def __init__(self, values: Sequence[int | float | tuple[int, int, int]]) -> None:
        flat: list[int] = []
        self.pointer_slots: list[int] = []
        for value in values:
            if isinstance(value, tuple):  # an array: (address, nitems, itemsize)
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

    def patch(self, addresses: Sequence[int]) -> None:
        for slot, address in zip(self.pointer_slots, addresses, strict=True):
            self.slots[slot] = address


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class _Launch:
    """One kernel with fixed grid, block, shared memory and stream."""

    def __init__(self, kern: Any, grid: tuple, block: tuple, smem: int, params: _Params) -> None:
        from cuda.bindings import driver

        self._driver = driver
        handle = kern._codelibrary.get_cufunc().handle  # a CUkernel (library-based loading)
        if not isinstance(handle, driver.CUfunction):
            kernel = handle if isinstance(handle, driver.CUkernel) else driver.CUkernel(int(handle))
            err, handle = driver.cuKernelGetFunction(kernel)
            _check(err)
        self._func = handle
        self._dims = (*grid, *block)
        self._smem = smem
        self.params = params

    def __call__(self) -> None:
        (err,) = self._driver.cuLaunchKernel(
            self._func, *self._dims, self._smem, 0, self.params.address, 0
        )
        _check(err)


def _check(err: Any) -> None:
    if int(err) != 0:
        raise LaunchError(f"cuLaunchKernel failed: {err!r}")


class BoundGemm:
    """``run_gemm`` for one shape/stride signature; call it with the current data pointers.

    ``spans`` are the element counts of the flat views of A, B, each epilogue input and each
    output, in that order; ``strides`` the same tuples ``run_gemm`` takes without the arrays.
    """

    def __init__(
        self,
        config: AmpereKernelConfig,
        spans: Sequence[int],
        a_strides: tuple[int, int],
        b_strides: tuple[int, int],
        epi_strides: Sequence[tuple[int, int, int]],
        out_strides: Sequence[tuple[int, int]],
        scalars: int,
        *,
        m: int,
        n: int,
        k: int,
        batch: int,
    ) -> None:
        prog = config.epilogue
        kernels = build(config)
        bm, bn, _ = config.cta_tile
        tiles = (-(-m // bm), -(-n // bn))
        sizes = [2] * 2 + [2 if i.dtype.is_half else 4 for i in prog.inputs]
        sizes += [2 if o.dtype.is_half else 4 for o in prog.outputs]
        arrays = [(0, span, size) for span, size in zip(spans, sizes, strict=True)]
        a, b = arrays[0], arrays[1]
        ins, outs = arrays[2 : 2 + len(prog.inputs)], arrays[2 + len(prog.inputs) :]
        dims = [m, n, k, batch, *a_strides, *b_strides]
        in_s = [s for t in epi_strides for s in t]
        out_s = [s for t in out_strides for s in t]
        tail = [k_per_split(config, k), *tiles]
        smem = config.smem_bytes
        main_kern = _prepared(kernels, "ampere_gemm", smem)
        grid, block = grid_for(config, m, n, batch), (config.threads, 1, 1)
        placeholders = [0.0] * scalars
        self._launches: list[_Launch] = []
        self._scalar_slots: list[tuple[_Params, int]] = []
        if config.splitk == 1:
            values = [a, b, *ins, *outs, *placeholders, *dims, *in_s, *out_s, *tail]
            params = _Params(values)
            self._launches.append(_Launch(main_kern, grid, block, smem, params))
            self._order = [(params, list(range(len(arrays))))]
            # the float32 scalars follow the array parameters
            self._scalar_slots = [(params, _ARRAY_SLOTS * len(arrays) + i) for i in range(scalars)]
        else:
            # a workspace of its own: a shared one could be reallocated under this launch
            from numba import cuda

            self._workspace = ws = cuda.device_array(config.splitk * batch * m * n, dtype="float32")
            ws_arg = (ws.device_ctypes_pointer.value, ws.size, 4)
            main = _Params([a, b, ws_arg, *dims, *tail])
            main.pointer_slots = main.pointer_slots[:2]  # the workspace pointer never changes
            red_kern = _prepared(kernels, "ampere_splitk_reduce", 0)
            red = _Params([ws_arg, *ins, *outs, *placeholders, m, n, batch, *in_s, *out_s])
            red.pointer_slots = red.pointer_slots[1:]
            total = batch * m * n
            self._launches = [
                _Launch(main_kern, grid, block, smem, main),
                _Launch(
                    red_kern, (-(-total // REDUCE_THREADS), 1, 1), (REDUCE_THREADS, 1, 1), 0, red
                ),
            ]
            self._order = [(main, [0, 1]), (red, list(range(2, len(arrays))))]
            first = _ARRAY_SLOTS * (1 + len(ins) + len(outs))
            self._scalar_slots = [(red, first + i) for i in range(scalars)]

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float]) -> None:
        """Launch on data at *addresses* (A, B, epilogue inputs, outputs) with *scalars*."""
        for params, which in self._order:
            params.patch([addresses[i] for i in which])
        for (params, slot), value in zip(self._scalar_slots, scalars, strict=True):
            params.slots[slot] = struct.unpack("<I", struct.pack("<f", value))[0]
        for launch in self._launches:
            launch()
