"""FP8 tuning problems: the ``scale`` field, their keys, their fusions and the ``fp8`` corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cli import bench
from mmaplug.errors import UsageError
from mmaplug.ir.dtypes import DType
from mmaplug.tune import corpus
from mmaplug.tune.corpus import TuneProblem

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"

TOML = """
[[problems]]
m = 4096
n = 4096
k = 4096
dtype = "float8_e4m3fn"
scale = "row"

[[problems]]
m = 1000
n = 1040
k = 528
dtype = "float8_e5m2"
scale = "tensor"
epilogue = "bias_gelu"

[[problems]]
m = 64
n = 64
k = 64
dtype = "bfloat16"
"""

JSON = """{"problems": [
  {"m": 4096, "n": 4096, "k": 4096, "dtype": "float8_e4m3fn", "scale": "row"},
  {"m": 1000, "n": 1040, "k": 528, "dtype": "float8_e5m2", "scale": "tensor",
   "epilogue": "bias_gelu"},
  {"m": 64, "n": 64, "k": 64, "dtype": "bfloat16", "scale": ""}
]}"""


def test_fp8_problems_parse_from_toml_and_json(tmp_path: Path) -> None:
    """Both formats carry the scale; a 16-bit problem may leave it out or give it empty."""
    (tmp_path / "c.toml").write_text(TOML)
    (tmp_path / "c.json").write_text(JSON)
    toml = corpus.load(str(tmp_path / "c.toml"))
    assert toml == corpus.load(str(tmp_path / "c.json"))
    assert toml == [
        TuneProblem(m=4096, n=4096, k=4096, dtype=E4M3, scale="row"),
        TuneProblem(m=1000, n=1040, k=528, dtype=E5M2, scale="tensor", epilogue="bias_gelu"),
        TuneProblem(m=64, n=64, k=64, dtype="bfloat16"),
    ]
    assert TuneProblem(**toml[1].as_dict()) == toml[1]  # jobs carry problems as plain dicts


def test_fp8_keys_carry_the_scale_and_16_bit_keys_are_unchanged() -> None:
    """The scale joins the dtype with a dash, so the key's underscored fields stay in place."""
    assert (
        TuneProblem(m=4096, n=4096, k=4096, dtype=E4M3, scale="row").key
        == "float8_e4m3fn-row_TN_none_b1_4096x4096x4096"
    )
    assert (
        TuneProblem(m=8, n=16, k=32, dtype=E5M2, scale="tensor", epilogue="bias_gelu").key
        == "float8_e5m2-tensor_TN_bias_gelu_b1_8x16x32"
    )
    assert (
        TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16").key
        == "bfloat16_TN_none_b1_4096x4096x4096"
    )
    assert (
        TuneProblem(m=128, n=512, k=1024, batch=4, layout="NT", epilogue="bias_gelu").key
        == "float16_NT_bias_gelu_b4_128x512x1024"
    )
    sixteen = [p for name, ps in corpus.BUILTIN.items() if not name.startswith("fp8") for p in ps]
    assert all("-" not in p.key and p.scale == "" for p in sixteen)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"dtype": E4M3}, r"scale='' on a float8_e4m3fn problem; FP8 problems need scale"),
        ({"dtype": E4M3, "scale": "blocks"}, r"scale='blocks' .* 'tensor', 'row', 'block'"),
        ({"dtype": "float16", "scale": "row"}, r"scale='row' on a float16 problem; .* drop it"),
        ({"dtype": E5M2, "scale": "row", "layout": "NT"}, r"layout NT, batch 1; .* TN"),
        ({"dtype": E4M3, "scale": "tensor", "batch": 2}, r"layout TN, batch 2; .* 1"),
        ({"dtype": "float8_e4m3", "scale": "row"}, r"dtype='float8_e4m3'; choose from"),
        ({"dtype": E4M3, "scale": 1}, r"scale=1; choose from tensor, row, block"),
    ],
    ids=["fp8-no-scale", "fp8-bad-scale", "scale-on-16-bit", "fp8-NT", "fp8-batched",
         "fp8-misspelt", "scale-not-text"],
)  # fmt: skip
def test_bad_fp8_entries_say_what_is_wrong(fields: dict, match: str) -> None:
    """Each mistake is a UsageError naming the problem's position and the fix."""
    text = json.dumps({"problems": [{"m": 64, "n": 64, "k": 64, **fields}]})
    with pytest.raises(UsageError, match="c.json: problem 1: .*" + match):
        corpus.parse(text, toml=False, source="c.json")


def test_fp8_problems_built_in_code_are_checked_too() -> None:
    """The same rules hold for a TuneProblem made directly (the CLI's, a job's)."""
    with pytest.raises(UsageError, match="FP8 problems need scale"):
        TuneProblem(m=1, n=16, k=16, dtype=E4M3)
    with pytest.raises(UsageError, match="scales are for float8_e4m3fn and float8_e5m2 only"):
        TuneProblem(m=1, n=16, k=16, scale="tensor")
    with pytest.raises(UsageError, match="layout TN"):
        TuneProblem(m=1, n=16, k=16, dtype=E4M3, scale="row", layout="TT")


def _inputs(tp: TuneProblem, rng: np.random.Generator) -> list[np.ndarray]:
    """numpy twins of ``work.problem_inputs``: B a weight [N, K] transposed, scales from 0.5."""
    m, n, k, fp8 = tp.m, tp.n, tp.k, DType[tp.dtype].numpy
    row = tp.scale == "row"
    inputs = [
        rng.standard_normal((m, k)).astype(fp8),
        rng.standard_normal((n, k)).astype(fp8).T,
        (rng.random((m, 1) if row else ()) + 0.5).astype(np.float32),
        ((rng.random((1, n) if row else (1,)) + 0.5) * k**-0.5).astype(np.float32),
    ]
    if tp.epilogue == "bias_gelu":
        inputs.append(rng.standard_normal(n).astype(DType.bfloat16.numpy))
    return inputs


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return x * 0.5 * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


@pytest.mark.parametrize(
    "tp",
    [
        TuneProblem(m=24, n=48, k=64, dtype=E4M3, scale="tensor"),
        TuneProblem(m=24, n=48, k=64, dtype=E4M3, scale="row"),
        TuneProblem(m=1, n=32, k=80, dtype=E5M2, scale="tensor"),
        TuneProblem(m=40, n=16, k=96, dtype=E4M3, scale="tensor", epilogue="bias_gelu"),
        TuneProblem(m=40, n=16, k=96, dtype=E5M2, scale="row", epilogue="bias_gelu"),
    ],
    ids=lambda tp: tp.key,
)
def test_an_fp8_fusion_is_scaled_mm_in_float64(tp: TuneProblem) -> None:
    """The fusion takes A, B (K-major), scale_a, scale_b (and the bias) in that order, shaped as
    torch._scaled_mm takes them, and evaluates to the float64 product times the scales (plus the
    bias, then GELU), rounded once to bfloat16."""
    fusion = tp.fusion()
    row = tp.scale == "row"
    expected = [
        ((tp.m, tp.k), DType[tp.dtype]),
        ((tp.k, tp.n), DType[tp.dtype]),
        ((tp.m, 1) if row else (), DType.float32),
        ((1, tp.n) if row else (1,), DType.float32),
        *([((tp.n,), DType.bfloat16)] if tp.epilogue == "bias_gelu" else []),
    ]
    assert [(tuple(v.shape), v.dtype) for v in fusion.inputs] == expected
    assert fusion.inputs[1].stride_order == [0, 1]  # B is K-major: a weight [N, K] transposed
    inputs = _inputs(tp, np.random.default_rng(7))
    (got,) = mp.evaluate(fusion, inputs)
    a, b, scale_a, scale_b, *bias = (x.astype(np.float64) for x in inputs)
    ref = (a @ b) * scale_a * scale_b
    if bias:
        ref = _gelu(ref + bias[0])
    assert got.dtype == DType.bfloat16.numpy and got.shape == (tp.m, tp.n)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2**-7, atol=1e-6)


def test_the_fp8_corpus_covers_what_fp8_serving_runs() -> None:
    """16 to 36 problems, every one torch._scaled_mm-shaped (TN, batch 1, K and N multiples of
    16): both scales of e4m3 at the squares, llama projections at 4096 tokens, decode M, odd
    extents, an e5m2 problem, fused bias+GELU and the llama FFN (decode steps and a prefill)."""
    fp8 = corpus.load("fp8")
    assert 16 <= len(fp8) <= 36 and len(set(fp8)) == len(fp8)
    assert all(p.is_fp8 and (p.layout, p.batch) == ("TN", 1) for p in fp8)
    assert all(p.k % 16 == 0 and p.n % 16 == 0 for p in fp8)
    shapes = {(p.m, p.n, p.k, p.scale) for p in fp8 if p.dtype == E4M3 and p.epilogue == "none"}
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120)]:
        assert {(*shape, "tensor"), (*shape, "row")} <= shapes
    projections = {(n, k) for n, k in corpus.LLAMA_WEIGHTS.values()}
    assert len({(n, k) for m, n, k, _ in shapes if m == 4096 and (n, k) in projections}) >= 5
    assert {m for m, n, k, _ in shapes if (n, k) == (4096, 4096)} >= {1, 16, 64, 128}
    assert any(p.dtype == E5M2 for p in fp8)
    fused = {(p.m, p.n, p.k, p.scale) for p in fp8 if p.epilogue == "bias_gelu"}
    assert fused == {(4096, 4096, 4096, "tensor"), (4096, 4096, 4096, "row")}
    ffn = {(p.m, p.scale) for p in fp8 if p.epilogue == "swiglu"}
    assert {(1, "tensor"), (1, "row"), (2048, "row")} <= ffn


def test_an_fp8_ffn_is_two_scaled_mm_sharing_a_in_float64() -> None:
    """``swiglu``: inputs A, B1, scale_a, scale_b1, B3, scale_b3; it evaluates to
    silu(A @ B1 * scales) * (A @ B3 * scales) in float64, rounded once to bfloat16."""
    tp = TuneProblem(m=3, n=32, k=64, dtype=E4M3, scale="row", epilogue="swiglu")
    rng = np.random.default_rng(8)
    fp8 = DType[tp.dtype].numpy
    inputs = [
        rng.standard_normal((3, 64)).astype(fp8),
        rng.standard_normal((32, 64)).astype(fp8).T,
        (rng.random((3, 1)) + 0.5).astype(np.float32),
        (rng.random((1, 32)) + 0.5).astype(np.float32),
        rng.standard_normal((32, 64)).astype(fp8).T,
        (rng.random((1, 32)) + 0.5).astype(np.float32),
    ]
    (got,) = mp.evaluate(tp.fusion(), inputs)
    a, b1, sa, sb1, b3, sb3 = (x.astype(np.float64) for x in inputs)
    gate, up = (a @ b1) * sa * sb1, (a @ b3) * sa * sb3
    ref = gate / (1.0 + np.exp(-gate)) * up
    assert got.dtype == DType.bfloat16.numpy
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize("tp", corpus.BUILTIN["fp8"], ids=lambda tp: tp.key)
def test_every_fp8_corpus_problem_plans_to_an_fp8_kernel(tp: TuneProblem) -> None:
    """Its analysis has FP8 operand letters and its own shape; the decode scheduler plans it at
    M <= 8 (mma.sync m16n8k32, sm_89+), the hopper scheduler above (its transposed product at
    9-16 rows, runs 193 and 316: the corpus has no weight of 16 MiB or less on 33 of hopper's
    tiles or fewer, which decode keeps); a horizontal FFN (``swiglu``) of up to 16 rows on
    decode, hopper building no transposed horizontal fusion."""
    problem = tp.problem()
    assert problem.precision[0] in "QR" and problem.layout == "TN"
    assert (problem.m, problem.n, problem.k, problem.batch) == (tp.m, tp.n, tp.k, 1)
    kept = tp.m <= 8
    expected = "decode" if kept or (tp.epilogue == "swiglu" and tp.m <= 16) else "hopper"
    assert mp.plan_problem(problem, "h200").scheduler == expected


def test_the_fp8_corpus_has_decode_steps_against_llama_weights() -> None:
    """M = 1, 4 and 16 against llama 8B and 70B weights, e4m3 with per-row scales: what
    ``mmaplug bench --corpus fp8 --graph`` times of the decode kernel."""
    weights = set(corpus.LLAMA_WEIGHTS.values())
    decode = {
        (p.m, (p.n, p.k))
        for p in corpus.load("fp8")
        if p.m <= 16 and p.dtype == E4M3 and p.scale == "row" and (p.n, p.k) in weights
    }
    assert {m for m, _ in decode} >= {1, 4, 16}
    assert {w for _, w in decode} & {
        corpus.LLAMA_WEIGHTS[n] for n in ("8b_qkv", "8b_gate_up", "8b_down")
    }
    assert {w for _, w in decode} & {
        corpus.LLAMA_WEIGHTS[n] for n in ("70b_qkv", "70b_o", "70b_gate_up")
    }


def test_min_bytes_of_fp8_counts_one_byte_operands_and_a_bfloat16_output() -> None:
    row = TuneProblem(m=2, n=16, k=32, dtype=E4M3, scale="row", epilogue="bias_gelu")
    assert bench.min_bytes(row) == 2 * 32 + 32 * 16 + 2 * (2 * 16 + 16) + 4 * (2 + 16)
    tensor = TuneProblem(m=2, n=16, k=32, dtype=E5M2, scale="tensor")
    assert bench.min_bytes(tensor) == 2 * 32 + 32 * 16 + 2 * 2 * 16 + 4 * 2


def test_block_scaled_problems_build_block_scaled_fusions() -> None:
    """A ``block`` entry's fusion takes scales [M, ceil(K / 128)] and [ceil(K / 128),
    ceil(N / 128)], is a block-scaled problem, and its key says so."""
    problem = TuneProblem(m=1000, n=1040, k=528, dtype=E4M3, scale="block")
    assert problem.scale_shapes == ((1000, 5), (5, 9))
    assert problem.key == "float8_e4m3fn-block_TN_none_b1_1000x1040x528"
    fusion = problem.fusion()
    assert [tuple(t.shape) for t in fusion.inputs[2:4]] == [(1000, 5), (5, 9)]
    assert mp.matmul_problem(fusion).block_scaled
    assert {p.scale for p in corpus.BUILTIN["fp8_block"]} == {"block"}
