"""The decode scheduler's build step: planned params and the analysis → kernel config → launches."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.patterns import DimRole
from mmaplug.cuda.kernel_views import DeviceTensor, require_unit_stride
from mmaplug.cuda.launching import (
    ARRAY_SLOTS,
    BoundKernels,
    DriverLaunch,
    KernelParams,
    launch_checked,
    zero_words,
)
from mmaplug.cuda.modules import FamilyArtifact, require_numba
from mmaplug.errors import DeclinedLaunchError
from mmaplug.planning.artifact import LaunchArgs
from mmaplug.planning.choices import KernelSpec

from .config import COLS_PER_MMA, ROWS, DecodeKernelConfig
from .kernel import KERNELS, build, loaded

__all__ = ["DecodeArtifact", "kernel_config"]


def kernel_config(spec: KernelSpec, analysis: MatmulAnalysis) -> DecodeKernelConfig:
    """The generated kernel's configuration for *spec*: m tiles from ``cta_tile.m``, row tiles
    from ``cta_tile.n``, warps (a product's) from ``splitk_factor``, unroll from ``stages``, the
    products of a horizontal fusion from the problem."""
    require_numba()  # a plan-only install stops here, with the extra to install
    params = spec.params
    return DecodeKernelConfig(
        operand_dtype=spec.problem.operand_dtype,
        m_tiles=params.cta_tile.m // COLS_PER_MMA,
        warps=params.splitk_factor,
        unroll=params.stages,
        epilogue=analysis.epilogue,
        horizontal=spec.problem.horizontal,
        row_tiles=params.cta_tile.n // ROWS,
    )


def _operand_strides(
    what: str, tensor: DeviceTensor, rows: DimRole, vector: int
) -> tuple[int, int]:
    """The stride of *tensor*'s *rows* and of its products of the batch, checked: K
    contiguous, both 16-byte aligned (``_row_stride``)."""
    require_unit_stride(what, tensor, DimRole.K)
    return (
        _row_stride(what, tensor, rows, vector),
        _row_stride(what, tensor, DimRole.BATCH, vector),
    )


def _row_stride(what: str, tensor: DeviceTensor, outer: DimRole, vector: int) -> int:
    """The stride between *tensor*'s rows (or products of the batch: *outer*), which the 16-byte
    loads (of *vector* elements) need 16-byte aligned."""
    stride = tensor.role_strides[outer]
    if tensor.address % 16 or stride % vector:
        step = "products of the batch" if outer is DimRole.BATCH else "rows"
        raise DeclinedLaunchError(
            "decode",
            f"{what} must start 16-byte aligned with {step} every {vector} elements for its "
            f"16-byte loads (address {tensor.address:#x}, stride {stride})",
        )
    return stride


@attrs.frozen
class DecodeArtifact(FamilyArtifact):
    """A built decode kernel: its config and the spec it was first planned for (each launch
    brings its own extents in ``LaunchArgs.problem``); ``decode_gemm`` built for the spec's
    compute capability."""

    family = KERNELS
    build = staticmethod(build)
    config: DecodeKernelConfig
    spec: KernelSpec = attrs.field(eq=False)

    def _shape(self, args: LaunchArgs) -> list[int]:
        """``M, N, K, a_sm, b_sn, a_sb, b_sb``, the further weights' ``sn, sb``, the input
        and the output strides of *args*, checked."""
        vector = self.config.vector
        a_sm, a_sb = _operand_strides("operand A", args.a, DimRole.M, vector)
        (b_sn, b_sb), *more = [
            _operand_strides(
                f"B operand {j} (horizontal)" if j else "operand B", b, DimRole.N, vector
            )
            for j, b in enumerate((args.b, *args.more_b))
        ]
        for out in args.outputs:
            require_unit_stride("an output", out, DimRole.N)
        p = args.problem
        in_strides = [
            t.role_strides[r]
            for t in args.epilogue_inputs
            for r in (DimRole.BATCH, DimRole.M, DimRole.N)
        ]
        out_strides = [t.role_strides[r] for t in args.outputs for r in (DimRole.BATCH, DimRole.M)]
        more_strides = [s for pair in more for s in pair]
        return [p.m, p.n, p.k, a_sm, b_sn, a_sb, b_sb, *more_strides, *in_strides, *out_strides]

    def _grid(self, args: LaunchArgs) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        rows = self.config.rows
        return (-(-args.problem.n // rows), args.problem.batch, 1), (self.config.threads, 1, 1)

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel once on *args* (the checked path; the simulator uses it)."""
        tensors = [args.a.array, args.b.array, *(t.array for t in args.more_b)]
        tensors += [t.array for t in args.epilogue_inputs]
        tensors += [t.array for t in args.outputs]
        values = [*tensors, *(np.float32(s) for s in args.scalars), *self._shape(args)]
        grid, block = self._grid(args)
        zero_words([args.outputs[j] for j, _ in self.config.epilogue.amaxes], args.stream)
        launch_checked(build(self.config), "decode_gemm", values, grid, block, args.stream, 0)

    def bind(self, args: LaunchArgs) -> BoundKernels:
        """A launcher for tensors like *args*' ones: parameters prepared, pointers per call."""
        prog = self.config.epilogue
        tensors: Sequence[DeviceTensor] = (
            args.a, args.b, *args.more_b, *args.epilogue_inputs, *args.outputs
        )  # fmt: skip
        operand = self.config.operand_dtype.itemsize
        sizes = [operand] * (2 + len(args.more_b)) + [i.dtype.itemsize for i in prog.inputs]
        sizes += [o.dtype.itemsize for o in prog.outputs]
        arrays = [(0, t.array.size, size) for t, size in zip(tensors, sizes, strict=True)]
        scalars = len(prog.scalars)
        params = KernelParams([*arrays, *([0.0] * scalars), *self._shape(args)])
        grid, block = self._grid(args)
        launch = DriverLaunch(loaded(self.config, len(params.slots)), grid, block, 0, params)
        first = ARRAY_SLOTS * len(arrays)
        first_out = len(tensors) - len(prog.outputs)
        return BoundKernels(
            [launch],
            [(params, range(len(arrays)))],
            [(params, first + i) for i in range(scalars)],
            zeroed=[first_out + j for j, _ in prog.amaxes],  # amax outputs start at 0.0
        )
