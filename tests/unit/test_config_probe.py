"""scripts/config_probe.py's rounds, without a GPU: a plan timed first in a round runs slower
(BENCHMARKS.md runs 242 and 244), so the rounds take turns at who goes first."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from mmaplug.tune.corpus import TuneProblem


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("config_probe")


def test_rounds_rotate_which_plan_is_timed_first(script: ModuleType) -> None:
    problem = TuneProblem(m=64, n=64, k=64)
    sets = [("a", "A"), ("b", "B"), ("c", "C")]
    jobs = script._in_turn([(problem, sets)], rounds=3)
    assert [(label, plan) for _, label, plan in jobs] == [
        ("warm-up", "A"),
        ("a 0", "A"), ("b 0", "B"), ("c 0", "C"),
        ("b 1", "B"), ("c 1", "C"), ("a 1", "A"),
        ("c 2", "C"), ("a 2", "A"), ("b 2", "B"),
    ]  # fmt: skip


def test_only_the_first_problem_of_a_probe_is_warmed_up(script: ModuleType) -> None:
    """The first problem with plans is warmed up, once; a problem without plans is left out."""
    none, first, second = (TuneProblem(m=m, n=64, k=64) for m in (32, 64, 128))
    sets = [("a", "A"), ("b", "B")]
    jobs = script._in_turn([(none, []), (first, sets), (second, sets)], rounds=2)
    assert jobs[0] == (first, "warm-up", "A") and all(problem != none for problem, *_ in jobs)
    assert [label for problem, label, _ in jobs if problem == second] == [
        "a 0",
        "b 0",
        "b 1",
        "a 1",
    ]


@pytest.mark.parametrize("scale, epilogue", [("tensor", "none"), ("row", "none"),
                                             ("tensor", "bias_gelu")])  # fmt: skip
def test_one_scale_then_the_other_is_the_same_problem(
    script: ModuleType, scale: str, epilogue: str
) -> None:
    """``fp8_scale_product``'s old form takes the inputs of ``scaled_mm``'s, in their order,
    and gives its result but for float32 rounding, so both sides check and time one problem."""
    import ml_dtypes
    import numpy as np

    import mmaplug as mp

    problem = TuneProblem(m=48, n=40, k=96, dtype="float8_e4m3fn", scale=scale, epilogue=epilogue)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TuneProblem, "_scaled_mm", script._one_scale_then_the_other)
        old = problem.fusion()
    new = problem.fusion()
    signature = [[(tuple(v.shape), v.dtype) for v in f.inputs] for f in (old, new)]
    assert signature[0] == signature[1]
    rng = np.random.default_rng(3)
    fp8 = ml_dtypes.float8_e4m3fn
    a = rng.standard_normal((48, 96)).astype(fp8)
    b = rng.standard_normal((96, 40)).astype(fp8)
    rest = [rng.uniform(0.5, 2.0, shape).astype(np.float32) for shape, _ in signature[1][2:4]]
    if epilogue == "bias_gelu":
        rest.append(rng.standard_normal(40).astype(ml_dtypes.bfloat16))
    (got_old,), (got_new,) = (mp.evaluate(f, [a, b, *rest]) for f in (old, new))
    np.testing.assert_allclose(
        got_old.astype(np.float64), got_new.astype(np.float64), rtol=2**-7, atol=1e-6
    )


def test_narrow_pairs_times_each_default_beside_its_plan_with_the_cluster_toggled(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every problem of ``narrow_pairs`` has 64-row 16-bit default tiles, and its second plan
    is the default's with only the cluster toggled (pairs along M where it runs alone)."""
    import functools

    from mmaplug.runtime.compile import compile as compile_fusion

    monkeypatch.setattr(script, "compile_fusion", functools.partial(compile_fusion, device="h200"))
    jobs = script.narrow_pairs_jobs()
    plans: dict[str, dict[str, object]] = {}
    for problem, label, compiled in jobs:
        plans.setdefault(problem.key, {})[label.rpartition(" ")[0] or label] = compiled.spec.params
    assert len(plans) == len(script.NARROW_PAIRS_PROBLEMS)
    for key, found in plans.items():
        default = found["default"]
        assert default.cta_tile.m == 64, key
        ((label, toggled),) = ((k, v) for k, v in found.items() if k not in ("default", "warm-up"))
        assert {default.cluster_dims, toggled.cluster_dims} == {(1, 1), (2, 1)}, key
        assert label == ("alone" if default.cluster_dims == (2, 1) else "pairs along M"), key
        assert toggled.with_overrides(cluster_dims=default.cluster_dims) == default, key


def test_one_consumer_times_each_64_row_default_beside_two_consumer_tiles(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every problem of ``one_consumer`` has a 64-row default tile (one consumer) and is timed
    beside tiles of two consumers that keep its grid to one wave; the odd-K rows run the one
    kernel 1024^3 runs, on its grid."""
    import functools

    from mmaplug.runtime.compile import compile as compile_fusion

    monkeypatch.setattr(script, "compile_fusion", functools.partial(compile_fusion, device="h200"))
    jobs = script.one_consumer_jobs()
    plans: dict[tuple[int, int, int, str], dict[str, object]] = {}
    for problem, label, compiled in jobs:
        key = (problem.m, problem.n, problem.k, problem.dtype)
        plans.setdefault(key, {})[label.rpartition(" ")[0] or label] = compiled
    assert len(plans) == len(script.ONE_CONSUMER_PROBLEMS) + len(script.ODD_K_PROBLEMS)
    for (m, n, k, _), found in plans.items():
        default = found.pop("default").spec.params
        found.pop("warm-up", None)
        assert default.cta_tile.m == 64 == default.warp_tile.m, (m, n, k)
        if (m, n) == (1024, 1024) and k != 1024:
            assert not found, "an odd-K row is timed on its default only"
            continue
        assert found, (m, n, k)
        for label, compiled in found.items():
            params = compiled.spec.params
            assert (params.cta_tile.m, params.warp_tile.m) == (128, 64), label
            units = -(-m // params.cta_tile.m) * -(-n // params.cta_tile.n)
            assert units <= 132 and params.cluster_dims == (1, 1), (m, n, k, label)
    odd = {p.k: c.kernel_name for p, lab, c in jobs if (p.m, p.n) == (1024, 1024)
           and lab.startswith("default")}  # fmt: skip
    assert len(set(odd.values())) == 1 and set(odd) == {960, 1000, 1008, 1024, 1088}


def test_k_depth_times_each_64x128_default_beside_its_other_depth_and_two_consumers(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every problem of ``k_depth`` has a one-wave 64x128 default, timed beside the same tile
    at the other K depth in its ring (8 stages of 64, 4 of 128) and two consumers' tiles at 64
    of K on one wave; the wide weights' defaults are at 64 of K, the others' at 128."""
    import functools

    from mmaplug.runtime.compile import compile as compile_fusion

    monkeypatch.setattr(script, "compile_fusion", functools.partial(compile_fusion, device="h200"))
    plans: dict[tuple[int, int, int, str], dict[str, object]] = {}
    for problem, label, compiled in script.k_depth_jobs():
        key = (problem.m, problem.n, problem.k, problem.dtype)
        plans.setdefault(key, {})[label.rpartition(" ")[0] or label] = compiled
    assert len(plans) == len(script.K_DEPTH_PROBLEMS)
    for (m, n, k, _), found in plans.items():
        default = found.pop("default").spec.params
        found.pop("warm-up", None)
        assert (default.cta_tile.m, default.cta_tile.n) == (64, 128)
        assert default.cta_tile.k == (64 if n >= 16 * m else 128), (m, n, k)
        assert -(-m // 64) * -(-n // 128) <= 132, (m, n, k)
        other = [c.spec.params for lab, c in found.items() if lab.startswith("k")]
        assert len(other) == 1 and other[0].cta_tile.k == 192 - default.cta_tile.k, (m, n, k)
        assert {other[0].stages, default.stages} == {4, 8}, (m, n, k)
        assert (
            other[0].with_overrides(
                cta_tile=default.cta_tile, warp_tile=default.warp_tile, stages=default.stages
            )
            == default
        ), (m, n, k)
        pairs = [c.spec.params for lab, c in found.items() if not lab.startswith("k")]
        assert pairs, (m, n, k)
        for params in pairs:
            assert (params.cta_tile.m, params.warp_tile.m, params.cta_tile.k) == (128, 64, 64)
            assert -(-m // 128) * -(-n // params.cta_tile.n) <= 132, (m, n, k)


def test_wide_k_times_each_wide_weight_default_beside_128_of_k(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every problem of ``wide_k`` is a wide weight (N >= 16 M) on a 64x128 tile, timed at 64
    of K in 8 stages and at 128 of K in 4, the default the first past one row tile."""
    import functools

    from mmaplug.runtime.compile import compile as compile_fusion

    monkeypatch.setattr(script, "compile_fusion", functools.partial(compile_fusion, device="h200"))
    plans: dict[tuple[int, int, int], dict[str, object]] = {}
    for problem, label, compiled in script.wide_k_jobs():
        key = (problem.m, problem.n, problem.k)
        plans.setdefault(key, {})[label.rpartition(" ")[0] or label] = compiled
    assert len(plans) == len(script.WIDE_K_PROBLEMS)
    for (m, n, k), found in plans.items():
        assert n >= 16 * m, (m, n, k)
        tiles = {lab: c.spec.params for lab, c in found.items() if lab != "warm-up"}
        default, other = tiles.pop("default"), tiles.pop("k128 s4" if m > 64 else "k64 s8")
        assert not tiles and (default.cta_tile.m, default.cta_tile.n) == (64, 128)
        assert (default.cta_tile.k, default.stages) == ((64, 8) if m > 64 else (128, 4))
        assert (other.cta_tile.k, other.stages) == ((128, 4) if m > 64 else (64, 8)), (m, n, k)
        assert (
            other.with_overrides(
                cta_tile=default.cta_tile, warp_tile=default.warp_tile, stages=default.stages
            )
            == default
        ), (m, n, k)
