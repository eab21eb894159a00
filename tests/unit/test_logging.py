"""The ``mmaplug`` loggers: plans, builds and cache hits reported; silent and free when off."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug import log
from mmaplug.cli.demo import example_fusion
from mmaplug.cuda import cubin
from mmaplug.errors import ParamAdjustedWarning
from mmaplug.planning import plan as plan_module


@pytest.fixture
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False)


@pytest.fixture
def problem(pm: mp.PluginManager) -> mp.MatmulProblem:
    return mp.matmul_problem(example_fusion(256, 512, 128), pm=pm)


def messages(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno == level]


def test_library_logger_is_silent_by_default() -> None:
    """``mmaplug`` carries a NullHandler and no level: the application decides what is shown."""
    logger = logging.getLogger("mmaplug")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.level == logging.NOTSET
    assert [logging.getLogger(f"mmaplug.{s}").parent for s in log.STAGES] == [logger] * 5


def test_plan_reports_scheduler_and_params_at_info(
    caplog: pytest.LogCaptureFixture, pm: mp.PluginManager, problem: mp.MatmulProblem
) -> None:
    """One INFO line per plan: the problem, device, scheduler, params and their base."""
    with caplog.at_level(logging.INFO, logger="mmaplug"):
        spec = mp.plan_problem(problem, mp.get_device("a100"), pm=pm)
    (line,) = messages(caplog, "mmaplug.plan", logging.INFO)
    assert line.startswith("m=256 n=512 k=128 layout=TN")
    assert f"on a100: scheduler ampere, params {spec.params.name} (base from default;" in line
    assert line.endswith("adjustments: none)")
    assert not messages(caplog, "mmaplug.plan", logging.DEBUG)


def test_plan_names_its_adjustments(
    caplog: pytest.LogCaptureFixture, pm: mp.PluginManager, problem: mp.MatmulProblem
) -> None:
    """A field the scheduler changed is in the INFO line, from what, to what and why."""
    with (
        caplog.at_level(logging.INFO, logger="mmaplug.plan"),
        pytest.warns(ParamAdjustedWarning),
    ):
        mp.plan_problem(
            problem, mp.get_device("a100"), pm=pm, overrides={"use_smem_epilogue": False}
        )
    (line,) = messages(caplog, "mmaplug.plan", logging.INFO)
    assert "adjustments: use_smem_epilogue: False -> True (the ampere kernel always stages" in line


def test_plan_debug_holds_the_explain_text(
    caplog: pytest.LogCaptureFixture, pm: mp.PluginManager, problem: mp.MatmulProblem
) -> None:
    """At DEBUG the whole ``explain`` account follows: candidates and each field's source."""
    with caplog.at_level(logging.DEBUG, logger="mmaplug.plan"):
        spec = mp.plan_problem(problem, mp.get_device("h200"), pm=pm)
    (text,) = messages(caplog, "mmaplug.plan", logging.DEBUG)
    assert text == f"plan of {spec.name}:\n{mp.explain(spec)}"
    assert "hopper       accepted (priority 20)" in text


def test_disabled_plan_logging_formats_nothing(
    monkeypatch: pytest.MonkeyPatch, pm: mp.PluginManager, problem: mp.MatmulProblem
) -> None:
    """With mmaplug's loggers off, planning never builds the explain text."""

    def no_explain(spec: object) -> str:
        raise AssertionError("explain() ran although DEBUG is off")

    monkeypatch.setattr(plan_module, "explain", no_explain)
    logging.getLogger("mmaplug").setLevel(logging.WARNING)
    try:
        assert mp.plan_problem(problem, mp.get_device("h200"), pm=pm).scheduler == "hopper"
    finally:
        logging.getLogger("mmaplug").setLevel(logging.NOTSET)


@pytest.mark.parametrize(("device", "scheduler"), [("h200", "hopper"), ("a100", "ampere")])
def test_compile_reports_the_build_and_its_time(
    caplog: pytest.LogCaptureFixture, pm: mp.PluginManager, device: str, scheduler: str
) -> None:
    """Each kernel build is one INFO line: plan name, kernel, building plugin, seconds."""
    with caplog.at_level(logging.INFO, logger="mmaplug"):
        compiled = mp.compile(example_fusion(64, 64, 64), device, pm=pm)
    (line,) = messages(caplog, "mmaplug.build", logging.INFO)
    assert line.startswith(f"{compiled.spec.name}: kernel {compiled.kernel_name} built by ")
    assert f"plugin {scheduler} in " in line and line.endswith(" s")
    assert [r.name for r in caplog.records] == ["mmaplug.plan", "mmaplug.build"]


def test_cubin_cache_misses_and_hits_at_debug(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk cache: a miss, the entry stored, then a hit in a later read."""
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    binary = cubin.Binary(b"\x7fELF log", "_Z", 3)
    with caplog.at_level(logging.DEBUG, logger="mmaplug.cache"):
        assert cubin.read("log1", 3) is None
        cubin.write("log1", binary)
        assert cubin.read("log1", 3) == binary
    where = tmp_path / "cubins" / "log1.cubin"
    assert messages(caplog, "mmaplug.cache", logging.DEBUG) == [
        f"cubin {where}: miss",
        f"cubin {where}: stored (8 bytes)",
        f"cubin {where}: hit",
    ]


def test_to_stream_prints_mmaplug_records(pm: mp.PluginManager, problem: mp.MatmulProblem) -> None:
    """``log.to_stream`` (``mmaplug -v``) prints ``name: message`` lines of the chosen level."""
    out = io.StringIO()
    handler = log.to_stream(logging.INFO, out)
    try:
        mp.plan_problem(problem, mp.get_device("a100"), pm=pm)
    finally:
        log.LOGGER.removeHandler(handler)
        log.LOGGER.setLevel(logging.NOTSET)
    assert out.getvalue().startswith("mmaplug.plan: m=256 n=512 k=128 layout=TN")
    assert out.getvalue().count("\n") == 1
