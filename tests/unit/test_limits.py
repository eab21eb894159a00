"""Tests for the Ampere and Hopper legality checks (plugins/<arch>/limits.py)."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import SENTINEL_SCHEDULERS, SENTINELS, MatmulParams
from mmaplug.plugins.ampere import limits as ampere
from mmaplug.plugins.hopper import limits as hopper

T4 = Device(name="t4", cc=(7, 5), sm_count=40, smem_per_block_optin=65_536, smem_per_sm=65_536)
H100_NO_A = Device(
    name="h100-plain", cc=(9, 0), sm_count=132, smem_per_block_optin=232_448, smem_per_sm=233_472
)


def problem(
    m: int = 4096,
    n: int = 4096,
    k: int = 4096,
    vec: int = 8,
    batch: int = 1,
    *,
    a_k_inner: bool = True,
    b_k_inner: bool = True,
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=vec, b=vec, epilogue=vec),
    )


AMPERE_OK = MatmulParams(
    cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=3
)
HOPPER_OK = MatmulParams(  # the default for 4096^3 fp16 on h100: what the wgmma kernel builds
    cta_tile=(128, 256, 64),
    warp_tile=(64, 256, 64),
    instruction_tile=(64, 256, 16),
    stages=4,
    tiling_strategy="persistent",
    warp_specialized=True,
)
NARROW = {"cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64), "instruction_tile": (64, 128, 16)}


def test_baselines_are_legal() -> None:
    """The nvFuser-style baseline configurations pass their scheduler's checks."""
    assert ampere.violations(AMPERE_OK, problem(), get_device("a100")) == []
    assert ampere.violations(AMPERE_OK, problem(), get_device("h200")) == []
    assert hopper.violations(HOPPER_OK, problem(), get_device("h100")) == []
    assert hopper.violations(HOPPER_OK, problem(), get_device("h200")) == []


@pytest.mark.parametrize(
    ("changes", "prob"),
    [
        ({"splitk_factor": 2}, problem()),
        ({"tiling_strategy": "one_tile_per_cta"}, problem()),
        ({"cta_order": "column_major", "grid_swizzle_factor": 8}, problem()),
        ({**NARROW, "warp_tile": (128, 128, 64), "instruction_tile": (64, 128, 16)}, problem()),
        (
            {**NARROW, "cta_tile": (64, 128, 256), "warp_tile": (64, 128, 256), "stages": 2},
            problem(),
        ),
        ({**NARROW, "stages": 6}, problem(b_k_inner=False)),
    ],
    ids=[
        "splitk_persistent",
        "one_tile_per_cta",
        "order_swizzle",
        "one_consumer",
        "cta_k_256",
        "n_major_b",
    ],
)
def test_hopper_accepts_what_the_kernel_builds(
    changes: dict[str, Any], prob: MatmulProblem
) -> None:
    """Split-K with persistent tiling, either tiling, CTA order and swizzle, one or two consumer
    warpgroups, k up to 256 and an N-major B with 64-column warp tiles are all legal."""
    assert hopper.violations(HOPPER_OK.with_overrides(**changes), prob, get_device("h100")) == []


def test_hopper_smem_counts_slack_stages_and_mbarriers() -> None:
    """Shared memory is 1024 B of alignment slack plus, per stage, the A and B tiles and two
    8-byte mbarriers; a budget of exactly that is legal and one byte less is not."""
    stage = (128 + 256) * 64 * 2 + 16
    assert hopper.smem_bytes(HOPPER_OK, problem()) == 1024 + 4 * stage == 197_696
    exact = Device(
        name="h100-exact",
        cc=(9, 0),
        arch_suffix="a",
        sm_count=132,
        smem_per_block_optin=197_696,
        smem_per_sm=233_472,
    )
    assert hopper.violations(HOPPER_OK, problem(), exact) == []
    short = attrs.evolve(exact, smem_per_block_optin=197_695)
    (found,) = hopper.violations(HOPPER_OK, problem(), short)
    assert (found.field, found.value) == ("stages", 4)
    assert "stages=4 needs 197,696 B of shared memory per block; sm_90a allows 197,695 B" in (
        found.message
    )


def test_smem_message_names_value_limit_and_fix() -> None:
    """The shared-memory message says what was asked, what sm_80 allows and what to change."""
    p = AMPERE_OK.with_overrides(cta_tile=(128, 128, 64), warp_tile=(64, 64, 64), stages=7)
    found = ampere.violations(p, problem(), get_device("a100"))
    assert [v.message for v in found] == [
        "stages=7 needs 229,376 B of shared memory per block; sm_80 allows 166,912 B. "
        "Lower stages or the CTA tile."
    ]
    assert found[0].field == "stages" and found[0].value == 7


@pytest.mark.parametrize(
    ("changes", "device", "prob", "field", "match"),
    [
        (
            {},
            T4,
            problem(),
            "device",
            r"needs mma.sync m16n8k16 and cp.async \(sm_80\+\); t4 is sm_75",
        ),
        (
            {"warp_tile": (64, 64, 32), "instruction_tile": (16, 16, 16)},
            "a100",
            problem(),
            "instruction_tile",
            r"mma.sync m16n8k16 only",
        ),
        (
            {"cta_tile": (72, 128, 32), "warp_tile": (24, 64, 32), "instruction_tile": (8, 8, 16)},
            "a100",
            problem(),
            "warp_tile",
            r"multiple of 16x16x16",
        ),
        (
            {"cta_tile": (64, 48, 32), "warp_tile": (32, 24, 32)},
            "a100",
            problem(),
            "warp_tile",
            r"warp_tile=32x24x32 must be a multiple of 16x16x16",
        ),
        (
            {"cta_tile": (256, 512, 32), "warp_tile": (16, 16, 32)},
            "a100",
            problem(),
            "cta_tile",
            r"needs 16,384 threads per block; sm_80 allows 1,024",
        ),
        ({"stages": 9}, "a100", problem(), "stages", r"supports 1 to 8 stages"),
        (
            {"async_gmem_load_operands": False},
            "a100",
            problem(),
            "stages",
            r"stages=3 needs cp.async loads",
        ),
        ({"stages": 2}, "a100", problem(vec=1), "async_gmem_load_operands", r"allow 1 x 2 B = 2 B"),
        (
            {"splitk_factor": 5},
            "a100",
            problem(k=128),
            "splitk_factor",
            r"splitk_factor=5 exceeds the 4 K tiles",
        ),
        (
            {"cluster_dims": (1, 2)},
            "a100",
            problem(),
            "cluster_dims",
            r"does not support thread block clusters .* or set cluster_dims=\(1, 1\)",
        ),
        (
            {"tiling_strategy": "persistent"},
            "a100",
            problem(),
            "tiling_strategy",
            r"does not support persistent tiling; use the hopper scheduler",
        ),
        (
            {"warp_specialized": True},
            "a100",
            problem(),
            "warp_specialized",
            r"does not support warp specialization; use the hopper scheduler",
        ),
        (
            {"cta_tile": (256, 256, 32), "warp_tile": (64, 64, 32), "stages": 2},
            "h200",
            problem(),
            "cta_tile",
            r"256 x \(256 \+ 8\) x 4 B = 270,336 B; sm_90a allows 232,448 B",
        ),
        (
            {"async_gmem_load_operands": False, "stages": 2},
            "a100",
            problem(),
            "async_gmem_load_operands",
            r"async_gmem_load_operands=False, but both operands allow cp.async copies of 16\+ B",
        ),
        (
            {"prefetch_gap": 2},
            "a100",
            problem(),
            "prefetch_gap",
            r"prefetch_gap=2; the ampere pipeline always loads stages - 1",
        ),
        (
            {"stages": 1, "cta_tile": (128, 128, 256), "warp_tile": (64, 64, 256)},
            "h200",
            problem(),
            "stages",
            r"stages=1 \(built as 2\) needs 262,144 B",
        ),
        (
            {},
            "a100",
            problem(batch=65_536),
            "splitk_factor",
            r"batch=65,536 x splitk_factor=1 = 65,536 CTAs along grid z",
        ),
        (
            {"splitk_factor": 2},
            "a100",
            problem(batch=40_000),
            "splitk_factor",
            r"= 80,000 CTAs along grid z; CUDA allows 65,535",
        ),
        (
            {"cta_tile": (16, 16, 16), "warp_tile": (16, 16, 16), "stages": 2},
            "a100",
            problem(m=2**31 - 1, n=2**31 - 1),
            "cta_tile",
            r"CUDA allows 2,147,483,647",
        ),
        (
            {"splitk_factor": 2},
            "a100",
            problem(m=2**21, n=2**20),  # 4 elements a thread: 2**31 blocks of 256
            "splitk_factor",
            r"sums the partials in a kernel of 2,147,483,648 blocks",
        ),
    ],
    ids=[
        "cc",
        "instruction",
        "warp_multiple",
        "threads",
        "max_stages",
        "stages_need_async",
        "cp_async_width",
        "splitk_le_k_tiles",
        "cluster",
        "persistent",
        "warp_specialized",
        "warp_n16",
        "epilogue_smem",
        "async_false_aligned",
        "prefetch_gap",
        "one_stage_built_as_two",
        "grid_z_batch",
        "grid_z_splitk",
        "grid_x_tiles",
        "reduce_grid_x",
    ],
)
def test_ampere_rules(
    changes: dict[str, Any], device: Any, prob: MatmulProblem, field: str, match: str
) -> None:
    """Each Ampere rule reports its own violation naming the field."""
    found = ampere.violations(AMPERE_OK.with_overrides(**changes), prob, get_device(device))
    hits = [v for v in found if v.field == field]
    assert any(re.search(match, v.message) for v in hits), found


@pytest.mark.parametrize(
    ("changes", "device", "prob", "field", "match"),
    [
        ({}, "a100", problem(), "device", r"which need sm_90a; a100 is sm_80\. Use an H100/H200"),
        ({}, H100_NO_A, problem(), "device", r"which need sm_90a; h100-plain is sm_90\. "),
        (
            {
                "cta_tile": (128, 256, 64),
                "warp_tile": (32, 256, 64),
                "instruction_tile": (16, 256, 16),
            },
            "h100",
            problem(),
            "warp_tile",
            r"warp_tile=32x256x64: .*so m must be a multiple of 64 and n a multiple of 8 up to 256",
        ),
        (
            {
                "cta_tile": (128, 100, 64),
                "warp_tile": (64, 100, 64),
                "instruction_tile": (64, 100, 16),
            },
            "h100",
            problem(),
            "warp_tile",
            r"warp_tile=64x100x64: .*n a multiple of 8 up to 256\. Round the warp tile\.",
        ),
        (
            {
                "cta_tile": (128, 96, 64),
                "warp_tile": (64, 96, 64),
                "instruction_tile": (64, 96, 16),
            },
            "h100",
            problem(b_k_inner=False),
            "warp_tile",
            r"n a multiple of 64 up to 256 \(an N-major B is read in 64-column swizzle rows\)",
        ),
        (
            {
                "cta_tile": (64, 512, 64),
                "warp_tile": (64, 512, 64),
                "instruction_tile": (64, 512, 16),
            },
            "h100",
            problem(),
            "warp_tile",
            r"warp_tile=64x512x64: .*n a multiple of 8 up to 256",
        ),
        (
            {"instruction_tile": (16, 8, 16)},
            "h100",
            problem(),
            "instruction_tile",
            r"instruction_tile=16x8x16; the kernel issues one m64nNk16 wgmma per 64 rows .*"
            r"Set instruction_tile=\(64, 256, 16\)\.",
        ),
        (
            {"instruction_tile": (64, 128, 16)},
            "h100",
            problem(),
            "instruction_tile",
            r"instruction_tile=64x128x16; .*N the warp tile's n \(float16 operands\)\. "
            r"Set instruction_tile=\(64, 256, 16\)",
        ),
        (
            {"cta_tile": (128, 256, 32), "warp_tile": (64, 256, 32)},
            "h100",
            problem(),
            "cta_tile",
            r"cta_tile=128x256x32: k must be one of 64, 128, 192, 256 \(whole 128-byte swizzle "
            r"rows of float16, one TMA box\) .*Set cta_tile\.k=64\.",
        ),
        (
            {**NARROW, "cta_tile": (64, 128, 320), "warp_tile": (64, 128, 320), "stages": 2},
            "h100",
            problem(),
            "cta_tile",
            r"cta_tile=64x128x320: k must be one of 64, 128, 192, 256 ",
        ),
        (
            {
                "cta_tile": (512, 128, 64),
                "warp_tile": (256, 128, 64),
                "instruction_tile": (64, 128, 16),
            },
            "h100",
            problem(),
            "cta_tile",
            r"cta_tile=512x128x64 must be a multiple of warp_tile=256x128x64 with m and n at most "
            r"256 \(one TMA box\)",
        ),
        (
            {
                "cta_tile": (128, 128, 64),
                "warp_tile": (64, 64, 64),
                "instruction_tile": (64, 64, 16),
            },
            "h100",
            problem(),
            "cta_tile",
            r"over warp_tile=64x64x64 makes 4 consumer warpgroups; the kernel runs at most 2",
        ),
        (
            {"warp_tile": (128, 256, 64)},
            "h100",
            problem(),
            "warp_tile",
            r"warp_tile=128x256x64 needs 256 float32 accumulators per thread; at most 160",
        ),
        (
            {"stages": 5},
            "h100",
            problem(),
            "stages",
            r"stages=5 needs 246,864 B of shared memory per block; sm_90a allows 232,448 B\. "
            r"Lower stages or the CTA tile\.",
        ),
        (
            {"stages": 1},
            "h100",
            problem(),
            "stages",
            r"stages=1: the producer fills one stage while the consumers read another, so at least "
            r"2 are needed",
        ),
        ({"prefetch_gap": 2}, "h100", problem(), "prefetch_gap", r"Set prefetch_gap=1\.$"),
        (
            {"async_gmem_load_operands": False},
            "h100",
            problem(),
            "async_gmem_load_operands",
            r"always loads operands with TMA; set async_gmem_load_operands=True",
        ),
        (
            {"warp_specialized": False},
            "h100",
            problem(),
            "warp_specialized",
            r"always warp-specialized .*; set warp_specialized=True or use the ampere scheduler",
        ),
        (
            {"cluster_dims": (4, 2)},
            "h100",
            problem(),
            "cluster_dims",
            r"cluster_dims=\(4, 2\): the kernel clusters 2 or 4 CTAs along M.* or along N, "
            r"which share one multicast A tile, or 2x2, which share both;.* Set one of "
            r"\(1, 1\) or \(2, 1\) or \(4, 1\) or \(1, 2\) or \(1, 4\) or \(2, 2\)\.",
        ),
        (
            {"cluster_dims": (1, 4)},
            "h100",
            problem(a_k_inner=False),
            "cluster_dims",
            r"each of the 4 CTAs multicasts a 1/4 part of the A tile, so m must be a multiple "
            r"of 256 for this layout\. Set cluster_dims=\(1, 1\)",
        ),
        (
            {
                "cluster_dims": (2, 1),
                "cta_tile": (128, 192, 64),
                "warp_tile": (64, 192, 64),
                "instruction_tile": (64, 192, 16),
            },
            "h100",
            problem(b_k_inner=False),
            "cluster_dims",
            r"n must be a multiple of 128 for this layout\. Set cluster_dims=\(1, 1\)",
        ),
        (
            {"splitk_factor": 3},
            "h100",
            problem(k=128),
            "splitk_factor",
            r"splitk_factor=3 exceeds the 2 K tiles of k=128 with cta_k=64",
        ),
        (
            {},
            "h100",
            problem(m=2**31 - 1, n=2**31 - 1),
            "cta_tile",
            r"140,737,488,355,328 work units \(batch x split-K x tiles\) exceed the grid's "
            r"2,147,483,647",
        ),
        (
            {"tiling_strategy": "persistent_streamk"},
            "h100",
            problem(),
            "splitk_factor",
            r"tiling_strategy='persistent_streamk' with splitk_factor=1: splitk_factor is the "
            r"number of K pieces each tail tile is cut into\. Set it to 2 or more",
        ),
        (
            {"tiling_strategy": "persistent_streamk", "splitk_factor": 2, "cluster_dims": (2, 1)},
            "h100",
            problem(),
            "tiling_strategy",
            r"a tail tile's pieces meet in the workspace, each CTA alone\. Set "
            r"cluster_dims=\(1, 1\) and splitk_in_cluster=False",
        ),
    ],
    ids=[
        "cc",
        "arch_suffix",
        "warp_m",
        "warp_n8",
        "warp_n_major_b",
        "warp_n_max",
        "instruction",
        "instruction_n",
        "cta_k",
        "cta_k_box",
        "tma_box",
        "consumers",
        "accumulators",
        "smem",
        "min_stages",
        "prefetch_gap",
        "tma_loads",
        "warp_specialized",
        "cluster",
        "cluster_along_n_unit",
        "cluster_pair_unit",
        "splitk_le_k_tiles",
        "work_units",
        "streamk_pieces",
        "streamk_alone",
    ],
)
def test_hopper_rules(
    changes: dict[str, Any], device: Any, prob: MatmulProblem, field: str, match: str
) -> None:
    """Each Hopper rule reports its own violation naming the field."""
    found = hopper.violations(HOPPER_OK.with_overrides(**changes), prob, get_device(device))
    hits = [v for v in found if v.field == field]
    assert any(re.search(match, v.message) for v in hits), found


@pytest.mark.parametrize(
    ("scheduler", "base", "device"),
    [("ampere", AMPERE_OK, "a100"), ("ampere", AMPERE_OK, "h200"), ("hopper", HOPPER_OK, "h100")],
    ids=["ampere_a100", "ampere_h200", "hopper_h100"],
)
def test_sentinels_are_legal_where_scoped(scheduler: str, base: MatmulParams, device: str) -> None:
    """The sentinels scoped to a scheduler, applied together, pass that scheduler's checks."""
    changes = {f: v for f, v in SENTINELS.items() if scheduler in SENTINEL_SCHEDULERS[f]}
    limits = ampere if scheduler == "ampere" else hopper
    # 3072 = 16 tiles of 192 along M and 64 tiles of 48 along N: cluster (2, 4) divides them.
    found = limits.violations(
        base.with_overrides(**changes), problem(3072, 3072, 3072), get_device(device)
    )
    assert found == []


def test_one_stage_is_adjusted_to_two_and_recorded(pm) -> None:
    """stages=1 is built as 2: the ampere scheduler records the change (and warns the caller)."""
    from mmaplug.errors import ParamAdjustedWarning
    from mmaplug.planning.plan import plan_problem

    with pytest.warns(ParamAdjustedWarning, match=r"ampere changed caller's stages: 1 -> 2"):
        spec = plan_problem(problem(k=32), get_device("a100"), pm=pm, overrides={"stages": 1})
    assert spec.params.stages == 2
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.field, adjustment.old, adjustment.new) == ("stages", 1, 2)
    assert "always has 2 buffers" in adjustment.reason


def test_default_one_stage_plan_is_recorded_without_warning(pm) -> None:
    """The default heuristic picks 1 stage for a single K tile; the change shows in provenance."""
    from mmaplug.planning.plan import plan_problem

    spec = plan_problem(problem(m=256, n=256, k=32), get_device("a100"), pm=pm)
    assert spec.params.stages == 2
    assert [a.field for a in spec.provenance.adjustments] == ["stages"]


def test_register_epilogue_is_adjusted_to_smem_and_recorded(pm) -> None:
    """use_smem_epilogue=False is built through smem: ampere records the change and warns."""
    from mmaplug.errors import ParamAdjustedWarning
    from mmaplug.planning.plan import explain, plan_problem

    with pytest.warns(
        ParamAdjustedWarning, match=r"ampere changed caller's use_smem_epilogue: False -> True"
    ):
        spec = plan_problem(
            problem(), get_device("a100"), pm=pm, overrides={"use_smem_epilogue": False}
        )
    assert spec.params.use_smem_epilogue
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.field, adjustment.old, adjustment.new) == ("use_smem_epilogue", False, True)
    reason = "always stages the epilogue tile through shared memory (its limits count that tile)"
    assert reason in adjustment.reason
    assert f"use_smem_epilogue: False -> True (the ampere kernel {reason} [by ampere])" in (
        explain(spec)
    )


def test_default_plan_stages_the_epilogue_without_adjustment(pm) -> None:
    """The default heuristic asks ampere for the smem epilogue it builds: nothing is adjusted."""
    from mmaplug.planning.plan import plan_problem

    spec = plan_problem(problem(), get_device("a100"), pm=pm)
    assert spec.params.use_smem_epilogue
    assert spec.provenance.adjustments == ()


@pytest.mark.parametrize(
    ("async_loads", "widths", "expected"),
    [
        (True, (8, 8), (8, 8)),
        (True, (16, 4), (8, 4)),
        (True, (6, 8), (2, 8)),
        (False, (8, 1), (8, 1)),
    ],
    ids=["both_16B", "wider_than_16B", "not_a_power_of_two", "one_operand_plain_loads"],
)
def test_operand_vectors_are_what_the_kernel_is_built_with(
    async_loads: bool, widths: tuple[int, int], expected: tuple[int, int]
) -> None:
    """The kernel is built with the widest of 8/4/2/1 dividing each operand's width."""
    from types import SimpleNamespace

    from mmaplug.analysis.epilogue import EpilogueProgram
    from mmaplug.planning.choices import KernelSpec, Provenance
    from mmaplug.plugins.ampere.artifact import kernel_config

    prob = MatmulProblem(
        m=64,
        n=64,
        k=64,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=widths[0], b=widths[1], epilogue=8),
    )
    params = AMPERE_OK.with_overrides(stages=2, async_gmem_load_operands=async_loads)
    assert ampere.operand_vectors(params, prob) == expected
    spec = KernelSpec(
        scheduler="ampere",
        problem=prob,
        device=get_device("h200"),
        params=params,
        provenance=Provenance(base="test", sources=()),
    )
    analysis = SimpleNamespace(epilogue=EpilogueProgram(), prologue_a=None, prologue_b=None)
    config = kernel_config(spec, analysis)  # type: ignore[arg-type]
    assert (config.vec_a, config.vec_b) == expected


def test_streamk_is_legal_alone_with_two_pieces_or_more() -> None:
    """Stream-K of the default 4096^3 tile in 2 or 3 pieces: nothing to refuse."""
    for pieces in (2, 3):
        params = HOPPER_OK.with_overrides(
            tiling_strategy="persistent_streamk", splitk_factor=pieces
        )
        assert hopper.violations(params, problem(), get_device("h100")) == []
