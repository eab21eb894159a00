"""The installed example heuristic (examples/third_party_heuristic) seen from mmaplug."""

from __future__ import annotations

import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.cli.main import main
from mmaplug.hooks.manager import get_plugin_manager, make_plugin_manager, reset_plugin_manager
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import get_device
from mmaplug.planning.plan import plan_problem
from mmaplug.testing import FakeHeuristic, override_matmul_params

square_tiles = pytest.importorskip(
    "mmaplug_square_tiles", reason="pip install -e examples/third_party_heuristic"
)

NAME = "square_tiles"
A100 = get_device("a100")  # square_tiles answers for ampere, the only scheduler here
PROBLEM = MatmulProblem(
    m=4096,
    n=4096,
    k=4096,
    a_k_inner=True,
    b_k_inner=True,
    operand_dtype=DType.float16,
    output_dtype=DType.float16,
    vector_widths=VectorWidths(a=8, b=8, epilogue=8),
)


@pytest.fixture
def env(monkeypatch):
    """No MMAPLUG_* variables, and a fresh process-wide manager before and after."""
    for var in (
        "MMAPLUG_DISABLE",
        "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD",
        "MMAPLUG_HEURISTIC",
        "MMAPLUG_STRICT",
    ):
        monkeypatch.delenv(var, raising=False)
    reset_plugin_manager()
    yield monkeypatch
    reset_plugin_manager()


def test_discovered_through_entry_point():
    """The entry point registers the module under its name, with its distribution."""
    pm = make_plugin_manager(strict=True)
    assert pm.get_plugin(NAME) is square_tiles
    info = pm.plugin_info[NAME]
    assert (info.distribution, info.version) == ("mmaplug-square-tiles", "0.1.0")


def test_listed_by_cli(env, capsys):
    """mmaplug plugins shows it with its distribution and hook."""
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert f"{NAME} mmaplug-square-tiles 0.1.0" in " ".join(out.split())
    assert "mmaplug_matmul_params" in out


def test_answers_when_autoloaded():
    """Autoloaded, it supplies the base params of a large fp16 TN problem."""
    spec = plan_problem(PROBLEM, A100, pm=make_plugin_manager(strict=True))
    assert spec.provenance.base == NAME
    assert (spec.params.cta_tile.as_tuple(), spec.params.stages) == ((128, 128, 32), 3)
    assert spec.params.use_smem_epilogue and spec.provenance.adjustments == ()  # no warning


def test_defers_when_hopper_is_chosen():
    """On h200 hopper outranks ampere, so the ampere-only heuristic defers to the default."""
    spec = plan_problem(PROBLEM, get_device("h200"), pm=make_plugin_manager(strict=True))
    assert (spec.scheduler, spec.provenance.base) == ("hopper", "default")
    assert NAME in spec.provenance.consulted


def test_selected_through_env_over_another_heuristic(env):
    """MMAPLUG_HEURISTIC=square_tiles makes it answer even when another heuristic would."""
    env.setenv("MMAPLUG_HEURISTIC", NAME)
    pm = get_plugin_manager()
    rival = FakeHeuristic("rival", {}, base=square_tiles.SQUARE.with_overrides(stages=2))
    pm.register(rival, name="rival")
    try:
        assert plan_problem(PROBLEM, A100, pm=pm).provenance.base == NAME
    finally:
        pm.unregister(rival)


def test_selected_through_api_defers_to_default():
    """Selected through the API, a problem it does not know still gets the default."""
    pm = make_plugin_manager(heuristic=NAME, strict=True)
    small = plan_problem(PROBLEM.__class__(**{**_fields(PROBLEM), "m": 128}), A100, pm=pm)
    assert small.provenance.base == "default"


@pytest.mark.parametrize("how", ["api", "env"])
def test_blockable(env, how):
    """Blocked by name (API or MMAPLUG_DISABLE), it is not registered and the default answers."""
    if how == "env":
        env.setenv("MMAPLUG_DISABLE", NAME)
        pm = get_plugin_manager()
    else:
        pm = make_plugin_manager(block=[NAME])
    assert not pm.has_plugin(NAME)
    assert plan_problem(PROBLEM, A100, pm=pm).provenance.base == "default"


def test_overrides_reach_final_params():
    """override_matmul_params changes a field of its answer; the rest stays its own."""
    pm = make_plugin_manager(strict=True)
    with override_matmul_params(stages=2):
        spec = plan_problem(PROBLEM, A100, pm=pm)
    assert (spec.params.stages, spec.provenance.source("stages")) == (2, "override_matmul_params")
    assert spec.provenance.source("cta_tile") == NAME


def _fields(problem: MatmulProblem) -> dict[str, object]:
    import attrs

    return attrs.asdict(problem, recurse=False)
