"""An example mmaplug heuristic plugin: square 128x128 CTA tiles and 3 stages for big fp16 TN."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.problem import Layout, MatmulProblem
from mmaplug.ir.dtypes import DType
from mmaplug.markers import hookimpl
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape

__all__ = ["MIN_EXTENT", "SQUARE", "applies", "mmaplug_matmul_params"]

MIN_EXTENT: Final = 1024  # below this, 128x128 tiles leave SMs idle: defer to the default
SQUARE: Final = MatmulParams(
    cta_tile=TileShape(128, 128, 32),
    warp_tile=TileShape(64, 64, 32),
    instruction_tile=TileShape(16, 8, 16),  # the ampere scheduler's only mma.sync shape
    stages=3,
    use_smem_epilogue=True,  # the ampere kernel always stages its epilogue through smem
)


def applies(problem: MatmulProblem, scheduler: str) -> bool:
    """True for fp16 TN problems on the ampere scheduler with M, N and K all >= MIN_EXTENT."""
    return (
        scheduler == "ampere"
        and problem.operand_dtype is DType.float16
        and problem.layout is Layout.TN
        and min(problem.m, problem.n, problem.k) >= MIN_EXTENT
    )


@hookimpl
def mmaplug_matmul_params(
    problem: MatmulProblem, device: Device, scheduler: str
) -> MatmulParams | None:
    """``SQUARE`` for the problems :func:`applies` to; None (defer to the default) otherwise."""
    return SQUARE if applies(problem, scheduler) else None
