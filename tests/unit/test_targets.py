"""The kernel targets table (``mmaplug targets``): which problems each target reads, and its
verdict on measured rows, judged here on rows written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from mmaplug.cli.main import main
from mmaplug.tune import targets
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.targets import TARGETS, Target, judge, markdown

BARE = TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16")
FUSED = attrs.evolve(BARE, epilogue="bias_gelu")
DECODE = TuneProblem(m=1, n=8192, k=8192, dtype="bfloat16")


def _row(p: TuneProblem, us: float, ratio: float = 1.0, cold_us: float | None = None) -> dict:
    """A ``run_corpus`` row of *p*: *us* per warm replay, torch's time over ours *ratio*."""
    cold = us if cold_us is None else cold_us
    return {"problem": p.key, "bytes": 2 * (p.m * p.k + p.n * p.k + p.m * p.n),
            "ours_ms": us / 1e3, "ours_graph_us": us, "graph_ratio": ratio, "ours_cold_us": cold,
            "cold_ratio": ratio * us / cold}  # fmt: skip


def test_every_target_reads_problems_of_its_kind() -> None:
    """Decode targets read M <= 16 against weights of 16 Mi elements or more; the large target
    no problem of 64 rows or fewer, none of deep K; the fused-cost targets a bare twin beside
    each fused problem; every problem once in ``problems()``."""
    by_text = {t.text: t for t in TARGETS}
    decode = [t for t in TARGETS if t.text.startswith("decode")]
    assert len(decode) == 2 and decode[0].problems == decode[1].problems
    assert all(p.m <= 16 and p.n * p.k >= 16 << 20 for p in decode[0].problems)
    assert {p.dtype for p in decode[0].problems} == {"bfloat16", "float16", "float8_e4m3fn"}
    (large,) = [t for t in TARGETS if t.text.startswith("large")]
    assert all(p.m > 64 and p.k < 4 * max(p.m, p.n) for p in large.problems)
    for cost in (t for t in TARGETS if t.measure == "cost"):
        fused = [p for p in cost.problems if p.epilogue == "bias_gelu"]
        assert fused and {attrs.evolve(p, epilogue="none") for p in fused} <= set(cost.problems)
    assert by_text["block-scaled FP8 >= 1,200 TF/s at 8192³"].problems[0].scale == "block"
    assert all(len(t.problems) == len(set(t.problems)) for t in TARGETS)  # each counted once
    every = targets.problems()
    assert len(every) == len(set(every)) and set(every) == {p for t in TARGETS for p in t.problems}


def test_a_target_is_met_only_with_every_problem_measured_and_within_bounds() -> None:
    """Each problem at least *each*, the geometric mean at least *mean*: one problem under
    either fails it; a problem without a row, or whose output failed its float64 check (a row
    without times), leaves it unmet and named as not measured or wrong."""
    target = Target(issue=25, text="t", problems=(BARE, DECODE), measure="ratio", each=0.9,
                    mean=1.0)  # fmt: skip
    (met,) = judge([target], [_row(BARE, 10, 1.2), _row(DECODE, 10, 0.95)])
    assert met.met and met.mean == pytest.approx((1.2 * 0.95) ** 0.5)
    (low,) = judge([target], [_row(BARE, 10, 1.2), _row(DECODE, 10, 0.85)])
    assert not low.met and low.failing == (DECODE,)
    (mean,) = judge([target], [_row(BARE, 10, 1.0), _row(DECODE, 10, 0.95)])
    assert not mean.met and not mean.failing  # each within, the mean under 1.0
    (missing,) = judge([target], [_row(BARE, 10, 1.2)])
    assert not missing.met and missing.missing == (DECODE,) and set(missing.values) == {BARE}
    (wrong,) = judge([target], [_row(BARE, 10, 1.2), {"problem": DECODE.key, "rel_err": 1.0}])
    assert not wrong.met and wrong.wrong == (DECODE,) and not wrong.missing
    assert "WRONG output (not timed): bf16 1×8192×8192" in markdown([wrong])


def test_measures_read_tflops_tbps_and_the_fused_cost_over_the_bare_twin() -> None:
    """TF/s from the problem's flops, TB/s from the row's bytes, both per warm replay; the cost
    of a fused epilogue is its time over its bare twin's (at most *each*), cold beside warm."""
    tflops = Target(issue=24, text="tf", problems=(BARE,), measure="tflops", each=1000.0)
    (v,) = judge([tflops], [_row(BARE, 137.4)])
    assert v.values[BARE] == pytest.approx(2 * 4096**3 / 137.4e-6 / 1e12) and v.met
    tbps = Target(issue=25, text="tb", problems=(DECODE,), measure="tbps", each=3.85)
    row = _row(DECODE, 30.0, cold_us=50.0)
    (v,) = judge([tbps], [row])
    assert v.values[DECODE] == pytest.approx(row["bytes"] / 30e-6 / 1e12) and v.met
    assert v.cold[DECODE] == pytest.approx(row["bytes"] / 50e-6 / 1e12)
    cost = Target(issue=25, text="c", problems=(FUSED, BARE), measure="cost", each=1.02)
    (v,) = judge([cost], [_row(FUSED, 214.0), _row(BARE, 200.0)])
    assert v.values == {FUSED: pytest.approx(1.07)} and v.failing == (FUSED,)
    (v,) = judge([cost], [_row(FUSED, 214.0)])  # no bare twin: not measured
    assert v.missing == (FUSED,) and not v.met


def test_the_table_names_the_worst_problem_what_fails_and_the_verdict() -> None:
    target = Target(issue=25, text="decode >= 1.0x", problems=(BARE, DECODE), measure="ratio",
                    each=1.0)  # fmt: skip
    table = markdown(judge([target], [_row(BARE, 10, 1.1), _row(DECODE, 10, 0.96)]))
    header, rule, line = table.splitlines()
    assert header.startswith("| issue | target |") and rule == "|---|---|---|---|"
    assert line.startswith("| 25 | decode >= 1.0x | 2 problems; worst bf16 1×8192×8192 0.960x")
    assert "cold 0.960–1.100x" in line and "outside: bf16 1×8192×8192 0.960x" in line
    assert line.endswith("| no |")


@pytest.mark.parametrize(
    ("device", "share"),
    [("NVIDIA H200", "70% of the H200's 4.8 TB/s HBM"),
     ("NVIDIA H100 80GB HBM3", "100% of the H100 80GB HBM3's 3.35 TB/s HBM"),
     ("NVIDIA A100-SXM4-80GB", None)],
)  # fmt: skip
def test_a_tbps_row_reads_as_a_share_of_the_measuring_gpus_hbm(
    device: str, share: str | None
) -> None:
    """The decode TB/s target is set on the H200; its row also gives the mean as a share of the
    peak of the GPU that measured it, where that GPU's peak is known (nothing is guessed)."""
    tbps = Target(issue=25, text="tb", problems=(DECODE,), measure="tbps", each=3.85)
    row = _row(DECODE, 30.0)
    us = row["bytes"] / (3.36 if "H200" in device else 3.35) / 1e6
    (line,) = markdown(judge([tbps], [_row(DECODE, us)]), device=device).splitlines()[-1:]
    assert (share in line) if share else ("HBM" not in line)


@pytest.mark.parametrize(
    ("device", "caption"),
    [("NVIDIA H200", "Measured on NVIDIA H200."),
     ("NVIDIA H100 80GB HBM3",
      "Measured on NVIDIA H100 80GB HBM3 (the targets are set on the H200).")],
)  # fmt: skip
def test_the_table_names_the_gpu_that_measured_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str, caption: str
) -> None:
    """A table measured on another GPU than the targets' says so above it; ``--rows`` reads the
    GPU from the saved file and ``--json`` keeps it."""
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps({"device": device, "rows": [_row(DECODE, 10, 1.1)]}))
    assert main(["targets", "--rows", str(saved), "--issue", "25"]) == 0
    caption_line, blank, header, *_ = capsys.readouterr().out.splitlines()
    assert (caption_line, blank) == (caption, "") and header.startswith("| issue | target |")
    assert main(["targets", "--rows", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == device


def test_targets_judges_saved_rows_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rows`` reads a ``--json`` file: rows of only some problems leave the others' targets
    unmet, naming what was not measured; ``--issue`` keeps one issue's targets."""
    rows = [_row(p, 10.0, 1.5) for p in targets.problems() if p.m <= 16]
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps({"schema": 1, "rows": rows}))
    assert main(["targets", "--rows", str(saved), "--issue", "25"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert len(lines) == sum(t.issue == 25 for t in TARGETS)
    decode = [line for line in lines if "decode (M <= 16, N·K >= 16 Mi) >= 1.0x" in line]
    assert decode and decode[0].endswith("| yes |")
    large = [line for line in lines if line.startswith("| 25 | large")]
    assert "not measured: " in large[0] and large[0].endswith("| no |")
    assert main(["targets", "--rows", str(saved), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {t["issue"] for t in doc["targets"]} == {24, 25} and len(doc["rows"]) == len(rows)


def test_targets_exits_1_on_a_wrong_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A saved row whose output failed its float64 check (no times): the table names it and
    the command fails, as ``mmaplug bench`` does."""
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps({"rows": [{"problem": FUSED.key, "rel_err": 0.5}]}))
    assert main(["targets", "--rows", str(saved), "--issue", "25"]) == 1
    out = capsys.readouterr().out
    assert "WRONG output (not timed): bf16 bias_gelu 4096×4096×4096" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "is not JSON"), ('{"rows": [1]}', "no list 'rows' of problem rows")],
)
def test_targets_refuses_unreadable_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    saved = tmp_path / "rows.json"
    saved.write_text(text)
    assert main(["targets", "--rows", str(saved)]) == 2
    assert message in capsys.readouterr().err
    assert main(["targets", "--rows", str(tmp_path / "none.json")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_against_adds_the_earlier_worst_and_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--against FILE`` judges the same targets on earlier rows and shows their worst value,
    mean and verdict in a last column, naming the earlier worst problem where it is another;
    a target without earlier rows says so; an unreadable file is refused by its option."""
    new = tmp_path / "new.json"
    old = tmp_path / "old.json"
    decode_16 = TuneProblem(m=16, n=8192, k=8192, dtype="bfloat16")
    new.write_text(
        json.dumps(
            {"device": "NVIDIA H200", "rows": [_row(DECODE, 10, 1.1), _row(decode_16, 10, 1.2)]}
        )
    )
    old.write_text(
        json.dumps(
            {
                "device": "NVIDIA H100 80GB HBM3",
                "rows": [_row(DECODE, 10, 1.3), _row(decode_16, 10, 0.9)],
            }
        )
    )
    assert main(["targets", "--rows", str(new), "--against", str(old), "--issue", "25"]) == 0
    _, _, header, rule, *lines = capsys.readouterr().out.splitlines()
    assert header.endswith("| met | before (NVIDIA H100 80GB HBM3) |")
    assert rule == "|---|---|---|---|---|"
    ratio = [line for line in lines if "decode (M <= 16, N·K >= 16 Mi) >= 1.0x" in line][0]
    assert "worst bf16 1×8192×8192 1.100x" in ratio
    assert ratio.endswith("| worst 0.900x (bf16 16×8192×8192), mean 1.082x; no |")
    large = [line for line in lines if line.startswith("| 25 | large")][0]
    assert large.endswith("| no | not measured |")
    assert main(["targets", "--rows", str(new), "--against", str(tmp_path / "none.json")]) == 2
    assert "--against" in capsys.readouterr().err


def test_the_table_without_before_keeps_four_columns() -> None:
    target = Target(issue=25, text="t", problems=(DECODE,), measure="ratio", each=1.0)
    verdicts = judge([target], [_row(DECODE, 10, 1.1)])
    assert markdown(verdicts).splitlines()[1] == "|---|---|---|---|"
    same = markdown(verdicts, before=verdicts).splitlines()[2]
    assert same.endswith("| yes | worst 1.100x; met |")
