"""What a generated Ampere kernel is specialised on, and its parameter list (the launch ABI)."""

from __future__ import annotations

from typing import Any, Final

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram, Prologue
from mmaplug.codegen.emitter import cast_epilogue, epilogue_params, tile3
from mmaplug.codegen.grid import grid_problems
from mmaplug.codegen.kernel_config import config_label
from mmaplug.ir.dtypes import DType

from .resources import EPILOGUE_PAD, cta_threads, smem_bytes

VECTOR_WIDTHS: Final = (8, 4, 2, 1)


def _check_vec(instance: Any, attribute: Any, value: int) -> None:
    if value not in VECTOR_WIDTHS:
        raise ValueError(f"{attribute.name} must be one of {VECTOR_WIDTHS}, got {value}")


@attrs.frozen(kw_only=True)
class AmpereKernelConfig:
    """Everything the generated kernel is specialized on (hashable: the build-cache key)."""

    operand_dtype: DType = DType.float16
    a_k_inner: bool = True
    b_k_inner: bool = True
    cta_tile: tuple[int, int, int] = attrs.field(default=(128, 128, 32), converter=tile3)
    warp_tile: tuple[int, int, int] = attrs.field(default=(64, 64, 32), converter=tile3)
    stages: int = 3
    splitk: int = 1
    cta_order: str = "row_major"
    grid_swizzle: int = 1
    vec_a: int = attrs.field(default=8, validator=_check_vec)
    vec_b: int = attrs.field(default=8, validator=_check_vec)
    epilogue: EpilogueProgram = attrs.field(factory=cast_epilogue)
    prologue_a: Prologue | None = None  # computed on A's fragments between ldmatrix and mma
    prologue_b: Prologue | None = None

    def __attrs_post_init__(self) -> None:
        bm, bn, bk = self.cta_tile
        wm, wn, wk = self.warp_tile
        problems = []
        if self.operand_dtype not in (DType.float16, DType.bfloat16):
            problems.append(f"operand_dtype must be float16 or bfloat16, got {self.operand_dtype}")
        if wm % 16 or wn % 16 or wm <= 0 or wn <= 0:
            problems.append(
                f"warp_tile m and n must be positive multiples of 16, got {self.warp_tile}"
            )
        elif bm % wm or bn % wn:
            problems.append(
                f"cta_tile {self.cta_tile} is not a multiple of warp_tile {self.warp_tile}"
            )
        if bk % 16 or bk <= 0 or wk != bk:
            problems.append(
                f"cta_tile k must be a multiple of 16 equal to warp_tile k, got {bk}, {wk}"
            )
        if self.stages < 2:
            problems.append(f"stages must be >= 2, got {self.stages}")
        if self.splitk < 1:
            problems.append(f"splitk must be >= 1, got {self.splitk}")
        problems += grid_problems(self.cta_order, self.grid_swizzle)
        for side, pro in (("a", self.prologue_a), ("b", self.prologue_b)):
            if pro and (pro.dtype is not self.operand_dtype or not pro.source.is_half):
                problems.append(
                    f"prologue_{side} must read float16/bfloat16 and give operand_dtype "
                    f"{self.operand_dtype}, got {pro.source} -> {pro.dtype}"
                )
        if not problems and self.threads > 1024:
            problems.append(f"{self.threads} threads per CTA is more than 1024")
        if problems:
            raise ValueError("invalid AmpereKernelConfig: " + "; ".join(problems))

    @property
    def warps(self) -> tuple[int, int]:
        """(WARPS_M, WARPS_N)."""
        return self.cta_tile[0] // self.warp_tile[0], self.cta_tile[1] // self.warp_tile[1]

    @property
    def workspace_splitk(self) -> bool:
        """Split-K through the float32 workspace and the reduce kernel (every split-K here)."""
        return self.splitk > 1

    @property
    def threads(self) -> int:
        """Threads per CTA (``resources.cta_threads``)."""
        return cta_threads(self.cta_tile, self.warp_tile)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per CTA (``resources.smem_bytes``, the scheduler's model)."""
        return smem_bytes(self.cta_tile, self.stages, self.operand_dtype.itemsize)

    @property
    def epilogue_stride(self) -> int:
        """Row stride (floats) of the staged accumulator tile: ``EPILOGUE_PAD`` floats of padding
        against bank conflicts."""
        return self.cta_tile[1] + EPILOGUE_PAD

    @property
    def kernel_name(self) -> str:
        """The kernel's one name (``ampere_<name>``): logs, dumps, the tuning database, the
        generated module and so the PTX ``.entry``, ``ampere_gemm`` inside it."""
        return f"ampere_{self.name}"

    @property
    def name(self) -> str:
        """A short readable id: ``config_label``, vectors, prologues."""
        return (
            f"{config_label(self)}_v{self.vec_a}{self.vec_b}"
            + ("_pa" if self.prologue_a else "")
            + ("_pb" if self.prologue_b else "")
        )

    @property
    def prologue_scalars(self) -> bool:
        """Whether a prologue reads the scalar table (the split-K main kernel then takes it)."""
        return any(p.uses_scalars for p in (self.prologue_a, self.prologue_b) if p)


# int64 parameters of the main kernel, in order (the launchers pass them in this order too)
SHAPE_PARAMS: Final = ("M", "N", "K", "batch", "a_sb", "a_s1", "b_sb", "b_s1")

GRID_PARAMS: Final = ("k_split", "tiles_m", "tiles_n")


def kernel_params(cfg: AmpereKernelConfig) -> list[str]:
    ins, outs, scal, in_strides, out_strides = epilogue_params(cfg.epilogue)
    if cfg.splitk > 1:
        pro_scal = scal if cfg.prologue_scalars else []
        return ["a", "b", "ws", *pro_scal, *SHAPE_PARAMS, *GRID_PARAMS]
    return [
        "a", "b", *ins, *outs, *scal, *SHAPE_PARAMS, *in_strides, *out_strides, *GRID_PARAMS
    ]  # fmt: skip
