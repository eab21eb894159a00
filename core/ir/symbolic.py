"""Symbolic (-1) extents: which dims a definition leaves open, bound per call from input shapes."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from mmaplug.errors import FusionError, MatmulError, UsageError
from mmaplug.ir.arguments import MAX_EXTENT
from mmaplug.ir.dim_graph import DimGraph
from mmaplug.ir.fusion import Fusion, IterDomain, TensorView

Shapes = Sequence[Sequence[int] | None]  # one shape per fusion input; None for a scalar


def symbolic_dims(fusion: Fusion) -> list[tuple[TensorView, int]]:
    """``(input, dim)`` of every symbolic extent; every other symbolic dim derives from these."""
    return [
        (tv, i)
        for tv in fusion.inputs
        if isinstance(tv, TensorView)
        for i, d in enumerate(tv.domain)
        if d.is_symbolic
    ]


def require_concrete(fusion: Fusion, what: str) -> None:
    """Raise UsageError when *fusion* still has symbolic extents (*what* needs them all)."""
    found = symbolic_dims(fusion)
    if found:
        dims = ", ".join(f"{tv.name} dim {i}" for tv, i in found)
        raise UsageError(
            f"{what} needs concrete extents; {fusion.origin} leaves {dims} symbolic (-1). "
            "mp.compile and mp.evaluate take such fusions (each call's inputs decide the "
            "extents); for a problem of given shapes use "
            "mmaplug.ir.symbolic.concretize(fusion, shapes) first"
        )


def shape_of(value: object) -> tuple[int, ...]:
    """The shape of an array-like input (torch, CuPy, Numba, numpy, nested sequences)."""
    shape = getattr(value, "shape", None)
    if shape is None:
        interface = getattr(value, "__cuda_array_interface__", None)
        if isinstance(interface, dict):
            shape = interface["shape"]
        else:
            shape = np.shape(value)  # type: ignore[call-overload]
    return tuple(int(e) for e in shape)


class Binding:
    """The extent of each symbolic dim class of a fusion, as the inputs ``read`` give them.

    A symbolic dim and every dim an op ties to it form one class (nvFuser's EXACT mode: a
    broadcast dim ties to nothing) and take one extent: the class's static one, or the first
    input's that gives it.

    A shape that contradicts the definition raises *error* (a ``MatmulError`` subclass)
    naming the input, the dim, the expected and the given extent: a wrong rank, a static
    extent, a broadcast (1) dim, or another input's extent of a dim the fusion uses as the
    same one.
    """

    def __init__(
        self, fusion: Fusion, *, error: type[MatmulError] = FusionError, where: str
    ) -> None:
        self._graph = DimGraph(fusion, exact=True)
        self._error, self._where = error, where
        self._values: dict[int, tuple[int, str]] = {}  # class -> (extent, who fixed it)
        for tv in fusion.tensors():
            for i, d in enumerate(tv.domain):
                if not (d.is_broadcast or d.is_symbolic):
                    self._fix(d, d.extent, f"{tv.name} dim {i} (declared {d.extent})", static=True)

    def extent(self, d: IterDomain) -> int | None:
        """The extent of *d*'s class (None while nothing fixes it)."""
        found = self._values.get(self._graph.group(d))
        return None if found is None else found[0]

    def read(self, tv: TensorView, shape: Sequence[int] | None) -> None:
        """Check input *tv*'s *shape* (None: a scalar was given) and fix its symbolic extents."""
        want = list(tv.shape)
        if shape is None or len(shape) != len(want):
            got = "a scalar" if shape is None else f"shape {list(shape)}"
            raise self._fail(
                f"input {tv.name} was declared with shape {want} ({len(want)} dims); got {got}"
            )
        for i, (d, e) in enumerate(zip(tv.domain, shape, strict=True)):
            if d.is_symbolic:
                if not 1 <= e < MAX_EXTENT:
                    raise self._fail(
                        f"input {tv.name} dim {i} (symbolic) is {e} in shape {list(shape)}; "
                        "extents run from 1 to 2**31 - 1 (skip calls on empty tensors)"
                    )
                self._fix(d, int(e), f"input {tv.name} dim {i}")
            elif e != d.extent:
                kind = "a broadcast dim" if d.is_broadcast else "a static extent"
                raise self._fail(
                    f"input {tv.name} dim {i} was declared {d.extent} ({kind}; declare it -1 "
                    f"to take any extent); got {e} (shape {list(shape)}, declared {want})"
                )

    def _fail(self, message: str) -> MatmulError:
        return self._error(f"{self._where}: {message}")

    def _fix(self, d: IterDomain, extent: int, who: str, *, static: bool = False) -> None:
        known = self._values.setdefault(self._graph.group(d), (extent, who))
        if known[0] == extent:
            return
        if static:
            raise self._fail(
                f"{known[1]} and {who} are one dim of the fusion (tied through symbolic "
                "extents) but differ; no extent fits both (define them alike)"
            )
        raise self._fail(
            f"{who} is {extent}, but the fusion uses it as one dim with {known[1]} = "
            f"{known[0]}; give both the same extent"
        )


def concretize(
    fusion: Fusion,
    shapes: Shapes,
    *,
    error: type[MatmulError] = FusionError,
    where: str = "concretize",
) -> Fusion:
    """A copy of *fusion* whose symbolic extents take the values *shapes* give them: what
    analysis, planning and the reference executor work on.

    :param shapes: One shape per fusion input (None for a scalar input).
    :raises error: A shape contradicts the definition (see ``Binding``), or *shapes* has not
        one entry per input.
    """
    if len(shapes) != len(fusion.inputs):
        raise error(
            f"{where}: the fusion takes {len(fusion.inputs)} inputs; got {len(shapes)} shapes"
        )
    binding = Binding(fusion, error=error, where=where)
    for tv, shape in zip(fusion.inputs, shapes, strict=True):
        if isinstance(tv, TensorView):
            binding.read(tv, shape)
    memo: dict[int, object] = {}
    work = copy.deepcopy(fusion, memo)
    for tv in fusion.tensors():
        for d in tv.domain:
            if d.is_symbolic:
                extent = binding.extent(d)
                assert extent is not None, "every symbolic dim descends from an input's"
                memo[id(d)].extent = extent  # type: ignore[attr-defined]
    return work
