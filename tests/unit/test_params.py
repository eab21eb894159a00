"""Tests for TileShape, MatmulParams validation and overrides, ParamOverride and SENTINELS."""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import numpy as np
import pytest

import mmaplug.planning.params as params_module
from mmaplug.errors import InvalidParamsError, UnknownParamError
from mmaplug.planning.params import (
    PARAM_NAMES,
    SENTINEL_SCHEDULERS,
    SENTINELS,
    CtaOrder,
    MatmulParams,
    ParamOverride,
    TileShape,
    TilingStrategy,
    Violation,
    check_param_names,
)

BASE: dict[str, Any] = {
    "cta_tile": (128, 128, 32),
    "warp_tile": (64, 64, 32),
    "instruction_tile": (16, 8, 16),
}


def make(**changes: Any) -> MatmulParams:
    return MatmulParams(**{**BASE, **changes})


FULL = make(
    stages=4,
    prefetch_gap=2,
    async_gmem_load_operands=False,
    cta_order=CtaOrder.column_major,
    grid_swizzle_factor=8,
    splitk_factor=2,
    use_smem_epilogue=True,
    cluster_dims=(1, 2),
    tiling_strategy=TilingStrategy.persistent,
    warp_specialized=True,
)


@pytest.mark.parametrize(
    "value",
    [(128, 64, 32), [128, 64, 32], TileShape(128, 64, 32), (np.int64(128), 64, 32)],
    ids=["tuple", "list", "tileshape", "numpy_int"],
)
def test_tiles_accept_sequences(value: Any) -> None:
    """A tile field takes a TileShape or any (m, n, k) sequence and stores a TileShape of ints."""
    p = make(cta_tile=value, warp_tile=(64, 64, 32))
    assert p.cta_tile == TileShape(128, 64, 32)
    assert type(p.cta_tile.m) is int


def test_tile_converter_is_idempotent() -> None:
    """Converting a TileShape returns the same object, so attrs.evolve keeps it."""
    tile = TileShape(64, 64, 32)
    assert params_module.to_tile(tile) is tile
    assert str(tile) == "64x64x32" and tile.as_tuple() == (64, 64, 32)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ((128, 128), "must be a TileShape or"),
        ("128x128x32", "must be a TileShape or"),
        ((0, 128, 32), r"m=0 is not allowed"),
        ((128, -8, 32), r"n=-8 is not allowed"),
    ],
    ids=["two_dims", "string", "zero", "negative"],
)
def test_bad_tiles_are_rejected(value: Any, match: str) -> None:
    """Malformed or non-positive tiles raise InvalidParamsError."""
    with pytest.raises(InvalidParamsError, match=match):
        make(cta_tile=value)


def test_defaults() -> None:
    """Fields other than the tiles default to nvFuser's values."""
    p = make()
    assert (p.stages, p.prefetch_gap, p.async_gmem_load_operands) == (2, 1, True)
    assert (p.cta_order, p.grid_swizzle_factor, p.splitk_factor) == (CtaOrder.row_major, 1, 1)
    assert (p.use_smem_epilogue, p.cluster_dims, p.warp_specialized) == (False, (1, 1), False)
    assert p.tiling_strategy is TilingStrategy.one_tile_per_cta


def test_field_names_are_fixed() -> None:
    """MatmulParams has exactly the agreed fields, in order."""
    assert PARAM_NAMES == (
        "cta_tile",
        "warp_tile",
        "instruction_tile",
        "stages",
        "prefetch_gap",
        "async_gmem_load_operands",
        "cta_order",
        "grid_swizzle_factor",
        "splitk_factor",
        "use_smem_epilogue",
        "cluster_dims",
        "tiling_strategy",
        "warp_specialized",
        "swap_ab",
        "splitk_in_cluster",
    )


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"stages": 0}, r"stages=0 is not allowed; it must be an int >= 1"),
        ({"stages": True}, r"stages=True is not allowed"),
        ({"stages": 2.5}, r"stages=2.5 is not allowed"),
        ({"prefetch_gap": 0}, r"prefetch_gap=0 is not allowed"),
        ({"grid_swizzle_factor": 0}, r"grid_swizzle_factor=0 is not allowed"),
        ({"splitk_factor": -1}, r"splitk_factor=-1 is not allowed"),
        ({"async_gmem_load_operands": 1}, r"must be True or False"),
        ({"use_smem_epilogue": "yes"}, r"must be True or False"),
        ({"warp_specialized": None}, r"must be True or False"),
        ({"cta_order": "diagonal"}, r"cta_order='diagonal' must be one of row_major, column_major"),
        ({"tiling_strategy": "stream_k"}, r"must be one of one_tile_per_cta, persistent"),
        ({"cluster_dims": (0, 1)}, r"must be a pair of positive ints"),
        ({"cluster_dims": (1, 2, 1)}, r"must be a pair of positive ints"),
    ],
    ids=lambda v: "-".join(f"{k}={v[k]}" for k in v) if isinstance(v, dict) else "",
)
def test_field_validators(changes: dict[str, Any], match: str) -> None:
    """Each field rejects values outside its own range with InvalidParamsError."""
    with pytest.raises(InvalidParamsError, match=match) as info:
        make(**changes)
    assert len(info.value.violations) == 1
    assert info.value.violations[0].field == next(iter(changes))


@pytest.mark.parametrize(
    ("changes", "field", "match"),
    [
        (
            {"cta_tile": (96, 128, 32)},
            "cta_tile",
            r"cta_tile=96x128x32 is not divisible by warp_tile=64x64x32 along m",
        ),  # noqa: E501
        (
            {"warp_tile": (64, 60, 32), "cta_tile": (128, 120, 32)},
            "warp_tile",
            r"warp_tile=64x60x32 is not divisible by instruction_tile=16x8x16 along n",
        ),  # noqa: E501
        ({"warp_tile": (64, 64, 64)}, "warp_tile", r"warp_tile.k=64 differs from cta_tile.k=32"),
        ({"stages": 2, "prefetch_gap": 3}, "prefetch_gap", r"prefetch_gap=3 exceeds stages=2"),
    ],
    ids=["warp_divides_cta", "inst_divides_warp", "same_k", "gap_le_stages"],
)
def test_cross_field_rules(changes: dict[str, Any], field: str, match: str) -> None:
    """Each rule spanning fields raises InvalidParamsError naming the field."""
    with pytest.raises(InvalidParamsError, match=match) as info:
        make(**changes)
    assert field in {v.field for v in info.value.violations}


def test_all_cross_field_violations_reported_at_once() -> None:
    """Every broken cross-field rule appears in one error."""
    with pytest.raises(InvalidParamsError, match="prefetch_gap=3") as info:
        make(cta_tile=(96, 128, 48), warp_tile=(64, 64, 40), stages=1, prefetch_gap=3)
    fields = [v.field for v in info.value.violations]
    assert fields == ["cta_tile", "warp_tile", "warp_tile", "prefetch_gap"]
    assert all(isinstance(v, Violation) for v in info.value.violations)


def test_invalid_params_error_pickles() -> None:
    """InvalidParamsError and its violations survive pickling (subprocess autotuning)."""
    with pytest.raises(InvalidParamsError, match="exceeds stages") as info:
        make(stages=1, prefetch_gap=2)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.violations == info.value.violations and str(again) == str(info.value)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("num_stage", "stages"), ("splitk", "splitk_factor"), ("cta_tiles", "cta_tile")],
    ids=["num_stage", "splitk", "cta_tiles"],
)
def test_unknown_override_suggests_field(key: str, suggestion: str) -> None:
    """An unknown override key raises UnknownParamError with a near miss and the valid names."""
    with pytest.raises(
        UnknownParamError,
        match=rf"unknown parameter '{key}'; did you mean '{suggestion}'\? valid: cta_tile, "
        "warp_tile",
    ):
        make().with_overrides(**{key: 3})


def test_unknown_override_without_near_miss() -> None:
    """A key close to nothing still lists the valid names; the error is also a KeyError."""
    with pytest.raises(KeyError, match=r"unknown parameter 'zzz'; valid: cta_tile"):
        make().with_overrides(zzz=1)


def test_with_overrides_accepts_tuples_and_keeps_original() -> None:
    """Tiles take (m, n, k) tuples; the original params object is unchanged."""
    p = make()
    q = p.with_overrides(cta_tile=(256, 128, 64), warp_tile=(64, 64, 64), stages=3)
    assert q.cta_tile == TileShape(256, 128, 64) and q.stages == 3
    assert p == make()


def test_with_overrides_dotted_tile_keys() -> None:
    """``cta_tile.k`` style keys change one dimension of a tile."""
    q = make().with_overrides(**{"cta_tile.k": 64, "warp_tile.k": 64, "cta_tile.n": 256})
    assert q.cta_tile == TileShape(128, 256, 64) and q.warp_tile == TileShape(64, 64, 64)
    with pytest.raises(UnknownParamError, match=r"unknown parameter 'stages.m'"):
        make().with_overrides(**{"stages.m": 1})


def test_with_overrides_revalidates() -> None:
    """An override that breaks a rule raises InvalidParamsError."""
    with pytest.raises(InvalidParamsError, match="differs from cta_tile.k"):
        make().with_overrides(cta_tile=(128, 128, 64))


def test_enum_fields_accept_strings() -> None:
    """cta_order and tiling_strategy accept their string values."""
    p = make(cta_order="column_major", tiling_strategy="persistent")
    assert p.cta_order is CtaOrder.column_major and p.tiling_strategy is TilingStrategy.persistent


@pytest.mark.parametrize(
    "p", [make(), FULL, make(stages=3)], ids=["defaults", "everything_set", "stages3"]
)  # noqa: E501
def test_repr_round_trip(p: MatmulParams) -> None:
    """repr() evaluates back to an equal MatmulParams."""
    assert eval(repr(p), vars(params_module)) == p  # noqa: S307 - the point of the test


@pytest.mark.parametrize(
    ("p", "name"),
    [
        (make(stages=3), "cta128x128x32_warp64x64x32_inst16x8x16_s3_k1"),
        (
            FULL,
            "cta128x128x32_warp64x64x32_inst16x8x16_s4_k2_pg2_sync_col_sw8_smemepi_cl1x2_persistent_ws",
        ),  # noqa: E501
    ],
    ids=["plain", "everything_set"],
)
def test_name_is_stable(p: MatmulParams, name: str) -> None:
    """The name spells tiles, stages and split-K, then every non-default field."""
    assert p.name == name


def test_as_dict_is_plain_and_rebuilds() -> None:
    """as_dict() holds only plain values and MatmulParams(**as_dict()) is equal."""
    d = FULL.as_dict()
    assert d["cta_tile"] == (128, 128, 32) and d["cta_order"] == "column_major"
    assert all(type(v) in (tuple, int, bool, str) for v in d.values())
    assert MatmulParams(**d) == FULL


def test_params_are_frozen_and_hashable() -> None:
    """MatmulParams cannot be mutated and can key a dict."""
    p = make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.stages = 3  # type: ignore[misc]
    assert {p: 1}[make()] == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cta_tile": (0, 256, 64)}, "cta_tile.m"),
        ({"warp_tile.k": 0}, "warp_tile.k"),
        ({"instruction_tile": (64, 256)}, "instruction_tile"),
    ],
)
def test_a_bad_tile_names_its_field(changes: dict, field: str) -> None:
    """A bad tile's violation and message name the MatmulParams field (the plugin author's
    key), not the TileShape's own m, n or k."""
    with pytest.raises(InvalidParamsError) as info:
        make().with_overrides(**changes)
    assert [v.field for v in info.value.violations] == [field]
    assert str(info.value).startswith(f"{field.partition('.')[0]}=")


def test_param_override_sorts_and_exposes_mapping() -> None:
    """ParamOverride stores sorted pairs and exposes a read-only mapping."""
    o = ParamOverride("fake", {"stages": 3, "cta_tile": [128, 64, 32]})
    assert list(o.changes) == ["cta_tile", "stages"]
    assert o.changes["cta_tile"] == (128, 64, 32)
    with pytest.raises(TypeError, match="does not support item assignment"):
        o.changes["stages"] = 4  # type: ignore[index]
    assert hash(o) == hash(ParamOverride("fake", {"cta_tile": (128, 64, 32), "stages": 3}))
    assert eval(repr(o), vars(params_module)) == o  # noqa: S307


def test_param_override_rejects_unknown_key_naming_source() -> None:
    """An unknown key in a ParamOverride names the source and suggests a field."""
    with pytest.raises(
        UnknownParamError,
        match=r"unknown parameter 'num_stages' from 'tuned'; did you mean 'stages'\?",
    ):  # noqa: E501
        ParamOverride(source="tuned", changes={"num_stages": 4})


def test_param_override_applies_through_with_overrides() -> None:
    """An override's changes feed straight into with_overrides."""
    o = ParamOverride("fake", {"stages": 4, "cta_order": "column_major"})
    p = make().with_overrides(**o.changes)
    assert p.stages == 4 and p.cta_order is CtaOrder.column_major


def test_check_param_names_accepts_fields() -> None:
    """Every field name, and dotted tile dims, pass check_param_names."""
    check_param_names([*PARAM_NAMES, "cta_tile.m", "instruction_tile.k"])


def test_sentinels_cover_fields_and_build_legal_params() -> None:
    """SENTINELS names real fields, has a scope for each, and applies as one legal set."""
    assert set(SENTINELS) <= set(PARAM_NAMES)
    assert set(SENTINELS) == set(SENTINEL_SCHEDULERS)
    assert all(scope <= {"ampere", "hopper"} and scope for scope in SENTINEL_SCHEDULERS.values())
    p = MatmulParams(**SENTINELS)  # type: ignore[arg-type]
    for field, value in SENTINELS.items():
        assert getattr(p, field) == value
