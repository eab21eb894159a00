"""MatmulParams and its parts: tiles, orders, violations, overrides and test sentinels."""

from __future__ import annotations

import contextvars
import difflib
import enum
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, cast

import attrs

from mmaplug.errors import InvalidParamsError, UnknownParamError, UsageError


@attrs.frozen
class Violation:
    """One broken rule: the field, its value, the limit in words and a message with the fix."""

    field: str
    value: object
    limit: str
    message: str


class Violations(list[Violation]):
    """Collects violations from tinygrad-style check lines (``found.check(ok, field, ...)``)."""

    def check(self, ok: bool, field: str, value: object, limit: str, message: str) -> None:
        """Record a violation unless *ok*."""
        if not ok:
            self.append(Violation(field, value, limit, message))


def _fail(field: str, value: object, limit: str, message: str) -> InvalidParamsError:
    """An ``InvalidParamsError`` carrying the single violation described."""
    return InvalidParamsError(message, (Violation(field, value, limit, message),))


def _as_int(value: object) -> object:
    """Integral non-bool values become ``int``; anything else is left for the validator."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def _int_at_least(low: int) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    """Validator: an ``int`` (not bool) that is ``>= low``."""

    def check(_instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise _fail(
                attribute.name,
                value,
                f">= {low}",
                f"{attribute.name}={value!r} is not allowed; it must be an int >= {low}.",
            )

    return check


def _is_bool(_instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: a real ``bool``."""
    if not isinstance(value, bool):
        raise _fail(
            attribute.name, value, "bool", f"{attribute.name}={value!r} must be True or False."
        )


@attrs.frozen
class TileShape:
    """An (m, n, k) tile of a CTA, a warp (warp group on Hopper) or one MMA instruction."""

    m: int = attrs.field(converter=_as_int, validator=_int_at_least(1))
    n: int = attrs.field(converter=_as_int, validator=_int_at_least(1))
    k: int = attrs.field(converter=_as_int, validator=_int_at_least(1))

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def as_tuple(self) -> tuple[int, int, int]:
        """The tile as a plain ``(m, n, k)`` tuple."""
        return (self.m, self.n, self.k)


def to_tile(value: object) -> TileShape:
    """Convert a ``TileShape`` (returned as is) or any ``(m, n, k)`` sequence to a ``TileShape``."""
    if isinstance(value, TileShape):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 3:
        return TileShape(*value)
    raise _fail("tile", value, "(m, n, k)", f"tile {value!r} must be a TileShape or (m, n, k).")


class _ReprEnum(enum.StrEnum):
    """A StrEnum whose ``repr`` evaluates back (``CtaOrder.row_major``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class CtaOrder(_ReprEnum):
    """Grid order of output tiles; ``column_major`` puts M tiles on blockIdx.x (the fast axis)."""

    row_major = "row_major"
    column_major = "column_major"


class TilingStrategy(_ReprEnum):
    """One output tile per CTA, or persistent CTAs looping over tiles (Hopper only); with
    ``persistent_pingpong`` two consumer warp groups of a CTA take alternate tiles, so one
    stores its epilogue while the other runs its main loop (Hopper only); with
    ``persistent_streamk`` (nvFuser's ``DistributeStagesAcrossSMs``) the tiles that would make
    a last, partly filled wave are cut along K into ``splitk_factor`` pieces, and the CTA that
    finishes a tile's last piece adds the others' partial sums and runs the epilogue (Hopper
    only)."""

    one_tile_per_cta = "one_tile_per_cta"
    persistent = "persistent"
    persistent_pingpong = "persistent_pingpong"
    persistent_streamk = "persistent_streamk"


def _to_pair(value: object) -> object:
    """Sequences become tuples of ints (idempotent); anything else is left for the validator."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_as_int(v) for v in value)
    return value


def _is_cluster(_instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: a pair of positive ints (cluster size along m and n)."""
    ok = (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    )
    if not ok:
        raise _fail(
            attribute.name,
            value,
            "(m, n) positive ints",
            f"{attribute.name}={value!r} must be a pair of positive ints (m, n).",
        )


def _enum_field(kind: type[enum.StrEnum], default: enum.StrEnum) -> Any:
    """An attrs field holding a member of *kind*; its values' strings are accepted too."""

    def convert(value: object) -> object:
        if not isinstance(value, str):  # no other value equals a member
            return value
        try:
            return kind(value)
        except ValueError:
            return value

    def check(_instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            valid = ", ".join(member.value for member in kind)
            raise _fail(
                attribute.name, value, valid, f"{attribute.name}={value!r} must be one of {valid}."
            )

    return attrs.field(default=default, converter=convert, validator=check)


def named_tile(name: str, value: object) -> TileShape:
    """``to_tile`` for the tile field *name*: a bad tile's error names that field (``cta_tile``,
    or ``cta_tile.m`` for one bad dimension), not the TileShape's own ``m``."""
    try:
        return to_tile(value)
    except InvalidParamsError as error:
        (inner,) = error.violations
        field = f"{name}.{inner.field}" if inner.field in ("m", "n", "k") else name
        message = f"{name}={value!r} is not allowed: {inner.message}"
        raise _fail(field, value, inner.limit, message) from None


# the tile fields' converters, one each (typed, so that type checkers accept (m, n, k) tuples)
def _cta_tile(value: TileShape | Sequence[int]) -> TileShape:
    return named_tile("cta_tile", value)


def _warp_tile(value: TileShape | Sequence[int]) -> TileShape:
    return named_tile("warp_tile", value)


def _instruction_tile(value: TileShape | Sequence[int]) -> TileShape:
    return named_tile("instruction_tile", value)


def _int_field(default: int, low: int = 1) -> Any:
    return attrs.field(default=default, converter=_as_int, validator=_int_at_least(low))


def _bool_field(default: bool) -> Any:
    return attrs.field(default=default, validator=_is_bool)


@attrs.frozen(kw_only=True)
class MatmulParams:
    """Everything a scheduler needs to build one matmul kernel (nvFuser's ``MatmulParams``).

    Build changed copies with :meth:`with_overrides`; arch legality lives in
    ``mmaplug.plugins.<arch>.limits``, here only the rules that hold on every target.
    For a horizontal problem (``problem.horizontal`` h > 1) the tiles describe the MMA:
    ``cta_tile.n`` is the width of the h B tiles stacked (one wgmma of that N on hopper), so
    the output tile is ``cta_tile.n / h`` columns.
    """

    cta_tile: TileShape = attrs.field(converter=_cta_tile)
    warp_tile: TileShape = attrs.field(converter=_warp_tile)
    instruction_tile: TileShape = attrs.field(converter=_instruction_tile)
    stages: int = _int_field(2)
    prefetch_gap: int = _int_field(1)
    async_gmem_load_operands: bool = _bool_field(True)
    cta_order: CtaOrder = _enum_field(CtaOrder, CtaOrder.row_major)
    grid_swizzle_factor: int = _int_field(1)
    splitk_factor: int = _int_field(1)
    use_smem_epilogue: bool = _bool_field(False)
    cluster_dims: tuple[int, int] = attrs.field(
        default=(1, 1), converter=_to_pair, validator=_is_cluster
    )
    tiling_strategy: TilingStrategy = _enum_field(TilingStrategy, TilingStrategy.one_tile_per_cta)
    warp_specialized: bool = _bool_field(False)
    swap_ab: bool = _bool_field(False)
    splitk_in_cluster: bool = _bool_field(False)

    def __attrs_post_init__(self) -> None:
        found = _cross_field_violations(self)
        if found:
            raise InvalidParamsError("\n".join(v.message for v in found), tuple(found))

    @property
    def name(self) -> str:
        """A stable readable name; after ``_s{stages}_k{split}`` only non-default fields appear."""
        parts = [
            f"cta{self.cta_tile}_warp{self.warp_tile}_inst{self.instruction_tile}",
            f"s{self.stages}",
            f"k{self.splitk_factor}",
        ]
        if self.prefetch_gap != 1:
            parts.append(f"pg{self.prefetch_gap}")
        if not self.async_gmem_load_operands:
            parts.append("sync")
        if self.cta_order is CtaOrder.column_major:
            parts.append("col")
        if self.grid_swizzle_factor != 1:
            parts.append(f"sw{self.grid_swizzle_factor}")
        if self.use_smem_epilogue:
            parts.append("smemepi")
        if self.cluster_dims != (1, 1):
            parts.append(f"cl{self.cluster_dims[0]}x{self.cluster_dims[1]}")
        if self.tiling_strategy is not TilingStrategy.one_tile_per_cta:
            parts.append(self.tiling_strategy.value)
        if self.warp_specialized:
            parts.append("ws")
        if self.swap_ab:
            parts.append("swapab")
        if self.splitk_in_cluster:
            parts.append("kcluster")
        return "_".join(parts)

    def as_dict(self) -> dict[str, object]:
        """Plain values (tiles as tuples, enums as strings); ``MatmulParams(**d)`` rebuilds."""
        out: dict[str, object] = {}
        for field in attrs.fields(MatmulParams):
            value = getattr(self, field.name)
            if isinstance(value, TileShape):
                value = value.as_tuple()
            elif isinstance(value, enum.StrEnum):
                value = value.value
            out[field.name] = value
        return out

    def with_overrides(self, **changes: object) -> MatmulParams:
        """A copy with *changes* applied; ``cta_tile.k=64`` style keys change one tile dimension.

        :raises UnknownParamError: a key is not a field (the message suggests the nearest one).
        :raises InvalidParamsError: the result breaks a rule.
        """
        check_param_names(changes)
        flat: dict[str, Any] = {}
        for key, value in changes.items():
            if "." in key:
                tile_name, dim = key.split(".", 1)
                tile = named_tile(tile_name, flat.get(tile_name, getattr(self, tile_name)))
                dims = {**dict(zip("mnk", tile.as_tuple(), strict=True)), dim: value}
                flat[tile_name] = named_tile(tile_name, tuple(dims.values()))
            else:
                flat[key] = value
        return attrs.evolve(self, **flat)


PARAM_NAMES: Final[tuple[str, ...]] = tuple(attrs.fields_dict(MatmulParams))
_TILE_FIELDS: Final = frozenset({"cta_tile", "warp_tile", "instruction_tile"})


def check_param_names(keys: Iterable[str], *, source: str = "") -> None:
    """Check override keys against the MatmulParams fields (``"cta_tile.k"`` is allowed too).

    :param source: who supplied the keys (a plugin name), quoted in the message.
    :raises UnknownParamError: naming the bad key, the nearest valid name and all valid names.
    """
    for key in keys:
        base, _, dim = str(key).partition(".")
        if base in PARAM_NAMES and (not dim or (base in _TILE_FIELDS and dim in ("m", "n", "k"))):
            continue
        near = difflib.get_close_matches(str(key), PARAM_NAMES, n=1)
        origin = f" from {source!r}" if source else ""
        hint = f"; did you mean {near[0]!r}?" if near else ";"
        raise UnknownParamError(
            f"unknown parameter {key!r}{origin}{hint} valid: {', '.join(PARAM_NAMES)}"
        )


def _cross_field_violations(p: MatmulParams) -> list[Violation]:
    """Rules spanning fields that every scheduler needs; all are reported together."""
    found: list[Violation] = []
    for outer, inner, what in (
        ("cta_tile", "warp_tile", "Pick a CTA tile that is a multiple of the warp tile."),
        ("warp_tile", "instruction_tile", "Pick a warp tile that is a multiple of it."),
    ):
        big, small = getattr(p, outer), getattr(p, inner)
        bad = [d for d in "mnk" if getattr(big, d) % getattr(small, d)]
        if bad:
            found.append(
                Violation(
                    outer,
                    big,
                    f"multiple of {inner} {small}",
                    f"{outer}={big} is not divisible by {inner}={small} along "
                    f"{', '.join(bad)}. {what}",
                )
            )
    if p.cta_tile.k != p.warp_tile.k:
        found.append(
            Violation(
                "warp_tile",
                p.warp_tile,
                f"k == cta_tile.k ({p.cta_tile.k})",
                f"warp_tile.k={p.warp_tile.k} differs from cta_tile.k={p.cta_tile.k}; "
                "warps do not split K. Set both k to the same value.",
            )
        )
    if p.prefetch_gap > p.stages:
        found.append(
            Violation(
                "prefetch_gap",
                p.prefetch_gap,
                f"<= stages ({p.stages})",
                f"prefetch_gap={p.prefetch_gap} exceeds stages={p.stages}. "
                "Lower prefetch_gap or raise stages.",
            )
        )
    return found


@attrs.frozen
class ParamOverride:
    """Partial changes to MatmulParams from one *source* (a plugin name), checked on creation.

    ``changes`` is stored as a sorted tuple of pairs (hashable); read it back as a mapping.
    """

    source: str = attrs.field(validator=lambda _, __, value: _check_source(value))
    _items: tuple[tuple[str, object], ...] = attrs.field(
        alias="changes", converter=lambda c: _sorted_items(c)
    )

    def __attrs_post_init__(self) -> None:
        check_param_names((key for key, _ in self._items), source=self.source)

    @property
    def changes(self) -> Mapping[str, object]:
        """The changes as a read-only mapping of field name to value."""
        return MappingProxyType(dict(self._items))

    def __repr__(self) -> str:
        return f"ParamOverride(source={self.source!r}, changes={dict(self._items)!r})"


def _check_source(source: object) -> None:
    """A ParamOverride's source is the name provenance and error messages show."""
    if not isinstance(source, str) or not source:
        raise UsageError(
            f"ParamOverride source {source!r} is not allowed; it must be a non-empty str, the "
            "name provenance shows (usually the plugin's own)"
        )


def _sorted_items(changes: object) -> tuple[tuple[str, object], ...]:
    """Mappings (or pair sequences) become sorted pairs; list values become tuples."""
    pairs = changes.items() if isinstance(changes, Mapping) else cast("Iterable[Any]", changes)
    items = ((str(k), tuple(v) if isinstance(v, list) else v) for k, v in pairs)
    return tuple(sorted(items, key=lambda kv: kv[0]))


# For each tunable field, a legal value the built-in defaults never choose (tests inject these
# and check they arrive untouched).  SENTINEL_SCHEDULERS says where each one is legal:
# * cta_tile / warp_tile / instruction_tile are ONE set: apply them together.  The Ampere default
#   always uses cta_k 32 and the Hopper default cta_k >= 64, so k=48 never appears;
#   (64, 48, 64) over (64, 48, 64) is legal on both (one warp on Ampere, one consumer warp
#   group on Hopper); no default uses n = 48. instruction (64, 48, 16) is Hopper-only: Ampere
#   only has m16n8k16, which it always uses.
# * stages=7: Ampere caps at 4, Hopper at 6; 7 stages of the sentinel tiles fit both targets.
# * grid_swizzle_factor=3: defaults use 1 or 8.
# * splitk_factor=3: defaults use powers of two; needs K >= 3 * cta_k.
# * tiling_strategy=one_tile_per_cta: Hopper only (its default is always persistent).
# prefetch_gap, cluster_dims and warp_specialized have no sentinel: no scheduler builds a
# value other than the default's (prefetch_gap=1, no clusters, hopper always warp-specialized).
# swap_ab and splitk_in_cluster have none: the hopper default chooses both values.
# async_gmem_load_operands, cta_order and use_smem_epilogue have no sentinel: the defaults
# choose both values (use_smem_epilogue is True on Ampere, whose kernel always stages the
# epilogue through smem, and False on Hopper).
SENTINELS: Final[Mapping[str, object]] = MappingProxyType(
    {
        "cta_tile": TileShape(64, 48, 64),
        "warp_tile": TileShape(64, 48, 64),
        "instruction_tile": TileShape(64, 48, 16),
        "stages": 7,
        "grid_swizzle_factor": 3,
        "splitk_factor": 3,
        "tiling_strategy": TilingStrategy.one_tile_per_cta,
    }
)

_BOTH: Final = frozenset({"ampere", "hopper"})
#: The sentinels that need the tile sentinels on a scheduler: 7 stages of hopper's default
#: tiles (128x256x64) exceed its shared memory; of the sentinel tiles they fit.
SENTINELS_WITH_TILES: Final[Mapping[str, str]] = MappingProxyType({"stages": "hopper"})
SENTINEL_SCHEDULERS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "cta_tile": _BOTH,
        "warp_tile": _BOTH,
        "instruction_tile": frozenset({"hopper"}),
        "stages": _BOTH,
        "grid_swizzle_factor": _BOTH,
        "splitk_factor": _BOTH,
        "tiling_strategy": frozenset({"hopper"}),
    }
)


#: The changes of the ``mmaplug.testing.override_matmul_params`` blocks active in this thread or
#: asyncio task (an inner block's keys win). The built-in ``testing`` plugin answers them as its
#: overrides; the planner lets them win over other plugins' and faults when that plugin is
#: blocked (they would change nothing).
HARNESS_CHANGES: Final[contextvars.ContextVar[Mapping[str, object]]] = contextvars.ContextVar(
    "mmaplug_override_matmul_params", default=MappingProxyType({})
)
