"""What every generated kernel is specialised on the same way: the fields both schedulers' kernel
configs take from a planned ``KernelSpec``, and the label their names start with.

Each config (``AmpereKernelConfig``, ``HopperKernelConfig``) adds its own fields and checks;
these are the operands' dtype and layout, the CTA and warp tiles, the pipeline's stages,
split-K, the tile order (``mmaplug.codegen.grid``) and the epilogue program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mmaplug.analysis.matmul_analysis import MatmulAnalysis
    from mmaplug.ir.dtypes import DType
    from mmaplug.planning.choices import KernelSpec

__all__ = ["LabelledConfig", "config_label", "spec_fields"]


def spec_fields(spec: KernelSpec, analysis: MatmulAnalysis) -> dict[str, Any]:
    """The common fields of the kernel config for *spec*, as keyword arguments.

    ``spec.params`` are planned ones: the scheduler's adjustments applied.
    """
    params, problem = spec.params, spec.problem
    return {
        "operand_dtype": problem.operand_dtype,
        "a_k_inner": problem.a_k_inner,
        "b_k_inner": problem.b_k_inner,
        "cta_tile": params.cta_tile.as_tuple(),
        "warp_tile": params.warp_tile.as_tuple(),
        "stages": params.stages,
        "splitk": params.splitk_factor,
        "cta_order": params.cta_order.value,
        "grid_swizzle": params.grid_swizzle_factor,
        "epilogue": analysis.epilogue,
    }


class LabelledConfig(Protocol):
    """The fields :func:`config_label` reads."""

    @property
    def operand_dtype(self) -> DType: ...
    @property
    def a_k_inner(self) -> bool: ...
    @property
    def b_k_inner(self) -> bool: ...
    @property
    def cta_tile(self) -> tuple[int, int, int]: ...
    @property
    def warp_tile(self) -> tuple[int, int, int]: ...
    @property
    def stages(self) -> int: ...
    @property
    def splitk(self) -> int: ...


def config_label(cfg: LabelledConfig) -> str:
    """The start of a config's short readable name: dtype, layout (``k`` for a K-inner operand,
    else ``m`` / ``n``), CTA tile, warp tile, stages, split-K
    (``float16_kk_128x128x32_w64x64_s3_sk1``)."""
    bm, bn, bk = cfg.cta_tile
    wm, wn, _ = cfg.warp_tile
    lay = ("k" if cfg.a_k_inner else "m") + ("k" if cfg.b_k_inner else "n")
    return f"{cfg.operand_dtype.label}_{lay}_{bm}x{bn}x{bk}_w{wm}x{wn}_s{cfg.stages}_sk{cfg.splitk}"
