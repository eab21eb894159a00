"""GPU tier: ``mmaplug targets`` measures its targets' problems on the local GPU and judges them
(here one small target of each measure, in place of issues 24 and 25's 143 problems)."""

from __future__ import annotations

import json

import pytest

from mmaplug.cli.main import main
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune import targets
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.targets import Target

torch = pytest.importorskip("torch") if cuda_device_count() else None
pytestmark = pytest.mark.sm80

BARE = TuneProblem(m=256, n=512, k=256, dtype="bfloat16")
FUSED = TuneProblem(m=256, n=512, k=256, dtype="bfloat16", epilogue="bias_gelu")
SMALL = (
    Target(issue=25, text="ratio", problems=(BARE,), measure="ratio", each=0.0),
    Target(issue=25, text="tflops", problems=(BARE,), measure="tflops", each=1e9),
    Target(issue=25, text="tbps", problems=(BARE,), measure="tbps", each=0.0),
    Target(issue=25, text="cost", problems=(FUSED, BARE), measure="cost", each=100.0),
)


def test_targets_measures_each_problem_once_and_judges_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both problems measured once (checked against float64 first); every measure read off
    them: met where the bound cannot fail, unmet (and named) where it cannot be met."""
    monkeypatch.setattr(targets, "TARGETS", SMALL)
    assert main(["targets", "--reps", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["problem"] for r in doc["rows"]] == [BARE.key, FUSED.key]
    assert doc["device"] == torch.cuda.get_device_name()  # the GPU that measured them
    assert all(r["rel_err"] < 1e-2 and r["ours_graph_us"] > 0 for r in doc["rows"])
    verdicts = {t["target"]: t for t in doc["targets"]}
    assert verdicts["ratio"]["met"] and verdicts["tbps"]["met"] and verdicts["cost"]["met"]
    assert not verdicts["tflops"]["met"] and verdicts["tflops"]["failing"] == [BARE.key]
    assert list(verdicts["cost"]["values"]) == [FUSED.key]  # the bare twin divides, unjudged
    us = doc["rows"][0]["ours_graph_us"]
    assert verdicts["tflops"]["values"][BARE.key] == pytest.approx(BARE.flops / us / 1e6)
