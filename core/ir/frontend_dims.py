"""Dim arithmetic the frontend's op builders share: agreement, extents, copies, merges, axes."""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.errors import FusionError
from mmaplug.ir.fusion import SYMBOLIC, IterDomain, IterType, TensorView


def agree(*dims: IterDomain) -> bool:
    """Whether *dims* may be one dim: equal static extents; a symbolic one fits any."""
    return len({d.extent for d in dims if not d.is_symbolic}) <= 1


def extent(*dims: IterDomain) -> int:
    """The static extent among *dims* (which agree), else SYMBOLIC."""
    return next((d.extent for d in dims if not d.is_symbolic), SYMBOLIC)


def copy_dim(d: IterDomain) -> IterDomain:
    """A new dim of *d*'s extent and iteration type."""
    return IterDomain(d.extent, d.iter_type)


def merge_dims(name: str, dims: Sequence[IterDomain], where: str = "") -> IterDomain:
    """Output dim of an element-wise op: concrete wins over broadcast; extents must agree
    (a symbolic extent agrees with any: the call's inputs must then make them equal)."""
    concrete = [d for d in dims if not d.is_broadcast]
    if not agree(*concrete):
        raise FusionError(
            f"{name}: {where or 'dims'} have extents {sorted({d.extent for d in concrete})}, "
            "which cannot be combined; extents must match or be 1 (broadcast)"
        )
    if concrete:
        return IterDomain(extent(*concrete), IterType.ITERATION)
    return IterDomain(max(d.extent for d in dims), IterType.BROADCAST)


def axis(t: TensorView, dim: int, what: str) -> int:
    """*dim* of *t* as a non-negative axis (negative counts from the end)."""
    rank = len(t.shape)
    if not -rank <= dim < rank:
        raise FusionError(f"{what}: dim {dim} is out of range for {t.name} of rank {rank}")
    return dim % rank
