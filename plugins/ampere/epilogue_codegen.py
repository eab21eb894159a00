"""The ampere epilogue's geometry: the smem-staged accumulator tile and when it is vectorised."""

from __future__ import annotations

from mmaplug.codegen.staged_epilogue import fits_staged

from .config import AmpereKernelConfig


def vector_epilogue(cfg: AmpereKernelConfig) -> bool:
    """Whether the staged tile takes the 4-columns-per-thread epilogue."""
    bm, bn, _ = cfg.cta_tile
    return fits_staged(bm, bn, cfg.threads)


def c_stride(cfg: AmpereKernelConfig) -> int:
    """Row stride (floats) of the smem accumulator tile: 8 floats of padding against conflicts."""
    return cfg.cta_tile[1] + 8
