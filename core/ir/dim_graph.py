"""DimGraph: which dims of a fusion are one loop (a union-find over the ops' dim pairs)."""

from __future__ import annotations

from mmaplug.ir.fusion import Fusion, IterDomain


class DimGraph:
    """Dims that are one loop, across the whole fusion (nvFuser's BROADCAST-mode IdModel).

    With *exact*, a broadcast dim joins nothing (nvFuser's EXACT mode): every class then holds
    dims of one extent, which is what binding symbolic extents needs.
    """

    def __init__(self, fusion: Fusion, *, exact: bool = False) -> None:
        self._parent: dict[int, int] = {}
        self._dims: dict[int, IterDomain] = {}
        for tv in fusion.tensors():
            for d in tv.domain:
                self._add(d)
        for expr in fusion.exprs():
            for src, dst in expr.dim_pairs():
                if not (exact and (src.is_broadcast or dst.is_broadcast)):
                    self._union(src, dst)

    def _add(self, d: IterDomain) -> None:
        self._parent.setdefault(id(d), id(d))
        self._dims[id(d)] = d

    def _find(self, key: int) -> int:
        while self._parent[key] != key:
            self._parent[key] = self._parent[self._parent[key]]
            key = self._parent[key]
        return key

    def _union(self, a: IterDomain, b: IterDomain) -> None:
        self._add(a)
        self._add(b)
        ra, rb = self._find(id(a)), self._find(id(b))
        if ra != rb:
            self._parent[ra] = rb

    def group(self, d: IterDomain) -> int:
        """The id of *d*'s equivalence class."""
        self._add(d)
        return self._find(id(d))

    def extent(self, group: int) -> int:
        """The concrete extent of a class (1 when every member is a broadcast)."""
        extents = [
            d.extent
            for key, d in self._dims.items()
            if self._find(key) == group and not d.is_broadcast
        ]
        return max(extents, default=1)
