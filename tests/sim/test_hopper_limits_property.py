"""Limits ≡ generator: every parameter set hopper's limits accept computes the right answer.

Runs tests/sim/hopper_limits_property.py in subprocesses with NUMBA_ENABLE_CUDASIM=1 (this
pytest process stays on the real CUDA target), in parallel: two seeded hypothesis shards over
tiles (legal and illegal) x stages x split-K x swizzle x order x tiling strategy x smem
epilogue x operand swap x cluster reduction x layouts x dtypes (FP8 included) x TMA-aligned
ragged shapes (a third shard stream-K wherever it can be, a fourth every legal set in a
cluster), plus unaligned shapes and FP8 operands that are not K-major, which hopper
must decline. A hopper kernel takes ~0.5-3 s in the simulator (256-384 Python threads per
CTA), so each shard runs only a few of the sets it accepts. Without ``--full-sim`` one shorter
shard runs (``QUICK``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

RUNNER = Path(__file__).with_name("hopper_limits_property.py")
SHARDS = {
    "seed1": ["1", "100"],
    "seed2": ["2", "100"],
    "streamk": ["3", "40", "streamk"],
    # (seed 4 accepted 2 sets, under the 3 due, once a swapped set could draw the staged
    # epilogue: seed 13 runs 3, all clustered, one 2x2)
    "cluster": ["13", "40", "cluster"],
}
# The quick tier's one shard (README, Tests): 60 of seed 2's sets, about a minute alone, 4 of
# them run (seed 1's first 60 draw a 2x2 cluster of two consumers: 5 minutes). The tests that
# count kinds of sets across the shards need --full-sim.
QUICK = {"quick": ["2", "60"]}
RUNS_DUE = {"cluster": 3, "quick": 3}  # accepted sets run, where not 6 (the cluster shard
# runs its clusters only)


@pytest.fixture(scope="module")
def runs(simulate: Any, sim_tier: Any) -> dict[str, tuple[int, dict | None, str]]:
    shards = sim_tier.pick(SHARDS, QUICK)
    return simulate({name: [str(RUNNER), *args] for name, args in shards.items()}, timeout=900)


@pytest.mark.parametrize("shard", sorted([*SHARDS, *QUICK]))
def test_accepted_params_match_evaluate_and_rejected_name_fields(
    runs: dict, sim_tier: Any, shard: str
) -> None:
    """Accepted sets run hopper_gemm and match mp.evaluate in the simulator; rejected ones
    raise InvalidParamsError naming MatmulParams fields; unaligned operands are declined."""
    sim_tier.require(shard, runs)
    code, counts, err = runs[shard]
    assert code == 0 and counts is not None, err
    runs_due = RUNS_DUE.get(shard, 6)
    assert counts["ran"] >= runs_due and counts["launches"] >= counts["ran"], counts
    assert counts["rejected"] >= 10 and counts["unaligned"] >= 1, counts
    assert {"warp_tile", "cta_tile", "stages", "splitk_factor"} <= set(counts["fields"])


def test_fp8_parameter_sets_ran_and_fp8_layouts_were_declined(runs: dict, sim_tier: Any) -> None:
    """Across the shards FP8 sets the rules accept ran (and matched), block-scaled ones among
    them, and FP8 operands that are not K-major were declined with FP8's reason."""
    sim_tier.require_full()
    counts = [runs[shard][1] or {} for shard in SHARDS]
    assert sum(c.get("fp8_ran", 0) for c in counts) >= 3, counts
    assert sum(c.get("fp8_layout", 0) for c in counts) >= 1, counts
    assert sum(c.get("block_ran", 0) for c in counts) >= 1, counts  # block scales too


def test_swapped_parameter_sets_ran(runs: dict, sim_tier: Any) -> None:
    """Across the shards sets of the transposed product (swap_ab) that the rules accept ran
    and matched mp.evaluate."""
    sim_tier.require_full()
    counts = [runs[shard][1] or {} for shard in SHARDS]
    assert sum(c.get("swap_ran", 0) for c in counts) >= 2, counts


def test_cluster_reduced_parameter_sets_ran(runs: dict, sim_tier: Any) -> None:
    """Across the shards sets with split-K summed in the cluster (splitk_in_cluster) that the
    rules accept ran and matched mp.evaluate, and sets the rules refuse named the field."""
    sim_tier.require_full()
    counts = [runs[shard][1] or {} for shard in SHARDS]
    assert sum(c.get("kcluster_ran", 0) for c in counts) >= 2, counts
    assert any("splitk_in_cluster" in c.get("fields", {}) for c in counts), counts


def test_multicast_parameter_sets_ran(runs: dict, sim_tier: Any) -> None:
    """Across the shards sets in clusters along M or N (a multicast B or A tile) and in 2x2
    clusters (both) that the rules accept ran and matched mp.evaluate."""
    sim_tier.require_full()
    counts = [runs[shard][1] or {} for shard in SHARDS]
    assert sum(c.get("multicast_ran", 0) for c in counts) >= 1, counts
    assert sum(c.get("cluster2x2_ran", 0) for c in counts) >= 1, counts


def test_streamk_parameter_sets_ran(runs: dict, sim_tier: Any) -> None:
    """Across the shards stream-K sets (the tail tiles cut into pieces of K, summed by the last
    piece) that the rules accept ran and matched mp.evaluate."""
    sim_tier.require_full()
    counts = [runs[shard][1] or {} for shard in SHARDS]
    assert sum(c.get("streamk_ran", 0) for c in counts) >= 1, counts
