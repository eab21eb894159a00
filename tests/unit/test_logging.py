"""The ``mmaplug`` loggers: plans, builds and cache hits reported; silent and free when off."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug import cache, log
from mmaplug import plan as plan_module
from mmaplug.demo import example_fusion
from mmaplug.errors import ParamAdjustedWarning

NJIT_SOURCE = "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"


@pytest.fixture
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False)


@pytest.fixture
def problem(pm: mp.PluginManager) -> mp.MatmulProblem:
    return mp.matmul_problem(example_fusion(256, 512, 128), pm=pm)


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """Generated kernel modules imported by a test are forgotten after it."""
    yield
    for name in [n for n in sys.modules if n.startswith("mmaplug_kernels.")]:
        del sys.modules[name]


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


def test_kernel_module_cache_misses_and_hits_at_debug(
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_modules: None,
) -> None:
    """Disk cache: written (miss), found in a fresh process (hit), then already loaded."""
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    with caplog.at_level(logging.DEBUG, logger="mmaplug.cache"):
        first = cache.kernel_module("log1", "A = 1\n")
        del sys.modules[first.__name__]  # as a fresh process
        cache.kernel_module("log1", "A = 1\n")
        cache.kernel_module("log1", "A = 1\n")
    where = str(tmp_path / "kernels" / Path(first.__file__).name)
    assert messages(caplog, "mmaplug.cache", logging.DEBUG) == [
        f"kernel module {first.__name__}: miss, wrote {where}",
        f"kernel module {first.__name__}: hit, {where}",
        f"kernel module {first.__name__}: already loaded in this process",
    ]


def test_numba_machine_code_misses_and_hits_at_debug(
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_modules: None,
) -> None:
    """Numba's cache beside a kernel module: a miss compiles, a fresh process then hits."""
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    module = cache.kernel_module("log2", NJIT_SOURCE)
    with caplog.at_level(logging.DEBUG, logger="mmaplug.cache"):
        assert module.f(1) == 2
        del sys.modules[module.__name__]
        assert cache.kernel_module("log2", NJIT_SOURCE).f(2) == 3
    numba_lines = [m for m in messages(caplog, "mmaplug.cache", logging.DEBUG) if "Numba" in m]
    assert len(numba_lines) == 2
    assert numba_lines[0].startswith("Numba machine code ") and ".nbi" in numba_lines[0]
    assert numba_lines[0].endswith(": miss (Numba compiles it)")
    assert numba_lines[1].endswith(": hit")


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
