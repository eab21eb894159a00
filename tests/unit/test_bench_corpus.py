"""The ``serving`` corpus (issue 25's problem set) and what ``bench --corpus`` counts per row."""

from __future__ import annotations

import pytest

from mmaplug.cli import bench
from mmaplug.cli.main import main
from mmaplug.ir.dtypes import DType
from mmaplug.tune.corpus import BUILTIN, LLAMA_WEIGHTS, TuneProblem


def test_serving_covers_what_servers_run() -> None:
    """≥ 40 problems: decode at every M of 1..64 against llama weights, skinny M 96..512, deep K,
    both dtypes, all four layouts, batched and fused problems."""
    serving = BUILTIN["serving"]
    assert len(serving) >= 40
    weights = set(LLAMA_WEIGHTS.values())
    decode_m = {p.m for p in serving if (p.n, p.k) in weights and p.m <= 64}
    assert decode_m == {1, 2, 4, 8, 16, 32, 64}
    assert {p.m for p in serving if (p.n, p.k) in weights and 96 <= p.m <= 512} >= {96, 512}
    assert any(p.k >= 8 * max(p.m, p.n) for p in serving)  # deep K
    assert {p.dtype for p in serving} == {"float16", "bfloat16"}
    assert {p.layout for p in serving} == {"TN", "TT", "NT", "NN"}
    assert any(p.batch > 1 for p in serving) and any(p.epilogue == "bias_gelu" for p in serving)
    ffn = {p.m for p in serving if p.epilogue == "swiglu"}  # the llama FFN as one fusion
    assert {1, 16} <= ffn and max(ffn) > 64  # decode steps and a prefill


def test_min_bytes_counts_each_operand_output_and_bias_once() -> None:
    p = TuneProblem(m=2, n=3, k=5, batch=4, dtype="bfloat16", epilogue="bias_gelu")
    assert bench.min_bytes(p) == (4 * (2 * 5 + 5 * 3 + 2 * 3) + 3) * 2
    ffn = TuneProblem(m=2, n=3, k=5, dtype="float16", epilogue="swiglu")  # two weights
    assert bench.min_bytes(ffn) == (2 * 5 + 2 * 5 * 3 + 2 * 3) * 2
    fp8 = TuneProblem(m=2, n=3, k=5, dtype="float8_e4m3fn", scale="row", epilogue="swiglu")
    assert bench.min_bytes(fp8) == 2 * 5 + 2 * 5 * 3 + 2 * 2 * 3 + 4 * (2 + 2 * 3)


def test_shape_problems_follow_the_shape_table() -> None:
    """The shape table as problems: TN, and bias+GELU only where EPILOGUE_SHAPES says."""
    problems = bench.shape_problems([(4096, 4096, 4096), (8, 16, 32)], [DType.bfloat16])
    assert [(p.m, p.n, p.k, p.epilogue) for p in problems] == [
        (4096, 4096, 4096, "none"),
        (4096, 4096, 4096, "bias_gelu"),
        (8, 16, 32, "none"),
    ]
    assert {(p.layout, p.dtype) for p in problems} == {("TN", "bfloat16")}


def test_plot_is_refused_with_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--graph", "--plot", "x.png"]) != 0
    assert "--plot draws the per-call shape table" in capsys.readouterr().err
