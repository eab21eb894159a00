"""The ``mmaplug`` command line: explain and plugins, errors without tracebacks."""

from __future__ import annotations

import pytest

from mmaplug.cli import main, parse_settings
from mmaplug.errors import UsageError
from mmaplug.manager import reset_plugin_manager

ENV_VARS = ("MMAPLUG_DISABLE", "MMAPLUG_HEURISTIC", "MMAPLUG_STRICT")
EXPLAIN = [
    "explain",
    "--device",
    "h200",
    "--m",
    "4096",
    "--n",
    "4096",
    "--k",
    "4096",
    "--dtype",
    "float16",
]


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch):
    """Only the built-in plugins, and a fresh process-wide manager per test."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    yield monkeypatch
    reset_plugin_manager()


def test_explain_prints_the_decision(capsys):
    """explain prints the layout both ways, the candidates and each field's source."""
    assert main([*EXPLAIN, "--device", "a100", "--layout", "NT"]) == 0
    out = capsys.readouterr().out
    assert "layout=NT (a_k_inner=False, b_k_inner=False)" in out
    assert "hopper       rejected: " in out and "a100 is sm_80" in out
    assert "from default" in out


def test_explain_set_overrides(capsys):
    """--set values are caller overrides and win (on a100: the ampere scheduler)."""
    argv = [*EXPLAIN, "--device", "a100", "--set", "stages=3", "--set", "cta_tile=128,256,32"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "stages                     3                  from caller" in out
    assert "128x256x32" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*EXPLAIN, "--set", "stage=3"], "did you mean 'stages'"),
        ([*EXPLAIN, "--set", "stages"], "expected FIELD=VALUE"),
        ([*EXPLAIN, "--set", "stages=99"], "stages=99"),
        (
            ["explain", "--device", "h300", "--m", "1", "--n", "1", "--k", "1"],
            "did you mean 'h200'",
        ),
        (["explain", "--m", "0", "--n", "8", "--k", "8"], "--m 0: extents must be ints"),
        (["explain", "--m", "8", "--n", "8", "--k", "-5"], "--k -5: extents must be ints"),
        (["explain", "--m", "8", "--n", str(2**31), "--k", "8"], "--n 2147483648: extents"),
        (["explain", "--m", "8", "--n", "8", "--k", "8", "--batch", "0"], "--batch 0: extents"),
        (
            [*EXPLAIN, "--set", "stages=99", "--set", "cta_tile=7,7,7"],
            "cta_tile=7x7x7 is not divisible",
        ),
    ],
    ids=[
        "unknown_field",
        "no_value",
        "invalid_value",
        "unknown_device",
        "m_zero",
        "k_negative",
        "n_2_pow_31",
        "batch_zero",
        "several_violations",
    ],
)
def test_errors_are_one_line_no_traceback(capsys, argv, message):
    """A MatmulError prints one 'error: ...' line to stderr and returns 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_usage_error_from_argparse(capsys):
    """A missing required option is reported by argparse with exit status 2."""
    assert main(["explain", "--m", "1"]) == 2
    assert "required" in capsys.readouterr().err


def test_parse_settings():
    """--set values are Python literals, or plain strings for enum names."""
    assert parse_settings(
        ["stages=3", "cta_tile=(128, 128, 32)", "cta_order=column_major", "use_smem_epilogue=True"]
    ) == {
        "stages": 3,
        "cta_tile": (128, 128, 32),
        "cta_order": "column_major",
        "use_smem_epilogue": True,
    }
    with pytest.raises(UsageError, match="expected FIELD=VALUE"):
        parse_settings(["=3"])


def test_plugins_lists_builtins_and_blocked(capsys, hermetic_env):
    """plugins lists each plugin's distribution, version and hooks, then the blocked names."""
    hermetic_env.setenv("MMAPLUG_DISABLE", "hopper")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "ampere       mmaplug 0.1.0" in out
    assert (
        "hooks: mmaplug_adjust_params, mmaplug_build_kernel, mmaplug_scheduler_candidates, "
        "mmaplug_validate_params"
    ) in out
    assert "blocked: hopper" in out and "  hopper " not in out


def test_plugins_reports_env_errors(capsys, hermetic_env):
    """A bad environment is an error message, not a traceback."""
    hermetic_env.setenv("MMAPLUG_DISABLE", "default")
    assert main(["plugins"]) == 2
    assert "cannot be disabled" in capsys.readouterr().err
