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
