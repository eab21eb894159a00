"""MatmulProblem: what heuristics and schedulers see of a fusion (shape, layout, precision)."""

from __future__ import annotations

import enum

import attrs

from mmaplug.ir.arguments import as_int, int_field, of_type, tuple_of
from mmaplug.ir.dtypes import DType


class Layout(enum.StrEnum):
    """Operand layout with nvFuser's ``MmaLayout`` letters.

    The first letter is A's, the second B's. For A, ``T`` means K is innermost (A is ``[M, K]``
    row-major); for B, ``N`` means K is innermost (B is ``[N, K]``). So ``TN`` is the
    ``x @ w.T`` (``F.linear``) layout with both operands K-contiguous. nvFuser's plugin ABI uses
    other letters for the same cases; mmaplug always reports ``a_k_inner``/``b_k_inner`` beside
    the letters so no one has to remember which convention is meant.
    """

    TN = "TN"
    TT = "TT"
    NT = "NT"
    NN = "NN"

    @classmethod
    def from_k_inner(cls, a_k_inner: bool, b_k_inner: bool) -> Layout:
        """The layout whose A (B) has K innermost exactly when *a_k_inner* (*b_k_inner*)."""
        return {
            (True, True): cls.TN,
            (True, False): cls.TT,
            (False, True): cls.NN,
            (False, False): cls.NT,
        }[(a_k_inner, b_k_inner)]

    @property
    def a_k_inner(self) -> bool:
        """True when A's innermost (contiguous) dimension is K."""
        return self in (Layout.TN, Layout.TT)

    @property
    def b_k_inner(self) -> bool:
        """True when B's innermost (contiguous) dimension is K."""
        return self in (Layout.TN, Layout.NN)


@attrs.frozen(kw_only=True)
class VectorWidths:
    """Widest vector, in elements, that each side may load or store (nvFuser §2.7)."""

    a: int = attrs.field(converter=as_int, validator=int_field(1))
    b: int = attrs.field(converter=as_int, validator=int_field(1))
    epilogue: int = attrs.field(converter=as_int, validator=int_field(1))


@attrs.frozen(kw_only=True)
class MatmulProblem:
    """The matmul a fusion computes, as heuristics see it.

    ``m``, ``n``, ``k`` are products of all dims of that role; ``batch`` is the product of the
    batch dims (1 when there are none). ``precision`` is three letters: operand type, accumulator
    (always ``S``) and output type, e.g. ``"HSH"``. ``horizontal`` is the number of matmuls that
    share operand A and meet in the epilogue (a horizontal fusion such as the llama FFN: 2; 1
    for one matmul, and for several that are not horizontal). A bad field is a ``UsageError``
    naming it (analysis refuses fusions whose extents reach 2**31; heuristics may still be
    asked about larger hand-built problems, and decline them).
    """

    m: int = attrs.field(converter=as_int, validator=int_field(1))
    n: int = attrs.field(converter=as_int, validator=int_field(1))
    k: int = attrs.field(converter=as_int, validator=int_field(1))
    batch: int = attrs.field(default=1, converter=as_int, validator=int_field(1))
    a_k_inner: bool = attrs.field(validator=of_type(bool, "True or False"))
    b_k_inner: bool = attrs.field(validator=of_type(bool, "True or False"))
    operand_dtype: DType = attrs.field(validator=of_type(DType, "an mmaplug dtype (mp.float16)"))
    output_dtype: DType = attrs.field(validator=of_type(DType, "an mmaplug dtype (mp.float16)"))
    vector_widths: VectorWidths = attrs.field(validator=of_type(VectorWidths, "a VectorWidths"))
    num_patterns: int = attrs.field(default=1, converter=as_int, validator=int_field(1))
    horizontal: int = attrs.field(default=1, converter=as_int, validator=int_field(1))
    epilogue_ops: tuple[str, ...] = attrs.field(default=(), validator=tuple_of(str, "op names"))
    # of the tensors the epilogue reads, in order
    epilogue_input_dtypes: tuple[DType, ...] = attrs.field(
        default=(), validator=tuple_of(DType, "mmaplug dtypes (mp.float16)")
    )
    # element-wise ops between input A (B) and the mma
    a_prologue_ops: tuple[str, ...] = attrs.field(default=(), validator=tuple_of(str, "op names"))
    b_prologue_ops: tuple[str, ...] = attrs.field(default=(), validator=tuple_of(str, "op names"))
    # FP8 sums scaled per K block (ScaledMmaOp, SCALE_BLOCK)
    block_scaled: bool = attrs.field(default=False, validator=of_type(bool, "True or False"))

    @property
    def layout(self) -> Layout:
        """nvFuser MmaLayout letters derived from ``a_k_inner``/``b_k_inner``."""
        return Layout.from_k_inner(self.a_k_inner, self.b_k_inner)

    @property
    def precision(self) -> str:
        """Operand letter, ``S`` for the float32 accumulator, output letter (``"HSH"``)."""
        return f"{self.operand_dtype.char}S{self.output_dtype.char}"

    @property
    def shape_class(self) -> str:
        """The extents that name this problem's shape class (``m=1 n=4096 k=4096 batch=1``).

        A compiled fusion with symbolic extents plans once per class: the hooks see nothing
        of a call but its problem, so two calls of one problem get one answer.
        """
        return f"m={self.m} n={self.n} k={self.k} batch={self.batch}"

    def without_extents(self) -> MatmulProblem:
        """This problem with m, n, k and batch set to 1: all a built kernel specialises on
        (kernels take the extents at launch)."""
        return attrs.evolve(self, m=1, n=1, k=1, batch=1)

    def transposed(self) -> MatmulProblem:
        """The problem of C^T = B^T A^T: m and n exchanged, and so the operands' roles (the new
        A is this B, K-major when this B is) and their vector widths. A kernel that swaps its
        operands (``MatmulParams.swap_ab``) computes this one; the epilogue stays the fusion's."""
        vec = self.vector_widths
        return attrs.evolve(
            self,
            m=self.n,
            n=self.m,
            a_k_inner=self.b_k_inner,
            b_k_inner=self.a_k_inner,
            vector_widths=attrs.evolve(vec, a=vec.b, b=vec.a),
            a_prologue_ops=self.b_prologue_ops,
            b_prologue_ops=self.a_prologue_ops,
        )

    def describe(self) -> str:
        """One line: shape, layout with both conventions spelled out, precision."""
        batch = f"batch={self.batch} " if self.batch > 1 else ""
        horizontal = f" horizontal={self.horizontal}" if self.horizontal > 1 else ""
        horizontal += " block-scaled" if self.block_scaled else ""
        return (
            f"{batch}m={self.m} n={self.n} k={self.k} layout={self.layout.value} "
            f"(a_k_inner={self.a_k_inner}, b_k_inner={self.b_k_inner}) "
            f"precision={self.precision}{horizontal}"
        )
