"""Override layers: which dotted keys set a common value (``cta_tile`` and ``cta_tile.m``), and
two plugins' layers that set one value differently (an ``OverrideConflictError``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from mmaplug.errors import MatmulError, OverrideConflictError
from mmaplug.planning.params import to_tile

#: (plugin, changes): a layer of changes applied on top of valid params.
Layer = tuple[str, Mapping[str, object]]

_TILES: Final = frozenset({"cta_tile", "warp_tile", "instruction_tile"})


def check_agree(layers: Sequence[Layer], what: str) -> None:
    """Raise ``OverrideConflictError`` when two plugins' *layers* set one field differently."""
    seen: dict[str, tuple[object, str]] = {}
    for plugin, changes in layers:
        for key, value in changes.items():
            clash = find_clash(key, value, seen)
            if clash is not None:
                other, other_value, first = clash
                raise OverrideConflictError(
                    f"plugins {first!r} and {plugin!r} both {what} {key!r}: "
                    f"{other}={other_value!r} != {key}={value!r}; block one of them "
                    "(MMAPLUG_DISABLE) or make them agree",
                    field=key,
                    sources=(first, plugin),
                )
            seen.setdefault(key, (value, plugin))


def overlaps(a: str, b: str) -> bool:
    """Whether override keys *a* and *b* set a common value (``cta_tile`` and ``cta_tile.m``)."""
    field_a, _, dim_a = a.partition(".")
    field_b, _, dim_b = b.partition(".")
    return field_a == field_b and (not dim_a or not dim_b or dim_a == dim_b)


def find_clash(
    key: str, value: object, merged: Mapping[str, tuple[object, str]]
) -> tuple[str, object, str] | None:
    """The earlier override (key, value, source) setting part of *key* differently, if any."""
    for other, (other_value, source) in merged.items():
        if overlaps(key, other) and _part(key, value, other) != _part(other, other_value, key):
            return other, other_value, source
    return None


def _part(key: str, value: object, other: str) -> object:
    """The part of *value* (set by *key*) that *other* sets too, normalised for comparison."""
    field, _, dim = key.partition(".")
    if field not in _TILES or dim:
        return value
    try:
        tile = to_tile(value)
    except MatmulError:
        return value
    other_dim = other.partition(".")[2]
    return getattr(tile, other_dim) if other_dim else tile
