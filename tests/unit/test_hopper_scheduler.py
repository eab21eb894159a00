"""The hopper scheduler object: its spaces, its rules and its one resource model."""

from __future__ import annotations

import attrs
import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.heuristics.default import hopper_params
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import PARAM_NAMES, MatmulParams, TileShape
from mmaplug.planning.scheduler import Scheduler, violations
from mmaplug.plugins.hopper import limits, space
from mmaplug.plugins.hopper.config import HopperKernelConfig
from mmaplug.plugins.hopper.scheduler import SCHEDULER

H200 = get_device("h200")


def problem(
    m: int = 4096, n: int = 4096, k: int = 4096, *, b_k_inner: bool = True, horizontal: int = 1
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        a_k_inner=True,
        b_k_inner=b_k_inner,
        operand_dtype=DType.float16,
        output_dtype=DType.float16,
        vector_widths=VectorWidths(a=8, b=8, epilogue=8),
        num_patterns=horizontal,
        horizontal=horizontal,
    )


PROBLEMS = [
    pytest.param(problem(), id="TN"),
    pytest.param(problem(b_k_inner=False), id="TT"),
    pytest.param(problem(horizontal=2), id="horizontal2"),
    pytest.param(problem(512, 11008, 4096, horizontal=3, b_k_inner=False), id="horizontal3_TT"),
]


def test_is_a_scheduler() -> None:
    assert isinstance(SCHEDULER, Scheduler)
    assert (SCHEDULER.name, SCHEDULER.priority) == ("hopper", 20)
    assert SCHEDULER.adjustments(hopper_params(problem(), H200), problem(), H200) == ()


@pytest.mark.parametrize("prob", PROBLEMS)
def test_spaces_name_fields_and_allow_their_examples(prob: MatmulProblem) -> None:
    """Each space is one MatmulParams field, listed once; its examples are legal values."""
    spaces = SCHEDULER.space(prob, H200)
    fields = [s.field for s in spaces]
    assert len(set(fields)) == len(fields) and set(fields) <= set(PARAM_NAMES)
    for s in spaces:
        assert all(s.allows(v) for v in s.examples), s.field
        assert all(s.allows(v) for v in s.values), s.field


@pytest.mark.parametrize("prob", PROBLEMS)
def test_the_default_plan_is_in_every_space(prob: MatmulProblem) -> None:
    params = hopper_params(prob, H200)
    for s in SCHEDULER.space(prob, H200):
        assert s.allows(getattr(params, s.field)), s.field
    assert violations(SCHEDULER, params, prob, H200) == []


def test_the_tuners_tiles_are_the_examples() -> None:
    """The warp tiles the tuner tries at each cta_k, and the CTA tiles of one or two consumer
    warpgroups along M or N over them (on a K-major B every listed warp tile is legal)."""
    spaces = {s.field: s for s in SCHEDULER.space(problem(), H200)}
    warps = spaces["warp_tile"].examples
    assert len(warps) == len(space.WARP_EXAMPLES) * len(space.CTA_K_EXAMPLES)
    assert TileShape(64, 160, 128) in warps and TileShape(128, 128, 256) in warps
    assert TileShape(128, 256, 64) in spaces["cta_tile"].examples
    assert TileShape(256, 128, 64) in spaces["cta_tile"].examples  # two 128x128 along M
    assert TileShape(256, 256, 64) not in spaces["cta_tile"].examples  # four consumers
    assert spaces["stages"].examples == (2, 3, 4, 5, 6)
    assert spaces["splitk_factor"].examples == (1, 2, 4, 8, 16, 32)
    n_major = {s.field: s for s in SCHEDULER.space(problem(b_k_inner=False), H200)}
    assert all(w.n % 64 == 0 for w in n_major["warp_tile"].examples)


def test_a_horizontal_fusion_narrows_split_k_and_clusters() -> None:
    spaces = {s.field: s for s in SCHEDULER.space(problem(horizontal=2), H200)}
    assert spaces["splitk_factor"].values == (1,) and not spaces["splitk_factor"].allows(2)
    assert spaces["cluster_dims"].values == ((1, 1),)
    assert not spaces["cta_tile"].allows(TileShape(64, 120, 64))  # 60 columns per product
    assert spaces["cta_tile"].allows(TileShape(64, 128, 64))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stages", 1),
        ("prefetch_gap", 2),
        ("async_gmem_load_operands", False),
        ("warp_specialized", False),
        ("cluster_dims", (8, 1)),
    ],
)
def test_single_field_rules_ask_the_space(field: str, value: object) -> None:
    """A value outside the field's space breaks exactly the rule about that field."""
    prob = problem()
    (s,) = [s for s in SCHEDULER.space(prob, H200) if s.field == field]
    assert not s.allows(value)
    params = hopper_params(prob, H200).with_overrides(**{field: value})
    assert [v.field for v in violations(SCHEDULER, params, prob, H200)] == [field]


def test_rules_blame_fields() -> None:
    for prob in (problem(), problem(horizontal=2)):
        for rule in SCHEDULER.rules(prob, H200):
            assert rule.field in (*PARAM_NAMES, "device") and rule.limit


def test_violations_follow_the_asked_problem_and_device() -> None:
    """``violations`` keeps the last problem's rules; another problem or device, asked right
    after, is checked against its own rules, never the kept ones."""
    bad = hopper_params(problem(), H200).with_overrides(
        cta_tile=(128, 96, 64), warp_tile=(64, 96, 64), instruction_tile=(64, 96, 16), stages=30
    )  # past shared memory; 96 columns, which an N-major B's 64-column rows do not divide

    def broken(prob: MatmulProblem, device: Device) -> list[str]:
        return [v.limit for v in violations(SCHEDULER, bad, prob, device)]

    def expected(prob: MatmulProblem, device: Device) -> list[str]:
        return [r.limit for r in limits.rules(prob, device) if r.check(bad, prob, device)]

    tn, tt, a100 = problem(), problem(b_k_inner=False), get_device("a100")
    first = broken(tn, H200)
    assert first == expected(tn, H200) and first
    assert broken(tt, H200) == expected(tt, H200) != first  # N-major B: 64-column rows
    assert broken(tt, a100) == expected(tt, a100) != expected(tt, H200)  # another smem, arch
    assert broken(attrs.evolve(tt), a100) == expected(tt, a100)  # an equal problem
    assert broken(tn, H200) == first


STAGED = {"smem_epilogue": True}
CONFIGS = [
    {},
    STAGED,
    {**STAGED, "pingpong": True, "cta_tile": (64, 256, 64), "warp_tile": (64, 256, 64)},
    {"cta_tile": (256, 128, 64), "warp_tile": (128, 128, 64), "stages": 3, "cluster_m": 2},
    {**STAGED, "cta_tile": (128, 192, 128), "warp_tile": (128, 96, 128), "stages": 2},
    {"b_k_inner": False, "cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64), "stages": 6},
    {**STAGED, "cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64), "horizontal": 2},
    {**STAGED, "cta_tile": (64, 192, 64), "warp_tile": (64, 192, 64), "horizontal": 3},
]


@pytest.mark.parametrize("changes", CONFIGS)
def test_resources_are_the_kernel_configs(changes: dict[str, object]) -> None:
    """The rules, the heuristic and the launch read one model: ``resources`` of the params
    equals what the built kernel's config launches with, byte for byte."""
    config = HopperKernelConfig(**changes)  # type: ignore[arg-type]
    prob = attrs.evolve(
        problem(b_k_inner=config.b_k_inner, horizontal=config.horizontal),
        operand_dtype=config.operand_dtype,
    )
    params = MatmulParams(
        cta_tile=config.cta_tile,
        warp_tile=config.warp_tile,
        instruction_tile=(64, config.warp_tile[1], 16),
        stages=config.stages,
        use_smem_epilogue=config.smem_epilogue,
        tiling_strategy="persistent_pingpong" if config.pingpong else "persistent",
        cluster_dims=(config.cluster_m, 1),
        warp_specialized=True,
    )
    got = SCHEDULER.resources(params, prob)
    assert got.smem_bytes == config.smem_bytes == limits.smem_bytes(params, prob)
    assert (got.threads, got.registers) == (config.threads, config.registers[1])


def test_resources_of_the_4096_cube_default() -> None:
    """1024 B of slack, four stages of A and B tiles with two mbarriers each, and the staged
    epilogue's two consumer regions (64 staged rows and two column rows each)."""
    params = hopper_params(problem(), H200)
    stage = (128 + 256) * 64 * 2 + 16
    staging = 2 * (64 * (4 * 32 + 32) + 2 * 256 * 4)
    got = SCHEDULER.resources(params, problem())
    assert got.smem_bytes == 1024 + params.stages * stage + staging
    assert (got.threads, got.registers) == (384, 240 if params.cluster_dims == (1, 1) else 232)
