"""The built-in ops of the Fusion IR: element-wise, metadata, reductions (sum, max), matmuls.

Each is an ``Expr`` that says how its input dims map to its output dims (``dim_pairs``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar, Final

from mmaplug.ir.dtypes import DType, promote
from mmaplug.ir.fusion import Expr, IterDomain, Scalar, TensorView, Val


class UnaryOp(Expr):
    """Element-wise ``op`` of one tensor (one of ``OPS``)."""

    kind = "unary"
    OPS: ClassVar[tuple[str, ...]] = (
        "neg", "relu", "gelu", "silu", "sigmoid", "sin",
        "cos", "exp", "log", "tanh", "abs", "reciprocal", "sqrt", "rsqrt", "erf",
    )  # fmt: skip

    def __init__(self, out: TensorView, inp: TensorView, op: str) -> None:
        super().__init__([out], [inp])
        self.op = op

    def __repr__(self) -> str:
        return f"{self.output.name} = {self.op}({self.inputs[0]!r})"


class BinaryOp(Expr):
    """Element-wise ``op`` (one of ``OPS``) of two same-rank tensors, or a tensor and a scalar."""

    kind = "binary"
    OPS: ClassVar[tuple[str, ...]] = ("add", "sub", "mul", "div", "maximum", "minimum")

    def __init__(self, out: TensorView, lhs: Val, rhs: Val, op: str) -> None:
        super().__init__([out], [lhs, rhs])
        self.op = op

    def __repr__(self) -> str:
        return f"{self.output.name} = {self.op}({self.inputs[0]!r}, {self.inputs[1]!r})"


class CastOp(Expr):
    """Convert to ``output.dtype`` (rounding to nearest even)."""

    kind = "cast"

    def attrs_text(self) -> str:
        return f"dtype={self.output.dtype.label}"


class SetOp(Expr):
    """A copy (nvFuser ``set``); a metadata op."""

    kind = "set"


class BroadcastOp(Expr):
    """Insert broadcast dims where ``flags`` is True; a metadata op."""

    kind = "broadcast"

    def __init__(self, out: TensorView, inp: TensorView, flags: Sequence[bool]) -> None:
        super().__init__([out], [inp])
        self.flags = tuple(flags)

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        kept = [d for d, new in zip(self.output.domain, self.flags, strict=True) if not new]
        yield from zip(self.inputs[0].no_reduction_domain, kept, strict=True)  # type: ignore[attr-defined]

    def attrs_text(self) -> str:
        return f"flags={list(self.flags)}"


class SqueezeOp(Expr):
    """Remove the broadcast dims at ``dims``; a metadata op."""

    kind = "squeeze"

    def __init__(self, out: TensorView, inp: TensorView, dims: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.dims = tuple(dims)

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        inp = self.inputs[0]
        assert isinstance(inp, TensorView)
        kept = [d for i, d in enumerate(inp.no_reduction_domain) if i not in self.dims]
        yield from zip(kept, self.output.domain, strict=True)

    def attrs_text(self) -> str:
        return f"dims={list(self.dims)}"


class PermuteOp(Expr):
    """Output dim ``j`` is input dim ``perm[j]``; a metadata op."""

    kind = "permute"

    def __init__(self, out: TensorView, inp: TensorView, perm: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.perm = tuple(perm)

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        inp = self.inputs[0]
        assert isinstance(inp, TensorView)
        dims = inp.no_reduction_domain
        for j, p in enumerate(self.perm):
            yield dims[p], self.output.domain[j]

    def attrs_text(self) -> str:
        return f"dims={list(self.perm)}"


class ReductionOp(Expr):
    """Sum over ``axes``; the output keeps them in place as reduction dims."""

    kind = "sum"

    def __init__(self, out: TensorView, inp: TensorView, axes: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.axes = tuple(axes)

    def attrs_text(self) -> str:
        return f"dims={list(self.axes)}"


class MaxReductionOp(Expr):
    """Maximum over ``axes`` (a NaN anywhere gives NaN, as ``np.max``); the output keeps them
    in place as reduction dims. An op of its own, not a ``ReductionOp``: the matmul recognisers
    read a ``ReductionOp`` of a mul as a matmul, and a max is no sum."""

    kind = "max"

    def __init__(self, out: TensorView, inp: TensorView, axes: Sequence[int]) -> None:
        super().__init__([out], [inp])
        self.axes = tuple(axes)

    def attrs_text(self) -> str:
        return f"dims={list(self.axes)}"


class MmaOp(Expr):
    """Tensor-core multiply-sum: same-rank operands, float32 result, one reduction axis."""

    kind = "mma"

    def __init__(self, out: TensorView, a: TensorView, b: TensorView, axes: Sequence[int]) -> None:
        super().__init__([out], [a, b])
        self.axes = tuple(axes)

    def attrs_text(self) -> str:
        return f"dims={list(self.axes)}"


#: K (and N) elements that share one scale of a block-scaled matmul (DeepSeek-V3's recipe:
#: 1x128 blocks of A, 128x128 blocks of B).
SCALE_BLOCK: Final = 128


def several_scale_blocks(columns: int) -> bool:
    """Whether *columns* of a block-scaled product are several whole blocks of B's scales (a
    hopper warp tile that wide is promoted a chunk of columns at a time: the kernel's rule, and
    what the default heuristic plans around)."""
    return columns > SCALE_BLOCK and columns % SCALE_BLOCK == 0


class ScaledMmaOp(MmaOp):
    """A block-scaled MmaOp: A ``[M, 1, K]`` and B ``[1, N, K]`` (FP8), float32 out ``[M, N]``,
    ``out[m, n] = sum_j scale_a[m, j] scale_b[j, n // block] sum_{k in block j} a[m, k] b[k, n]``
    with K blocks ``j`` of ``block`` elements (the last may be shorter). ``scale_a`` is float32
    ``[M, ceil(K / block)]`` (1 x block along K), ``scale_b`` float32
    ``[ceil(K / block), ceil(N / block)]`` (block x block). The scales are loop inputs of the
    sum, not epilogue inputs. ``scale_a``'s rows are A's rows, so they join M (a symbolic M
    binds both); their other dims count blocks, not M, N or K, and join no dim.
    """

    kind = "scaled_mma"

    def __init__(
        self,
        out: TensorView,
        a: TensorView,
        b: TensorView,
        scale_a: TensorView,
        scale_b: TensorView,
        axes: Sequence[int],
        block: int = SCALE_BLOCK,
    ) -> None:
        super().__init__(out, a, b, axes)
        self.inputs += [scale_a, scale_b]
        self.block = block

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        for inp in self.inputs[:2]:
            assert isinstance(inp, TensorView)
            yield from zip(inp.no_reduction_domain, self.output.domain, strict=False)
        scale_a = self.inputs[2]
        assert isinstance(scale_a, TensorView)
        yield scale_a.no_reduction_domain[0], self.output.domain[0]

    def attrs_text(self) -> str:
        return f"dims={list(self.axes)}, block={self.block}"


class MatmulOp(Expr):
    """``torch.matmul`` semantics: A ``[*, M, K]`` or ``[K]``, B ``[*, K, N]`` or ``[K]``."""

    kind = "matmul"

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        a_tv, b_tv = self.inputs
        assert isinstance(a_tv, TensorView) and isinstance(b_tv, TensorView)
        a, b = a_tv.no_reduction_domain, b_tv.no_reduction_domain
        out = self.output.domain
        k_out = out[-1] if out and out[-1].is_reduction else None
        if k_out is not None:
            yield a[-1], k_out
            yield b[0 if len(b) == 1 else -2], k_out
        body = out[:-1] if k_out is not None else out
        # Non-K dims, aligned from the right: [..batch, M, N] with M from A and N from B.
        a_rest = a[:-1]
        b_rest = [] if len(b) == 1 else [*b[:-2], b[-1]]
        if len(b) > 1:
            yield b_rest[-1], body[-1]
            b_batch, body_b = b_rest[:-1], body[:-1]
        else:
            b_batch, body_b = [], body
        if len(a) > 1:
            yield a_rest[-1], body_b[-1]
            a_batch, batch_out = a_rest[:-1], body_b[:-1]
        else:
            a_batch, batch_out = [], body_b
        for dims in (a_batch, b_batch):
            yield from zip(reversed(dims), reversed(batch_out), strict=False)


class LinearOp(Expr):
    """``F.linear`` semantics: input ``[*, K]``, weight ``[N, K]`` or ``[K]``, bias ``[N]``."""

    kind = "linear"

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        a_tv, w_tv = self.inputs[0], self.inputs[1]
        assert isinstance(a_tv, TensorView) and isinstance(w_tv, TensorView)
        a, w = a_tv.no_reduction_domain, w_tv.no_reduction_domain
        out = self.output.domain
        k_out = out[-1] if out and out[-1].is_reduction else None
        if k_out is not None:
            yield a[-1], k_out
            yield w[-1], k_out
        body = out[:-1] if k_out is not None else out
        if len(w) == 2:
            yield w[0], body[-1]
            for bias in self.inputs[2:]:
                assert isinstance(bias, TensorView)
                yield bias.no_reduction_domain[-1], body[-1]
            body = body[:-1]
        yield from zip(a[:-1], body, strict=True)


METADATA_OPS: tuple[type[Expr], ...] = (BroadcastOp, SqueezeOp, PermuteOp, SetOp)


def result_dtype(*vals: Val) -> DType:
    """The dtype element-wise arithmetic on *vals* produces (half types compute in float32).

    As in nvFuser and torch, a scalar never promotes a tensor: only tensors decide the type
    (``float16 tensor * float64 scalar`` computes in float32 and ``float32 * float64 scalar``
    stays float32); the scalar is converted to that type.
    """
    tensors = [v.dtype for v in vals if isinstance(v, TensorView)]
    dtypes = tensors or [v.dtype for v in vals if isinstance(v, Scalar)]
    result = dtypes[0]
    for d in dtypes[1:]:
        result = promote(result, d)
    if result.is_narrow:
        return promote(result, result)
    return result
