"""``mmaplug report`` / ``diff`` / ``db`` / ``tune --plan-only`` over rows recorded here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.cli.main import main
from mmaplug.errors import UsageError
from mmaplug.planning.device import get_device
from mmaplug.planning.plan import plan_problem
from mmaplug.tune import db, report, work
from mmaplug.tune.corpus import TuneProblem

sys.path.insert(0, str(Path(__file__).parent))
from tune_workers import row  # noqa: E402

H200 = get_device("h200")
SQUARE = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
SKINNY = TuneProblem(m=64, n=4096, k=4096, dtype="bfloat16")
PLUGIN = '''
from mmaplug.markers import hookimpl
from mmaplug.planning.params import MatmulParams

@hookimpl
def mmaplug_matmul_params(problem, device, scheduler):
    """Stage 3 of the default's tiles for 4096-row problems; the default elsewhere."""
    if scheduler != "hopper" or problem.m != 4096:
        return None
    from mmaplug.heuristics.default import hopper_params
    return hopper_params(problem, device).with_overrides(stages=3)
'''


def _default(tp: TuneProblem) -> mp.MatmulParams:
    pm = mp.make_plugin_manager(load_entrypoints=False, block=["ampere"])
    return plan_problem(tp.problem(), H200, pm=pm).params


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """SQUARE: the default 2.0 ms, its stages=3 variant 1.6 ms, the best 1.0 ms; SKINNY: the
    default is the best (0.5 ms), plus a crashed candidate."""
    path = tmp_path / "t.sqlite"
    conn = db.connect(path)
    base = _default(SQUARE)
    for name, ms in ((base.name, 2.0), (base.with_overrides(stages=3).name, 1.6), ("best", 1.0)):
        db.record(conn, row(SQUARE.key, params_name=name, time_ms=ms))
    db.record(conn, row(SKINNY.key, params_name=_default(SKINNY).name, time_ms=0.5, m=64))
    db.record(conn, row(SKINNY.key, params_name="boom", time_ms=None, m=64, error="exit -11"))
    conn.close()
    (tmp_path / "stage3.py").write_text(PLUGIN)
    return path


def test_report_divides_the_best_time_by_each_choice(recorded: Path) -> None:
    """The default reaches 0.5 of the best on SQUARE and 1.0 on SKINNY: geometric mean 0.707."""
    plugin = str(recorded.parent / "stage3.py")
    result = report.report(db.connect(recorded), [SQUARE, SKINNY], H200, ["default", plugin])
    square, skinny = result["rows"]
    assert (square["best_ms"], square["best_params"]) == (1.0, "best")
    assert square["default"]["of_best"] == 0.5 and skinny["default"]["of_best"] == 1.0
    assert result["columns"] == ["default", "stage3"]  # a plugin file's column: its stem
    assert square["stage3"]["of_best"] == 1.0 / 1.6
    assert result["geomean_of_best"]["default"] == pytest.approx(0.5**0.5)
    text = report.format_report(result, result["columns"])
    assert "geometric mean" in text and "0.707" in text and "0.500" in text


def test_report_means_over_problems_with_a_candidate_beside_the_choice(recorded: Path) -> None:
    """SKINNY's one ok row is the default's own (its other candidate crashed): 1.0 of nothing.
    The report says so: a second mean over SQUARE alone, 0.5 (a sweep cut short, run 179)."""
    result = report.report(db.connect(recorded), [SQUARE, SKINNY], H200, ["default"])
    assert result["geomean_of_best"]["default"] == pytest.approx(0.5**0.5)
    assert result["compared_problems"] == 1
    assert result["geomean_of_best_compared"]["default"] == pytest.approx(0.5)
    lines = report.format_report(result, ["default"]).splitlines()
    assert lines[-1].startswith("... of the 1 with 2+ rows") and lines[-1].endswith("0.500")
    alone = report.report(db.connect(recorded), [SQUARE], H200, ["default"])
    assert "... of the" not in report.format_report(alone, ["default"])  # nothing to add


def test_unmeasured_choice_is_reported_as_such(recorded: Path) -> None:
    """A problem without rows has no best and no ratio; the table says 'not measured'."""
    other = TuneProblem(m=1024, n=1024, k=1024, dtype="bfloat16")
    result = report.report(db.connect(recorded), [other], H200, ["default"])
    assert result["rows"][0]["default"]["of_best"] is None
    assert result["geomean_of_best"]["default"] is None
    assert "not measured" in report.format_report(result, ["default"])


def test_diff_lists_changed_decisions_and_their_speedup(recorded: Path) -> None:
    """The plugin file changes stages on SQUARE only: 2.0 / 1.6 = 1.25x; SKINNY unchanged."""
    plugin = str(recorded.parent / "stage3.py")
    result = report.diff(db.connect(recorded), [SQUARE, SKINNY], H200, "default", plugin)
    assert result["changed"] == 1
    square = result["rows"][0]
    assert square["changed"] == ["stages"] and square["speedup"] == pytest.approx(1.25)
    assert result["rows"][1]["a"] == result["rows"][1]["b"]
    assert "1 of 2 decisions changed" in report.format_diff(result)


def test_unknown_plugin_set_is_a_usage_error() -> None:
    """A name that is not 'default', an installed heuristic or a .py file lists the options."""
    with pytest.raises(UsageError, match="heuristic 'nope' is not installed; installed: "):
        report.manager("nope")
    with pytest.raises(UsageError, match="plugin file 'missing.py' does not exist"):
        report.manager("missing.py")


def test_a_plugin_file_that_raises_is_one_line(tmp_path: Path) -> None:
    """report --heuristic FILE.py / diff: the file's exception is a UsageError naming it."""
    bad = tmp_path / "bad.py"
    bad.write_text("raise ValueError('boom')\n")
    with pytest.raises(UsageError, match=r"plugin file '.*bad.py' failed to run: ValueError: boom"):
        report.manager(str(bad))


def test_cli_db_report_diff(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The subcommands read the same rows: db exports, report and diff print JSON."""
    assert main(["db", "--db", str(recorded), "--format", "json", "--best"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert {r["params_name"] for r in best} == {"best", _default(SKINNY).name}
    assert main(["db", "--db", str(recorded), "--status", "crash", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("id,problem_key,") and len(lines) == 2 and "exit -11" in lines[1]
    shapes = ["--shape", "4096x4096x4096", "--shape", "64x4096x4096", "--device", "h200"]
    assert main(["report", "--db", str(recorded), *shapes, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["geomean_of_best"]["default"] == pytest.approx(0.5**0.5)
    plugin = str(recorded.parent / "stage3.py")
    assert main(["diff", "default", plugin, "--db", str(recorded), *shapes, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] == 1


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing database, no problems, or timing without a GPU: one error line, status 2."""
    assert main(["db", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "does not exist; run 'mmaplug tune' first" in capsys.readouterr().err
    assert main(["tune", "--plan-only"]) == 2
    assert "no problems: give --corpus" in capsys.readouterr().err
    assert main(["tune", "--shape", "256x256x256", "--db", str(tmp_path / "t.sqlite")]) == 2
    err = capsys.readouterr().err  # CI has no torch; a GPU-less machine with torch has no GPU
    assert "needs torch" in err or "none was found" in err


def test_cli_tune_plan_only(capsys: pytest.CaptureFixture[str]) -> None:
    """--plan-only prints each problem's candidates, the default's choice first (no GPU)."""
    assert main(["tune", "--shape", "64x4096x4096", "--candidates", "5", "--plan-only",
                 "--json"]) == 0  # fmt: skip
    jobs = json.loads(capsys.readouterr().out)["candidates"]  # one object, as every --json
    assert len(jobs) == 5 and {j["problem"] for j in jobs} == {SKINNY.key}
    assert jobs[0]["name"] == _default(SKINNY).name


@pytest.mark.parametrize(
    ("option", "value"), [("--timeout", "nan"), ("--timeout", "-1"), ("--gpus", "-5")]
)
def test_cli_tune_refuses_odd_numbers(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """A timeout that is no positive number of seconds, or a negative GPU count: rc 2."""
    assert main(["tune", "--shape", "64x64x64", "--plan-only", option, value]) == 2
    assert f"argument {option}: '{value}' is not a" in capsys.readouterr().err


def test_columns_are_labelled_by_module_unless_two_would_clash() -> None:
    """A plugin file's column is its stem (a package's __init__.py: the package's name); two
    versions of one plugin keep their paths; --leave-one-out adds NAME/loo but for default."""
    assert report.columns(["default", "a/x.py", "p/__init__.py"], True) == [
        "default", "x", "p", "x/loo", "p/loo"]  # fmt: skip
    assert report.columns(["default", "old/x.py", "new/x.py"], False) == [
        "default", "old/x.py", "new/x.py"]  # fmt: skip


def test_ampere_plugin_sets_report_the_ampere_decision(recorded: Path) -> None:
    """'default@ampere' is the default heuristic with hopper blocked: its ampere choice's time
    against the best of every scheduler; an unknown suffix is a usage error."""
    pm = mp.make_plugin_manager(load_entrypoints=False, block=["hopper"])
    ampere = plan_problem(SQUARE.problem(), H200, pm=pm).params
    conn = db.connect(recorded)
    db.record(conn, row(SQUARE.key, params_name=ampere.name, time_ms=4.0, scheduler="ampere"))
    result = report.report(conn, [SQUARE], H200, ["default", "default@ampere"])
    (square,) = result["rows"]
    assert square["default@ampere"] == {
        "scheduler": "ampere", "params": ampere.name, "time_ms": 4.0, "of_best": 0.25}  # fmt: skip
    assert square["default"]["scheduler"] == "hopper"
    assert report.columns(["default@ampere"], True) == ["default@ampere"]
    with pytest.raises(
        UsageError, match="names scheduler 'volta'; end it with @decode or @hopper or @amp"
    ):
        report.manager("default@volta")


def test_report_measure_times_the_missing_choices_first(
    recorded: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """report --measure builds and times (here: fake workers, no GPU) each choice the database
    lacks, the ampere one with its scheduler, then reports them; the others are not re-run."""
    import tune_workers

    from mmaplug.cli import report as cli_report

    monkeypatch.setattr(cli_report, "requires", lambda *args: None)
    monkeypatch.setattr(cli_report, "get_device", lambda name: H200)
    monkeypatch.setitem(work.WORK, "build", tune_workers.fake_build)
    monkeypatch.setitem(work.WORK, "measure", tune_workers.fake_measure)
    argv = ["report", "--db", str(recorded), "--shape", "4096x4096x4096", "--device", "h200",
            "--heuristic", "default@ampere", "--measure", "--workers", "1", "--json"]  # fmt: skip
    assert main(argv) == 0
    (square,) = json.loads(capsys.readouterr().out)["rows"]
    assert square["default"]["time_ms"] == 2.0  # recorded before, not measured again
    assert square["default@ampere"]["time_ms"] == 0.8 and square["best_ms"] == 0.8
    (measured,) = db.rows(db.connect(recorded), problem_key=SQUARE.key, status="ok", limit=1)
    assert (measured["scheduler"], measured["worker"]) == ("ampere", "test:1/gpu0")


def test_a_set_without_suffix_is_what_a_call_plans(tmp_path: Path) -> None:
    """``default`` is the plan a user's call gets, here the decode scheduler's for a decode step
    (the best row); ``default@hopper`` is the hopper decision, half as fast. A hopper row
    under the decode choice's name does not stand in for it."""
    step = TuneProblem(m=4, n=4096, k=4096, dtype="bfloat16")
    conn = db.connect(tmp_path / "t.sqlite")
    pms = {s: report.manager(f"default@{s}") for s in ("decode", "hopper")}
    chosen = {s: report.choose(step, H200, f"default@{s}", pm) for s, pm in pms.items()}
    assert report.choose(step, H200, "default", report.manager("default")) == chosen["decode"]
    for scheduler, ms in (("decode", 0.01), ("hopper", 0.02)):
        name = chosen[scheduler][1].name  # type: ignore[index]
        db.record(conn, row(step.key, params_name=name, time_ms=ms, scheduler=scheduler, m=4))
    decode_name = chosen["decode"][1].name  # type: ignore[index]
    db.record(conn, row(step.key, params_name=decode_name, time_ms=0.001, m=4))  # hopper's
    result = report.report(conn, [step], H200, ["default", "default@hopper"])
    (entry,) = result["rows"]
    assert entry["default"]["scheduler"] == "decode" and entry["default"]["time_ms"] == 0.01
    assert entry["default@hopper"]["scheduler"] == "hopper"
    assert entry["default@hopper"]["time_ms"] == 0.02
    assert db.time_of(conn, step.key, "h200", decode_name) == 0.001  # any scheduler's row
