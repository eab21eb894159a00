"""GPU tier: ``mmaplug bench --corpus/--graph`` (``bench.run_corpus``) checks, then times both
sides per call and as CUDA-graph replays, with TB/s from the least bytes a call moves."""

from __future__ import annotations

import io

import pytest

from mmaplug.cli import bench
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.corpus import TuneProblem

torch = pytest.importorskip("torch") if cuda_device_count() else None
pytestmark = pytest.mark.sm80

PROBLEMS = [
    TuneProblem(m=1, n=1024, k=2048, dtype="bfloat16"),  # decode-like
    TuneProblem(m=64, n=256, k=512, batch=2, dtype="float16", layout="NN"),
    TuneProblem(m=128, n=256, k=256, dtype="float16", epilogue="bias_gelu"),
]


def test_every_row_is_checked_then_timed_per_call_and_as_replays() -> None:
    out = io.StringIO()
    rows = bench.run_corpus(out, PROBLEMS, reps=5, graph=True)
    assert [r["problem"] for r in rows] == [p.key for p in PROBLEMS]
    for row, problem in zip(rows, PROBLEMS, strict=True):
        assert row["rel_err"] < 1e-2, row
        assert row["ours_ms"] > 0 and row["torch_ms"] > 0
        assert row["ours_graph_us"] > 0 and row["torch_graph_us"] > 0
        assert row["graph_ratio"] == pytest.approx(row["torch_graph_us"] / row["ours_graph_us"])
        assert row["ours_tbps"] == pytest.approx(
            bench.min_bytes(problem) / row["ours_graph_us"] / 1e6
        )
    assert out.getvalue().count("\n") == 1 + len(PROBLEMS)


def test_a_wrong_kernel_is_reported_and_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose output is off (here: its result scaled after the fact) gets no time."""
    from mmaplug.runtime.compiled_fusion import CompiledFusion

    execute = CompiledFusion.execute

    def off_by_half(self, inputs, **kwargs):  # noqa: ANN001, ANN003, ANN202
        return [t * 1.5 for t in execute(self, inputs, **kwargs)]

    monkeypatch.setattr(CompiledFusion, "execute", off_by_half)
    out = io.StringIO()
    (row,) = bench.run_corpus(out, PROBLEMS[:1], reps=5, graph=True)
    assert row["rel_err"] > bench.CORPUS_TOLERANCE and "ours_ms" not in row
    assert "WRONG" in out.getvalue()
