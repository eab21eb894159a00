"""The decode scheduler: what it takes and why not, its space and rules, its resources, and the
default heuristic's choice for it."""

from __future__ import annotations

import itertools

import attrs
import pytest

import mmaplug as mp
from mmaplug.heuristics.default import mmaplug_matmul_params
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import resident_ctas, violations
from mmaplug.plugins.decode.scheduler import SCHEDULER
from mmaplug.tune.corpus import TuneProblem

H200 = mp.get_device("h200")


def _problem(**fields: object) -> mp.MatmulProblem:
    return TuneProblem(**{"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16", **fields}).problem()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"m": 17}, "at most 16 activation rows"),
        ({"layout": "NN", "m": 4}, "K-contiguous operands only"),
        ({"k": 4100}, "K must be a multiple of 8"),
        ({"k": 1}, "K must be a multiple of 8 (bfloat16), not 1"),  # (K = 1 reads as NT)
    ],
)
def test_declines_with_its_reason(fields: dict, reason: str) -> None:
    assert reason in (SCHEDULER.accepts(_problem(**fields), H200) or "")


def test_takes_a_batch_and_counts_its_ctas() -> None:
    """A batch of products (each its own weight: a shared operand folds into M or N) is one
    launch, a CTA row per product: 32 x 1x4096x128 is 8,192 CTAs, past one wave of CTAs of one
    warp (an SM holds 17), and its weight rows are short, so the default plans one warp, each
    streaming its rows' 2 chunks of K (run 191); 256-1,024 CTAs take the most warps that fit
    one wave."""
    problem = _problem(batch=32, k=128)
    assert SCHEDULER.accepts(problem, H200) is None
    params = mmaplug_matmul_params(problem, H200, "decode")
    assert params is not None and params.splitk_factor == 1
    one = mmaplug_matmul_params(_problem(n=4096, k=4096), H200, "decode")
    assert one is not None and one.splitk_factor == 8  # 256 CTAs: fewer than 2 a SM
    batched = mmaplug_matmul_params(_problem(n=4096, k=4096, batch=2), H200, "decode")
    assert batched is not None and batched.splitk_factor == 4  # 512 CTAs
    four = mmaplug_matmul_params(_problem(n=4096, k=4096, batch=4), H200, "decode")
    assert four is not None and four.splitk_factor == 2  # 1,024 CTAs


@pytest.mark.parametrize(
    ("batch", "k", "warps"),
    [
        (32, 128, 1),  # 8,192 CTAs of 256-byte rows
        (32, 256, 1),
        (32, 1024, 1),  # 2 KiB rows
        (16, 512, 1),  # 4,096 CTAs
        (32, 1032, 2),  # longer rows: the fuller last wave, 2 warps' 76% against 4's 52%
        (16, 4096, 2),  # 88% against 76%
        (4, 4096, 2),  # 1,024 CTAs: one wave of 2 warps
    ],  # fmt: skip
)
def test_plans_one_warp_for_short_rows_past_one_wave(batch: int, k: int, warps: int) -> None:
    """Where no warp count's CTAs fit one wave (2,244 CTAs of one warp, 17 an SM), weight rows
    of at most 2 KiB take one warp a CTA, each streaming all of its row's K (runs 191-192);
    longer rows the fuller last wave of 4 or 2 warps (run 193)."""
    params = mmaplug_matmul_params(_problem(batch=batch, k=k), H200, "decode")
    assert params is not None and params.splitk_factor == warps


@pytest.mark.parametrize(
    ("batch", "m", "k", "planner"),
    [
        (4, 8, 1024, "decode"),
        (8, 1, 4096, "decode"),
        (4, 9, 4096, "hopper"),
        (8, 16, 4096, "hopper"),
        (64, 8, 1016, "decode"),  # short weight rows too (run 191) ...
        (32, 1, 256, "decode"),  # ... of 512 bytes (run 339: decode and hopper tied)
        (32, 1, 128, "hopper"),  # ... but of 256 bytes on more than two waves of hopper tiles
        (64, 8, 64, "hopper"),
        (16, 8, 128, "hopper"),  # 16 x 32 tiles of 128 rows: 3.9 waves (run 340)
        (8, 1, 128, "decode"),  # 8 x 32: 1.9 waves (run 340: decode 3.7 us, hopper 4.1)
        (4, 1, 128, "decode"),
    ],  # fmt: skip
    ids=str,
)
def test_hands_batches_of_many_rows_to_hopper(batch: int, m: int, k: int, planner: str) -> None:
    """Beside a hopper scheduler that takes the problem, decode keeps batches of at most 8 rows
    (runs 181 and 191) but those of 16-bit weight rows of at most 256 bytes on more than two
    waves of hopper's 128-row tiles (runs 338-340), and names the hand-off of the others."""
    problem = _problem(batch=batch, m=m, k=k)
    spec = plan_problem(problem, H200)
    assert spec.scheduler == planner
    if planner == "hopper":
        (why,) = [c.reason for c in spec.provenance.candidates if c.name == "decode"]
        assert "hands a batch of" in why
        assert ("over 8 rows" if m > 8 else "at most 256 bytes on more 128-row tiles than 2") in why
        no_hopper = mp.make_plugin_manager(load_entrypoints=False, block=["hopper"])
        assert plan_problem(problem, H200, pm=no_hopper).scheduler == "decode"


def test_the_short_row_hand_off_and_hoppers_swap_agree() -> None:
    """Decode hands over a batch of at most 8 rows exactly where hopper's default swaps it on
    its two-consumer tile (the bound lives in each: the decode scheduler's hand-off and the
    hopper default's ``short_batched_rows``), on both devices and over the bounds' edges."""
    seen = set()
    for device in (H200, mp.get_device("h100")):
        for batch, m, n, k, dtype in itertools.product(
            (2, 4, 5, 8, 9, 32), (1, 8), (1024, 4096, 4224), (64, 128, 136), ("bfloat16", "float16")
        ):
            problem = _problem(batch=batch, m=m, n=n, k=k, dtype=dtype)
            handed = plan_problem(problem, device).scheduler == "hopper"
            params = mmaplug_matmul_params(problem, device, "hopper")
            swapped = params.swap_ab and params.cta_tile.m == 128
            assert handed == swapped, (device.name, problem)
            seen.add(handed)
    assert seen == {True, False}


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "planner"),
    [
        (16, 8192, 8192, "bfloat16", "hopper"),  # 16 KiB weight rows: hopper's swap
        (9, 57344, 8192, "float16", "hopper"),
        (16, 128, 16384, "bfloat16", "hopper"),  # a narrow weight too: swapped and split
        (16, 4096, 4096, "bfloat16", "hopper"),  # 8 KiB rows too (run 183)
        (16, 4096, 2048, "bfloat16", "decode"),  # 4 KiB rows: not timed handed over
        (16, 10240, 8192, "bfloat16", "decode"),  # hopper's 160 swapped tiles: 1.2 waves
        (12, 9216, 4096, "bfloat16", "decode"),  # 144 tiles; decode's 576 CTAs: one wave
        (16, 12672, 4096, "bfloat16", "decode"),  # 792 CTAs of 2 warps: the last in one wave
        (16, 12688, 4096, "bfloat16", "hopper"),  # 793
        (16, 14336, 4096, "bfloat16", "hopper"),  # 1.7 waves of hopper's tiles
        (16, 8448, 4096, "bfloat16", "hopper"),  # 132 tiles: one wave
        (8, 8192, 28672, "bfloat16", "decode"),  # up to 8 rows: decode everywhere
        (16, 8192, 8192, "float8_e4m3fn", "hopper"),  # FP8: hopper's e4m3 tiles (run 193)
        (16, 8192, 4096, "float8_e4m3fn", "hopper"),  # on 4 KiB rows too
        (16, 8192, 2048, "float8_e4m3fn", "hopper"),  # 16 MiB, but 128 tiles
        (16, 4096, 8192, "float8_e4m3fn", "hopper"),  # 64 tiles, but 32 MiB (run 200)
        (16, 4160, 4096, "float8_e4m3fn", "hopper"),  # 65 tiles, 16.25 MiB
        (16, 4240, 2048, "float8_e4m3fn", "hopper"),  # 8.3 MiB, but 67 tiles
        (16, 4224, 2048, "float8_e4m3fn", "hopper"),  # 66 tiles: half the SMs
        (16, 4096, 4096, "float8_e4m3fn", "hopper"),  # 16 MiB on 64 tiles (run 316)
        (16, 2112, 8192, "float8_e4m3fn", "hopper"),  # 16.5 MiB on 33 tiles
        (16, 2176, 4096, "float8_e4m3fn", "hopper"),  # 8.5 MiB, but 34 tiles
        (16, 2112, 4096, "float8_e4m3fn", "decode"),  # 33 tiles: a quarter of the SMs
        (16, 2048, 8192, "float8_e4m3fn", "decode"),  # 16 MiB on 32 tiles (run 316)
        (12, 2048, 8192, "float8_e4m3fn", "decode"),  # 32 tiles
        (16, 1040, 1024, "float8_e4m3fn", "decode"),  # 17 tiles of 1 KiB rows
    ],
    ids=str,
)
def test_hands_longer_rows_of_9_to_16_activations_to_hopper(
    m: int, n: int, k: int, dtype: str, planner: str
) -> None:
    """Beside a hopper scheduler that takes the problem, decode declines 16-bit problems of
    more than 8 rows whose weight rows are 8 KiB or more (hopper's transposed product streams
    them faster, runs 101, 105 and 183), naming the hand-off, but where hopper's 64-row tiles
    are more than one a SM while decode's CTAs of 2 warps run in one wave (runs 183 and 185);
    FP8 ones of more than 8 rows, but a weight of at most 16 MiB on hopper's tiles of at most
    a quarter of the SMs (runs 193, 200 and 316); with hopper blocked it takes them."""
    scale = "row" if dtype.startswith("float8") else ""
    problem = _problem(m=m, n=n, k=k, dtype=dtype, scale=scale)
    spec = plan_problem(problem, H200)
    assert spec.scheduler == planner
    if planner == "hopper":
        assert spec.params.swap_ab
        (why,) = [c.reason for c in spec.provenance.candidates if c.name == "decode"]
        assert "hands" in why and "transposed product" in why
        no_hopper = mp.make_plugin_manager(load_entrypoints=False, block=["hopper"])
        assert plan_problem(problem, H200, pm=no_hopper).scheduler == "decode"
    elif m > 8 and n > 132 * 64:  # kept for its one wave: of 2 warps
        assert spec.params.splitk_factor == 2


def test_declines_before_sm80() -> None:
    old = attrs.evolve(H200, name="v100", cc=(7, 0))
    assert "sm_80 or newer" in (SCHEDULER.accepts(_problem(), old) or "")


@pytest.mark.parametrize(
    ("m", "n", "warps"),
    [
        (1, 4096, 8),  # 256 CTAs: 2 of 8 warps an SM hold 264
        (1, 4240, 4),  # 265
        (1, 8192, 4),  # 512: 4 of 4 warps an SM hold 528
        (8, 8464, 2),  # 529: 8 of 2 warps an SM hold 1056
        (1, 14336, 2),  # 896
        (1, 16896, 2),  # 1056
        (1, 16912, 1),  # 1057: one wave of one warp (17 an SM hold 2,244)
        (1, 28672, 1),  # 1,792
        (1, 35904, 1),  # 2,244
        (1, 57344, 4),  # 3,584, past one wave: the last fills 79% of 4 warps' slots, 39% of 2's
        (16, 2048, 8),  # two m tiles: 132 CTAs of 8 warps an SM hold 132
        (9, 1040, 8),
        (16, 4096, 4),  # 256: 3 of 4 warps an SM hold 396
        (16, 6352, 2),  # 397: 6 of 2 warps an SM hold 792
        (16, 12688, 1),  # 793: 12 of one warp hold 1,584
    ],
)
def test_plans_decode_with_the_default_heuristic(m: int, n: int, warps: int) -> None:
    """M <= 16 TN problems plan to decode with the most warps (8, 4, 2, 1) whose CTAs an SM's
    17 warps (one m tile), 12 (two) hold at once, else (rows of 8 KiB) 4 or 2, the fuller last
    wave (H200 runs 71, 88, 89, 180-183, 190-193). Hopper is blocked: it takes 9-16 rows of
    weight rows of 8 KiB."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    spec = plan_problem(_problem(m=m, n=n), H200, pm=pm)
    assert spec.scheduler == "decode"
    assert spec.params.cta_tile == mp.TileShape(8 * -(-m // 8), 16, 64)
    assert (spec.params.splitk_factor, spec.params.stages) == (warps, 3)
    assert SCHEDULER.resources(spec.params, spec.problem).threads == 32 * warps


def test_m17_goes_to_the_tensor_core_gemm() -> None:
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    assert plan_problem(_problem(m=17), H200, pm=pm).scheduler == "hopper"


def test_every_space_value_passes_the_rules() -> None:
    problem = _problem(m=9)
    spaces = {s.field: s for s in SCHEDULER.space(problem, H200)}
    tiles = (mp.TileShape(16, 16, 64), mp.TileShape(16, 32, 64))  # M rounded up to 8s; rows
    assert spaces["cta_tile"].values == spaces["warp_tile"].values == tiles
    for tile in tiles:
        for warps in spaces["splitk_factor"].values:
            for stages in spaces["stages"].values:
                params = mp.MatmulParams(
                    cta_tile=tile, warp_tile=tile, instruction_tile=(8, 16, 16), stages=stages,
                    splitk_factor=warps, async_gmem_load_operands=False, use_smem_epilogue=True,
                )  # fmt: skip
                assert violations(SCHEDULER, params, problem, H200) == []


def test_a_warp_takes_the_whole_cta_tile() -> None:
    """Each warp multiplies all the CTA's row tiles: a warp tile of fewer rows is refused, and
    the message names the CTA's tile."""
    params = mp.MatmulParams(
        cta_tile=(16, 32, 64), warp_tile=(16, 16, 64), instruction_tile=(8, 16, 16), stages=4,
        splitk_factor=4, async_gmem_load_operands=False, use_smem_epilogue=True,
    )  # fmt: skip
    found = {v.field: v.message for v in violations(SCHEDULER, params, _problem(m=16), H200)}
    assert set(found) == {"warp_tile"}
    assert "warp_tile must equal cta_tile 16x32x64" in found["warp_tile"]


def test_a_refused_value_names_its_field_and_the_accepted_ones() -> None:
    problem = _problem()
    params = mp.MatmulParams(
        cta_tile=(8, 16, 64), warp_tile=(8, 16, 64), instruction_tile=(8, 16, 16), stages=5,
        splitk_factor=3, async_gmem_load_operands=False, use_smem_epilogue=True,
    )  # fmt: skip
    found = {v.field: v.message for v in violations(SCHEDULER, params, problem, H200)}
    assert set(found) == {"splitk_factor", "stages"}
    assert "1, 2, 4, 8: the warps of a CTA" in found["splitk_factor"]
    assert "1 to 4" in found["stages"]


def test_resources_count_each_warps_partial() -> None:
    """Shared memory for each warp's partial, and the registers ptxas takes (158 a thread at
    two m tiles and 3 chunks: an SM holds 3 CTAs of 4 warps); chunks the rules refuse name
    none."""
    params = mp.MatmulParams(cta_tile=(16, 16, 64), warp_tile=(16, 16, 64),
                             instruction_tile=(8, 16, 16), splitk_factor=4, stages=3)  # fmt: skip
    res = SCHEDULER.resources(params, _problem(m=16))
    assert (res.smem_bytes, res.threads, res.registers) == (4 * 16 * 16 * 4, 128, 158)
    assert resident_ctas(res, H200) == 3
    assert SCHEDULER.resources(attrs.evolve(params, stages=5), _problem(m=16)).registers == 0


def test_resources_of_two_row_tiles() -> None:
    """Two row tiles (32 weight rows a CTA) double each warp's partial and take the registers
    ptxas gave them (238 at two m tiles of 16-bit operands and 3 chunks: one CTA of 4 warps
    takes 30,464 of an SM's 65,536 registers, so it holds 2; of 8 warps, 1)."""
    tile = (16, 32, 64)
    params = mp.MatmulParams(cta_tile=tile, warp_tile=tile, instruction_tile=(8, 16, 16),
                             splitk_factor=4, stages=3)  # fmt: skip
    res = SCHEDULER.resources(params, _problem(m=16))
    assert (res.smem_bytes, res.threads, res.registers) == (4 * 32 * 16 * 4, 128, 238)
    assert resident_ctas(res, H200) == 2
    eight = SCHEDULER.resources(attrs.evolve(params, splitk_factor=8), _problem(m=16))
    assert resident_ctas(eight, H200) == 1


def _horizontal(h: int, **fields: object) -> mp.MatmulProblem:
    scale = "tensor" if str(fields.get("dtype", "")).startswith("float8") else ""
    return attrs.evolve(_problem(scale=scale, **fields), horizontal=h, num_patterns=h)


def test_takes_a_horizontal_fusion_of_up_to_four_products() -> None:
    """The llama FFN's decode step (two weights sharing x) is one decode kernel, of 9-16 rows
    and long weight rows too (hopper's transposed product, which won those, builds no
    horizontal fusion); five products or matmuls of other operands are declined, named."""
    for h in (2, 3, 4):
        assert SCHEDULER.accepts(_horizontal(h), H200) is None
    ffn = _horizontal(2, m=16, n=14336, k=4096)
    assert SCHEDULER.accepts(ffn, H200) is None
    assert plan_problem(ffn, H200).scheduler == "decode"
    assert plan_problem(ffn, mp.get_device("a100")).scheduler == "decode"  # one kernel on sm_80
    assert "up to 4 matmuls" in (SCHEDULER.accepts(_horizontal(5), H200) or "")
    several = attrs.evolve(_problem(), num_patterns=2)
    assert "not 2 matmuls of other operands" in (SCHEDULER.accepts(several, H200) or "")


@pytest.mark.parametrize(
    ("h", "m", "dtype", "warps", "fits"),
    [
        (2, 1, "bfloat16", 8, True),  # 16 warps of 120 registers: 61,440
        (3, 1, "bfloat16", 8, False),  # 24 warps: 24 x 32 x 120 > 65,536
        (3, 16, "float8_e4m3fn", 2, True),  # 6 warps of 176 (FP8, two m tiles, 3 chunks)
        (3, 16, "float8_e4m3fn", 4, False),  # 12 warps of 176
        (4, 16, "float8_e4m3fn", 1, True),  # the most products, one warp each
    ],
)
def test_a_cta_of_every_products_warps_fits_an_sm(
    h: int, m: int, dtype: str, warps: int, fits: bool
) -> None:
    """Each product takes ``splitk_factor`` warps of the CTA: the resources count them all, and
    a CTA an SM cannot hold (ptxas would cut its registers and spill) is refused, naming
    splitk_factor."""
    problem = _horizontal(h, m=m, dtype=dtype)
    spaces = {s.field: s.values[0] for s in SCHEDULER.space(problem, H200)}
    tile, inst = spaces["cta_tile"], spaces["instruction_tile"]
    params = mp.MatmulParams(
        cta_tile=tile, warp_tile=tile, instruction_tile=inst, stages=3, splitk_factor=warps,
        async_gmem_load_operands=False, use_smem_epilogue=True,
    )  # fmt: skip
    rows = 8 * -(-m // 8)
    res = SCHEDULER.resources(params, problem)
    assert res.threads == 32 * h * warps
    assert res.smem_bytes == h * warps * 16 * rows * 4
    found = {v.field: v.message for v in violations(SCHEDULER, params, problem, H200)}
    assert (found == {}) is fits, found
    if not fits:
        assert "warps a CTA" in found["splitk_factor"]


@pytest.mark.parametrize(
    ("h", "m", "n", "dtype"),
    [(2, 1, 14336, "bfloat16"), (2, 16, 14336, "float8_e4m3fn"), (3, 1, 4096, "bfloat16"),
     (4, 16, 4096, "float8_e4m3fn")],
)  # fmt: skip
def test_the_default_gives_each_product_two_warps_and_three_chunks(
    h: int, m: int, n: int, dtype: str
) -> None:
    """A horizontal fusion: 2 warps a product, 3 chunks in flight (the best of run 222's
    sweep on every FFN), FP8 too; a plan the rules take."""
    problem = _horizontal(h, m=m, n=n, dtype=dtype)
    params = mmaplug_matmul_params(problem, H200, "decode")
    assert params is not None and (params.splitk_factor, params.stages) == (2, 3)
    assert violations(SCHEDULER, params, problem, H200) == []


@pytest.mark.parametrize(
    ("h", "m", "n", "dtype", "warps"),
    [
        (2, 16, 14336, "float8_e4m3fn", 4),  # 896 CTAs: 4 warps' last wave is the fuller
        (2, 16, 4096, "bfloat16", 2),  # 256 CTAs of 4 warps: 2 an SM, one wave
        (3, 1, 4096, "bfloat16", 2),  # 12 warps: one CTA an SM, 132; 6 warps: 2, 264
        (4, 16, 4096, "float8_e4m3fn", 1),  # FP8 two m tiles: only one warp a product fits
    ],
)
def test_where_two_warps_a_product_do_not_fit_the_warps_are_those_that_do(
    h: int, m: int, n: int, dtype: str, warps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the SMs hold no CTA of the horizontal rule's warps (here made 8 a product), the
    rule for one product decides, the CTA's warps counted over every product: never a plan
    the rules refuse."""
    from mmaplug.heuristics.default import decode

    monkeypatch.setattr(decode, "DECODE_HORIZONTAL_WARPS", 8)
    problem = _horizontal(h, m=m, n=n, dtype=dtype)
    params = mmaplug_matmul_params(problem, H200, "decode")
    assert params is not None and params.splitk_factor == warps
    assert violations(SCHEDULER, params, problem, H200) == []
