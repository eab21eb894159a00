"""What a scheduler receives about a fusion: tensor bindings and the MatmulAnalysis."""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram, Prologue
from mmaplug.analysis.patterns import DimRole, MatmulPattern, TensorRole
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion

#: The roles block scales' dims are bound with (their strides are read by these roles): A's
#: ``[M, K blocks]``, B's ``[K blocks, N blocks]``; a block dim's stride steps one block.
SCALE_DIMS: Final = ((DimRole.M, DimRole.K), (DimRole.K, DimRole.N))


@attrs.frozen(kw_only=True)
class TensorBinding:
    """How one fusion input or output maps onto the kernel: its role and each dim's role.

    ``dim_roles[i]`` is the role of value dim ``i`` (None for a broadcast dim). ``index`` is the
    position in ``fusion.inputs`` (inputs) or ``fusion.outputs`` (outputs). ``alloc_order``
    lists the dims outermost to innermost in memory, as declared by ``stride_order``.
    """

    index: int
    name: str
    role: TensorRole
    dtype: DType
    shape: tuple[int, ...]
    dim_roles: tuple[DimRole | None, ...]
    alloc_order: tuple[int, ...]


@attrs.frozen(kw_only=True)
class MatmulAnalysis:
    """Everything a scheduler needs from a fusion, computed on a translated copy of it.

    ``scales``: a block-scaled matmul's scales (``problem.block_scaled``), A's ``[M, K
    blocks]`` then B's ``[K blocks, N blocks]``, bound with dim roles (M, K) and (K, N): a block
    dim's stride steps one block. Empty otherwise.

    ``bs``: every B operand of a horizontal fusion (``problem.horizontal > 1``) in accumulator
    order (``bs[0]`` is ``b``; the epilogue's ``acc`` with ``arg=j`` is the product with
    ``bs[j]``); ``(b,)`` otherwise.
    """

    fusion: Fusion = attrs.field(eq=False, repr=False)
    patterns: tuple[MatmulPattern, ...] = attrs.field(eq=False, repr=False)
    problem: MatmulProblem
    a: TensorBinding
    b: TensorBinding
    epilogue_inputs: tuple[TensorBinding, ...]
    outputs: tuple[TensorBinding, ...]
    scalar_inputs: tuple[int, ...]
    epilogue: EpilogueProgram
    prologue_a: Prologue | None = None
    prologue_b: Prologue | None = None
    bs: tuple[TensorBinding, ...] = attrs.field(
        default=attrs.Factory(lambda self: (self.b,), takes_self=True)
    )
    scales: tuple[TensorBinding, ...] = ()
