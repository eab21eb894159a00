"""scripts/source_snapshot.py, the refactor's proof (issue 23): its plan list is fixed, large,
unique and covers the three schedulers and every feature; a handful of plans compile as listed; a
changed source is reported with a diff. The full 200+ compiles are the script's job, not this
test's (``python scripts/source_snapshot.py --check scripts/source_snapshot.json``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SNAPSHOT = Path(__file__).parents[2] / "scripts" / "source_snapshot.json"

# features the refactor's proof names, each in at least one plan
REQUIRED = {
    "hopper", "ampere", "decode", "ampere_on_h200", "splitk", "batch", "horizontal", "pingpong",
    "cluster", "symbolic", "prologue", "segmented", "smem_epilogue", "register_epilogue",
    "default_params",
    "TN", "TT", "NT", "NN", "float16", "bfloat16", "out:float16", "out:bfloat16", "out:float32",
    "float8_e4m3fn", "float8_e5m2", "scale:tensor", "scale:row", "scale:block",
    "out:float8_e4m3fn",
}  # fmt: skip


@pytest.fixture(scope="module")
def snap(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("source_snapshot")


@pytest.fixture(scope="module")
def plans(snap: ModuleType) -> list:
    return snap.plans()


def test_the_list_is_fixed_large_and_unique(snap: ModuleType, plans: list) -> None:
    ids = [p.id for p in plans]
    assert len(ids) >= 200
    assert len(set(ids)) == len(ids)
    assert [p.id for p in snap.plans()] == ids  # deterministic, in a fixed order


def test_every_scheduler_and_feature_is_covered(snap: ModuleType, plans: list) -> None:
    seen = {f for p in plans for f in p.features}
    assert REQUIRED <= seen, sorted(REQUIRED - seen)
    assert {f"epilogue:{kind}" for kind in snap.EPILOGUES} <= seen  # every epilogue kind listed
    for scheduler in ("hopper", "ampere"):  # the features both kernels build, on each
        for feature in ("splitk", "batch", "symbolic", "segmented", *snap.LAYOUTS):
            assert any({scheduler, feature} <= p.features for p in plans), (scheduler, feature)
    for feature in ("pingpong", "cluster"):  # hopper's own
        assert all(p.scheduler == "hopper" for p in plans if feature in p.features), feature
    horizontal = {p.scheduler for p in plans if "horizontal" in p.features}
    assert horizontal == {"hopper", "decode"}  # ampere's are segmented
    assert any(p.block == ("hopper",) and p.device == "h200" for p in plans)


def test_the_written_snapshot_lists_every_plan(plans: list) -> None:
    """Ids only: the sha256 values are regenerated with ``--write`` when kernels change."""
    written = json.loads(SNAPSHOT.read_text())
    assert {key.partition("@")[0] for key in written} == {p.id for p in plans}
    assert list(written) == sorted(written)
    assert all(set(r) == {"scheduler", "kernel_name", "params", "sha256"} for r in written.values())


def _first_with(plans: list, *features: str) -> object:
    return next(p for p in plans if set(features) <= p.features)


def test_a_handful_of_plans_compile_as_listed(snap: ModuleType, plans: list) -> None:
    """One plan per feature: each compiles, from the listed scheduler, with what it declares."""
    pytest.importorskip("numba")
    wanted = (("hopper", "pingpong"), ("hopper", "cluster"), ("horizontal",), ("hopper", "batch"),
              ("ampere", "splitk"), ("ampere_on_h200",), ("prologue", "segmented"),
              ("symbolic", "hopper"), ("segmented", "ampere"))  # fmt: skip
    picked = {plan.id: plan for plan in (_first_with(plans, *f) for f in wanted)}
    records, sources, faults = snap.snapshot(list(picked.values()))
    assert faults == []
    assert {key.partition("@")[0] for key in records} == set(picked)
    written = json.loads(SNAPSHOT.read_text())
    for key, entry in records.items():
        assert entry["scheduler"] == picked[key.partition("@")[0]].scheduler
        assert entry["sha256"] == hashlib.sha256(sources[key].encode()).hexdigest()
        assert set(entry) == set(written[key])


def test_a_refused_or_mislabelled_plan_is_an_error_of_the_list(
    snap: ModuleType, plans: list
) -> None:
    pytest.importorskip("numba")
    import attrs

    plan = _first_with(plans, "hopper", "TN")
    wrong = attrs.evolve(plan, id="x/wrong_scheduler", scheduler="ampere")
    refused = attrs.evolve(plan, id="x/refused", overrides={"cluster_dims": (4, 4)})
    _, _, faults = snap.snapshot([wrong, refused])
    assert len(faults) == 2
    assert faults[0].startswith("x/wrong_scheduler: scheduler ['hopper'], not 'ampere'")
    assert faults[1].startswith("x/refused: refused: InvalidParamsError")


def test_check_prints_every_difference_and_the_first_diff(
    snap: ModuleType, plans: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("numba")
    plan = _first_with(plans, "hopper", "splitk")
    keep, snapshot = tmp_path / "sources", tmp_path / "snapshot.json"
    records, sources, _ = snap.snapshot([plan])
    snapshot.write_text(json.dumps(records))
    assert snap.main(["--check", str(snapshot), "--only", plan.id]) == 0
    snap.keep_sources(keep, {plan.id: sources[plan.id].replace("def ", "def old_", 1)}, True)
    records[plan.id]["sha256"] = "0" * 64
    snapshot.write_text(json.dumps(records))
    capsys.readouterr()
    assert snap.main(["--check", str(snapshot), "--keep", str(keep), "--only", plan.id]) == 1
    out = capsys.readouterr().out
    assert f"DIFFERS {plan.id}: source differs" in out
    assert "-def old_" in out and "+def " in out


def test_ptx_hashes_ignore_the_counters_of_earlier_builds(snap: ModuleType) -> None:
    """Numba numbers a kernel's mangled name and its shared array by the kernels built before it
    in the process; ``--ptx`` must not depend on which plans ran first."""
    first = ".entry _ZN4k_v3hopper_gemmB2v1B8abcdefghE(\n.b8 _cudapy_smem_1[];\nmov.u32 %r1, 7;"
    later = ".entry _ZN4k_v3hopper_gemmB3v12B8abcdefghE(\n.b8 _cudapy_smem_5[];\nmov.u32 %r1, 7;"
    assert snap.ptx_digest(first) == snap.ptx_digest(later)
    assert snap.ptx_digest(first) != snap.ptx_digest(first.replace("7;", "8;"))
