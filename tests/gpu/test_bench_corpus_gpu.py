"""GPU tier: ``mmaplug bench --corpus/--graph`` (``bench.run_corpus``) checks, then times both
sides per call and as CUDA-graph replays, with TB/s from the least bytes a call moves."""

from __future__ import annotations

import io

import pytest

from mmaplug.cli import bench
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.work import problem_inputs

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
        # the same replays on operand copies read in turn: these problems' operands are a few
        # MiB, so their copies (up to 64) are many
        assert row["cold_copies"] > 1, row
        assert row["ours_cold_us"] > 0 and row["torch_cold_us"] > 0
        assert row["cold_ratio"] == pytest.approx(row["torch_cold_us"] / row["ours_cold_us"])
    assert out.getvalue().count("\n") == 1 + len(PROBLEMS)


def test_operand_copies_keep_values_and_strides() -> None:
    """Each copy of a problem's operands is a new tensor equal to the original, with its
    strides (a transposed operand stays transposed), and the copies span two L2 sizes."""
    problem = TuneProblem(m=64, n=256, k=512, batch=2, dtype="float16", layout="NN")
    inputs = problem_inputs(problem)
    copies = bench.operand_copies(inputs)
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    total = sum(t.nbytes for t in inputs)
    assert len(copies) == min(64, -(-2 * l2 // total)) and copies[0] is inputs
    for copy in copies[1:]:
        for t, c in zip(inputs, copy, strict=True):
            assert c.data_ptr() != t.data_ptr() and c.stride() == t.stride()
            assert torch.equal(c, t)


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
