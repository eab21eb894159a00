"""Tests for the built-in default heuristic (heuristics/default/) over a shape suite."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import attrs
import pytest

from mmaplug.analysis.problem import Layout, MatmulProblem, VectorWidths
from mmaplug.heuristics.default import ampere, grid, hopper, mmaplug_matmul_params
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import (
    SENTINEL_SCHEDULERS,
    SENTINELS,
    CtaOrder,
    TileShape,
    TilingStrategy,
)
from mmaplug.plugins.ampere import limits as ampere_limits
from mmaplug.plugins.ampere.scheduler import SCHEDULER
from mmaplug.plugins.hopper import limits as hopper_limits


def problem(
    m: int,
    n: int,
    k: int,
    *,
    batch: int = 1,
    layout: Layout = Layout.TN,
    dtype: DType = DType.float16,
    out: DType | None = None,
    vec: int = 8,
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        a_k_inner=layout.a_k_inner,
        b_k_inner=layout.b_k_inner,
        operand_dtype=dtype,
        output_dtype=out or dtype,
        vector_widths=VectorWidths(a=vec, b=vec, epilogue=vec),
    )


class Shape(NamedTuple):
    m: int
    n: int
    k: int
    batch: int = 1


SHAPES = [Shape(s, s, s) for s in (128, 256, 512, 1024, 2048, 4096, 8192)] + [
    Shape(128, 4096, 4096),
    Shape(128, 8192, 1024),
    Shape(16384, 1024, 512),
    Shape(2048, 14336, 5120),
    Shape(504, 136, 248),
    Shape(1024, 1024, 1024, batch=3),
    Shape(4096, 32, 4096),
    Shape(128, 256, 512),
]
TARGETS = [
    ("a100", "ampere"),
    ("h100", "ampere"),
    ("h200", "ampere"),
    ("h100", "hopper"),
    ("h200", "hopper"),
]
LIMITS = {"ampere": ampere_limits, "hopper": hopper_limits}
CASES = [
    pytest.param(
        dev,
        sched,
        shape,
        layout,
        dtype,
        id=f"{dev}_{sched}_{dtype.label[:2]}{'16'}_{layout.value}_"
        f"{f'b{shape.batch}_' if shape.batch > 1 else ''}{shape.m}x{shape.n}x{shape.k}",
    )
    for (dev, sched), shape, layout, dtype in itertools.product(
        TARGETS, SHAPES, list(Layout), [DType.float16, DType.bfloat16]
    )
]


@pytest.mark.parametrize(("device", "scheduler", "shape", "layout", "dtype"), CASES)
def test_default_answers_pass_limits(
    device: str, scheduler: str, shape: Shape, layout: Layout, dtype: DType
) -> None:
    """Every default answer on the shape suite passes the matching scheduler's limits."""
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, layout=layout, dtype=dtype)
    params = mmaplug_matmul_params(prob, get_device(device), scheduler)
    assert params is not None
    assert LIMITS[scheduler].violations(params, prob, get_device(device)) == []


@pytest.mark.parametrize(("device", "scheduler", "shape", "layout", "dtype"), CASES)
def test_defaults_never_choose_sentinels(
    device: str, scheduler: str, shape: Shape, layout: Layout, dtype: DType
) -> None:
    """No default answer on the suite ever holds a sentinel value scoped to its scheduler."""
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, layout=layout, dtype=dtype)
    params = mmaplug_matmul_params(prob, get_device(device), scheduler)
    assert params is not None
    hits = [
        f
        for f, v in SENTINELS.items()
        if scheduler in SENTINEL_SCHEDULERS[f] and getattr(params, f) == v
    ]
    assert hits == []


@pytest.mark.parametrize(
    "scheduler", ["blackwell", "", "Ampere"], ids=["blackwell", "empty", "wrong_case"]
)
def test_other_schedulers_get_none(scheduler: str) -> None:
    """The default heuristic defers (returns None) for schedulers it does not know."""
    assert mmaplug_matmul_params(problem(128, 128, 128), get_device("h100"), scheduler) is None


def test_hookimpl_is_trylast() -> None:
    """The default answers the params hook last, so any other plugin goes first."""
    assert mmaplug_matmul_params.mmaplug_impl["trylast"] is True  # type: ignore[attr-defined]


def test_hopper_pairs_ctas_on_large_grids_of_long_units_only() -> None:
    """8192^3 (2048 tiles of 128x256, 15.5 waves on 132 SMs) runs CTA pairs; 4096^3 (3.9
    waves) and the llama FFN shape (6.8) do not: the H200 measurements of run 35. Of grids as
    large, those whose units run fewer than 8 K tiles of 64 stay alone (runs 175-176)."""
    h200 = get_device("h200")
    measured = {
        (1, 8192, 8192, 8192): True,
        (1, 8192, 8192, 4096): True,
        (1, 4096, 4096, 4096): False,
        (1, 2048, 14336, 5120): False,
        (16, 2048, 2048, 128): False,  # 2 K tiles a unit
        (1, 8192, 8192, 64): False,
        (1, 8192, 8192, 448): False,  # 7
        (1, 8192, 8192, 512): True,  # 8
    }
    for (batch, m, n, k), pairs in measured.items():
        params = mmaplug_matmul_params(problem(m, n, k, batch=batch), h200, "hopper")
        assert params is not None
        assert params.cluster_dims == ((2, 1) if pairs else (1, 1)), (m, n, k)


@pytest.mark.parametrize(
    ("shape", "dtype", "gpu", "order", "group"),
    [
        # the walked operand (B of a row-major order, A of a column-major one) over half of L2
        (Shape(8192, 8192, 8192), DType.bfloat16, "h200", CtaOrder.row_major, 8),
        (Shape(4096, 4096, 4096), DType.bfloat16, "h200", CtaOrder.row_major, 8),
        (Shape(4096, 28672, 4096), DType.bfloat16, "h200", CtaOrder.column_major, 8),
        # ... or with the output a wave writes, where the walk is longer than a group's wave
        # walks (132 / 8 = 16.5 tiles): B of e4m3 4096x6144x4096 24 MiB (24 N tiles of 256), a
        # wave of 132 128x256 bf16 tiles 8.25 MiB (runs 238-244)
        (Shape(4096, 6144, 4096), DType.float8_e4m3fn, "h200", CtaOrder.row_major, 8),
        # (fp16 3000x5000x2048, grouped on 128x256 tiles in runs 242 and 244: its 256x160
        # tiles walk A whole, 12 MiB in 12 M tiles, which a group's wave would only reorder)
        (Shape(3000, 5000, 2048), DType.float16, "h100", CtaOrder.column_major, 1),
        # ... within half of it with that output (A of 2048x14336x5120: 20 MiB; B of 4096^3
        # e4m3: 16 MiB), or over it where the walk is no longer than a group's wave (16 M tiles
        # of 2048x14336x5120 on the H100): the groups would only reorder the same tiles
        (Shape(2048, 14336, 5120), DType.bfloat16, "h200", CtaOrder.column_major, 1),
        (Shape(4096, 4096, 4096), DType.float8_e4m3fn, "h200", CtaOrder.row_major, 1),
        (Shape(2048, 14336, 5120), DType.bfloat16, "h100", CtaOrder.column_major, 1),
        # over it (A: 31.5 MiB), but the other axis has under two groups (15 N tiles of 256)
        (Shape(1920, 3840, 8192), DType.bfloat16, "h200", CtaOrder.column_major, 1),
    ],
    ids=str,
)
def test_hopper_groups_the_tile_order_where_a_wave_spills_l2(
    shape: Shape, dtype: DType, gpu: str, order: CtaOrder, group: int
) -> None:
    """grid_swizzle_factor 8 where the operand the persistent wave walks whole outgrows half of
    the GPU's L2, alone or, where groups narrow the walk, with the output the wave writes
    (BENCHMARKS.md runs 117, 238-248), else 1. FP8 products write bf16, as the targets' do."""
    out = DType.bfloat16 if dtype.itemsize == 1 else dtype
    params = mmaplug_matmul_params(
        problem(*shape[:3], dtype=dtype, out=out), get_device(gpu), "hopper"
    )
    assert params is not None
    assert (params.cta_order, params.grid_swizzle_factor) == (order, group)


def test_hopper_keeps_the_tile_order_where_l2_is_unknown() -> None:
    """A device that does not report its L2 (l2_bytes 0) gets the plain tile order."""
    unknown = attrs.evolve(get_device("h200"), l2_bytes=0)
    params = mmaplug_matmul_params(problem(8192, 8192, 8192), unknown, "hopper")
    assert params is not None and params.grid_swizzle_factor == 1


#: (shape, split, CTA tile) of 16-bit defaults
SPLITS_16 = [
    # deep K over few tiles: split until the units fill one wave (H200 runs 86-87), the
    # tile chosen with the partials weighed 4x (runs 143-146: fewer splits of smaller tiles)
    (Shape(256, 256, 16384), 16, TileShape(64, 128, 64)),
    (Shape(128, 128, 32768), 32, TileShape(64, 64, 64)),
    # ... a split tile at 64 of K where 128 ties it in bytes
    (Shape(64, 512, 28672), 16, TileShape(64, 64, 64)),
    # ... 128x128 split 8, not 128x256 split 16: past 64 MACs an element loaded a split
    # tile's panels count its wgmma time, and the halved partials decide (run 340)
    (Shape(512, 512, 65536), 8, TileShape(128, 128, 64)),
    (Shape(1024, 512, 16384), 4, TileShape(128, 128, 64)),
    (Shape(512, 384, 16384), 8, TileShape(64, 192, 64)),
    # ... not where its units match unsplit 64x128 tiles (as many, as many outputs each,
    # at most 4096 of K each): 2048x512x8192 27.6 us unsplit against 35.9-37.2 (run 342)
    (Shape(2048, 512, 8192), 1, TileShape(64, 128, 128)),
    (Shape(1024, 1024, 16384), 1, TileShape(64, 128, 128)),
    # ... split where its units compute fewer outputs each (128x192 split 4: 6,144
    # against 8,192; a tie at 768x768x8192 in run 342, 45.1 against 58.3 us at
    # 384x2048x16384, 1.8x faster than 64x128 tiles padded to 256 columns at 4096x192),
    # run more of K each (8192: 103.4 against 111.2 us, run 344) or are more (128
    # against 96: 64x128 tiles fit M = 192 whole, 128x256 tiles pad it)
    (Shape(768, 768, 8192), 4, TileShape(128, 192, 64)),
    (Shape(384, 2048, 16384), 4, TileShape(128, 192, 64)),
    (Shape(4096, 192, 16384), 4, TileShape(128, 192, 64)),
    (Shape(3072, 256, 32768), 4, TileShape(128, 256, 64)),
    (Shape(192, 4096, 16384), 4, TileShape(128, 256, 64)),
    # ... where 64x192 ties 128x128 in bytes: one consumer warp group wins the tie
    (Shape(200, 136, 9000, batch=2), 16, TileShape(64, 192, 64)),
    # deep, but 48+ tiles already fill over a quarter of the SMs (split 2 lost 1.7x)
    (Shape(1536, 1000, 7168), 1, TileShape(128, 128, 64)),
    # not deep: a weight-streaming row over more than one wave of 64 weight rows (not
    # swapped): 64x128 tiles, unsplit where they fill a quarter of the SMs (runs 92-93)
    (Shape(64, 28672, 4096), 1, TileShape(64, 128, 128)),
    (Shape(256, 8192, 8192), 1, TileShape(128, 128, 64)),
    (Shape(4096, 4096, 4096), 1, TileShape(128, 256, 64)),
]


@pytest.mark.parametrize(
    ("shape", "splitk", "cta", "dtype"),
    [
        *((shape, splitk, cta, DType.float16) for shape, splitk, cta in SPLITS_16),
        # a split's units against unsplit 64x128 tiles count K in bytes: 8192 of FP8 K a unit
        # is 8 KiB of a row, as 4096 of 16-bit K, and lost as those did (e4m3 2048x512x32768
        # on 128x256 split 4 64.1-65.8 us, unsplit 64x128x256 57.1-57.8; an H100, run 344)
        (Shape(2048, 512, 32768), 1, TileShape(64, 128, 256), DType.float8_e4m3fn),
        (Shape(1024, 1024, 32768), 1, TileShape(64, 128, 256), DType.float8_e4m3fn),
        # ... 16 KiB a unit keeps the split, as 8192 of 16-bit K did (run 344)
        (Shape(2048, 512, 65536), 4, TileShape(128, 256, 128), DType.float8_e4m3fn),
        # ... and so does a split that computes fewer outputs a unit
        (Shape(4096, 192, 32768), 4, TileShape(128, 192, 128), DType.float8_e4m3fn),
    ],
    ids=str,
)
def test_hopper_splits_k_only_where_k_is_deep_and_tiles_few(
    shape: Shape, splitk: int, cta: TileShape, dtype: DType
) -> None:
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, dtype=dtype)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None
    assert (params.splitk_factor, params.cta_tile) == (splitk, cta)
    if splitk > 1:  # one wave of work units, each keeping 8+ K tiles, no CTA pairs
        tiles = shape.batch * -(-shape.m // cta.m) * -(-shape.n // cta.n)
        assert tiles * splitk <= h200.sm_count
        assert -(-shape.k // cta.k) // splitk >= grid.SPLITK_MIN_K_TILES
        assert params.cluster_dims == (1, 1)


@pytest.mark.parametrize(
    ("shape", "cols"),
    [
        (Shape(32, 6144, 4096), 32),
        (Shape(48, 4096, 14336), 48),
        (Shape(56, 6144, 4096), 56),
        (Shape(32, 8192, 28672), 32),
        (Shape(20, 4096, 4096), 24),  # the activation rows rounded up to 8s
    ],
    ids=str,
)
def test_hopper_swaps_the_operands_of_weight_streaming_problems(shape: Shape, cols: int) -> None:
    """One row block (at most 56 rows) against a wide weight whose 64-row tiles fill between
    a quarter of the SMs and one wave runs as the transposed product: 64 weight rows a CTA,
    the activation rows the wgmma's N, 128 of K a stage, 8 stages (6 at 56 rows), unsplit,
    the epilogue staged where its ring is at most one stage shallower (at 48 rows it would
    take 6 of the 8 stages) (H200 run 99: 20.2 -> 14.1 us at 32x6144x4096, 0.65 -> 0.92;
    staged, H100 run 334: 10.4 -> 9.8 at 32x4096x4096)."""
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None and params.swap_ab
    assert params.cta_tile == params.warp_tile == TileShape(64, cols, 128)
    assert params.instruction_tile == TileShape(64, cols, 16)
    assert params.splitk_factor == 1
    assert params.stages == (8 if cols <= 48 else 6)
    assert params.use_smem_epilogue == (cols != 48)
    assert LIMITS["hopper"].violations(params, prob, h200) == []


@pytest.mark.parametrize(
    ("shape", "stages"),
    [(Shape(96, 6144, 4096), 5), (Shape(72, 4096, 4096), 6), (Shape(112, 8192, 8192), 4),
     (Shape(96, 4096, 14336), 5)],
    ids=str,
)  # fmt: skip
def test_hopper_swaps_65_to_112_rows_against_a_wide_weight(shape: Shape, stages: int) -> None:
    """16-bit rows of 65-112 activations against a weight 16 times as wide, whose 64-row tiles
    fill a quarter of the SMs to one wave, swap too: one wgmma of N = the rows, no second
    64-row block of padding (H200 run 132: 96x4096x14336 59.4 -> 41.6 us), the epilogue
    staged (H100 run 333: bf16 96x6144x4096 23.7 -> 22.2 us, with bias + GELU in fp16 36.4 ->
    22.9)."""
    h200 = get_device("h200")
    for dtype in (DType.bfloat16, DType.float16):
        prob = problem(shape.m, shape.n, shape.k, dtype=dtype)
        params = mmaplug_matmul_params(prob, h200, "hopper")
        assert params is not None and params.swap_ab and params.splitk_factor == 1
        assert params.cta_tile == params.warp_tile == TileShape(64, shape.m, 128)
        assert params.stages == stages and params.use_smem_epilogue
        assert LIMITS["hopper"].violations(params, prob, h200) == []


@pytest.mark.parametrize(
    ("shape", "swaps"),
    [(Shape(1, 4096, 128, batch=32), True), (Shape(8, 4096, 128, batch=32), True),
     (Shape(16, 4096, 64, batch=32), True), (Shape(1, 2048, 128, batch=64), True),
     (Shape(1, 4096, 256, batch=32), False),  # 512-byte weight rows: decode tied (run 339)
     (Shape(1, 4096, 128, batch=4), False)],  # 128 tiles of 128 rows: fewer than the SMs
    ids=str,
)  # fmt: skip
def test_hopper_swaps_batches_of_short_weight_rows(shape: Shape, swaps: bool) -> None:
    """A batch of decode-sized products over 16-bit weight rows of at most 256 bytes, on more
    128-row tiles than SMs, runs as the transposed product on two consumers of 64 weight rows
    (128 a tile), the epilogue staged, the persistent ring across the batch's tiles (H100 run
    338: 32 x 8x4096x128 11.27 -> 7.74 us against the decode kernel)."""
    h200 = get_device("h200")
    for dtype in (DType.bfloat16, DType.float16):
        prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, dtype=dtype)
        params = mmaplug_matmul_params(prob, h200, "hopper")
        assert params is not None and params.swap_ab == swaps
        if swaps:
            cols = 8 * -(-shape.m // 8)
            assert params.cta_tile == TileShape(128, cols, 128)
            assert params.warp_tile == TileShape(64, cols, 128)
            assert params.use_smem_epilogue and params.splitk_factor == 1
            assert LIMITS["hopper"].violations(params, prob, h200) == []
    fp8 = problem(shape.m, shape.n, shape.k, batch=shape.batch, dtype=DType.float8_e4m3fn)
    assert not mmaplug_matmul_params(fp8, h200, "hopper").swap_ab  # (16-bit measured only)


@pytest.mark.parametrize(
    "shape",
    [Shape(120, 8192, 8192), Shape(128, 6144, 4096), Shape(96, 28672, 4096),
     Shape(96, 1024, 4096), Shape(96, 6144, 4096, batch=2)],
    ids=str,
)  # fmt: skip
def test_hopper_keeps_65_to_128_rows_unswapped_elsewhere(shape: Shape) -> None:
    """No swap at 120 rows (4 stages; run 132: 39.4 -> 43.0 us) or 128 (the unswapped tiles'
    own N; run 130: 19.9 -> 22.4), over one wave of 64-row weight tiles (96x28672x4096: 67.3
    -> 80.0 us, run 131), against a weight under 16 times as wide, or batched; nor for FP8."""
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, dtype=DType.bfloat16)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None and not params.swap_ab
    fp8 = problem(96, 6144, 4096, dtype=DType.float8_e4m3fn)
    params = mmaplug_matmul_params(fp8, h200, "hopper")
    assert params is not None and not params.swap_ab


@pytest.mark.parametrize(
    ("shape", "dtype", "cta"),
    [
        # 16-bit tiles of 64x192 outputs or more: 64 of K a stage, the deeper ring (run 133:
        # 512x4096x4096 29.7 -> 26.9 us; run 135: 160x8192x8192 54.6 -> 48.2)
        (Shape(512, 4096, 4096), DType.bfloat16, TileShape(128, 128, 64)),
        (Shape(1536, 1000, 7168), DType.float16, TileShape(128, 128, 64)),
        (Shape(160, 8192, 8192), DType.bfloat16, TileShape(64, 192, 64)),
        # ... and 64x128 tiles of a wide weight past one row tile, in 8 stages (runs 312 and
        # 315: 256x4096x4096 16.2 -> 14.7 us, 192x4096x14336 55.8 -> 52.1)
        (Shape(256, 4096, 4096), DType.bfloat16, TileShape(64, 128, 64)),
        (Shape(192, 4096, 14336), DType.bfloat16, TileShape(64, 128, 64)),
        # other tiles keep nvFuser's order: at one row tile (64x10240x8192 61.2 -> 64.8 us at
        # 64 of K), a weight under 16 times as wide (1000x1000x4096 16.6 -> 22.8), 64x64x256
        # 1-2% faster than 64 or 128 deep
        (Shape(64, 10240, 8192), DType.bfloat16, TileShape(64, 128, 128)),
        (Shape(1000, 1000, 4096), DType.bfloat16, TileShape(64, 128, 128)),
        (Shape(512, 2048, 4096), DType.float16, TileShape(64, 128, 128)),
        (Shape(4096, 16, 4096), DType.bfloat16, TileShape(64, 64, 256)),
        # FP8 keeps it too: 128 of K is its 128 bytes already
        (Shape(4096, 4096, 4096), DType.float8_e4m3fn, TileShape(128, 256, 128)),
    ],
    ids=str,
)
def test_hopper_ties_of_bytes_go_to_128_bytes_of_k_on_wide_16_bit_tiles(
    shape: Shape, dtype: DType, cta: TileShape
) -> None:
    """On a tie of bytes between K depths, a 16-bit tile of 64x192 outputs or more (64x128 of
    a wide weight past one row tile) takes 64 of K a stage (``HOPPER_TIE_K_BYTES``) and the
    deepest ring that fits: 6 stages here, the 64x128 tile the streaming ring's 8."""
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k, dtype=dtype)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None and params.cta_tile == cta
    if cta.k * dtype.itemsize == hopper.HOPPER_TIE_K_BYTES and dtype.itemsize == 2:
        ring = 8 if (cta.m, cta.n) == (64, 128) else hopper.HOPPER_MAX_STAGES
        assert params.stages == ring
    assert LIMITS["hopper"].violations(params, prob, h200) == []


@pytest.mark.parametrize(
    ("shape", "cta", "warp_n", "split"),
    [
        # two consumers' 128x64 tiles tie one consumer's 64x128 in bytes: the one wins,
        # unsplit or split (an H100, run 345: 1024x1024x4096 9.6 against 10.4-10.5 us,
        # 1536x512x8192 13.6 against 15.4, 128x1024x16384 split 8 9.9-10.1 against 10.3-10.5;
        # run 344: 1024x1024x16384 32.2-33.5 against 36.7-37.4)
        (Shape(1024, 1024, 16384), TileShape(64, 128, 256), 128, 1),
        (Shape(1024, 1024, 4096), TileShape(64, 128, 256), 128, 1),
        (Shape(128, 1024, 16384), TileShape(64, 128, 128), 128, 8),
        # ... and where it pads less (96 tiles against 128 at M = 192: 8.9 against 14.5)
        (Shape(192, 4096, 4096), TileShape(64, 128, 256), 128, 1),
        # not where it pads more (N = 192: 128 units against 96; 12.6 against 10.5 us split
        # 4) or spans N in one column of tiles (8192x128x4096 10.5-10.8 against 10.3-10.6)
        (Shape(1024, 192, 8192), TileShape(128, 64, 128), 64, 4),
        (Shape(8192, 128, 4096), TileShape(128, 64, 256), 64, 1),
        # one consumer wider than FP8_ONE_CONSUMER_N keeps nvFuser's order: 64x256 as two of
        # 64x128 along N (untimed one; FP8's single 64x192 warp tile lost 5-7% in run 93)
        (Shape(189, 2784, 15104), TileShape(64, 256, 128), 128, 4),
        # no tie with two 64x64 consumers: wider tiles and one consumer's 64x64 keep their plan
        (Shape(4096, 4096, 4096), TileShape(128, 256, 128), 256, 1),
        (Shape(1000, 1040, 528), TileShape(128, 128, 128), 128, 1),
        (Shape(128, 4096, 4096), TileShape(64, 64, 256), 64, 1),
    ],
    ids=str,
)
def test_fp8_ties_of_outputs_go_to_one_consumer(
    shape: Shape, cta: TileShape, warp_n: int, split: int
) -> None:
    """On a tie of bytes between FP8 tiles of as many outputs, one consumer's warp tile up to
    ``FP8_ONE_CONSUMER_N`` wide wins over two consumers' 64x64 where it makes no more work
    units and more than one column of tiles (``_one_consumer_wins``)."""
    h100 = get_device("h100")
    prob = problem(shape.m, shape.n, shape.k, dtype=DType.float8_e4m3fn, out=DType.bfloat16)
    params = mmaplug_matmul_params(prob, h100, "hopper")
    assert params is not None and params.cta_tile == cta
    assert (params.warp_tile.n, params.splitk_factor) == (warp_n, split)
    assert LIMITS["hopper"].violations(params, prob, h100) == []


@pytest.mark.parametrize(
    ("shape", "cta"),
    [
        # 336 tiles of 128x256 in 3 waves of 132 (the last 72) -> 384 of 128x224
        (Shape(384, 28672, 4096), TileShape(128, 224, 64)),
        # 216 of 128x192 in 2 waves (the last 84) -> 256 of 128x160
        (Shape(512, 10240, 8192), TileShape(128, 160, 64)),
        # one wave keeps the widths 64 apart: 96 tiles of 64x128, not 129 of 64x96, and 96 of
        # 128x128, not 132 of 128x96 (which lost at the power cap); the wide weight's 64x128
        # at 64 of K
        (Shape(192, 4096, 14336), TileShape(64, 128, 64)),
        (Shape(1536, 1000, 7168), TileShape(128, 128, 64)),
        # whole waves of 128x256 keep it
        (Shape(4096, 4096, 4096), TileShape(128, 256, 64)),
    ],
    ids=str,
)
def test_hopper_tile_widths_between_fill_a_last_wave(shape: Shape, cta: TileShape) -> None:
    """The widths between 64 and 256 (``HOPPER_FILL_N``) where the tiles of 256, 192, 128
    and 64 span more than one wave: the bytes of whole waves, scored, take the width whose
    tiles fill the last (H100 runs 264-265: 5-10% faster on the first two)."""
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k, dtype=DType.bfloat16)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None and params.cta_tile == cta
    assert params.instruction_tile.n == params.warp_tile.n == cta.n  # one wgmma width a tile


@pytest.mark.parametrize(
    ("shape", "dtype", "cta"),
    [
        # fewer outputs an SM computes over whole waves: 3 waves of 256x160 against 4 of 128x256
        (Shape(3000, 5000, 2048), DType.float16, TileShape(256, 160, 64)),
        (Shape(5000, 2048, 2048), DType.bfloat16, TileShape(256, 160, 64)),
        # against 3 waves of the 128x224 that fill the last
        (Shape(2048, 5000, 2048), DType.float16, TileShape(256, 160, 64)),
        # as many (4 waves of 256x160, 5 of 128x256) or more (10 against 12): the searched tile
        (Shape(4096, 5000, 4096), DType.bfloat16, TileShape(128, 256, 64)),
        (Shape(8192, 6144, 4096), DType.bfloat16, TileShape(128, 256, 64)),
        # one wave, and FP8 (its fused epilogues spill at 160 accumulators): never searched
        (Shape(1536, 3072, 4096), DType.bfloat16, TileShape(128, 160, 64)),
        (Shape(3000, 5000, 2048), DType.float8_e4m3fn, TileShape(128, 256, 128)),
    ],
    ids=str,
)
def test_hopper_tiles_of_256_rows_where_they_save_outputs(
    shape: Shape, dtype: DType, cta: TileShape
) -> None:
    """Past one wave, 16-bit tiles of 256 rows (two 128x160 consumers, ``HOPPER_TALL_N``)
    replace the searched tile where an SM computes fewer outputs over their whole waves (H100
    runs 325-328: 2-17% faster on all twelve rows it changes)."""
    out = DType.bfloat16 if dtype.itemsize == 1 else dtype
    params = mmaplug_matmul_params(
        problem(*shape[:3], dtype=dtype, out=out), get_device("h200"), "hopper"
    )
    assert params is not None and params.cta_tile == cta
    if cta.m == 256:
        assert params.warp_tile == TileShape(128, 160, 64)
        assert params.instruction_tile == TileShape(64, 160, 16)


@pytest.mark.parametrize("m", [24, 32])
def test_hopper_swaps_fp8_rows_with_256_bytes_of_k_a_stage(m: int) -> None:
    """FP8 rows of up to 32 activations swap too, 256 of K a stage (H200 run 103:
    24x6144x4096 e4m3 12.6 -> 9.2 us)."""
    prob = problem(m, 6144, 4096, dtype=DType.float8_e4m3fn)
    params = mmaplug_matmul_params(prob, get_device("h200"), "hopper")
    assert params is not None and params.swap_ab
    assert params.cta_tile == TileShape(64, m, 256)
    assert params.instruction_tile == TileShape(64, m, 32)
    assert LIMITS["hopper"].violations(params, prob, get_device("h200")) == []


@pytest.mark.parametrize("shape", [Shape(64, 4096, 8192), Shape(60, 4096, 14336)], ids=str)
def test_hopper_swaps_64_rows_where_the_unswapped_tiles_split(shape: Shape) -> None:
    """57-64 activation rows of an N-major weight (which the narrow 32-row tiles cannot read)
    swap where the unswapped tiles would split a K of at most 16384: the swapped tile (64 x 64
    weight rows x activations) needs no split (H200 run 110: 64x4096x8192 26.1 -> 24.1 us
    against a split of 2)."""
    prob = problem(shape.m, shape.n, shape.k, layout=Layout.NT)
    params = mmaplug_matmul_params(prob, get_device("h200"), "hopper")
    assert params is not None and params.swap_ab and params.splitk_factor == 1
    assert params.cta_tile == TileShape(64, 64, 128)
    unswapped = mmaplug_matmul_params(
        problem(shape.m, shape.n, 4096, layout=Layout.NT), get_device("h200"), "hopper"
    )
    assert unswapped is not None and not unswapped.swap_ab  # K = 4096: no split, no swap


@pytest.mark.parametrize(
    ("shape", "cols", "stages"),
    [
        (Shape(64, 4096, 4096), 32, 8),  # 128 tiles of 32 weight rows
        (Shape(60, 4096, 14336), 32, 8),
        (Shape(64, 6144, 4096), 64, 6),  # 192 of 32 rows: two waves; 96 of 64
        (Shape(64, 5120, 8192), 64, 6),
    ],
    ids=str,
)
def test_hopper_streams_64_rows_through_narrow_tiles(shape: Shape, cols: int, stages: int) -> None:
    """57-64 activation rows of a 16-bit K-major weight whose 64x128 tiles fill under 40% of
    the SMs: the narrowest weight tile (32 or 64 rows) whose tiles fill half the SMs to one
    wave, 128 of K a stage, the deepest ring, no split or swap (H200 run 114: 64x6144x4096
    19.0 -> 15.6 us, 64x5120x8192 32.8 -> 26.9)."""
    prob = problem(shape.m, shape.n, shape.k, dtype=DType.bfloat16)
    h200 = get_device("h200")
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None and not params.swap_ab and params.splitk_factor == 1
    assert params.cta_tile == params.warp_tile == TileShape(64, cols, 128)
    assert params.instruction_tile == TileShape(64, cols, 16)
    assert params.stages == stages and params.use_smem_epilogue
    assert LIMITS["hopper"].violations(params, prob, h200) == []


@pytest.mark.parametrize(
    "shape",
    [Shape(64, 2048, 8192), Shape(64, 14336, 4096), Shape(64, 28672, 4096),
     Shape(64, 8192, 8192), Shape(64, 4096, 28672)],
    ids=str,
)  # fmt: skip
def test_hopper_keeps_128_row_weight_tiles_elsewhere(shape: Shape) -> None:
    """Where the narrow tiles fill under half the SMs (64 tiles of 32 rows at N = 2048: the
    split 64x128 tiles ran faster, run 113) or past one wave, where the 64x128 tiles fill 40%
    of the SMs or more (64 at N = 8192: 37.6 against 38.5 us, run 114) and past K = 16384
    (64x4096x28672: 64.4 against 66.2), the 64x128 weight tile stays."""
    params = mmaplug_matmul_params(problem(shape.m, shape.n, shape.k), get_device("h200"), "hopper")
    assert params is not None and params.cta_tile.n == 128


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        (Shape(64, 28672, 4096), DType.bfloat16),  # 448 tiles of 64 weight rows: 3.4 waves
        (Shape(64, 4096, 4096), DType.bfloat16),  # a wgmma N of 64, and the tiles unsplit
        (Shape(64, 8192, 8192), DType.bfloat16),
        (Shape(64, 4096, 28672), DType.bfloat16),  # split, but K past 16384
        (Shape(32, 2048, 8192), DType.bfloat16),  # 32 tiles: the unswapped ones split further
        (Shape(32, 1024, 16384), DType.bfloat16),
        (Shape(128, 8192, 8192), DType.float16),  # two row blocks
        (Shape(32, 6144, 4096, batch=2), DType.float16),  # batched
        (Shape(32, 256, 4096), DType.float16),  # N < 16 M: not a wide weight
        (Shape(48, 8192, 8192), DType.float8_e4m3fn),  # FP8 past 32 rows: 4% slower swapped
    ],
    ids=str,
)
def test_hopper_keeps_the_orientation_elsewhere(shape: Shape, dtype: DType) -> None:
    """The swap is a weight-streaming problem's of at most 56 rows (32 of FP8; 64 where the
    unswapped tiles split K), whose tiles fill a quarter of the SMs to one wave (the losses of
    runs 99, 103 and 109 on either side)."""
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, dtype=dtype)
    params = mmaplug_matmul_params(prob, get_device("h200"), "hopper")
    assert params is not None and not params.swap_ab


def test_hopper_4096_cube() -> None:
    """4096³ fp16 on h100: CTA 128x256x64 in two 64x256 consumers, wgmma m64n256k16, 4 stages,
    persistent and warp-specialized, one CTA per cluster, epilogue staged through smem."""
    params = mmaplug_matmul_params(problem(4096, 4096, 4096), get_device("h100"), "hopper")
    assert params is not None
    assert params.cta_tile == TileShape(128, 256, 64)
    assert params.warp_tile == TileShape(64, 256, 64)
    assert params.instruction_tile == TileShape(64, 256, 16)
    assert (params.stages, params.cta_order, params.cluster_dims) == (4, CtaOrder.row_major, (1, 1))
    assert params.tiling_strategy is TilingStrategy.persistent and params.warp_specialized
    assert params.use_smem_epilogue
    assert (params.splitk_factor, params.prefetch_gap, params.async_gmem_load_operands) == (
        1,
        1,
        True,
    )


def test_hopper_output_dtype_does_not_change_the_plan() -> None:
    """The epilogue writes from registers, so a float32 output takes the same tiles and stages."""
    base = problem(4096, 4096, 4096)
    wide = MatmulProblem(
        m=base.m,
        n=base.n,
        k=base.k,
        a_k_inner=True,
        b_k_inner=True,
        operand_dtype=DType.float16,
        output_dtype=DType.float32,
        vector_widths=base.vector_widths,
    )
    params = mmaplug_matmul_params(wide, get_device("h100"), "hopper")
    assert params is not None and params == mmaplug_matmul_params(
        base, get_device("h100"), "hopper"
    )
    assert hopper_limits.violations(params, wide, get_device("h100")) == []


def test_hopper_stages_fill_smem_less_alignment_slack() -> None:
    """Stages fill the opt-in shared memory minus 1024 B of alignment slack and the epilogue
    staging (two consumers x (64 rows x (4 * 32 + 32) bytes + two column rows of 256 floats)),
    exactly."""
    stage = (128 + 256) * 64 * 2 + 16  # operand bytes of one stage plus its two mbarriers
    staging = 2 * (64 * (4 * 32 + 32) + 2 * 256 * 4)
    for stages in (3, 4, 5):
        tight = Device(
            name="h100-tight",
            cc=(9, 0),
            arch_suffix="a",
            sm_count=132,
            smem_per_block_optin=1024 + stages * stage + staging,
            smem_per_sm=233_472,
        )
        prob = problem(4096, 4096, 4096)
        params = mmaplug_matmul_params(prob, tight, "hopper")
        assert params is not None
        assert (params.cta_tile, params.stages) == (TileShape(128, 256, 64), stages)
        assert hopper_limits.smem_bytes(params, prob) == tight.smem_per_block_optin
        assert hopper_limits.violations(params, prob, tight) == []


@pytest.mark.parametrize(
    ("shape", "dtype", "layout", "pairs"),
    [
        # rows 16 bytes apart, one wave of 64-row tiles: pairs (run 316: 10.8 -> 9.0 us)
        (Shape(1000, 1000, 1000), DType.float16, Layout.TN, True),
        (Shape(1000, 1000, 1000), DType.bfloat16, Layout.TN, True),
        (Shape(1000, 1000, 3000), DType.float16, Layout.TN, True),
        (Shape(512, 2048, 1000), DType.bfloat16, Layout.TN, True),
        # an N-major B whose rows (N = 1000) are 2,000 bytes apart, K aligned
        (Shape(1000, 1000, 1024), DType.float16, Layout.TT, True),
        # 32-byte pitches tied or lost, aligned ones lost: alone
        (Shape(1024, 1024, 1008), DType.float16, Layout.TN, False),
        (Shape(1000, 1000, 2000), DType.bfloat16, Layout.TN, False),
        (Shape(1000, 1000, 1024), DType.float16, Layout.TN, False),
        (Shape(1024, 1024, 1024), DType.float16, Layout.TN, False),
        # not timed: batches, FP8, fewer than 8 K tiles a unit
        (Shape(1000, 1000, 1000, batch=2), DType.float16, Layout.TN, False),
        (Shape(1000, 1000, 1000), DType.float8_e4m3fn, Layout.TN, False),
        (Shape(1000, 1000, 440), DType.float16, Layout.TN, False),
    ],
    ids=str,
)
def test_hopper_pairs_one_wave_of_rows_16_bytes_apart(
    shape: Shape, dtype: DType, layout: Layout, pairs: bool
) -> None:
    """CTA pairs along M on one wave of 64-row 16-bit tiles of one product whose A or B rows
    are 16 but not 32 bytes apart (``HOPPER_PAIR_PITCH``), 8 K tiles a unit or more."""
    h200 = get_device("h200")
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, layout=layout, dtype=dtype)
    params = mmaplug_matmul_params(prob, h200, "hopper")
    assert params is not None
    assert params.cluster_dims == ((2, 1) if pairs else (1, 1)), params.name
    if pairs:
        assert (
            params.cta_tile.m == 64 and -(-shape.m // 64) * -(-shape.n // params.cta_tile.n) <= 132
        )
    assert hopper_limits.violations(params, prob, h200) == []


@pytest.mark.parametrize(
    ("shape", "stages"),
    [(Shape(128, 128, 1024), 6), (Shape(128, 128, 64), 2), (Shape(4096, 4096, 64), 4)],
    ids=["capped_at_6", "one_k_tile_gets_2", "k_tiles_times_tiles_per_cta"],
)
def test_hopper_stages_caps(shape: Shape, stages: int) -> None:
    """Stages stop at 6 and at the K tiles a persistent CTA walks (K tiles x its tiles); >= 2."""
    params = mmaplug_matmul_params(problem(shape.m, shape.n, shape.k), get_device("h100"), "hopper")
    assert params is not None and params.stages == stages


HOPPER_CASES = [case for case in CASES if case.values[1] == "hopper"]


@pytest.mark.parametrize(("device", "scheduler", "shape", "layout", "dtype"), HOPPER_CASES)
def test_hopper_defaults_are_what_the_kernel_builds(
    device: str, scheduler: str, shape: Shape, layout: Layout, dtype: DType
) -> None:
    """Every default Hopper answer has CTA pairs exactly on grids of 12 waves or more, or of
    one wave of 64-row 16-bit tiles of one product whose row pitch is no multiple of 32
    bytes, whose units run 8 K tiles or more, the smem epilogue, wgmma m64nNk16 with N the
    warp tile's n, prefetch_gap 1, and stages that fill shared memory unless capped; hopper's
    limits accept it."""
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, layout=layout, dtype=dtype)
    gpu = get_device(device)
    params = mmaplug_matmul_params(prob, gpu, scheduler)
    assert params is not None
    cta = params.cta_tile
    tiles = shape.batch * -(-shape.m // cta.m) * -(-shape.n // cta.n)
    unit_k = -(-shape.k // params.splitk_factor)
    k_tiles = -(-unit_k // cta.k)
    rows = (shape.k if layout.a_k_inner else shape.m, shape.k if layout.b_k_inner else shape.n)
    odd = any(row * dtype.itemsize % 32 for row in rows) and dtype.itemsize == 2
    one_wave = tiles <= gpu.sm_count and cta.m == 64 and params.splitk_factor == 1
    one_wave = one_wave and shape.batch == 1
    grid = tiles >= 12 * gpu.sm_count or (odd and one_wave)
    pairs = grid and -(-shape.m // cta.m) >= 2 and k_tiles >= 8
    assert params.cluster_dims == ((2, 1) if pairs else (1, 1))
    assert (params.use_smem_epilogue, params.prefetch_gap) == (True, 1)
    assert hopper_limits.violations(params, prob, gpu) == []
    assert params.instruction_tile == TileShape(64, params.warp_tile.n, 16)
    assert params.warp_specialized and params.tiling_strategy is TilingStrategy.persistent
    k_walk = -(-shape.k // params.cta_tile.k)
    more = hopper_limits.smem_bytes(params.with_overrides(stages=params.stages + 1), prob)
    assert params.stages == 6 or params.stages >= k_walk or more > gpu.smem_per_block_optin


AMPERE_CASES = [case for case in CASES if case.values[1] == "ampere"]


@pytest.mark.parametrize(("device", "scheduler", "shape", "layout", "dtype"), AMPERE_CASES)
def test_ampere_defaults_ask_for_the_smem_epilogue(
    device: str, scheduler: str, shape: Shape, layout: Layout, dtype: DType
) -> None:
    """Every default Ampere answer stages the epilogue through smem, as the kernel always does,
    so the scheduler never adjusts use_smem_epilogue (at most stages 1 -> 2)."""
    prob = problem(shape.m, shape.n, shape.k, batch=shape.batch, layout=layout, dtype=dtype)
    params = mmaplug_matmul_params(prob, get_device(device), scheduler)
    assert params is not None and params.use_smem_epilogue
    adjustments = SCHEDULER.adjustments(params, prob, get_device(device))
    adjusted = [a.field for a in adjustments]
    assert adjusted in ([], ["stages"])


def test_ampere_504x136x248_adapted_example() -> None:
    """nvFuser's §5.4 example: 4x1 warps by M/N=3.7, shrunk to 2 warps so more SMs get tiles."""
    params = mmaplug_matmul_params(problem(504, 136, 248), get_device("a100"), "ampere")
    assert params is not None
    assert ampere.ampere_warp_grid(problem(504, 136, 248)) == (4, 1)
    assert params.instruction_tile == TileShape(16, 8, 16)
    assert params.warp_tile == TileShape(64, 64, 32)
    assert params.cta_tile == TileShape(128, 64, 32)
    assert (params.stages, params.splitk_factor) == (4, 1)


def test_ampere_plugin_test_shape_splits_k() -> None:
    """128x256x512 (nvFuser's plugin-test shape) shrinks to 64x128 CTAs and splits K by 2."""
    params = mmaplug_matmul_params(problem(128, 256, 512), get_device("a100"), "ampere")
    assert params is not None
    assert params.cta_tile == TileShape(64, 128, 32) and params.splitk_factor == 2


def test_ampere_large_square_keeps_nvfuser_tiles() -> None:
    """4096³ keeps nvFuser's 128x128x32 CTA with 4 stages and a swizzle of 8."""
    params = mmaplug_matmul_params(problem(4096, 4096, 4096), get_device("a100"), "ampere")
    assert params is not None
    assert params.cta_tile == TileShape(128, 128, 32) and params.warp_tile == TileShape(64, 64, 32)
    assert (params.stages, params.grid_swizzle_factor, params.splitk_factor) == (4, 8, 1)


@pytest.mark.parametrize(
    ("m", "n", "grid"),
    [(128, 4096, (1, 4)), (4096, 128, (4, 1)), (1024, 1024, (2, 2)), (1024, 2048, (2, 2))],
    ids=["wide", "tall", "square", "ratio_half"],
)
def test_ampere_warp_grid_follows_mn_ratio(m: int, n: int, grid: tuple[int, int]) -> None:
    """The CTA is 1x4 warps when M/N < 0.5, 4x1 when M/N > 2, else 2x2."""
    assert ampere.ampere_warp_grid(problem(m, n, 1024)) == grid


def test_ampere_small_n_uses_narrow_warps() -> None:
    """N at most 32 uses 64x32x32 warp tiles."""
    params = mmaplug_matmul_params(problem(4096, 32, 4096), get_device("a100"), "ampere")
    assert params is not None and params.warp_tile == TileShape(64, 32, 32)


def test_ampere_without_cp_async_uses_two_stages() -> None:
    """Operands too narrow for cp.async load synchronously with at most 2 stages."""
    prob = problem(4096, 4096, 4095, vec=1)
    params = mmaplug_matmul_params(prob, get_device("a100"), "ampere")
    assert params is not None
    assert not params.async_gmem_load_operands and params.stages == 2
    assert ampere_limits.violations(params, prob, get_device("a100")) == []


def test_ampere_stages_capped_by_k_loop() -> None:
    """A K loop of two tiles gets two stages."""
    params = mmaplug_matmul_params(problem(4096, 4096, 64), get_device("a100"), "ampere")
    assert params is not None and params.stages == 2


def test_cta_order_puts_fewer_tiles_on_x() -> None:
    """column_major (M tiles on blockIdx.x) when M has no more tiles than N."""
    assert grid.cta_order_for(4, 16) is CtaOrder.column_major
    assert grid.cta_order_for(16, 4) is CtaOrder.row_major


@pytest.mark.parametrize(
    ("shape", "vec", "cta", "warp", "copies"),
    [
        # rows of 4 filling the SMs with 128x128 CTAs: 16 copies kept (faster than spill-free
        # 128x64 CTAs on the H200, run 216)
        ((4100, 4100, 1028), 4, (128, 128, 32), (64, 64, 32), 16),
        # rows of 2: 32 copies there, so the smallest warp tiles, in 4 warps at most: 16
        ((4098, 4098, 1026), 2, (64, 64, 32), (32, 32, 32), 16),
        ((1026, 1026, 1026), 2, (64, 64, 32), (32, 32, 32), 16),
        # a grid fill_sms shrank: 12 at most
        ((516, 516, 260), 4, (32, 64, 32), (32, 32, 32), 12),
    ],
)
@pytest.mark.parametrize("layout", list(Layout))
def test_ampere_keeps_the_copies_of_narrow_rows_within_their_budget(
    shape: tuple[int, int, int],
    vec: int,
    cta: tuple[int, int, int],
    warp: tuple[int, int, int],
    copies: int,
    layout: Layout,
) -> None:
    """Operands whose rows are no 8-element multiples copy narrower vectors, more of them a
    thread: the default ampere tiles keep them within AMPERE_COPIES (the first warp tile in a
    grid fill_sms left whole: AMPERE_FULL_GRID_COPIES), else take the smallest warp tile."""
    prob = problem(*shape, layout=layout, vec=vec)
    params = mmaplug_matmul_params(prob, get_device("h200"), "ampere")
    assert (params.cta_tile.as_tuple(), params.warp_tile.as_tuple()) == (cta, warp)
    assert SCHEDULER.resources(params, prob).copies == copies
    smallest = params.warp_tile == ampere.AMPERE_SMALL_WARP
    full_grid = params.warp_tile == ampere.AMPERE_WARP
    limit = ampere.AMPERE_FULL_GRID_COPIES if full_grid else ampere.AMPERE_COPIES
    assert copies <= limit or smallest
    assert not ampere_limits.violations(params, prob, get_device("h200"))
