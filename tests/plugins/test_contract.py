"""Contract tests run over the default plugins: registration, scoping, defaults pass limits."""

from __future__ import annotations

import importlib

import pluggy
import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.hooks import hookspecs
from mmaplug.hooks.manager import DEFAULT_PLUGINS
from mmaplug.ir.dtypes import DType
from mmaplug.markers import PROJECT
from mmaplug.planning.device import PRESET_NAMES, get_device
from mmaplug.planning.params import SENTINEL_SCHEDULERS, SENTINELS, MatmulParams, TileShape
from mmaplug.planning.scheduler import violations
from mmaplug.plugins import ampere, hopper

SCHEDULERS = {"ampere": ampere, "hopper": hopper}
SHAPES = [
    (4096, 4096, 4096),
    (128, 4096, 4096),
    (16384, 1024, 512),
    (504, 136, 248),
    (8192, 8192, 8192),
    (64, 64, 64),
]
LAYOUTS = [(True, True), (True, False), (False, True), (False, False)]


def make_problem(m: int, n: int, k: int, layout: tuple[bool, bool], dtype: DType) -> MatmulProblem:
    width = 8 if min(m, n, k) % 8 == 0 else 4
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        a_k_inner=layout[0],
        b_k_inner=layout[1],
        operand_dtype=dtype,
        output_dtype=dtype,
        vector_widths=VectorWidths(a=width, b=width, epilogue=width),
    )


PROBLEMS = [
    pytest.param(
        make_problem(*shape, layout, dtype),
        id=f"{dtype.label}_{'TN TT NN NT'.split()[LAYOUTS.index(layout)]}_"
        f"{'x'.join(map(str, shape))}",
    )
    for shape in SHAPES
    for layout in LAYOUTS[:2]
    for dtype in (DType.float16, DType.bfloat16)
]
# (scheduler, device) pairs each scheduler claims: ampere on sm_80+, hopper on sm_90a.
TARGETS = [("ampere", "a100"), ("ampere", "h200"), ("hopper", "h100"), ("hopper", "h200")]


@pytest.mark.parametrize("module", DEFAULT_PLUGINS)
def test_registers_cleanly(module):
    """Each default plugin registers alone under check_pending()."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(importlib.import_module(module))
    pm.check_pending()


@pytest.mark.parametrize("name", SCHEDULERS)
def test_rules_refuse_what_the_kernel_cannot_build(name):
    """A scheduler's rules refuse parameters its kernel cannot build (core asks only the chosen
    scheduler's rules)."""
    broken = MatmulParams(
        cta_tile=(4096, 4096, 16), warp_tile=(16, 16, 16), instruction_tile=(16, 16, 16), stages=8
    )
    problem = make_problem(4096, 4096, 4096, (True, True), DType.float16)
    assert violations(SCHEDULERS[name].SCHEDULER, broken, problem, get_device("h200"))


@pytest.mark.parametrize(("scheduler", "device"), TARGETS, ids=lambda v: v)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_default_answers_pass_validators(scheduler, device, problem):
    """The default heuristic's answer passes the limits of every target it claims."""
    from mmaplug.heuristics import default

    gpu = get_device(device)
    params = default.mmaplug_matmul_params(problem=problem, device=gpu, scheduler=scheduler)
    assert isinstance(params, MatmulParams)
    assert violations(SCHEDULERS[scheduler].SCHEDULER, params, problem, gpu) == []
    for field, sentinel in SENTINELS.items():
        if scheduler in SENTINEL_SCHEDULERS[field]:
            assert getattr(params, field) != sentinel, f"default chose sentinel {field}"


@pytest.mark.parametrize("device", PRESET_NAMES)
def test_candidates(device):
    """ampere accepts half precision on sm_80+; hopper accepts it above ampere on sm_90a only."""
    gpu = get_device(device)
    f16 = make_problem(256, 256, 256, (True, True), DType.float16)
    f32 = make_problem(256, 256, 256, (True, True), DType.float32)
    assert ampere.SCHEDULER.accepts(f16, gpu) is None and ampere.SCHEDULER.priority == 10
    assert "float32" in (ampere.SCHEDULER.accepts(f32, gpu) or "")
    assert hopper.SCHEDULER.priority == 20
    reason = hopper.SCHEDULER.accepts(f16, gpu)
    if gpu.target == "sm_90a":
        assert reason is None
    else:
        assert f"{device} is {gpu.target}" in (reason or "")
    assert hopper.SCHEDULER.accepts(f32, gpu)


def test_ampere_rejects_pre_sm80():
    """ampere declines a Turing GPU with a reason naming the target."""
    from mmaplug.planning.device import Device

    turing = Device(
        name="t4", cc=(7, 5), sm_count=40, smem_per_block_optin=65536, smem_per_sm=65536
    )
    problem = make_problem(256, 256, 256, (True, True), DType.float16)
    assert "t4 is sm_75" in (ampere.SCHEDULER.accepts(problem, turing) or "")


def test_tile_shape_is_used_for_tiles():
    """Default params carry TileShape tiles (never bare tuples)."""
    from mmaplug.heuristics import default

    problem = make_problem(4096, 4096, 4096, (True, True), DType.float16)
    params = default.mmaplug_matmul_params(
        problem=problem, device=get_device("h200"), scheduler="ampere"
    )
    assert all(
        isinstance(t, TileShape)
        for t in (params.cta_tile, params.warp_tile, params.instruction_tile)
    )
