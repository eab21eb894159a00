"""The ``mmaplug`` command line: one-line errors, any-case choices, JSON, help, pipes, logs."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug import log
from mmaplug.cli import args as cli_args
from mmaplug.cli import bench
from mmaplug.cli import main as cli
from mmaplug.cli.main import main, parse_settings
from mmaplug.cuda import presence as gpu
from mmaplug.errors import UsageError
from mmaplug.hooks.manager import reset_plugin_manager

ENV_VARS = ("MMAPLUG_DISABLE", "MMAPLUG_HEURISTIC", "MMAPLUG_STRICT", "MMAPLUG_DUMP")
EXPLAIN = ["explain", "--device", "h200", "--m", "4096", "--n", "4096", "--k", "4096"]
SMALL = ["explain", "--m", "64", "--n", "64", "--k", "64"]
PLAN_KEYS = {
    "schema", "plan", "scheduler", "scheduler_plugin", "problem", "device", "candidates",
    "consulted", "dropped", "base", "params", "sources", "adjustments",
}  # fmt: skip


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Only the built-in plugins, and a fresh process-wide manager per test."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    yield monkeypatch
    reset_plugin_manager()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def subprocess_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    return {**env, "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_explain_prints_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    """explain prints the layout both ways, the candidates and each field's source."""
    status, out, _ = run(capsys, *EXPLAIN, "--device", "a100", "--layout", "NT")
    assert status == 0
    assert "layout=NT (a_k_inner=False, b_k_inner=False)" in out
    assert "hopper       rejected: " in out and "a100 is sm_80" in out
    assert "from default" in out


def test_explain_says_the_tiles_of_a_swapped_plan_are_the_transposed_products(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A weight-streaming row plans swapped on the h200; explain says what its tiles cover."""
    argv = ["explain", "--device", "h200", "--m", "32", "--n", "6144", "--k", "4096"]
    status, out, _ = run(capsys, *argv, "--dtype", "bfloat16")
    assert status == 0
    assert "swap_ab                    True               from default" in out
    assert "its tiles' m covers n=6144, their n covers m=32" in out
    status, out, _ = run(capsys, *EXPLAIN, "--device", "h200")
    assert status == 0 and "swap_ab                    False" in out and "(swap_ab:" not in out


def test_explain_set_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    """--set values are caller overrides and win; tiles as m,n,k or MxNxK, enums in any case."""
    argv = [*EXPLAIN, "--device", "a100", "--set", "stages=3", "--set", "cta_tile=128x256x32"]
    status, out, _ = run(capsys, *argv, "--set", "cta_order=Row_Major")
    assert status == 0
    assert "stages                     3                  from caller" in out
    assert "cta_tile                   128x256x32         from caller" in out
    assert "cta_order                  row_major          from caller" in out


def test_a_cluster_is_set_as_mxn_and_a_shape_stays_mxnxk() -> None:
    """``cluster_dims=2x2`` as tiles are written; ``--shape`` still takes three extents."""
    assert parse_settings(["cluster_dims=2X2"]) == {"cluster_dims": (2, 2)}
    with pytest.raises(argparse.ArgumentTypeError, match="is not MxNxK"):
        cli_args.shape("4x4")


def test_parse_settings() -> None:
    """Python literals, true/false and MxNxK tiles in any case, or lower-cased enum names."""
    assert parse_settings(
        ["stages=3", "cta_tile=(128, 128, 32)", "warp_tile=64X64X32", "cta_order=COLUMN_MAJOR",
         "use_smem_epilogue=True", "async_gmem_load_operands=false", "cluster_dims=1,2"]
    ) == {
        "stages": 3,
        "cta_tile": (128, 128, 32),
        "warp_tile": (64, 64, 32),
        "cta_order": "column_major",
        "use_smem_epilogue": True,
        "async_gmem_load_operands": False,
        "cluster_dims": (1, 2),
    }  # fmt: skip
    with pytest.raises(UsageError, match="expected FIELD=VALUE"):
        parse_settings(["=3"])
    with pytest.raises(UsageError, match="--set stages is given twice"):
        parse_settings(["stages=3", "stages=4"])


BAD_ARGUMENTS = {
    # argparse: the option, the value and what is accepted
    "m_zero": (
        ["explain", "--m", "0", "--n", "8", "--k", "8"],
        "argument --m: '0' is not an extent",
    ),
    "k_negative": ([*SMALL[:5], "--k", "-5"], "argument --k: '-5' is not an extent; extents"),
    "n_2_pow_31": ([*SMALL[:3], "--n", str(2**31), "--k", "8"], "ints from 1 to 2**31 - 1"),
    "m_text": (["explain", "--m", "x", "--n", "8", "--k", "8"], "argument --m: 'x' is not"),
    "batch_zero": ([*SMALL, "--batch", "0"], "argument --batch: '0' is not an extent"),
    "dtype": ([*SMALL, "--dtype", "float8"], "'float8' is not a dtype; choose from float16"),
    "out_dtype": ([*SMALL, "--out-dtype", "half"], "argument --out-dtype: 'half' is not a"),
    "layout": ([*SMALL, "--layout", "tx"], "'tx' is not a layout; choose from TN, TT, NT, NN"),
    "emit": ([*SMALL, "--emit", "cubin"], "'cubin' is not an emit kind; choose from plan"),
    "set_no_value": ([*SMALL, "--set", "stages"], "argument --set: expected FIELD=VALUE"),
    "set_no_field": ([*SMALL, "--set", "=3"], "argument --set: expected FIELD=VALUE"),
    "missing_m": (["explain", "--n", "8", "--k", "8"], "arguments are required: --m (or --fusion"),
    "fusion_file": (["explain", "--fusion", "/no/such.py"], "'/no/such.py': /no/such.py is not"),
    "unknown_option": ([*SMALL, "--tile", "3"], "unrecognized arguments: --tile 3"),
    "no_command": ([], "the following arguments are required: COMMAND"),
    "bad_command": (["explian"], "invalid choice: 'explian'"),
    "demo_m": (["demo", "--m", "-1"], "argument --m: '-1' is not an extent; extents are ints"),
    "reps_zero": (["bench", "--reps", "0"], "argument --reps: '0' is not a positive int"),
    "workers": (["bench", "--workers", "two"], "argument --workers: 'two' is not a positive"),
    "shape": (["bench", "--shape", "8x8"], "argument --shape: '8x8' is not MxNxK"),
    "shape_zero": (["bench", "--shape", "0x8x8"], "'0' is not an extent"),
    "bench_dtype": (["bench", "--dtype", "float32"], "'float32' is not a benchmark dtype"),
    "bench_set": (["bench", "--set", "stages"], "argument --set: expected FIELD=VALUE"),
    "plot_folder": (["bench", "--plot", "/no/such/dir/b.png"], "the folder /no/such/dir does"),
    # MatmulError from the library: the message names the value and the fix
    "unknown_field": ([*SMALL, "--set", "stage=3"], "did you mean 'stages'"),
    "invalid_value": ([*EXPLAIN, "--set", "stages=99"], "stages=99"),
    "twice": ([*SMALL, "--set", "stages=3", "--set", "stages=4"], "stages is given twice"),
    "unknown_device": ([*SMALL, "--device", "h300"], "did you mean 'h200'"),
    "demo_device": (["demo", "--device", "h300"], "unknown device 'h300'"),
    "several_violations": (
        [*EXPLAIN, "--set", "stages=99", "--set", "cta_tile=7,7,7"],
        "cta_tile=7x7x7 is not divisible",
    ),
}


@pytest.mark.parametrize(("argv", "message"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_every_bad_argument_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """A bad argument prints one 'mmaplug ...: error: ...' line to stderr and returns 2."""
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("mmaplug") and ": error: " in err and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "options",
    [
        ["--layout", "nt", "--dtype", "BFloat16", "--out-dtype", "FLOAT32", "--device", "A100"],
        ["--layout", "Nt", "--dtype", "bfloat16", "--out-dtype", "float32", "--device", "a100"],
    ],
)
def test_enumerations_take_any_case(capsys: pytest.CaptureFixture[str], options: list[str]) -> None:
    """Every enumeration option (layout, dtypes, device, emit) accepts any case."""
    canonical = ["--layout", "NT", "--dtype", "bfloat16", "--out-dtype", "float32"]
    assert run(capsys, *SMALL, *canonical, "--device", "a100", "--emit", "plan")[0] == 0
    expected = capsys.readouterr().out or run(capsys, *SMALL, *canonical, "--device", "a100")[1]
    status, out, _ = run(capsys, *SMALL, *options, "--emit", "PLAN")
    assert status == 0 and out == expected and "layout=NT" in out and "precision=TSS" in out


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """*parser* and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _subparsers(sub)


def test_no_option_has_case_sensitive_choices() -> None:
    """argparse's ``choices`` match one case only; every enumeration goes through ``one_of``."""
    fixed = [
        f"{sub.prog} {'/'.join(action.option_strings)}"
        for sub in _subparsers(cli.build_parser())
        for action in sub._actions
        if action.choices and not isinstance(action, argparse._SubParsersAction)
    ]
    assert not fixed


def test_tuning_enumerations_take_any_case() -> None:
    """db's --status and --format, tune's --dtype: the canonical spelling from any case."""
    args = cli.build_parser().parse_args(["db", "--status", "OK", "--format", "CSV"])
    assert (args.status, args.format) == ("ok", "csv")
    assert cli.build_parser().parse_args(["tune", "--dtype", "Float16"]).dtype == "float16"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version first, then what a bug report needs."""
    status, out, _ = run(capsys, "--version")
    expected = getattr(mp, "__version__", None) or importlib.metadata.version("mmaplug")
    assert status == 0 and out.startswith(f"mmaplug {expected} (Python 3.")
    assert "numba-cuda" in out


def test_python_dash_m_runs_the_command() -> None:
    """``python -m mmaplug`` is the same command."""
    done = subprocess.run(
        [sys.executable, "-m", "mmaplug", "plugins"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("registered plugins:\n"), done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_an_output_that_cannot_be_written_is_one_line() -> None:
    """stdout on a full disk: one error line and status 1, no traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "mmaplug", "plugins"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            timeout=120,
        )
    assert done.returncode == 1
    assert done.stderr == "mmaplug: error: [Errno 28] No space left on device\n"


@pytest.mark.parametrize("command", [[], ["explain"], ["plugins"], ["demo"], ["bench"]])
def test_help_is_written_for_a_terminal(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Help is plain text (no reStructuredText markup) and exits 0."""
    status, out, _ = run(capsys, *command, "--help")
    assert status == 0 and out.startswith("usage: mmaplug")
    assert "``" not in out and ":param" not in out
    assert "--progress" in out and "--verbose" in out


def test_top_level_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--help")
    assert "examples:\n  mmaplug explain --m 4096" in out and "exit status: 0 done" in out


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    """explain --json: the documented keys; params as JSON values; sources per field."""
    status, out, err = run(capsys, *EXPLAIN, "--device", "a100", "--json", "--set", "stages=3")
    assert status == 0 and err == ""
    record = json.loads(out)
    assert set(record) == PLAN_KEYS and record["schema"] == 2
    assert record["scheduler"] == "ampere" and record["problem"]["layout"] == "TN"
    assert record["problem"]["a_k_inner"] is True and record["device"]["cc"] == [8, 0]
    assert record["params"]["stages"] == 3 and record["sources"]["stages"] == "caller"
    assert len(record["params"]["cta_tile"]) == 3 and record["sources"]["cta_tile"] == "default"
    hopper = next(c for c in record["candidates"] if c["name"] == "hopper")
    assert hopper["accepted"] is False and "sm_80" in hopper["reason"]


FUSION_FILE = """\
import mmaplug as mp

with mp.FusionDefinition() as fd:
    a = fd.define_tensor([64, 32], dtype=mp.float16)
    w = fd.define_tensor([48, 32], dtype=mp.float16)
    fd.add_output(fd.ops.slice(fd.ops.relu(fd.ops.linear(a, w)), [0, 0], [8, 8]))
"""


#: the same linear without the slice: one kernel takes it whole
ONE_KERNEL_FILE = FUSION_FILE.replace("fd.ops.slice(", "(").replace(", [0, 0], [8, 8]", "")


def _one_kernel_file(tmp_path: Path, name: str = "mm.py", more: str = "") -> Path:
    """``ONE_KERNEL_FILE`` (and *more* lines) written as *name* in *tmp_path*."""
    script = tmp_path / name
    script.write_text(ONE_KERNEL_FILE + more)
    return script


def test_explain_fusion_shows_the_segments_and_each_cut(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """explain --fusion FILE: why the fusion is segmented, each segment with its inputs,
    outputs and cut, then the kernel's plan; --json carries the same."""
    script = tmp_path / "ffn.py"
    script.write_text(FUSION_FILE)
    status, out, err = run(capsys, "explain", "--device", "a100", "--fusion", str(script))
    assert status == 0 and err == ""
    assert out.startswith("segmented (no single kernel takes this fusion): T5 = slice(T4)")
    assert "segment 1 (matmul): T0, T1 -> T4" in out and "segment 2 (pointwise): T4 -> T5" in out
    assert "    cut: the matmul kernel's epilogue cannot take what follows" in out
    assert "plan of segment 1:\nplan:       mm_sm80_ampere" in out
    status, out, _ = run(capsys, "explain", "--fusion", f"{script}:fd", "--json")
    record = json.loads(out)
    assert status == 0 and record["segmented"].startswith("T5 = slice(T4)")
    kinds = [(s["kind"], s["inputs"], s["outputs"]) for s in record["segments"]]
    assert kinds == [("matmul", ["T0", "T1"], ["T4"]), ("pointwise", ["T4"], ["T5"])]
    assert record["segments"][0]["plan"]["scheduler"] == "hopper"
    assert record["segments"][1]["plan"] is None and record["segments"][1]["reason"]


def test_explain_fusion_of_one_kernel_prints_its_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A fusion one kernel takes: the plan, as explain prints it for --m --n --k."""
    script = _one_kernel_file(tmp_path)
    status, out, _ = run(capsys, "explain", "--device", "a100", "--fusion", str(script))
    assert status == 0 and out.startswith("plan:       mm_sm80_ampere") and "segment" not in out


def test_explain_fusion_json_stays_parseable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What the fusion file prints goes to stderr, so --json parses; --emit with --json is
    the record plus the text under that key, as without --fusion."""
    script = _one_kernel_file(tmp_path, more='print("loading weights...")\n')
    status, out, err = run(capsys, "explain", "--device", "h200", "--fusion", str(script), "--json")
    assert status == 0 and json.loads(out)["scheduler"] == "hopper"
    assert "loading weights..." in err
    argv = ["explain", "--device", "h200", "--fusion", str(script), "--emit", "source", "--json"]
    status, out, _ = run(capsys, *argv)
    record = json.loads(out)
    assert status == 0 and "def hopper_gemm(" in record["source"] and record["kernel_name"]


def test_a_fusion_file_whose_name_has_a_colon(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--fusion 'a:b.py' is that file (FILE:NAME splits at the last colon only otherwise)."""
    script = _one_kernel_file(tmp_path, "a:b.py")
    status, out, _ = run(capsys, "explain", "--device", "a100", "--fusion", str(script))
    assert status == 0 and out.startswith("plan:       mm_sm80_ampere")
    status, out, _ = run(capsys, "explain", "--device", "a100", "--fusion", f"{script}:fd")
    assert status == 0 and out.startswith("plan:       mm_sm80_ampere")


def test_a_bad_strict_switch_is_an_error_for_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MMAPLUG_STRICT=bad: one error line and 2 from cache info too, not only from explain."""
    monkeypatch.setenv("MMAPLUG_STRICT", "bad")
    status, out, err = run(capsys, "cache", "info")
    assert status == 2 and out == "" and "MMAPLUG_STRICT='bad' is not a switch" in err


FUSION_ERRORS = {
    "two_fusions": (FUSION_FILE + "other = fd.fusion\n", "", "defines 2 fusions (fd, other)"),
    "no_such_name": (FUSION_FILE, ":fusion", "defines no variable 'fusion'"),
    "raises": ("raise ValueError('boom')\n", "", "raised ValueError: boom"),
    "exits": ("import sys\nsys.exit(0)\n", "", "raised SystemExit: 0"),
    "with_extents": (FUSION_FILE, "", "--fusion takes the extents from the fusion; drop --m"),
}


@pytest.mark.parametrize(("text", "suffix", "message"), FUSION_ERRORS.values(),
                         ids=FUSION_ERRORS.keys())  # fmt: skip
def test_explain_fusion_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, suffix: str, message: str
) -> None:
    """A file without one fusion, one that raises, or extents beside --fusion: one line, 2."""
    script = tmp_path / "f.py"
    script.write_text(text)
    extra = ["--m", "8"] if "extents" in message else []
    status, out, err = run(capsys, "explain", "--fusion", f"{script}{suffix}", *extra)
    assert status == 2 and out == "" and message in err and err.count("\n") == 1, err


def test_plugins_lists_builtins_and_blocked(
    capsys: pytest.CaptureFixture[str], hermetic_env: pytest.MonkeyPatch
) -> None:
    """plugins lists each plugin's distribution, version and hooks, then the blocked names."""
    hermetic_env.setenv("MMAPLUG_DISABLE", "hopper")
    status, out, _ = run(capsys, "plugins")
    assert status == 0
    assert "ampere       mmaplug " in out
    assert "hooks: mmaplug_schedulers\n" in out
    assert "  ampere       priority 10       from plugin ampere" in out
    assert "blocked: hopper" in out and "  hopper " not in out


def test_plugins_json(capsys: pytest.CaptureFixture[str], hermetic_env: pytest.MonkeyPatch) -> None:
    """plugins --json: every plugin with distribution, version, module and hooks; the policy."""
    hermetic_env.setenv("MMAPLUG_DISABLE", "hopper")
    status, out, _ = run(capsys, "plugins", "--json")
    record = json.loads(out)
    assert status == 0 and set(record) == {
        "schema", "plugins", "schedulers", "heuristics", "heuristic", "blocked", "skipped",
        "strict",
    }  # fmt: skip
    assert all(set(s) == {"name", "priority", "plugin"} for s in record["schedulers"])
    ampere = next(p for p in record["plugins"] if p["name"] == "ampere")
    assert set(ampere) == {"name", "distribution", "version", "module", "hooks", "later_hooks"}
    assert ampere["distribution"] == "mmaplug" and ampere["module"] == "mmaplug.plugins.ampere"
    assert ampere["hooks"] == ["mmaplug_schedulers"]
    assert {"name": "ampere", "priority": 10, "plugin": "ampere"} in record["schedulers"]
    assert record["blocked"] == ["hopper"] and record["heuristic"] is None
    assert record["strict"] is False


def test_plugins_reports_env_errors(
    capsys: pytest.CaptureFixture[str], hermetic_env: pytest.MonkeyPatch
) -> None:
    """A bad environment is an error message, not a traceback."""
    hermetic_env.setenv("MMAPLUG_DISABLE", "default")
    status, _, err = run(capsys, "plugins")
    assert status == 2 and err.startswith("mmaplug: error: ") and "cannot be disabled" in err


@pytest.mark.parametrize(
    ("argv", "status"),
    [(["plugins"], 1), (SMALL, 1), (["--help"], 0)],
    ids=["plugins", "explain", "help"],
)
def test_a_closed_pipe_ends_quietly(argv: list[str], status: int) -> None:
    """The reader gone (``| head -1``): no traceback; status 1 as the Python docs advise (0 for
    --help, whose write error argparse itself swallows)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmaplug", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    proc.stdout.close()  # before the child writes: its first write gets EPIPE
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == status and err == ""


def test_emit_source_progress_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Slow steps say so on stderr with --progress; not by default off a terminal, never stdout."""
    status, out, err = run(capsys, *SMALL, "--emit", "source")
    assert status == 0 and err == "" and out.startswith('"""Generated by mmaplug.plugins.hopper')
    status, again, err = run(capsys, *SMALL, "--emit", "source", "--progress")
    assert status == 0 and again == out
    assert err.startswith("mmaplug: compiling kernel hopper_float16_kk_64x64x64_")
    assert err.splitlines()[1].endswith(" s") and "done in" in err
    assert run(capsys, "--no-progress", *SMALL, "--emit", "source")[2] == ""


def test_emit_json_adds_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    """--emit with --json: the plan record plus the kernel name and the emitted text."""
    status, out, _ = run(capsys, *SMALL, "--emit", "source", "--json", "--progress")
    record = json.loads(out)
    assert status == 0 and set(record) == PLAN_KEYS | {"kernel_name", "source"}
    assert record["kernel_name"].startswith("hopper_") and "def hopper_gemm(" in record["source"]


def test_emit_without_numba(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan-only install: --emit names the extra to install, plain explain still works."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "numba" else find_spec(name, *a),
    )
    status, _, err = run(capsys, *SMALL, "--emit", "ptx")
    assert status == 2 and "--emit ptx needs numba, which is not installed: pip install" in err
    assert "mmaplug[cu13]" in err and run(capsys, *SMALL)[0] == 0


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_logs_on_stderr(capsys: pytest.CaptureFixture[str], where: str) -> None:
    """-v (before or after the command) prints mmaplug's INFO lines; the handler goes after."""
    argv = ["-v", *SMALL] if where == "before" else [*SMALL, "-v"]
    status, out, err = run(capsys, *argv)
    assert status == 0 and out.startswith("plan:")
    assert err.startswith("mmaplug.plan: m=64 n=64 k=64 layout=TN") and err.count("\n") == 1
    assert [type(h) for h in log.LOGGER.handlers] == [logging.NullHandler]
    assert run(capsys, *SMALL)[2] == ""


def without(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == module else find_spec(name, *a),
    )


def test_bench_without_torch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without torch, bench says which extra to install, in one line."""
    without(monkeypatch, "torch")
    status, _, err = run(capsys, "bench", "--quick")
    assert status == 2 and err == (
        "mmaplug: error: mmaplug bench needs torch, which is not installed: "
        "pip install 'mmaplug[bench]'\n"
    )


def test_bench_json_is_only_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """bench --json prints the rows (inf as null) and the dispatch time; the table stays out."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(gpu, "cuda_device_count", lambda: 1)
    seen = {}

    def fake_run(out, **kwargs):  # noqa: ANN001, ANN202
        seen.update(kwargs)
        print("kernel  sched ... the table", file=out)
        return [{"kernel": "linear", "m": 64, "ours_ms": 0.5, "rel_err": float("inf")}]

    monkeypatch.setattr(bench, "run", fake_run)
    monkeypatch.setattr(bench, "dispatch_overhead", lambda out: 15.5)
    argv = ["bench", "--json", "--shape", "64X64x64", "--dtype", "BFloat16", "--set", "stages=3"]
    status, out, err = run(capsys, *argv)
    assert status == 0 and err == ""
    assert json.loads(out) == {
        "schema": 1,
        "rows": [{"kernel": "linear", "m": 64, "ours_ms": 0.5, "rel_err": None}],
        "dispatch_us": 15.5,
    }
    assert seen["shapes"] == ((64, 64, 64),) and seen["dtypes"] == (mp.bfloat16,)
    assert seen["overrides"] == {"stages": 3} and seen["reps"] == 30
    status, out, err = run(capsys, *argv, "--progress")
    assert json.loads(out)["dispatch_us"] == 15.5 and "the table" in err


def test_bench_needs_a_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(gpu, "cuda_device_count", lambda: 0)
    status, _, err = run(capsys, "bench")
    assert status == 2 and err == "mmaplug: error: mmaplug bench needs a CUDA GPU; none was found\n"


def test_interrupt_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C: 'mmaplug: interrupted', status 130, no traceback."""

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_plugins", interrupted)
    status, _, err = run(capsys, "plugins")
    assert status == 130 and err == "mmaplug: interrupted\n"


def test_an_error_reads_as_one_line_without_doubled_punctuation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A multi-line error is one line on stderr: a heading's colon joins what follows, a
    line's period gives way to the "; " (no ".;" or ":;")."""
    error = UsageError("no scheduler accepts it:\n  ampere: too narrow.\n  hopper: unaligned.")
    assert cli.one_line(error) == "no scheduler accepts it: ampere: too narrow; hopper: unaligned."
    assert cli.one_line(UsageError("\n")) == "UsageError"
    status = main(["explain", "--m", "4", "--n", "4", "--k", "4", "--set", "stages=abc"])
    err = capsys.readouterr().err
    assert status == 2 and "value from: caller" in err and ".;" not in err and ":;" not in err
