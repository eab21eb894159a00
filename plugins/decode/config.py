"""What a decode kernel is specialised on, and the launch ABI its generated source follows."""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.emitter import cast_epilogue, epilogue_params
from mmaplug.ir.dtypes import DType

#: Rows of the weight (N) of one row tile: the M of one mma.sync m16n8k16.
ROWS: Final = 16
#: Row tiles a warp (and so a CTA) may take: each more reuses the activations' registers for
#: another 16 weight rows, so a CTA loads them once for more weight bytes.
ROW_TILES: Final = (1, 2)
#: Columns of the activations (M) one mma covers: its N.
COLS_PER_MMA: Final = 8
#: Bytes of each row one warp loads per step: 16 bytes per lane, twice, four lanes a row (4 mmas:
#: 64 16-bit elements with m16n8k16, 128 FP8 elements with m16n8k32; the same 32-bit words).
CHUNK_BYTES: Final = 128
#: Bytes of one load (``ld.global.nc.v4``): K must be a multiple of its elements (aligned rows).
VECTOR_BYTES: Final = 16
#: The mma of each operand type: its intrinsic and its K (32 bytes of K either way).
MMAS: Final = {
    DType.float16: ("mma_m16n8k16_f16", 16),
    DType.bfloat16: ("mma_m16n8k16_bf16", 16),
    DType.float8_e4m3fn: ("mma_m16n8k32_e4m3", 32),
    DType.float8_e5m2: ("mma_m16n8k32_e5m2", 32),
}
_SHORT: Final = {
    DType.float16: "f16",
    DType.bfloat16: "bf16",
    DType.float8_e4m3fn: "e4m3",
    DType.float8_e5m2: "e5m2",
}


def chunk_k(dtype: DType) -> int:
    """Elements of K in a chunk of *dtype* (64 16-bit, 128 FP8)."""
    return CHUNK_BYTES // dtype.itemsize


def vector(dtype: DType) -> int:
    """Elements of *dtype* in one 16-byte load (8 16-bit, 16 FP8)."""
    return VECTOR_BYTES // dtype.itemsize


#: Shape parameters of the kernel after the epilogue arrays and scalars.
#: (a_sb, b_sb: the operands' batch strides, 0 for one shared across the batch.)
SHAPE_PARAMS: Final = ("M", "N", "K", "a_sm", "b_sn", "a_sb", "b_sb")


def more_b_params(horizontal: int) -> tuple[list[str], list[str]]:
    """The further weights of a horizontal fusion of *horizontal* products and their strides
    (``b1``, ``b2``, ...; ``b1_sn``, ``b1_sb``, ...): the first weight is ``b``."""
    bs = [f"b{j}" for j in range(1, horizontal)]
    return bs, [f"{b}_{ax}" for b in bs for ax in ("sn", "sb")]


@attrs.frozen(kw_only=True)
class DecodeKernelConfig:
    """One generated decode kernel: ``out = epilogue(A @ B^T)`` for ``M <= 8 * m_tiles``.

    A CTA computes ``16 * row_tiles`` weight rows; every warp multiplies all of them with the
    activations it loaded once. ``warps`` split K between them (warp ``w`` takes K chunks
    ``w, w + warps, ...``) and sum their partials in shared memory; ``unroll`` chunks are
    loaded before their mmas run. A horizontal fusion of ``horizontal`` products sharing A (the
    llama FFN's two) gives each product ``warps`` warps of its own: warp ``w`` multiplies
    weight ``w // warps`` and takes K chunks ``w % warps, ...``, and the epilogue reads every
    product's sum.
    """

    operand_dtype: DType
    m_tiles: int
    warps: int
    unroll: int
    epilogue: EpilogueProgram = attrs.field(factory=cast_epilogue)
    horizontal: int = 1
    row_tiles: int = 1

    @property
    def rows(self) -> int:
        """Weight rows of one CTA (``16 * row_tiles``)."""
        return ROWS * self.row_tiles

    @property
    def chunk_k(self) -> int:
        """Elements of K a warp loads per step (``chunk_k``)."""
        return chunk_k(self.operand_dtype)

    @property
    def vector(self) -> int:
        """Elements of one 16-byte load (``vector``)."""
        return vector(self.operand_dtype)

    @property
    def mma(self) -> str:
        """The name of the mma intrinsic for the operand type."""
        return MMAS[self.operand_dtype][0]

    @property
    def splitk(self) -> int:
        """K splits across CTAs: none (the warps of one CTA split K)."""
        return 1

    @property
    def workspace_splitk(self) -> bool:
        """Partials through a workspace and a reduce kernel: never."""
        return False

    @property
    def threads(self) -> int:
        """Threads of one CTA: ``warps`` warps per product."""
        return 32 * self.warps * self.horizontal

    @property
    def name(self) -> str:
        """A readable name of the configuration."""
        dtype = _SHORT[self.operand_dtype]
        h = f"_h{self.horizontal}" if self.horizontal > 1 else ""
        r = f"_r{self.row_tiles}" if self.row_tiles > 1 else ""
        return f"decode_{dtype}_m{COLS_PER_MMA * self.m_tiles}_w{self.warps}_u{self.unroll}{r}{h}"

    @property
    def kernel_name(self) -> str:
        """The kernel's one name: logs, dumps, the generated module and the PTX ``.entry``
        (cubins are keyed by the source as well, so epilogues never share one)."""
        return self.name

    def parameters(self) -> list[str]:
        """The generated kernel's parameters, in launch order."""
        ins, outs, scal, in_strides, out_strides = epilogue_params(self.epilogue)
        bs, b_strides = more_b_params(self.horizontal)
        return [
            "a", "b", *bs, *ins, *outs, *scal, *SHAPE_PARAMS, *b_strides, *in_strides,
            *out_strides,
        ]  # fmt: skip
