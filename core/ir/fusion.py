"""The Fusion IR graph: tensors, iteration domains, scalars, the ``Expr`` node and ``Fusion``.

The built-in op kinds are ``mmaplug.ir.ops``; a plugin may add its own ``Expr`` subclass.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import ClassVar, Final

from mmaplug.errors import FusionError, UsageError
from mmaplug.ir.dtypes import DType


class IterType(enum.StrEnum):
    """What a tensor dimension is: a plain loop, a summed-over axis, or a size-1 broadcast."""

    ITERATION = "i"
    REDUCTION = "r"
    BROADCAST = "b"


class MemoryType(enum.StrEnum):
    """Where a tensor lives; fusion inputs and outputs are global."""

    GLOBAL = "global"
    SHARED = "shared"
    LOCAL = "local"


#: The extent of a symbolic dim (nvFuser's ``-1``): known only when inputs arrive.
SYMBOLIC: Final = -1


class IterDomain:
    """One dimension of one tensor. Identity matters: ops map input dims to output dims.

    ``extent`` is ``SYMBOLIC`` (-1) for a dim whose size each call's inputs decide.
    """

    __slots__ = ("extent", "iter_type")

    def __init__(self, extent: int, iter_type: IterType = IterType.ITERATION) -> None:
        self.extent = extent
        self.iter_type = iter_type

    @property
    def is_reduction(self) -> bool:
        return self.iter_type is IterType.REDUCTION

    @property
    def is_broadcast(self) -> bool:
        return self.iter_type is IterType.BROADCAST

    @property
    def is_symbolic(self) -> bool:
        return self.extent == SYMBOLIC

    def __repr__(self) -> str:
        prefix = "" if self.iter_type is IterType.ITERATION else self.iter_type.value
        return f"{prefix}{self.extent}"


class Val:
    """A value in a fusion: a tensor or a scalar."""

    definition: Expr | None
    uses: list[Expr]
    name: str
    #: The fusion that created this value (set by ``Fusion.new_tensor``/``new_scalar``).
    owner: Fusion | None = None


class Scalar(Val):
    """A float scalar: a constant (``value`` set) or a fusion input (``value`` None)."""

    def __init__(self, name: str, dtype: DType, value: float | None = None) -> None:
        self.name = name
        self.dtype = dtype
        self.value = value
        self.definition = None
        self.uses = []

    @property
    def is_constant(self) -> bool:
        return self.value is not None

    def __repr__(self) -> str:
        return repr(self.value) if self.is_constant else self.name


class TensorView(Val):
    """A tensor: dtype, logical domain (reductions kept in place), allocation order, memory.

    ``alloc_order`` lists the non-reduction logical positions from outermost to innermost in
    memory. ``alias_of`` is set by the skip-intermediates analysis on metadata ops whose output a
    scheduler may read straight from the fusion input it names.
    """

    def __init__(
        self,
        name: str,
        dtype: DType,
        domain: Sequence[IterDomain],
        alloc_order: Sequence[int] | None = None,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.domain = list(domain)
        positions = [i for i, d in enumerate(self.domain) if not d.is_reduction]
        self.alloc_order = list(alloc_order) if alloc_order is not None else positions
        self.memory_type = MemoryType.LOCAL
        self.definition = None
        self.uses = []
        self.alias_of: TensorView | None = None

    @property
    def rank(self) -> int:
        """Number of logical dims, reductions included."""
        return len(self.domain)

    @property
    def shape(self) -> tuple[int, ...]:
        """Extents of the value this tensor holds (reduction dims excluded)."""
        return tuple(d.extent for d in self.domain if not d.is_reduction)

    @property
    def no_reduction_domain(self) -> list[IterDomain]:
        return [d for d in self.domain if not d.is_reduction]

    @property
    def allocation(self) -> list[IterDomain]:
        """Dims in memory order, outermost first."""
        return [self.domain[i] for i in self.alloc_order]

    @property
    def stride_order(self) -> list[int]:
        """nvFuser's ``stride_order`` over the value's dims: 0 marks the innermost."""
        value_positions = [i for i, d in enumerate(self.domain) if not d.is_reduction]
        rank_of = {pos: len(self.alloc_order) - 1 - j for j, pos in enumerate(self.alloc_order)}
        return [rank_of[p] for p in value_positions]

    def __repr__(self) -> str:
        return self.name

    def describe(self) -> str:
        """``T0: float16[128, b1, 64]`` plus the stride order when it is not row-major."""
        dims = ", ".join(repr(d) for d in self.domain)
        text = f"{self.name}: {self.dtype.label}[{dims}]"
        order = self.stride_order
        if order != sorted(order, reverse=True):
            text += f" stride_order={order}"
        if self.alias_of is not None:
            text += f" (alias of {self.alias_of.name})"
        return text


class Expr:
    """An op node. Subclasses declare ``kind`` and how input dims map to output dims."""

    kind: ClassVar[str] = "expr"

    def __init__(self, outputs: Sequence[TensorView], inputs: Sequence[Val]) -> None:
        self.outputs = list(outputs)
        self.inputs = list(inputs)

    @property
    def output(self) -> TensorView:
        return self.outputs[0]

    def dim_pairs(self) -> Iterator[tuple[IterDomain, IterDomain]]:
        """(input dim, output dim) pairs that are the same loop; default: position by position.

        An input's reduction dims (a sum or an MmaOp result) are gone from its value, wherever
        they sit, so the input's value dims pair with the output's dims in order.
        """
        for inp in self.inputs:
            if isinstance(inp, TensorView):
                yield from zip(inp.no_reduction_domain, self.output.domain, strict=False)

    def attrs_text(self) -> str:
        return ""

    def __repr__(self) -> str:
        args = ", ".join(repr(v) for v in self.inputs)
        extra = self.attrs_text()
        return f"{self.output.name} = {self.kind}({args}{', ' + extra if extra else ''})"


class Fusion:
    """A DAG of ops between ordered inputs and outputs. Mutated in place by translation."""

    def __init__(self, origin: str = "a Fusion built directly") -> None:
        self.inputs: list[Val] = []
        self.outputs: list[TensorView] = []
        self.origin = origin  # who built it, for messages ("fusion definition #2 (x.py:10)")
        self._next_id = 0  # an int, not itertools.count: fusions are deep-copied

    # -- building ---------------------------------------------------------------------------
    def _fresh_name(self, prefix: str) -> str:
        self._next_id += 1
        return f"{prefix}{self._next_id - 1}"

    def new_tensor(
        self,
        dtype: DType,
        domain: Sequence[IterDomain],
        alloc_order: Sequence[int] | None = None,
    ) -> TensorView:
        tv = TensorView(self._fresh_name("T"), dtype, domain, alloc_order)
        tv.owner = self
        return tv

    def new_scalar(self, dtype: DType, value: float | None = None) -> Scalar:
        scalar = Scalar(self._fresh_name("S"), dtype, value)
        scalar.owner = self
        return scalar

    def add_input(self, val: Val) -> None:
        if isinstance(val, TensorView):
            val.memory_type = MemoryType.GLOBAL
        self.inputs.append(val)

    def add_output(self, tv: TensorView) -> None:
        if not isinstance(tv, TensorView):
            raise FusionError(f"add_output takes a tensor; got {tv!r}")
        if tv in self.outputs:
            raise FusionError(f"{tv.name} is already an output of this fusion")
        tv.memory_type = MemoryType.GLOBAL
        self.outputs.append(tv)

    def attach(self, expr: Expr) -> Expr:
        """Make *expr* the definition of its outputs and a use of its inputs."""
        for inp in expr.inputs:
            inp.uses.append(expr)
        for out in expr.outputs:
            out.definition = expr
        return expr

    def detach(self, expr: Expr) -> None:
        """Remove *expr* from its inputs' uses (its outputs keep it until redefined)."""
        for inp in expr.inputs:
            if expr in inp.uses:
                inp.uses.remove(expr)

    def replace_uses(self, old: Val, new: Val, *, skip: Expr | None = None) -> None:
        """Make every use of *old* (except *skip*) read *new*; outputs move over too."""
        for use in list(old.uses):
            if use is skip:
                continue
            use.inputs = [new if v is old else v for v in use.inputs]
            old.uses.remove(use)
            new.uses.append(use)
        if isinstance(old, TensorView) and old in self.outputs:
            assert isinstance(new, TensorView)
            self.outputs[self.outputs.index(old)] = new
            new.memory_type = MemoryType.GLOBAL

    # -- traversal --------------------------------------------------------------------------
    def exprs(self) -> list[Expr]:
        """Every op that some output depends on, producers before consumers."""
        order: list[Expr] = []
        seen: set[int] = set()
        stack: list[tuple[Val, bool]] = [(tv, False) for tv in reversed(self.outputs)]
        while stack:
            val, expanded = stack.pop()
            expr = val.definition
            if expr is None or (id(expr) in seen and not expanded):
                continue
            if expanded:
                if id(expr) not in seen:
                    seen.add(id(expr))
                    order.append(expr)
                continue
            stack.append((val, True))
            stack.extend((inp, False) for inp in expr.inputs if inp.definition is not None)
        return order

    def tensors(self) -> list[TensorView]:
        """Inputs, then every op output in producer order."""
        out = [v for v in self.inputs if isinstance(v, TensorView)]
        for expr in self.exprs():
            out.extend(o for o in expr.outputs if o not in out)
        return out

    def __repr__(self) -> str:
        lines = ["Fusion:"]
        for val in self.inputs:
            if isinstance(val, TensorView):
                lines.append(f"  input  {val.describe()}")
            else:
                lines.append(f"  input  {val.name}: {val.dtype.label} scalar")  # type: ignore[attr-defined]
        for expr in self.exprs():
            lines.append(f"  {expr!r:<40} # {expr.output.describe()}")
        lines.append("  outputs: " + ", ".join(tv.name for tv in self.outputs))
        return "\n".join(lines)


def as_fusion(value: object, what: str) -> Fusion:
    """*value* if it is a Fusion, the fusion of a FusionDefinition, else a UsageError."""
    if isinstance(value, Fusion):
        return value
    inner = getattr(value, "fusion", None)
    if isinstance(inner, Fusion):
        return inner
    raise UsageError(
        f"{what} takes a Fusion or a FusionDefinition (fd or fd.fusion); got "
        f"{type(value).__name__} {value!r:.60}"
    )
