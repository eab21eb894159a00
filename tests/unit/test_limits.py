"""Tests for the Ampere and Hopper legality checks (plugins/<arch>/limits.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mmaplug.device import Device, get_device
from mmaplug.dtypes import DType
from mmaplug.params import SENTINEL_SCHEDULERS, SENTINELS, MatmulParams
from mmaplug.plugins.ampere import limits as ampere
from mmaplug.plugins.hopper import limits as hopper
from mmaplug.problem import MatmulProblem, VectorWidths

T4 = Device(name="t4", cc=(7, 5), sm_count=40, smem_per_block_optin=65_536, smem_per_sm=65_536)
H100_NO_A = Device(
    name="h100-plain", cc=(9, 0), sm_count=132, smem_per_block_optin=232_448, smem_per_sm=233_472
)


def problem(
    m: int = 4096, n: int = 4096, k: int = 4096, vec: int = 8, batch: int = 1
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=vec, b=vec, epilogue=vec),
    )


AMPERE_OK = MatmulParams(
    cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=3
)
HOPPER_OK = MatmulParams(
    cta_tile=(128, 256, 64),
    warp_tile=(64, 256, 64),
    instruction_tile=(64, 256, 16),
    stages=3,
    cluster_dims=(1, 2),
    tiling_strategy="persistent",
    warp_specialized=True,
    use_smem_epilogue=True,
)


def test_baselines_are_legal() -> None:
    """The nvFuser-style baseline configurations pass their scheduler's checks."""
    assert ampere.violations(AMPERE_OK, problem(), get_device("a100")) == []
    assert ampere.violations(AMPERE_OK, problem(), get_device("h200")) == []
    assert hopper.violations(HOPPER_OK, problem(), get_device("h100")) == []


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
            problem(m=2**20, n=2**20),
            "splitk_factor",
            r"sums the partials in a kernel of 4,294,967,296 blocks",
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
        ({}, "a100", problem(), "device", r"need sm_90a; a100 is sm_80"),
        ({}, H100_NO_A, problem(), "device", r"h100-plain is sm_90\."),
        (
            {"instruction_tile": (16, 8, 16), "warp_tile": (64, 256, 64)},
            "h100",
            problem(),
            "instruction_tile",
            r"wgmma is m64nNk16",
        ),
        (
            {
                "cta_tile": (128, 256, 64),
                "warp_tile": (32, 256, 64),
                "instruction_tile": (16, 256, 16),
            },
            "h100",
            problem(),
            "warp_tile",
            r"multiple of 64",
        ),
        (
            {
                "cta_tile": (512, 256, 64),
                "warp_tile": (256, 256, 64),
                "instruction_tile": (64, 256, 16),
            },
            "h100",
            problem(),
            "cta_tile",
            r"TMA box limit of 256 elements along m",
        ),
        (
            {
                "cta_tile": (256, 256, 64),
                "warp_tile": (64, 64, 64),
                "instruction_tile": (64, 64, 16),
                "stages": 2,
            },
            "h100",
            problem(),
            "cta_tile",
            r"needs 2,176 threads",
        ),
        (
            {"stages": 5},
            "h100",
            problem(),
            "stages",
            r"stages=5 needs 311,376 B of shared memory per block; sm_90a allows 232,448 B",
        ),
        (
            {"async_gmem_load_operands": False, "stages": 2},
            "h100",
            problem(),
            "async_gmem_load_operands",
            r"always loads operands with TMA",
        ),
        (
            {"cluster_dims": (4, 4)},
            "h100",
            problem(),
            "cluster_dims",
            r"cluster of 16 CTAs; sm_90a allows 8",
        ),
        (
            {"cluster_dims": (1, 2)},
            "h100",
            problem(n=4096 + 256),
            "cluster_dims",
            r"does not divide the 32x17 tile grid",
        ),
        (
            {"splitk_factor": 2},
            "h100",
            problem(),
            "splitk_factor",
            r"cannot be combined with persistent tiling",
        ),
        (
            {"splitk_factor": 3, "tiling_strategy": "one_tile_per_cta"},
            "h100",
            problem(k=128),
            "splitk_factor",
            r"exceeds the 2 K tiles",
        ),
        ({"stages": 1}, "h100", problem(), "warp_specialized", r"needs stages > 1"),
    ],
    ids=[
        "cc",
        "arch_suffix",
        "instruction",
        "warp_m",
        "tma_box",
        "threads",
        "smem",
        "tma_loads",
        "cluster_size",
        "cluster_divides",
        "splitk_persistent",
        "splitk_le_k_tiles",
        "ws_stages",
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
    from mmaplug.plan import plan_problem

    with pytest.warns(ParamAdjustedWarning, match=r"ampere changed caller's stages: 1 -> 2"):
        spec = plan_problem(problem(k=32), get_device("a100"), pm=pm, overrides={"stages": 1})
    assert spec.params.stages == 2
    (adjustment,) = spec.provenance.adjustments
    assert (adjustment.field, adjustment.old, adjustment.new) == ("stages", 1, 2)
    assert "always has 2 buffers" in adjustment.reason


def test_default_one_stage_plan_is_recorded_without_warning(pm) -> None:
    """The default heuristic picks 1 stage for a single K tile; the change shows in provenance."""
    from mmaplug.plan import plan_problem

    spec = plan_problem(problem(m=256, n=256, k=32), get_device("a100"), pm=pm)
    assert spec.params.stages == 2
    assert [a.field for a in spec.provenance.adjustments] == ["stages"]


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

    from mmaplug.choices import KernelSpec, Provenance
    from mmaplug.epilogue import EpilogueProgram
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
    config = kernel_config(spec, SimpleNamespace(epilogue=EpilogueProgram()))  # type: ignore[arg-type]
    assert (config.vec_a, config.vec_b) == expected
