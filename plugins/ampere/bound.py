"""Ampere launches bound to one input signature (see ``mmaplug.cuda.launching``)."""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.cuda.launching import ARRAY_SLOTS, DriverLaunch, KernelParams

from .kernel import REDUCE_THREADS, AmpereKernelConfig, build
from .launch import grid_for, k_per_split, prepared


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
        main_kern = prepared(kernels, "ampere_gemm", smem)
        grid, block = grid_for(config, m, n, batch), (config.threads, 1, 1)
        placeholders = [0.0] * scalars
        self._launches: list[DriverLaunch] = []
        self._scalar_slots: list[tuple[KernelParams, int]] = []
        if config.splitk == 1:
            values = [a, b, *ins, *outs, *placeholders, *dims, *in_s, *out_s, *tail]
            params = KernelParams(values)
            self._launches.append(DriverLaunch(main_kern, grid, block, smem, params))
            self._order = [(params, list(range(len(arrays))))]
            # the float32 scalars follow the array parameters
            self._scalar_slots = [(params, ARRAY_SLOTS * len(arrays) + i) for i in range(scalars)]
        else:
            # a workspace of its own: a shared one could be reallocated under this launch
            from numba import cuda

            self._workspace = ws = cuda.device_array(config.splitk * batch * m * n, dtype="float32")
            ws_arg = (ws.device_ctypes_pointer.value, ws.size, 4)
            main = KernelParams([a, b, ws_arg, *dims, *tail])
            main.pointer_slots = main.pointer_slots[:2]  # the workspace pointer never changes
            red_kern = prepared(kernels, "ampere_splitk_reduce", 0)
            red = KernelParams([ws_arg, *ins, *outs, *placeholders, m, n, batch, *in_s, *out_s])
            red.pointer_slots = red.pointer_slots[1:]
            total = batch * m * n
            self._launches = [
                DriverLaunch(main_kern, grid, block, smem, main),
                DriverLaunch(
                    red_kern, (-(-total // REDUCE_THREADS), 1, 1), (REDUCE_THREADS, 1, 1), 0, red
                ),
            ]
            self._order = [(main, [0, 1]), (red, list(range(2, len(arrays))))]
            first = ARRAY_SLOTS * (1 + len(ins) + len(outs))
            self._scalar_slots = [(red, first + i) for i in range(scalars)]

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float]) -> None:
        """Launch on data at *addresses* (A, B, epilogue inputs, outputs) with *scalars*."""
        for params, which in self._order:
            params.patch([addresses[i] for i in which])
        for (params, slot), value in zip(self._scalar_slots, scalars, strict=True):
            params.set_float(slot, value)
        for launch in self._launches:
            launch()
