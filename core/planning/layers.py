"""Override layers: which dotted keys set a common value (``cta_tile`` and ``cta_tile.m``), two
plugins' layers that set one value differently (an ``OverrideConflictError``), one plugin's
adjustments that do, and a layer that wins over those before it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from mmaplug.errors import MatmulError, OverrideConflictError
from mmaplug.planning.choices import Adjustment
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


def win(
    layers: dict[str, dict[str, object]],
    sources: dict[str, str],
    layer: str,
    source: str,
    changes: Mapping[str, object],
) -> list[str]:
    """*changes* as *layer*'s, from *source*, each dropping what the layers before it set of the
    same field (no conflict: the harness's and the caller's layers win); the fields set."""
    fields = []
    for key, value in changes.items():
        for earlier in layers.values():
            for other in [k for k in earlier if overlaps(k, key) and "." not in key]:
                del earlier[other]
        layers.setdefault(layer, {})[key] = value
        fields.append(key.partition(".")[0])
        sources[fields[-1]] = source
    return fields


def set_twice(adjustments: Sequence[Adjustment]) -> str:
    """The fault of one plugin's *adjustments* setting a field to two values, or ''."""
    first: dict[str, object] = {}
    for adj in adjustments:
        if first.setdefault(adj.field, adj.new) != adj.new:
            return (
                f"answered adjustments of {adj.field!r} to both {first[adj.field]!r} and "
                f"{adj.new!r}; one plugin changes a field once"
            )
    return ""
