"""The tuned-table plugin (examples/tuned_table): exact and nearest answers from the database."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import mmaplug as mp
from mmaplug.planning.device import get_device
from mmaplug.planning.params import MatmulParams
from mmaplug.planning.plan import plan_problem
from mmaplug.testing import registered
from mmaplug.tune import db
from mmaplug.tune.corpus import TuneProblem

sys.path.insert(0, str(Path(__file__).parent))
from tune_workers import row  # noqa: E402

_SOURCE = Path(__file__).parents[2] / "examples/tuned_table/src/mmaplug_tuned_table/__init__.py"
H200 = get_device("h200")


def _load() -> ModuleType:
    """``mmaplug_tuned_table`` as installed, else loaded from the example's source tree."""
    try:
        import mmaplug_tuned_table
    except ImportError:
        spec = importlib.util.spec_from_file_location("mmaplug_tuned_table", _SOURCE)
        assert spec is not None and spec.loader is not None
        mmaplug_tuned_table = importlib.util.module_from_spec(spec)
        sys.modules["mmaplug_tuned_table"] = mmaplug_tuned_table
        spec.loader.exec_module(mmaplug_tuned_table)
    return mmaplug_tuned_table


table = _load()

TUNED = MatmulParams(cta_tile=(64, 48, 64), warp_tile=(64, 48, 64), instruction_tile=(64, 48, 16),
                     stages=7, warp_specialized=True, use_smem_epilogue=True)  # fmt: skip
SLOWER = TUNED.with_overrides(stages=3)


def _record(conn: object, tp: TuneProblem, params: MatmulParams, ms: float) -> None:
    db.record(conn, row(tp.key, params_name=params.name, time_ms=ms, params=params.as_dict(),  # type: ignore[arg-type]
                        m=tp.m, n=tp.n, k=tp.k, batch=tp.batch, dtype=tp.dtype))  # fmt: skip


@pytest.fixture
def tuned_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """A database at $MMAPLUG_TUNING_DB holding 4096^3 bfloat16: TUNED fastest, SLOWER after."""
    monkeypatch.setenv("MMAPLUG_TUNING_DB", str(tmp_path / "t.sqlite"))
    conn = db.connect(db.default_path())
    tp = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
    _record(conn, tp, SLOWER, 2.0)
    _record(conn, tp, TUNED, 1.0)
    return conn


@pytest.fixture
def pm() -> object:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


def _plan(pm: object, tp: TuneProblem) -> mp.KernelSpec:
    with registered(pm, table):  # type: ignore[arg-type]
        return plan_problem(tp.problem(), H200, pm=pm)  # type: ignore[arg-type]


def test_exact_match_answers_the_fastest_row(tuned_db: object, pm: object) -> None:
    """The measured problem gets its fastest ok params, and provenance names the plugin."""
    spec = _plan(pm, TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16"))
    assert spec.params == TUNED
    assert spec.provenance.base.startswith("mmaplug_tuned_table")


def test_nearest_measured_problem_answers(tuned_db: object, pm: object) -> None:
    """A problem within MAX_DISTANCE in log space of a measured one gets its params."""
    spec = _plan(pm, TuneProblem(m=3000, n=5000, k=4096, dtype="bfloat16"))
    assert spec.params == TUNED


def test_far_or_different_problems_defer_to_the_default(tuned_db: object, pm: object) -> None:
    """Too far, another dtype or layout, or another epilogue: None, and the default answers."""
    square = dict(m=4096, n=4096, k=4096)
    for tp in (TuneProblem(m=64, n=4096, k=4096, dtype="bfloat16"),
               TuneProblem(**square, dtype="float16"),
               TuneProblem(**square, dtype="bfloat16", layout="NT"),
               TuneProblem(**square, dtype="bfloat16", epilogue="bias_gelu")):  # fmt: skip
        assert table.table().lookup(tp.problem(), H200, "hopper") is None, tp.key
        assert _plan(pm, tp).provenance.base.startswith("default"), tp.key


def test_nearest_params_the_scheduler_refuses_are_skipped(tuned_db: object) -> None:
    """The nearest row's split-K 8 needs 8 K tiles; k=512 has 4 of 128: the next nearest
    measured problem, whose params are legal, answers instead."""
    split = TUNED.with_overrides(cta_tile=(64, 48, 128), warp_tile=(64, 48, 128), splitk_factor=8,
                                 stages=4)  # fmt: skip
    _record(tuned_db, TuneProblem(m=1024, n=1024, k=1024, dtype="bfloat16"), split, 0.1)
    _record(tuned_db, TuneProblem(m=2048, n=2048, k=512, dtype="bfloat16"), SLOWER, 0.2)
    shallow = TuneProblem(m=1024, n=1024, k=512, dtype="bfloat16").problem()
    assert table.table().lookup(shallow, H200, "hopper") == SLOWER
    legal = TuneProblem(m=1024, n=1024, k=2048, dtype="bfloat16").problem()
    assert table.table().lookup(legal, H200, "hopper") == split


def test_no_database_answers_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a database file the plugin defers everywhere (and creates nothing)."""
    monkeypatch.setenv("MMAPLUG_TUNING_DB", str(tmp_path / "none.sqlite"))
    problem = TuneProblem(m=4096, n=4096, k=4096).problem()
    assert table.mmaplug_matmul_params(problem=problem, device=H200, scheduler="hopper") is None
    assert not (tmp_path / "none.sqlite").exists()


def test_other_device_or_scheduler_is_not_answered(tuned_db: object) -> None:
    """Rows of the h200 answer neither an a100 nor the ampere scheduler."""
    problem = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16").problem()
    assert table.table().lookup(problem, get_device("a100"), "ampere") is None
    assert table.table().lookup(problem, H200, "ampere") is None


def test_report_leave_one_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the database, each problem's best is the tuned table's own answer (1.0, trivially);
    left out, each problem gets its neighbour's best: SLOWER on the square (2.0 ms of a best
    1.0) and TUNED on the deep one (3.0 of 1.0). $MMAPLUG_TUNING_DB is restored after."""
    from mmaplug.cli.main import main
    from mmaplug.tune import report

    monkeypatch.setenv("MMAPLUG_TUNING_DB", str(tmp_path / "other.sqlite"))
    path = tmp_path / "t.sqlite"
    conn = db.connect(path)
    square = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
    deep = TuneProblem(m=4096, n=4096, k=8192, dtype="bfloat16")
    for tp, params, ms in ((square, TUNED, 1.0), (square, SLOWER, 2.0), (deep, SLOWER, 1.0),
                           (deep, TUNED, 3.0)):  # fmt: skip
        _record(conn, tp, params, ms)
    sets = ["default", str(_SOURCE)]
    result = report.report(conn, [square, deep], H200, sets, leave_one_out=True)
    loo = "mmaplug_tuned_table/loo"  # a package's __init__.py is named by the package
    assert result["columns"] == ["default", "mmaplug_tuned_table", loo]
    got = [(r["mmaplug_tuned_table"]["of_best"], r[loo]["params"], r[loo]["of_best"])
           for r in result["rows"]]  # fmt: skip
    assert got == [(1.0, SLOWER.name, 0.5), (1.0, TUNED.name, 1 / 3)]
    assert result["geomean_of_best"][loo] == pytest.approx((0.5 / 3) ** 0.5)
    assert result["rows"][0]["ok_rows"] == 2
    assert db.default_path() == tmp_path / "other.sqlite"
    argv = ["report", "--db", str(path), "--device", "h200", "--heuristic", str(_SOURCE),
            "--shape", "4096x4096x4096", "--shape", "4096x4096x8192",
            "--leave-one-out"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1].split()[-3:] == ["not", "measured", "0.408"]  # default unmeasured


def test_a_faster_row_of_another_scheduler_does_not_hide_the_hopper_best(
    tuned_db: object, pm: object
) -> None:
    """The fastest row of 4096^3 is an ampere kernel's: the hopper scheduler still gets its
    own fastest row, and the ampere scheduler gets the ampere one."""
    ampere = MatmulParams(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32),
                          instruction_tile=(16, 8, 16), stages=4,
                          use_smem_epilogue=True)  # fmt: skip
    square = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
    db.record(tuned_db, row(square.key, params_name=ampere.name, params=ampere.as_dict(),  # type: ignore[arg-type]
                            time_ms=0.5, scheduler="ampere"))  # fmt: skip
    problem = square.problem()
    assert table.table().lookup(problem, H200, "hopper") == TUNED
    assert table.table().lookup(problem, H200, "ampere") == ampere
