"""What a decode kernel is specialised on, and the launch ABI its generated source follows."""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.emitter import cast_epilogue, epilogue_params
from mmaplug.ir.dtypes import DType

#: Rows of the weight (N) one CTA computes: the M of one mma.sync m16n8k16.
ROWS: Final = 16
#: Columns of the activations (M) one mma covers: its N.
COLS_PER_MMA: Final = 8
#: K one warp loads per step: 16 bytes per lane, twice, four lanes a row (4 mmas).
CHUNK_K: Final = 64
#: Elements of a 16-byte vector of 16-bit values: K must be a multiple (aligned row starts).
VECTOR: Final = 8
#: Shape parameters of the kernel after the epilogue arrays and scalars.
SHAPE_PARAMS: Final = ("M", "N", "K", "a_sm", "b_sn")


@attrs.frozen(kw_only=True)
class DecodeKernelConfig:
    """One generated decode kernel: ``out = epilogue(A @ B^T)`` for ``M <= 8 * m_tiles``.

    ``warps`` split K between them (warp ``w`` takes K chunks ``w, w + warps, ...``) and sum
    their partials in shared memory; ``unroll`` chunks are loaded before their mmas run.
    """

    operand_dtype: DType
    m_tiles: int
    warps: int
    unroll: int
    epilogue: EpilogueProgram = attrs.field(factory=cast_epilogue)

    @property
    def splitk(self) -> int:
        """K splits across CTAs: none (the warps of one CTA split K)."""
        return 1

    @property
    def threads(self) -> int:
        """Threads of one CTA."""
        return 32 * self.warps

    @property
    def smem_bytes(self) -> int:
        """Static shared memory: each warp's float32 partial tile."""
        return self.warps * ROWS * COLS_PER_MMA * self.m_tiles * 4

    @property
    def name(self) -> str:
        """A readable name of the configuration."""
        dtype = "bf16" if self.operand_dtype is DType.bfloat16 else "f16"
        return f"decode_{dtype}_m{COLS_PER_MMA * self.m_tiles}_w{self.warps}_u{self.unroll}"

    @property
    def kernel_name(self) -> str:
        """The kernel's one name: logs, dumps, the generated module and the PTX ``.entry``
        (cubins are keyed by the source as well, so epilogues never share one)."""
        return self.name

    def parameters(self) -> list[str]:
        """The generated kernel's parameters, in launch order."""
        ins, outs, scal, in_strides, out_strides = epilogue_params(self.epilogue)
        return ["a", "b", *ins, *outs, *scal, *SHAPE_PARAMS, *in_strides, *out_strides]
