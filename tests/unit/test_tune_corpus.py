"""Tuning corpora and candidates: parsing, built-ins, and every candidate legal by planning."""

from __future__ import annotations

from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.errors import UsageError
from mmaplug.planning.device import get_device
from mmaplug.planning.params import TileShape
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import planning_with
from mmaplug.plugins.decode.scheduler import SCHEDULER as DECODE
from mmaplug.plugins.hopper import limits
from mmaplug.plugins.hopper.scheduler import SCHEDULER as HOPPER
from mmaplug.tune import candidates, corpus
from mmaplug.tune.corpus import TuneProblem

H200 = get_device("h200")

TOML = """
[[problems]]
m = 4096
n = 6144
k = 4096
dtype = "bfloat16"

[[problems]]
m = 128
n = 512
k = 1024
batch = 4
layout = "NT"
epilogue = "bias_gelu"
"""


def test_toml_and_json_files(tmp_path: Path) -> None:
    """Both formats give the same problems, with the documented defaults filled in."""
    (tmp_path / "c.toml").write_text(TOML)
    (tmp_path / "c.json").write_text(
        '{"problems": [{"m": 4096, "n": 6144, "k": 4096, "dtype": "bfloat16"},'
        ' {"m": 128, "n": 512, "k": 1024, "batch": 4, "layout": "NT", "epilogue": "bias_gelu"}]}'
    )
    toml = corpus.load(str(tmp_path / "c.toml"))
    assert toml == corpus.load(str(tmp_path / "c.json"))
    assert toml[0] == TuneProblem(m=4096, n=6144, k=4096, dtype="bfloat16")
    assert toml[1].key == "float16_NT_bias_gelu_b4_128x512x1024"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"problems": [{"m": 1, "n": 2, "k": 3, "tile": 4}]}', "unknown field.s. tile"),
        ('{"problems": [{"m": 0, "n": 2, "k": 3}]}', "m=0; extents are ints from 1"),
        ('{"problems": [{"m": 1, "n": 2}]}', "k=None; extents are ints"),
        ('{"problems": [{"m": 1, "n": 2, "k": 3, "dtype": "float32"}]}', "dtype='float32'; choose"),
        ('{"problems": [{"m": 1, "n": 2, "k": 3, "layout": "XX"}]}', "layout='XX'; choose from TN"),
        ('{"problems": []}', "expected a non-empty list 'problems'"),
        ("{", "not valid JSON"),
        ("[" * 100_000, "not valid JSON: nested too deeply"),
        ('{"problems": [{"m": ' + "9" * 5000 + "}]}", "not valid JSON: Exceeds the limit"),
    ],
    ids=[
        "unknown-field",
        "zero",
        "missing",
        "dtype",
        "layout",
        "empty",
        "syntax",
        "deep",
        "digits",
    ],  # fmt: skip
)
def test_bad_corpus_entries_say_what_is_wrong(text: str, match: str) -> None:
    """Each mistake is a UsageError naming the problem's position and what is accepted."""
    with pytest.raises(UsageError, match=match):
        corpus.parse(text, toml=False, source="c.json")


def test_swiglu_is_the_llama_ffn_as_one_horizontal_fusion() -> None:
    """``silu(A @ B1) * (A @ B3)``: two products sharing A (twice the FLOPs), read from a
    corpus file like any epilogue; FP8: two scaled_mm sharing A and its scale, per tensor or
    per row."""
    (tp,) = corpus.parse(
        '{"problems": [{"m": 4, "n": 1024, "k": 512, "dtype": "bfloat16", "epilogue": "swiglu"}]}',
        toml=False,
    )
    problem = tp.problem()
    assert (problem.horizontal, problem.num_patterns) == (2, 2)
    assert "silu" in problem.epilogue_ops and tp.flops == 2 * 2 * 4 * 1024 * 512
    assert [tuple(v.shape) for v in tp.fusion().inputs] == [(4, 512), (512, 1024), (512, 1024)]
    fp8 = TuneProblem(m=4, n=256, k=512, dtype="float8_e4m3fn", scale="row", epilogue="swiglu")
    assert fp8.problem().horizontal == 2 and fp8.scale_count == 4 + 2 * 256
    shapes = [tuple(v.shape) for v in fp8.fusion().inputs]
    assert shapes == [(4, 512), (512, 256), (4, 1), (1, 256), (512, 256), (1, 256)]
    with pytest.raises(UsageError, match="swiglu' with block scales"):
        TuneProblem(m=4, n=16, k=32, dtype="float8_e4m3fn", scale="block", epilogue="swiglu")


def test_a_corpus_file_that_is_no_text_says_so(tmp_path: Path) -> None:
    """A binary or UTF-16 file is a UsageError, not a UnicodeDecodeError traceback."""
    path = tmp_path / "c.json"
    path.write_text('{"problems": []}', encoding="utf-16")
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        corpus.load(str(path))


def test_unknown_corpus_names_the_builtins(tmp_path: Path) -> None:
    """A name that is neither built in nor a .json/.toml file lists the built-ins."""
    with pytest.raises(UsageError, match="neither a built-in .llm, skinny, odd, narrow, batched."):
        corpus.load("llama")
    with pytest.raises(UsageError, match="cannot be read"):
        corpus.load(str(tmp_path / "missing.toml"))


def test_builtin_corpora_are_hopper_problems() -> None:
    """Every built-in problem but ``narrow``'s analyses to its own shape, and the hopper
    scheduler takes it; by default it plans on decode exactly where decode accepts it beside
    hopper (the skinny few-row ones, but FP8 ones of 9-16 rows past 16 MiB or half the SMs'
    tiles and 16-bit ones of long weight rows, which it hands to hopper)."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    no_decode = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["decode"])
    hopper_corpora = [name for name in corpus.BUILTIN if name != "narrow"]
    problems = corpus.load_all(hopper_corpora)
    assert len(problems) == sum(len(corpus.BUILTIN[name]) for name in hopper_corpora)
    decoded = set()
    for tp in problems:
        problem = tp.problem()
        assert (problem.m, problem.n, problem.k, problem.batch) == (tp.m, tp.n, tp.k, tp.batch)
        assert plan_problem(problem, H200, pm=no_decode).scheduler == "hopper", tp.key
        with planning_with({"decode": DECODE, "hopper": HOPPER}):  # as a plan asks it
            takes = DECODE.accepts(problem, H200) is None
        scheduler = plan_problem(problem, H200, pm=pm).scheduler
        assert scheduler == ("decode" if takes else "hopper"), tp.key
        decoded |= {tp.key} if takes else set()
    few = {"bfloat16_TN_none_b1_1x4096x4096", "float8_e4m3fn-row_TN_none_b1_4x10240x8192"}
    assert few <= decoded
    assert "bfloat16_TN_none_b1_16x4096x4096" not in decoded  # 8 KiB weight rows
    assert "float8_e4m3fn-row_TN_none_b1_16x57344x8192" not in decoded  # FP8: 896 MiB
    assert "float8_e4m3fn-tensor_TN_none_b1_16x4096x4096" not in decoded  # 64 tiles (run 316)


def test_the_narrow_corpus_is_amperes() -> None:
    """``narrow``'s operands have rows of no 16-byte multiple: hopper declines every one (TMA)
    and they plan on ampere, in each of its problem's own extents and layout."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    problems = corpus.BUILTIN["narrow"]
    assert {tp.layout for tp in problems} == {"TN", "NT", "NN", "TT"}
    for tp in problems:
        problem = tp.problem()
        assert (problem.m, problem.n, problem.k) == (tp.m, tp.n, tp.k)
        assert min(problem.vector_widths.a, problem.vector_widths.b) < 8, tp.key
        assert plan_problem(problem, H200, pm=pm).scheduler == "ampere", tp.key


@pytest.mark.parametrize(
    "tp",
    [corpus.BUILTIN["skinny"][0], corpus.BUILTIN["llm"][-1], corpus.BUILTIN["odd"][1],
     corpus.BUILTIN["batched"][0], TuneProblem(m=512, n=512, k=512, layout="NN")],
    ids=lambda tp: tp.key,
)  # fmt: skip
def test_candidates_are_all_legal_and_include_the_default(tp: TuneProblem) -> None:
    """Each candidate passes the hopper limits and plans unchanged; the default's choice is
    first; the list is as long as asked and spans several tiles (the schedulers that would take
    the problem first blocked, as in tuning)."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["ampere", "decode"])
    problem = tp.problem()
    default = plan_problem(problem, H200, pm=pm).params
    found = candidates.candidates(problem, H200, pm, limit=20, include=[default])
    assert found[0] == default and len(found) == 20
    assert len({c.name for c in found}) == 20
    assert len({(c.cta_tile, c.warp_tile) for c in found}) >= 4
    for params in found:
        assert limits.violations(params, problem, H200) == []
        assert plan_problem(problem, H200, pm=pm, overrides=params.as_dict()).params == params


def test_illegal_include_is_dropped() -> None:
    """A heuristic's choice that planning refuses never becomes a candidate."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["ampere"])
    problem = corpus.BUILTIN["llm"][0].problem()
    good = plan_problem(problem, H200, pm=pm).params
    bad = good.with_overrides(stages=40)  # far more shared memory than an SM has
    assert not candidates.legal(bad, problem, H200, pm)
    assert bad not in candidates.candidates(problem, H200, pm, limit=5, include=[bad])


def test_model_counts_waves() -> None:
    """On 132 SMs, 128x256 tiles of 1536x2816 are one full wave; 128 more rows add an 11-tile
    second wave, which the model prices at about twice the time."""
    pm = mp.make_plugin_manager(load_entrypoints=False, block=["ampere"])
    full_problem = TuneProblem(m=1536, n=2816, k=4096).problem()
    tiles = dict(cta_tile=(128, 256, 64), warp_tile=(64, 256, 64), instruction_tile=(64, 256, 16))
    params = plan_problem(full_problem, H200, pm=pm).params.with_overrides(**tiles)
    full = candidates.estimate_us(params, full_problem, H200)
    ragged = candidates.estimate_us(params, TuneProblem(m=1664, n=2816, k=4096).problem(), H200)
    assert 1.8 * full < ragged < 2.2 * full


@pytest.mark.parametrize(
    "tp", [corpus.BUILTIN["skinny"][0], corpus.BUILTIN["llm"][-1], corpus.BUILTIN["odd"][3]],
    ids=lambda tp: tp.key,
)  # fmt: skip
def test_ampere_candidates_are_legal_for_the_ampere_scheduler(tp: TuneProblem) -> None:
    """With hopper (and decode) blocked, every ampere candidate passes the ampere limits and
    plans unchanged; the ampere default's choice comes first."""
    from mmaplug.plugins.ampere import limits as ampere_limits

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper", "decode"])
    problem = tp.problem()
    default = plan_problem(problem, H200, pm=pm).params
    found = candidates.candidates(problem, H200, pm, limit=8, include=[default],
                                  scheduler="ampere")  # fmt: skip
    assert found[0] == default and len({c.name for c in found}) == 8
    for params in found:
        assert params.instruction_tile == TileShape(16, 8, 16)
        assert ampere_limits.violations(params, problem, H200) == []
        spec = plan_problem(problem, H200, pm=pm, overrides=params.as_dict())
        assert (spec.scheduler, spec.params) == ("ampere", params)
    hopper_pm = mp.make_plugin_manager(
        load_entrypoints=False, strict=True, block=["ampere", "decode"]
    )
    assert not candidates.legal(found[1], problem, H200, hopper_pm, "ampere")


def test_model_charges_split_k_its_reduction() -> None:
    """A 4096x6144x4096 problem fills the SMs many times over: split-K 8 only adds its float32
    partials' traffic, so the model ranks it behind split-K 1 of the same tile."""
    pm = mp.make_plugin_manager(load_entrypoints=False, block=["ampere"])
    problem = corpus.BUILTIN["llm"][0].problem()
    params = plan_problem(problem, H200, pm=pm).params.with_overrides(splitk_factor=1)
    whole = candidates.estimate_us(params, problem, H200)
    split = candidates.estimate_us(params.with_overrides(splitk_factor=8), problem, H200)
    assert split > 1.5 * whole


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).parents[2] / "scripts").glob("*.toml")), ids=lambda p: p.name
)
def test_the_corpus_files_the_device_scripts_sweep_load(path: Path) -> None:
    """Each corpus file under scripts/ (``device_tier.sh``'s report parts read them on the
    device, where a malformed one would cost a call) parses into problems that plan on the
    H200."""
    problems = corpus.load(str(path))
    assert problems
    for p in problems:
        assert plan_problem(p.problem(), H200, pm=mp.make_plugin_manager()).scheduler
