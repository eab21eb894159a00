"""Limits ≡ generator: every parameter set ampere's limits accept computes the right answer.

Runs tests/sim/ampere_limits_property.py in subprocesses with NUMBA_ENABLE_CUDASIM=1 (this
pytest process stays on the real CUDA target), in parallel: two seeded hypothesis shards over
tiles x stages x split-K x swizzle x order x layouts x dtypes x ragged shapes, and one process
per regression case (wrong results before the swizzle fix, see docs/decisions.md). Without
``--full-sim`` one shorter shard runs (``QUICK``) beside the regression cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

RUNNER = Path(__file__).with_name("ampere_limits_property.py")
SHARDS = {"seed1": ["1", "120"], "seed2": ["2", "120"]}
# The quick tier's one shard (README, Tests): 60 of seed 4's sets, 10 of them accepted and run,
# about 7 s alone against the two shards' 30 s (seed 2's first 60 accept 3)
QUICK = {"quick": ["4", "60"]}
REGRESSIONS = ["k96_k_inner", "m96_a_m_inner", "n80_b_n_inner", "n48_b_n_inner_bk48",
               "mixed_sync_loads"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(simulate: Any, sim_tier: Any) -> dict[str, tuple[int, dict | None, str]]:
    jobs = {name: [str(RUNNER), *args] for name, args in sim_tier.pick(SHARDS, QUICK).items()}
    jobs.update({name: [str(RUNNER), "regression", name] for name in REGRESSIONS})
    return simulate(jobs, timeout=900)


@pytest.mark.parametrize("shard", sorted([*SHARDS, *QUICK]))
def test_accepted_params_match_evaluate_and_rejected_name_fields(
    runs: dict, sim_tier: Any, shard: str
) -> None:
    """Accepted sets match mp.evaluate in the simulator; rejected ones name MatmulParams fields."""
    sim_tier.require(shard, runs)
    code, counts, err = runs[shard]
    assert code == 0 and counts is not None, err
    assert counts["accepted"] >= 10, counts  # the property ran kernels, not only rejections
    assert {"warp_tile", "prefetch_gap", "splitk_factor", "stages"} <= set(counts["fields"])


@pytest.mark.parametrize("name", REGRESSIONS)
def test_regression_case_matches_evaluate(runs: dict, name: str) -> None:
    """Tiles whose smem rows are not 8j 16-byte units, and mixed loads, compute the right answer."""
    code, counts, err = runs[name]
    assert code == 0 and counts == {"accepted": 1, "rejected": 0, "fields": {}}, err
