"""Ampere launches bound to one input signature (see ``mmaplug.cuda.launching``)."""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.codegen.emitter import reduce_grid
from mmaplug.cuda.launching import ARRAY_SLOTS, BoundKernels, DriverLaunch, KernelParams

from .kernel import REDUCE_THREADS, AmpereKernelConfig
from .launch import grid_for, k_per_split, loaded


class BoundGemm(BoundKernels):
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
        bm, bn, _ = config.cta_tile
        tiles = (-(-m // bm), -(-n // bn))
        sizes = [2] * 2 + [i.dtype.itemsize for i in prog.inputs]
        sizes += [o.dtype.itemsize for o in prog.outputs]
        arrays = [(0, span, size) for span, size in zip(spans, sizes, strict=True)]
        a, b = arrays[0], arrays[1]
        ins, outs = arrays[2 : 2 + len(prog.inputs)], arrays[2 + len(prog.inputs) :]
        dims = [m, n, k, batch, *a_strides, *b_strides]
        in_s = [s for t in epi_strides for s in t]
        out_s = [s for t in out_strides for s in t]
        tail = [k_per_split(config, k), *tiles]
        smem = config.smem_bytes
        grid, block = grid_for(config, m, n, batch), (config.threads, 1, 1)
        placeholders = [0.0] * scalars
        if config.splitk == 1:
            params = KernelParams([a, b, *ins, *outs, *placeholders, *dims, *in_s, *out_s, *tail])
            main_kern = loaded(config, "ampere_gemm", smem, len(params.slots))
            # the float32 scalars follow the array parameters
            first = ARRAY_SLOTS * len(arrays)
            super().__init__(
                [DriverLaunch(main_kern, grid, block, smem, params)],
                [(params, range(len(arrays)))],
                [(params, first + i) for i in range(scalars)],
            )
            return
        size = config.splitk * batch * m * n
        ws_arg, ws = (0, size, 4), len(arrays)  # the workspace's address comes last
        pro_scal = placeholders if config.prologue_scalars else []
        main = KernelParams([a, b, ws_arg, *pro_scal, *dims, *tail])
        red = KernelParams([ws_arg, *ins, *outs, *placeholders, m, n, batch, *in_s, *out_s])
        main_kern = loaded(config, "ampere_gemm", smem, len(main.slots))
        red_kern = loaded(config, "ampere_splitk_reduce", 0, len(red.slots))
        first = ARRAY_SLOTS * (1 + len(ins) + len(outs))
        super().__init__(
            [
                DriverLaunch(main_kern, grid, block, smem, main),
                DriverLaunch(red_kern, reduce_grid(batch, m, n), (REDUCE_THREADS, 1, 1), 0, red),
            ],
            [(main, [0, 1, ws]), (red, [ws, *range(2, len(arrays))])],
            [(red, first + i) for i in range(scalars)]
            + [(main, ARRAY_SLOTS * 3 + i) for i in range(len(pro_scal))],
            workspace=size,
        )


class BoundGemmPrologueScalars(BoundGemm):
    """A split-K BoundGemm whose operand prologue reads scalars: the main kernel takes the
    scalar table too, so every scalar is written to the reduce kernel's slot and the main's."""

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float], stream: int) -> None:
        super().__call__(addresses, [*scalars, *scalars], stream)
