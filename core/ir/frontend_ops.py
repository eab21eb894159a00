"""``fd.ops``: the matmul family, element-wise ops and reductions (shape ops in frontend_shapes)."""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.errors import FusionError
from mmaplug.ir import arguments
from mmaplug.ir import frontend_dims as fdims
from mmaplug.ir.dtypes import DType
from mmaplug.ir.frontend_shape_ops import Operand, ShapeOps
from mmaplug.ir.fusion import IterDomain, IterType, TensorView, Val
from mmaplug.ir.ops import (
    SCALE_BLOCK,
    BinaryOp,
    CastOp,
    LinearOp,
    MatmulOp,
    MaxReductionOp,
    MmaOp,
    ReductionOp,
    ScaledMmaOp,
    SetOp,
    UnaryOp,
    result_dtype,
)


class Ops(ShapeOps):
    """``fd.ops``: every operation a fusion may contain."""

    # -- matmul family ------------------------------------------------------------------------
    def matmul(self, a: TensorView, b: TensorView) -> TensorView:
        """``torch.matmul``: A ``[*, M, K]`` or ``[K]`` times B ``[*, K, N]`` or ``[K]``.

        The product has the operands' dtype, but FP8 operands give float32 (the accumulator):
        an FP8 product is scaled before it is rounded (see ``scaled_mm``), never rounded to FP8
        implicitly."""
        a, b = self._tensor(a, "matmul"), self._tensor(b, "matmul")
        self._same_dtype("matmul", a, b)
        ad, bd = a.no_reduction_domain, b.no_reduction_domain
        if not ad or not bd:
            raise FusionError("matmul: operands must have at least one dim; got a 0-d tensor")
        k_a = ad[-1]
        k_b = bd[0] if len(bd) == 1 else bd[-2]
        if not fdims.agree(k_a, k_b):
            raise FusionError(
                f"matmul: K of {a.name} is {k_a.extent} but K of {b.name} is {k_b.extent}; "
                "A's last dim must equal B's second-to-last dim (its only dim when 1-D)"
            )
        a_batch = ad[:-2] if len(ad) > 1 else []
        b_batch = bd[:-2] if len(bd) > 1 else []
        batch = self._broadcast_batch("matmul", a_batch, b_batch)
        body = list(batch)
        if len(ad) > 1:
            body.append(fdims.copy_dim(ad[-2]))
        if len(bd) > 1:
            body.append(fdims.copy_dim(bd[-1]))
        body.append(IterDomain(fdims.extent(k_a, k_b), IterType.REDUCTION))
        out = self._new(_product_dtype(a.dtype), body)
        self._fusion.attach(MatmulOp([out], [a, b]))
        return out

    def scaled_mm(
        self,
        a: TensorView,
        b: TensorView,
        scale_a: TensorView,
        scale_b: TensorView,
        bias: TensorView | None = None,
        out_dtype: DType = DType.bfloat16,
    ) -> TensorView:
        """``torch._scaled_mm``: FP8 A ``[M, K]`` times FP8 B ``[K, N]``, each product scaled.

        Scales are float32, in one of three forms:

        - per tensor: ``scale_a`` and ``scale_b`` ``[]``, ``[1]`` or ``[1, 1]``;
        - per row of A / column of B: ``scale_a`` ``[M, 1]``, ``scale_b`` ``[1, N]`` (either
          may be per tensor);
        - per block (DeepSeek-V3): ``scale_a`` ``[M, ceil(K / 128)]`` (1 x 128 blocks along K),
          ``scale_b`` ``[ceil(K / 128), ceil(N / 128)]`` (128 x 128 blocks).

        The first two scale the product: ``cast(matmul(a, b) * (scale_a * scale_b) + bias,
        out_dtype)``, written with those ops (so ``mp.evaluate`` and every scheduler see one
        definition). Block scales scale each K block's partial sums before they are added
        (a ``ScaledMmaOp``), then the bias and cast follow. ``bias`` is ``[N]`` of float16,
        bfloat16 or float32, ``out_dtype`` float16, bfloat16 or float32.
        """
        a, b = self._tensor(a, "scaled_mm"), self._tensor(b, "scaled_mm")
        self._same_dtype("scaled_mm", a, b)
        if not a.dtype.is_float8:
            raise FusionError(
                f"scaled_mm: operands are {a.dtype.label}; it takes float8_e4m3fn or float8_e5m2 "
                "(use matmul for 16-bit operands)"
            )
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise FusionError(
                f"scaled_mm: {a.name} has shape {list(a.shape)} and {b.name} {list(b.shape)}; "
                "it takes A [M, K] and B [K, N], as torch._scaled_mm"
            )
        out_dtype = arguments.dtype(out_dtype, "scaled_mm: out_dtype")
        if out_dtype not in (DType.float16, DType.bfloat16, DType.float32):
            raise FusionError(
                f"scaled_mm: out_dtype {out_dtype.label} is not accepted; use float16, bfloat16 "
                "or float32 (then cast, where an FP8 result is wanted)"
            )
        rows, cols = a.no_reduction_domain[0], b.no_reduction_domain[1]
        for label, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
            if not isinstance(scale, TensorView):
                raise FusionError(
                    f"scaled_mm: {label} is {getattr(scale, 'name', repr(scale))}, not a tensor; "
                    "scales are float32 tensors, [] for one per tensor "
                    "(fd.define_tensor([], dtype=mp.float32))"
                )
        scales = [
            self._tensor(scale_a, "scaled_mm scale_a"),
            self._tensor(scale_b, "scaled_mm scale_b"),
        ]
        forms = [_scale_form(scales[0], 0, rows), _scale_form(scales[1], 1, cols)]
        blocks = _block_shapes(a, b)
        if None in forms:
            as_blocks = [
                blocks is not None and tuple(t.shape) == shape and t.dtype is DType.float32
                for t, shape in zip(scales, blocks or ((), ()), strict=True)
            ]
            if not all(as_blocks):
                # the scale that fits no form, else the one that is not a block (the other is)
                neither = [i for i in (0, 1) if forms[i] is None and not as_blocks[i]]
                which = (neither or [as_blocks.index(False)])[0]
                bad = scales[which]
                block = (
                    "[M, ceil(K / 128)] and [ceil(K / 128), ceil(N / 128)] for a static K and "
                    "N (a symbolic one takes the other forms)"
                )
                if blocks:
                    block = f"{list(blocks[0])} and {list(blocks[1])}"
                raise FusionError(
                    f"scaled_mm: {('scale_a', 'scale_b')[which]} {bad.name} is "
                    f"{bad.dtype.label}{list(bad.shape)}; scales must be float32: [], [1] or "
                    "[1, 1] (per tensor), [M, 1] and [1, N] (per row of A / column of B) or "
                    f"{block} (blocks of 1x128 and 128x128)"
                )
            y = self._block_scaled(a, b, *scales)
        else:
            scale_a, scale_b = (
                self.broadcast_in_dim(s, [1, 1], [1]) if len(s.no_reduction_domain) == 1 else s
                for s in scales
            )
            # the scales' product first, as torch's per-tensor path (cuBLASLt's alpha): one
            # multiply an element where both are per tensor, the product computed once
            y = self.mul(self.matmul(a, b), self.mul(scale_a, scale_b))
        if bias is not None:
            bias = self._tensor(bias, "scaled_mm bias")
            bd = bias.no_reduction_domain
            if len(bd) != 1 or not fdims.agree(bd[0], cols) or bias.dtype.itemsize not in (2, 4):
                raise FusionError(
                    f"scaled_mm: bias {bias.name} is {bias.dtype.label}{list(bias.shape)}; it "
                    f"must be [N] = [{cols.extent}] of float16, bfloat16 or float32"
                )
            y = self.add(y, bias)
        return y if out_dtype is DType.float32 else self.cast(y, out_dtype)

    def _block_scaled(
        self, a: TensorView, b: TensorView, scale_a: TensorView, scale_b: TensorView
    ) -> TensorView:
        """The block-scaled sum of ``scaled_mm``: a ScaledMmaOp of A ``[M, 1, K]`` and B
        ``[1, N, K]`` (B transposed, as a weight is stored), float32 ``[M, N]``."""
        (m, k), n = a.shape, b.shape[1]
        a3 = self.broadcast_in_dim(a, [m, 1, k], [0, 2])
        b3 = self.broadcast_in_dim(self.permute(b, [1, 0]), [1, n, k], [1, 2])
        ad, bd = a.no_reduction_domain, b.no_reduction_domain
        domain = [
            fdims.copy_dim(ad[0]),
            fdims.copy_dim(bd[1]),
            IterDomain(fdims.extent(ad[1], bd[0]), IterType.REDUCTION),
        ]
        out = self._new(DType.float32, domain)
        self._fusion.attach(ScaledMmaOp(out, a3, b3, scale_a, scale_b, [2]))
        return out

    def linear(self, a: TensorView, w: TensorView, bias: TensorView | None = None) -> TensorView:
        """``F.linear``: input ``[*, K]``, weight ``[N, K]`` (or ``[K]``), optional bias ``[N]``.

        The bias has the operands' dtype; with FP8 operands it is float16, bfloat16 or float32
        (the product is float32, see ``matmul``)."""
        a, w = self._tensor(a, "linear"), self._tensor(w, "linear")
        operands = [a, w] + ([self._tensor(bias, "linear bias")] if bias is not None else [])
        self._same_dtype("linear", *(operands if not a.dtype.is_float8 else operands[:2]))
        if bias is not None and a.dtype.is_float8 and operands[2].dtype.itemsize not in (2, 4):
            raise FusionError(
                f"linear: bias {operands[2].name} is {operands[2].dtype.label}; with FP8 operands "
                "the bias is float16, bfloat16 or float32"
            )
        ad, wd = a.no_reduction_domain, w.no_reduction_domain
        if not ad:
            raise FusionError(f"linear: input {a.name} must have at least one dim")
        if len(wd) not in (1, 2):
            raise FusionError(
                f"linear: weight {w.name} has rank {len(wd)}; F.linear takes [N, K] or [K]"
            )
        if not fdims.agree(ad[-1], wd[-1]):
            raise FusionError(
                f"linear: K of input {a.name} is {ad[-1].extent} but K of weight {w.name} is "
                f"{wd[-1].extent}; both must have K as their last dim"
            )
        body = [fdims.copy_dim(d) for d in ad[:-1]]
        if len(wd) == 2:
            body.append(fdims.copy_dim(wd[0]))
            if bias is not None:
                bias_t = operands[2]
                bd = bias_t.no_reduction_domain
                if len(bd) != 1 or not fdims.agree(bd[0], wd[0]):
                    raise FusionError(
                        f"linear: bias {bias_t.name} has shape {list(bias_t.shape)}; "
                        f"it must be [N] = [{wd[0].extent}]"
                    )
        elif bias is not None:
            raise FusionError("linear: a bias needs a 2-D weight [N, K]")
        body.append(IterDomain(fdims.extent(ad[-1], wd[-1]), IterType.REDUCTION))
        out = self._new(_product_dtype(a.dtype), body)
        self._fusion.attach(LinearOp([out], operands))
        return out

    def fused_multiply_sum(
        self, a: TensorView, b: TensorView, dims: Sequence[int] = (-1,)
    ) -> TensorView:
        """nvFuser's ``fusedMultiplySum``: an MmaOp on same-rank 16-bit or FP8 operands,
        float32 out."""
        a, b = self._tensor(a, "fused_multiply_sum"), self._tensor(b, "fused_multiply_sum")
        self._same_dtype("fused_multiply_sum", a, b)
        if not a.dtype.is_narrow:
            raise FusionError(
                f"fused_multiply_sum: operands are {a.dtype.label}; MmaOp takes float16, "
                "bfloat16, float8_e4m3fn or float8_e5m2 operands (cast them first)"
            )
        if len(a.shape) != len(b.shape):
            raise FusionError(
                f"fused_multiply_sum: {a.name} has rank {len(a.shape)} and {b.name} rank "
                f"{len(b.shape)}; MmaOp operands must have the same rank (broadcast first)"
            )
        dims = arguments.ints(dims, "fused_multiply_sum: dims", scalar_ok=True)
        if len(dims) != 1:
            raise FusionError(f"fused_multiply_sum: exactly one reduction dim; got {list(dims)}")
        axis = fdims.axis(a, dims[0], "fused_multiply_sum")
        ad, bd = a.no_reduction_domain, b.no_reduction_domain
        if ad[axis].is_broadcast and bd[axis].is_broadcast:
            raise FusionError(
                f"fused_multiply_sum: the reduction dim {axis} is a broadcast (size 1) in both "
                f"{a.name} and {b.name}; K must be a real dim of both operands"
            )
        domain = []
        for i, (da, db) in enumerate(zip(ad, bd, strict=True)):
            where = f"dim {i} of {a.name} and {b.name}"
            merged = fdims.merge_dims("fused_multiply_sum", [da, db], where)
            if i == axis:
                merged = IterDomain(merged.extent, IterType.REDUCTION)
            domain.append(merged)
        return self._emit(MmaOp, self._new(DType.float32, domain), a, b, [axis])

    # -- element-wise ---------------------------------------------------------------------------
    def add(self, x: Operand, y: Operand) -> TensorView:
        """``x + y`` with broadcasting; either side may be a Python number or a scalar."""
        return self._binary("add", x, y)

    def sub(self, x: Operand, y: Operand) -> TensorView:
        """``x - y`` with broadcasting."""
        return self._binary("sub", x, y)

    def mul(self, x: Operand, y: Operand) -> TensorView:
        """``x * y`` with broadcasting."""
        return self._binary("mul", x, y)

    def neg(self, x: TensorView) -> TensorView:
        """``-x``."""
        return self._unary("neg", x)

    def relu(self, x: TensorView) -> TensorView:
        """``max(x, 0)``."""
        return self._unary("relu", x)

    def gelu(self, x: TensorView) -> TensorView:
        """GELU, exact (erf) form."""
        return self._unary("gelu", x)

    def silu(self, x: TensorView) -> TensorView:
        """``x * sigmoid(x)``."""
        return self._unary("silu", x)

    def sigmoid(self, x: TensorView) -> TensorView:
        """``1 / (1 + exp(-x))``."""
        return self._unary("sigmoid", x)

    def sin(self, x: TensorView) -> TensorView:
        """``sin(x)``."""
        return self._unary("sin", x)

    def cos(self, x: TensorView) -> TensorView:
        """``cos(x)``."""
        return self._unary("cos", x)

    def exp(self, x: TensorView) -> TensorView:
        """``e**x``."""
        return self._unary("exp", x)

    def log(self, x: TensorView) -> TensorView:
        """Natural logarithm."""
        return self._unary("log", x)

    def tanh(self, x: TensorView) -> TensorView:
        """``tanh(x)``."""
        return self._unary("tanh", x)

    def abs(self, x: TensorView) -> TensorView:
        """``|x|``."""
        return self._unary("abs", x)

    def reciprocal(self, x: TensorView) -> TensorView:
        """``1 / x``."""
        return self._unary("reciprocal", x)

    def sqrt(self, x: TensorView) -> TensorView:
        """``sqrt(x)``."""
        return self._unary("sqrt", x)

    def rsqrt(self, x: TensorView) -> TensorView:
        """``1 / sqrt(x)``."""
        return self._unary("rsqrt", x)

    def erf(self, x: TensorView) -> TensorView:
        """The error function."""
        return self._unary("erf", x)

    def div(self, x: Operand, y: Operand) -> TensorView:
        """``x / y`` (true division: the ops here compute in floating point)."""
        return self._binary("div", x, y)

    truediv = div

    def maximum(self, x: Operand, y: Operand) -> TensorView:
        """Element-wise ``max(x, y)``."""
        return self._binary("maximum", x, y)

    def minimum(self, x: Operand, y: Operand) -> TensorView:
        """Element-wise ``min(x, y)``."""
        return self._binary("minimum", x, y)

    def cast(self, x: TensorView, dtype: DType) -> TensorView:
        """Convert to *dtype*, rounding to nearest even."""
        x = self._tensor(x, "cast")
        dtype = arguments.dtype(dtype, f"cast of {x.name}: dtype")
        out = self._new(dtype, [fdims.copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(CastOp([out], [x]))
        return out

    def set(self, x: TensorView) -> TensorView:
        """A copy of *x*."""
        x = self._tensor(x, "set")
        out = self._new(x.dtype, [fdims.copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(SetOp([out], [x]))
        return out

    def sum(self, x: TensorView, dims: Sequence[int], dtype: DType | None = None) -> TensorView:
        """Sum over *dims*; half inputs accumulate and return in float32."""
        x = self._tensor(x, "sum")
        if dtype is not None:
            dtype = arguments.dtype(dtype, f"sum of {x.name}: dtype")
        axes = self._reduced_axes(x, dims, "sum")
        domain = [
            IterDomain(d.extent, IterType.REDUCTION if i in axes else d.iter_type)
            for i, d in enumerate(x.no_reduction_domain)
        ]
        x = self._promoted(x)  # type: ignore[assignment]
        return self._emit(ReductionOp, self._new(dtype or x.dtype, domain), x, axes)

    def max(self, x: TensorView, dims: Sequence[int]) -> TensorView:
        """The maximum over *dims*, in *x*'s dtype; a NaN anywhere gives NaN (``np.max``,
        ``torch.amax``). In a matmul fusion, kernels take the maximum of ``abs`` of an epilogue
        value over every output dim (see :meth:`amax`)."""
        x = self._tensor(x, "max")
        axes = self._reduced_axes(x, dims, "max")
        domain = [
            IterDomain(d.extent, IterType.REDUCTION if i in axes else d.iter_type)
            for i, d in enumerate(x.no_reduction_domain)
        ]
        return self._emit(MaxReductionOp, self._new(x.dtype, domain), x, axes)

    def amax(self, x: TensorView, dims: Sequence[int]) -> TensorView:
        """``max(abs(x), dims)``, float32 for half and FP8 *x*: the amax a quantised layer keeps
        of its output for delayed scaling (``amax = fd.ops.amax(y, [0, 1])`` beside
        ``cast(y * scale, float8_e4m3fn)``)."""
        return self.max(self.abs(x), dims)

    # -- internals --------------------------------------------------------------------------------
    def _reduced_axes(self, x: TensorView, dims: Sequence[int], what: str) -> list[int]:
        """The positions *dims* name in *x* (negative from the end), sorted; at least one."""
        dims = arguments.ints(dims, f"{what} of {x.name}: dims", scalar_ok=True)
        axes = sorted({fdims.axis(x, d, what) for d in dims})
        if not axes:
            raise FusionError(f"{what} of {x.name}: give at least one dim to reduce; got {dims}")
        return axes

    def _promoted(self, x: Val) -> Val:
        """Half and FP8 tensors enter arithmetic through an explicit cast to float32, as in
        nvFuser."""
        if isinstance(x, TensorView) and x.dtype.is_narrow:
            return self.cast(x, DType.float32)
        return x

    def _same_dtype(self, what: str, *tensors: TensorView) -> None:
        if len({t.dtype for t in tensors}) > 1:
            found = ", ".join(f"{t.name}: {t.dtype.label}" for t in tensors)
            raise FusionError(f"{what}: operands must share one dtype; found {found}")

    def _broadcast_batch(
        self, what: str, a: Sequence[IterDomain], b: Sequence[IterDomain]
    ) -> list[IterDomain]:
        n = max(len(a), len(b))
        pa = [None] * (n - len(a)) + list(a)
        pb = [None] * (n - len(b)) + list(b)
        out = []
        for i, (da, db) in enumerate(zip(pa, pb, strict=True)):
            dims = [d for d in (da, db) if d is not None]
            try:
                out.append(fdims.merge_dims(what, dims))
            except FusionError:
                raise FusionError(
                    f"{what}: batch dim {i} has extents {[d.extent for d in dims]}; batch dims "
                    "must match or be 1"
                ) from None
        return out

    def _align(self, what: str, x: TensorView, rank: int) -> TensorView:
        if len(x.shape) == rank:
            return x
        extra = rank - len(x.shape)
        shape = [1] * extra + list(x.shape)
        return self.broadcast_in_dim(x, shape, list(range(extra, rank)))

    def _binary(self, op: str, x: Operand, y: Operand) -> TensorView:
        xv, yv = self._value(x, op), self._value(y, op)
        tensors = [v for v in (xv, yv) if isinstance(v, TensorView)]
        if not tensors:
            raise FusionError(f"{op}: at least one operand must be a tensor")
        tensors = [self._tensor(t, op) for t in tensors]
        rank = max(len(t.shape) for t in tensors)
        if isinstance(xv, TensorView):
            xv = self._align(op, self._tensor(xv, op), rank)
        if isinstance(yv, TensorView):
            yv = self._align(op, self._tensor(yv, op), rank)
        names = " and ".join(t.name for t in tensors)
        xv, yv = self._promoted(xv), self._promoted(yv)
        aligned = [v for v in (xv, yv) if isinstance(v, TensorView)]
        domain = [
            fdims.merge_dims(op, [t.no_reduction_domain[i] for t in aligned], f"dim {i} of {names}")
            for i in range(rank)
        ]
        out = self._new(result_dtype(xv, yv), domain)
        self._fusion.attach(BinaryOp(out, xv, yv, op))
        return out

    def _unary(self, op: str, x: TensorView) -> TensorView:
        x = self._promoted(self._tensor(x, op))  # type: ignore[assignment]
        out = self._new(result_dtype(x), [fdims.copy_dim(d) for d in x.no_reduction_domain])
        self._fusion.attach(UnaryOp(out, x, op))
        return out


def _product_dtype(operands: DType) -> DType:
    """The dtype of a matmul of *operands*: theirs, but float32 for FP8."""
    return DType.float32 if operands.is_float8 else operands


def _scale_form(scale: TensorView, line: int, extent_dim: IterDomain) -> str | None:
    """``"tensor"`` or ``"line"`` (``[M, 1]`` when *line* is 0, ``[1, N]`` when 1) for a float32
    scale of that form, else None."""
    if scale.dtype is not DType.float32:
        return None
    dims = scale.no_reduction_domain
    if len(dims) <= 2 and all(d.extent == 1 for d in dims):
        return "tensor"
    if len(dims) == 2 and fdims.agree(dims[line], extent_dim) and dims[1 - line].extent == 1:
        return "line"
    return None


def _block_shapes(a: TensorView, b: TensorView) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The shapes of block scales of A ``[M, K]`` and B ``[K, N]``: a symbolic M is -1 in
    both (the scale's rows are then bound with A's); None for a symbolic K or N (a block count
    needs them)."""
    (m, k), n = a.shape, b.shape[1]
    if min(k, n) < 0:
        return None
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return (m, kb), (kb, nb)
