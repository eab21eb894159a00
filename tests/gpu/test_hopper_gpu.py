"""GPU tier, sm_90a: the hopper wgmma kernel through mp.compile → execute on torch, vs float64.

The matrix: dtype × layout × epilogue × split-K × batch at a ragged shape, the transposed
product (``swap_ab``) over the same, plus tiles smaller than the problem in M or N, every tile
shape the default heuristic picks, persistent and one-tile-per-CTA grids, and operands that
only TMA's alignment rules send back to ampere.
Outputs are poisoned (the caching allocator's free blocks filled with NaN) before each run.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

EPILOGUES = ("none", "bias_gelu", "alpha_beta", "relu_aux")


def _fusion(m: int, n: int, k: int, dtype: mp.DType, layout: str, epilogue: str, batch: int):  # noqa: ANN202
    """A matmul fusion in *layout* (nvFuser letters) with one of the four epilogues."""
    lead = [batch] if batch > 1 else []
    a_order = [1, 0] if layout[0] == "T" else [0, 1]  # T: A is K-inner
    b_order = [0, 1] if layout[1] == "N" else [1, 0]  # N: B [K, N] is K-inner
    shift = len(lead)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype=dtype, stride_order=[*([2] * shift), *a_order])
        b = fd.define_tensor([*lead, k, n], dtype=dtype, stride_order=[*([2] * shift), *b_order])
        y = fd.ops.matmul(a, b)
        if epilogue == "none":
            fd.add_output(fd.ops.cast(y, dtype))
        elif epilogue == "bias_gelu":
            bias = fd.define_tensor([n], dtype=dtype)
            y = fd.ops.add(y, fd.ops.broadcast_in_dim(bias, [*lead, m, n], [len(lead) + 1]))
            fd.add_output(fd.ops.cast(fd.ops.gelu(y), dtype))
        elif epilogue == "alpha_beta":
            c = fd.define_tensor([*lead, m, n], dtype=dtype)
            fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.mul(y, 0.5), fd.ops.mul(c, -2.0)), dtype))
        else:
            fd.add_output(fd.ops.cast(fd.ops.relu(y), dtype))
            fd.add_output(fd.ops.cast(y, mp.float32))
    return fd.fusion


def _run(
    checks: Checks, fusion: mp.Fusion, pm: mp.PluginManager, seed: int, **overrides: object
) -> Any:
    """Compile with *overrides* and check two calls against float64 (a float32 output of a
    half matmul: the reference rounds the product to the operand type, the kernel keeps the
    float32 accumulator, so the operands' tolerance applies)."""
    inputs = checks.inputs(fusion, np.random.default_rng(seed))
    return checks.run(fusion, pm, inputs, overrides, operand_floor=True)


MATRIX = list(
    itertools.product(
        (mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), EPILOGUES, (1, 2), (1, 3)
    )
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "splitk", "batch"),
    MATRIX,
    ids=[f"{d.label}_{lay}_{e}_sk{s}_b{b}" for d, lay, e, s, b in MATRIX],
)
def test_matrix(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    splitk: int, batch: int,
) -> None:  # fmt: skip
    """504x264x328 (ragged in every dim) with a 128x128x64 two-consumer tile."""
    fusion = _fusion(504, 264, 328, dtype, layout, epilogue, batch)
    compiled = _run(
        checks, fusion, pm, seed=7, cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
        instruction_tile=(64, 128, 16), stages=3, splitk_factor=splitk,
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"


SMEM_MATRIX = list(
    itertools.product((mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), EPILOGUES)
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue"),
    SMEM_MATRIX,
    ids=[f"{d.label}_{lay}_{e}" for d, lay, e in SMEM_MATRIX],
)
def test_smem_epilogue(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str
) -> None:
    """use_smem_epilogue: chunks staged through shared memory, batch 3, ragged, 2 consumers."""
    fusion = _fusion(504, 264, 328, dtype, layout, epilogue, 3)
    compiled = _run(
        checks, fusion, pm, seed=9, cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
        instruction_tile=(64, 128, 16), stages=3, use_smem_epilogue=True,
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert "_se" in compiled.kernel_name


WIDE = list(
    itertools.product((mp.float16, mp.bfloat16), ("TN", "NN"), ("none", "bias_gelu"), (152, 160))
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "width"),
    WIDE,
    ids=[f"{d.label}_{lay}_{e}_w{w}" for d, lay, e, w in WIDE],
)
def test_warp_tiles_of_160_accumulators(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    width: int,
) -> None:  # fmt: skip
    """Two consumers of 128xW (W = 152 or 160: that many accumulators a thread, the most the
    rules allow), staged and from registers, alone and in pairs (along N for 152, whose B tile
    the rules do not split in two), 520x330x328 (every tile ragged)."""
    fusion = _fusion(520, 330, 328, dtype, layout, epilogue, 1)
    tiles = {"cta_tile": (256, width, 64), "warp_tile": (128, width, 64),
             "instruction_tile": (64, width, 16), "stages": 3}  # fmt: skip
    pair = (2, 1) if width % 16 == 0 else (1, 2)
    for staged, cluster in ((True, (1, 1)), (False, (1, 1)), (True, pair)):
        compiled = _run(
            checks,
            fusion,
            pm,
            seed=width,
            **tiles,
            use_smem_epilogue=staged,
            cluster_dims=cluster,
        )
        assert f"_w128x{width}_" in compiled.kernel_name


PINGPONG = list(itertools.product((mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), (1, 2)))


@pytest.mark.parametrize(
    ("dtype", "layout", "splitk"),
    PINGPONG,
    ids=[f"{d.label}_{lay}_sk{s}" for d, lay, s in PINGPONG],
)
def test_pingpong(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, splitk: int
) -> None:
    """Two consumers taking alternate tiles (main loops in turn, epilogues overlapped)."""
    fusion = _fusion(504, 264, 328, dtype, layout, "relu_aux", 3)
    warp = (128, 128, 64) if layout in ("TN", "NT") else (64, 256, 64)
    compiled = _run(
        checks, fusion, pm, seed=17, cta_tile=warp, warp_tile=warp,
        instruction_tile=(64, warp[1], 16), stages=4, tiling_strategy="persistent_pingpong",
        splitk_factor=splitk,
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_pp")


CLUSTER = list(
    itertools.product(
        (mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), ("none", "bias_gelu"), (1, 2),
        (504, 296),
    )
)  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "splitk", "m"),
    CLUSTER,
    ids=[f"{d.label}_{lay}_{e}_sk{s}_m{m}" for d, lay, e, s, m in CLUSTER],
)
def test_cluster_pairs(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    splitk: int, m: int,
) -> None:  # fmt: skip
    """cluster_dims=(2, 1): CTA pairs along M share a multicast B tile; m=296 makes 3 M tiles,
    so the second pair's second CTA has no rows (it still loads and releases its half)."""
    fusion = _fusion(m, 264, 328, dtype, layout, epilogue, 3 if splitk == 1 else 1)
    compiled = _run(
        checks, fusion, pm, seed=23, cta_tile=(128, 256, 64), warp_tile=(64, 256, 64),
        instruction_tile=(64, 256, 16), stages=4, use_smem_epilogue=True,
        splitk_factor=splitk, cluster_dims=(2, 1),
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_c2")


SWAP = list(
    itertools.product((mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), EPILOGUES, (1, 3))
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "splitk"),
    SWAP,
    ids=[f"{d.label}_{lay}_{e}_sk{s}" for d, lay, e, s in SWAP],
)
def test_swap_ab(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    splitk: int,
) -> None:  # fmt: skip
    """swap_ab: the transposed product, 64 weight rows a CTA against the 40 activation rows as
    the wgmma's N (64 where the kernel's B, the problem's A, is M-major), batch 2, ragged in
    every dim, stored from registers; split-K's partials in the output's orientation."""
    cols = 40 if layout[0] == "T" else 64
    fusion = _fusion(40, 1000, 1064, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=29, cta_tile=(64, cols, 64), warp_tile=(64, cols, 64),
        instruction_tile=(64, cols, 16), stages=6, splitk_factor=splitk, swap_ab=True,
        use_smem_epilogue=False, tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_swap")


SWAP_STAGED = list(
    itertools.product((mp.float16, mp.bfloat16), ("TN", "NT"), EPILOGUES, ((64, 40), (128, 104)))
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "tile"),
    SWAP_STAGED,
    ids=[f"{d.label}_{lay}_{e}_{t[0]}x{t[1]}" for d, lay, e, t in SWAP_STAGED],
)
def test_swap_ab_staged(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    tile: tuple[int, int],
) -> None:  # fmt: skip
    """swap_ab with the staged epilogue: each chunk of the kernel's columns (the output's
    rows) written transposed into shared memory, stored along the output's rows; one consumer
    of 64 weight rows against 40 activation rows (64 where the kernel's B is M-major), or two
    (128 weight rows) against 100 as a wgmma N of 104 (chunks of 8; 104 M-major rows, 16-byte
    pitches, in 128); batch 2, ragged."""
    rows, cols = tile
    cols = cols if layout[0] == "T" else 64 * -(-cols // 64)
    m = 40 if rows == 64 else 100 if layout[0] == "T" else 104
    fusion = _fusion(m, 1000, 1064, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=31, cta_tile=(rows, cols, 64), warp_tile=(64, cols, 64),
        instruction_tile=(64, cols, 16), stages=4, swap_ab=True, use_smem_epilogue=True,
        tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_se_swap")


KCLUSTER = list(
    itertools.product((mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), EPILOGUES, (2, 3, 8))
)


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue", "splitk"),
    KCLUSTER,
    ids=[f"{d.label}_{lay}_{e}_sk{s}" for d, lay, e, s in KCLUSTER],
)
def test_splitk_in_cluster(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str,
    splitk: int,
) -> None:  # fmt: skip
    """splitk_in_cluster: a tile's splits are one cluster and sum their partials in
    distributed shared memory; 2 consumers on 128x128 tiles, batch 2, ragged in every dim,
    K of 9 tiles (split 8: ranks 5-7 have empty ranges), persistent clusters walking 24
    units."""
    fusion = _fusion(504, 264, 520, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=37, cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
        instruction_tile=(64, 128, 16), stages=3, splitk_factor=splitk,
        splitk_in_cluster=True, use_smem_epilogue=False, tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_kc")


@pytest.mark.parametrize("layout", ["TN", "NT"])
@pytest.mark.parametrize("splitk", [2, 4])
def test_swap_ab_splitk_in_cluster(
    pm: mp.PluginManager, checks: Checks, layout: str, splitk: int
) -> None:
    """The transposed product split in a cluster (a one-wave grid: 16 tiles of 64 weight
    rows), bias + GELU summed and applied in the ranks' slices."""
    cols = 40 if layout[0] == "T" else 64
    fusion = _fusion(40, 1000, 4096, mp.bfloat16, layout, "bias_gelu", 1)
    compiled = _run(
        checks, fusion, pm, seed=41, cta_tile=(64, cols, 128), warp_tile=(64, cols, 128),
        instruction_tile=(64, cols, 16), stages=4, splitk_factor=splitk, swap_ab=True,
        splitk_in_cluster=True, use_smem_epilogue=False, tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith("_swap_kc")


CLUSTER4 = list(itertools.product((mp.float16, mp.bfloat16), ("TN", "TT", "NT", "NN"), EPILOGUES))


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue"),
    CLUSTER4,
    ids=[f"{d.label}_{lay}_{e}" for d, lay, e in CLUSTER4],
)
def test_clusters_of_four(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str
) -> None:
    """cluster_dims=(4, 1): four CTAs along M share the B tile, each multicasting a quarter
    (2 x 64 columns of an N-major B); m=584 makes 10 M tiles, so the third cluster has two
    CTAs without rows; batch 2, ragged."""
    fusion = _fusion(584, 520, 328, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=43, cta_tile=(64, 256, 64), warp_tile=(64, 256, 64),
        instruction_tile=(64, 256, 16), stages=4, use_smem_epilogue=True,
        cluster_dims=(4, 1), tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith("_c4")


@pytest.mark.parametrize("layout", ["TN", "TT"])  # (an M-major A needs 256 rows a cluster)
def test_swap_ab_clusters_of_four(pm: mp.PluginManager, checks: Checks, layout: str) -> None:
    """The transposed product in clusters of 4 (each multicasts 8 of the 32 activation rows),
    bias + GELU; 1000 weight rows make 16 tiles, 4 clusters."""
    fusion = _fusion(32, 1000, 1064, mp.bfloat16, layout, "bias_gelu", 1)
    compiled = _run(
        checks, fusion, pm, seed=47, cta_tile=(64, 32, 64), warp_tile=(64, 32, 64),
        instruction_tile=(64, 32, 16), stages=6, swap_ab=True, use_smem_epilogue=False,
        cluster_dims=(4, 1), tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith("_c4_swap")


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue"),
    CLUSTER4,
    ids=[f"{d.label}_{lay}_{e}" for d, lay, e in CLUSTER4],
)
@pytest.mark.parametrize("ctas", [2, 4])
def test_clusters_along_n(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str, ctas: int
) -> None:
    """cluster_dims=(1, ctas): CTAs along N share the A tile (128 rows in two consumers),
    each multicasting a 1/ctas part (one 64-row swizzle row of an M-major A a pair); n=520 in
    64-column tiles makes 9 N tiles, so the last cluster has CTAs without columns; batch 2,
    ragged."""
    if ctas == 4 and layout[0] == "N":
        pytest.skip("an M-major A splits into 64-row swizzle rows: 4 CTAs need 256 rows")
    fusion = _fusion(584, 520, 328, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=53, cta_tile=(128, 64, 64), warp_tile=(64, 64, 64),
        instruction_tile=(64, 64, 16), stages=4, use_smem_epilogue=True,
        cluster_dims=(1, ctas), tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith(f"_cn{ctas}")


@pytest.mark.parametrize(
    ("dtype", "layout", "epilogue"),
    CLUSTER4,
    ids=[f"{d.label}_{lay}_{e}" for d, lay, e in CLUSTER4],
)
def test_clusters_of_2x2(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, epilogue: str
) -> None:
    """cluster_dims=(2, 2): the two CTAs of a column share the B tile and the two of a row the
    A tile (128 x 128 tiles in two consumers), each multicasting half of each (one 64-wide
    swizzle row of an MN-major operand); m=584 and n=520 make 5 M and 5 N tiles, so the last
    clusters have CTAs without rows, without columns or both; batch 2, ragged; with relu and
    an aux output, K split 2 ways through the workspace."""
    splitk = 2 if epilogue == "relu_aux" else 1
    fusion = _fusion(584, 520, 328, dtype, layout, epilogue, 2)
    compiled = _run(
        checks, fusion, pm, seed=61, cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
        instruction_tile=(64, 128, 16), stages=4, use_smem_epilogue=True, splitk_factor=splitk,
        cluster_dims=(2, 2), tiling_strategy="persistent",
    )  # fmt: skip
    assert "_c2_cn2" in compiled.kernel_name


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_swap_ab_clusters_of_2x2(pm: mp.PluginManager, checks: Checks, epilogue: str) -> None:
    """The transposed product in 2x2 clusters: two 64-row weight tiles and two 32-row tiles
    of the 60 activations, each CTA multicasting half of each; 1000 weight rows."""
    fusion = _fusion(60, 1000, 1064, mp.bfloat16, "TN", epilogue, 1)
    compiled = _run(
        checks, fusion, pm, seed=67, cta_tile=(64, 32, 128), warp_tile=(64, 32, 128),
        instruction_tile=(64, 32, 16), stages=6, swap_ab=True, use_smem_epilogue=False,
        cluster_dims=(2, 2), tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith("_c2_cn2_swap")


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("ctas", [2, 4])
def test_swap_ab_clusters_along_n(
    pm: mp.PluginManager, checks: Checks, epilogue: str, ctas: int
) -> None:
    """The transposed product in clusters along N (cuBLAS's 1x2 at 64 activation rows): the
    60 activations in tiles of 64/ctas rows share each K-major 64-row weight tile, multicast
    by parts (an N-major weight would need 64 rows a CTA); 1000 weight rows make 16 tiles."""
    cols = 64 // ctas
    fusion = _fusion(60, 1000, 1064, mp.bfloat16, "TN", epilogue, 1)
    compiled = _run(
        checks, fusion, pm, seed=59, cta_tile=(64, cols, 128), warp_tile=(64, cols, 128),
        instruction_tile=(64, cols, 16), stages=6, swap_ab=True, use_smem_epilogue=False,
        cluster_dims=(1, ctas), tiling_strategy="persistent",
    )  # fmt: skip
    assert compiled.kernel_name.endswith(f"_cn{ctas}_swap")


@pytest.mark.parametrize(
    ("shape", "epilogue"),
    [
        ((32, 6144, 4096), "bias_gelu"),
        ((48, 4096, 14336), "relu_aux"),
        ((24, 8192, 8192), "none"),
        ((16, 8192, 8192), "bias_gelu"),  # handed over by the decode scheduler
        ((12, 1024, 16384), "alpha_beta"),  # ... and split: 16 tiles of 64 weight rows
    ],
    ids=[
        "32x6144x4096",
        "48x4096x14336",
        "24x8192x8192",
        "16x8192x8192",
        "12x1024x16384",
    ],  # fmt: skip
)
def test_default_swaps_weight_streaming(
    pm: mp.PluginManager, checks: Checks, shape: tuple[int, int, int], epilogue: str
) -> None:
    """The default plan of a weight-streaming row is the transposed product (from 9 rows of
    16 KiB weight rows, which the decode scheduler hands over; split where its tiles are few)
    and matches float64 with the fused epilogue."""
    compiled = _run(checks, _fusion(*shape, mp.bfloat16, "TN", epilogue, 1), pm, seed=31)
    assert compiled.spec.scheduler == "hopper" and compiled.params.swap_ab
    assert (compiled.params.splitk_factor > 1) == (shape[1] == 1024)


@pytest.mark.parametrize(
    ("shape", "layout", "epilogue", "cols"),
    [
        ((64, 4096, 8192), "TN", "bias_gelu", 32),  # 128 tiles of 32 weight rows
        ((60, 4096, 4096), "TN", "relu_aux", 32),  # rows ragged in the 64-row tile
        ((64, 6144, 4096), "TN", "alpha_beta", 64),  # 96 tiles of 64
        ((64, 5120, 8192), "NN", "none", 64),
        ((64, 4096, 8192), "NT", "bias_gelu", 0),  # an N-major weight: swapped instead
    ],
    ids=["64x4096x8192", "60x4096x4096", "64x6144x4096", "64x5120x8192_nn", "64x4096x8192_nt"],
)
def test_default_streams_64_rows_on_narrow_tiles(
    pm: mp.PluginManager, checks: Checks, shape: tuple[int, int, int], layout: str, epilogue: str,
    cols: int,
) -> None:  # fmt: skip
    """The default plan of 57-64 activation rows against a K-major weight whose 64x128 tiles
    would fill under 40% of the SMs: 32- or 64-row weight tiles, unsplit, a deep ring; an
    N-major weight's swaps where the unswapped tiles would split K. Each matches float64 with
    its fused epilogue."""
    compiled = _run(checks, _fusion(*shape, mp.bfloat16, layout, epilogue, 1), pm, seed=37)
    params = compiled.params
    assert compiled.spec.scheduler == "hopper" and params.swap_ab == (cols == 0)
    assert params.splitk_factor == 1 and (cols == 0 or params.cta_tile.n == cols)


@pytest.mark.parametrize(
    ("shape", "layout", "epilogue", "swapped"),
    [
        ((96, 6144, 4096), "TN", "bias_gelu", True),  # 65-112 rows: one wgmma of N = 96
        ((72, 4096, 4096), "TT", "relu_aux", True),
        ((112, 8192, 8192), "TN", "alpha_beta", True),
        ((100, 4096, 14336), "TN", "none", True),  # the rows rounded up to 104
        ((512, 4096, 4096), "TN", "bias_gelu", False),  # the 64-deep tie: 128x128x64, 6 stages
        ((1536, 1000, 7168), "NT", "relu_aux", False),
        ((256, 5120, 4096), "TN", "bias_gelu", False),  # one consumer: 64x192x64, 6 stages
        ((160, 8192, 8192), "NT", "alpha_beta", False),
    ],
    ids=["96x6144x4096", "72x4096x4096_tt", "112x8192x8192", "100x4096x14336", "512x4096x4096",
         "1536x1000x7168_nt", "256x5120x4096", "160x8192x8192_nt"],
)  # fmt: skip
def test_default_swaps_65_to_112_rows_and_ties_to_64_of_k(
    pm: mp.PluginManager, checks: Checks, shape: tuple[int, int, int], layout: str, epilogue: str,
    swapped: bool,
) -> None:  # fmt: skip
    """The default plans of 65-112 activation rows against a weight 16 times as wide (the
    transposed product) and of 16-bit tiles of 64x192 outputs or more (64 of K a stage, the
    deeper ring) match float64 with their fused epilogues."""
    compiled = _run(checks, _fusion(*shape, mp.bfloat16, layout, epilogue, 1), pm, seed=41)
    params = compiled.params
    assert compiled.spec.scheduler == "hopper" and params.swap_ab == swapped
    assert swapped or params.cta_tile.k == 64


TILES = [
    ((128, 256, 64), (64, 256, 64), 4, "persistent"),
    ((64, 256, 64), (64, 256, 64), 4, "persistent"),
    ((128, 128, 64), (128, 128, 64), 4, "one_tile_per_cta"),
    ((64, 64, 256), (64, 64, 256), 3, "persistent"),
    ((64, 128, 128), (64, 64, 128), 3, "persistent"),
    ((256, 128, 64), (128, 128, 64), 3, "one_tile_per_cta"),
]


@pytest.mark.parametrize(("cta", "warp", "stages", "tiling"), TILES, ids=[str(t[0]) for t in TILES])
@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_tile_shapes(
    pm: mp.PluginManager, checks: Checks, cta, warp, stages: int, tiling: str, layout: str
) -> None:  # noqa: ANN001
    """Tile shapes (1 or 2 consumers, k 64..256) on a problem smaller than a tile in M."""
    fusion = _fusion(40, 1000, 1064, mp.float16, layout, "bias_gelu", 1)
    compiled = _run(
        checks, fusion, pm, seed=11, cta_tile=cta, warp_tile=warp,
        instruction_tile=(64, warp[1], 16), stages=stages, tiling_strategy=tiling,
    )  # fmt: skip
    assert compiled.spec.scheduler == "hopper"


@pytest.mark.parametrize("epilogue", ["bias_gelu", "relu_aux"])
@pytest.mark.parametrize("layout", ["TN", "NN"])
def test_wgmma_n_160(pm: mp.PluginManager, checks: Checks, layout: str, epilogue: str) -> None:
    """128x160 tiles of two 64x160 consumers (the tuner's; at 512x10240x8192 they filled two
    waves and ran 10% faster than the default's 128x192), B K-major (the rules refuse an
    N-major one), ragged in every dim."""
    fusion = _fusion(296, 1000, 1064, mp.bfloat16, layout, epilogue, 1)
    compiled = _run(
        checks, fusion, pm, seed=15, cta_tile=(128, 160, 64), warp_tile=(64, 160, 64),
        instruction_tile=(64, 160, 16), stages=5,
    )  # fmt: skip
    assert "_128x160x64_w64x160_" in compiled.kernel_name


@pytest.mark.parametrize(
    "shape",
    [(4096, 4096, 4096), (2048, 1024, 512), (128, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096)],
)
def test_default_plan(pm: mp.PluginManager, checks: Checks, shape: tuple[int, int, int]) -> None:
    """The default heuristic's plan for benchmark shapes (and decode-sized rows: the decode
    scheduler takes 8, and hands 16 of 8 KiB weight rows to hopper's transposed product)."""
    compiled = _run(checks, _fusion(*shape, mp.bfloat16, "TN", "none", 1), pm, seed=3)
    assert compiled.spec.scheduler == ("decode" if shape[0] <= 8 else "hopper")


@pytest.mark.parametrize(
    ("batch", "k"), [(16, 128), (1, 64), (1, 512)], ids=["b16_k128", "k64", "k512"]
)
def test_default_plan_pairs_long_units_only(
    pm: mp.PluginManager, checks: Checks, batch: int, k: int
) -> None:
    """Grids of 12 waves and more (16 x 2048x2048, 8192x8192 of 128x256 tiles) run CTA pairs
    only where a unit's main loop is 8 K tiles or more (runs 175-176): 2 and 1 alone, 8
    paired; each plan checked against float64."""
    m = n = 2048 if batch > 1 else 8192
    compiled = _run(checks, _fusion(m, n, k, mp.bfloat16, "TN", "none", batch), pm, seed=9)
    assert compiled.params.cluster_dims == ((2, 1) if k >= 512 else (1, 1))


DEEP_K = [
    ((256, 256, 16384, 1), "none", mp.bfloat16),
    ((128, 128, 32768, 1), "alpha_beta", mp.bfloat16),
    ((64, 512, 28672, 1), "bias_gelu", mp.float16),
    ((200, 136, 9000, 2), "relu_aux", mp.float16),
    ((1024, 1024, 32768, 1), "bias_gelu", mp.bfloat16),  # 2**20 outputs: 4 a reduce thread
]


@pytest.mark.parametrize(
    ("shape", "epilogue", "dtype"),
    DEEP_K,
    ids=["x".join(map(str, s)) + f"_{e}" for s, e, _ in DEEP_K],
)
def test_default_deep_k_splits(
    pm: mp.PluginManager, checks: Checks, shape: tuple[int, ...], epilogue: str, dtype: mp.DType
) -> None:
    """Deep K over few tiles: the default plan splits K (up to 32 ways, ragged in every dim for
    the batched one) and every epilogue still matches float64."""
    m, n, k, batch = shape
    compiled = _run(checks, _fusion(m, n, k, dtype, "TN", epilogue, batch), pm, seed=17)
    assert compiled.spec.scheduler == "hopper"
    assert compiled.params.splitk_factor > 1


def test_unaligned_rows_fall_back_to_ampere(pm: mp.PluginManager, checks: Checks) -> None:
    """K = 100 gives 200-byte rows, which TMA cannot stride: ampere runs, explain says why."""
    fusion = _fusion(96, 80, 100, mp.float16, "TN", "none", 1)
    compiled = _run(checks, fusion, pm, seed=5)
    assert compiled.spec.scheduler == "ampere"
    assert "TMA needs 16-byte aligned row pitches" in mp.explain(compiled.spec)


def test_misaligned_address_falls_back_to_ampere(pm: mp.PluginManager, checks: Checks) -> None:
    """An operand 2 bytes past an aligned address: TMA declines it, ampere runs it (warned)."""
    fusion = _fusion(256, 192, 320, mp.float16, "TN", "bias_gelu", 1)
    compiled = mp.compile(fusion, pm=pm)
    assert compiled.spec.scheduler == "hopper"
    a, b, bias = checks.inputs(fusion, np.random.default_rng(13))
    base = torch.empty(a.numel() + 8, device="cuda", dtype=torch.float16)
    shifted = base[1 : 1 + a.numel()].view(a.shape)
    shifted.copy_(a)
    with pytest.warns(mp.FallbackWarning, match=r"hopper kernel declines.*ampere kernel"):
        got = compiled.execute([shifted, b, bias])[0]
    again = compiled.execute([shifted, b, bias])[0]  # the fallback is bound: no second warning
    expected = checks.expected(fusion, [a, b, bias])
    for out in (got, again, compiled.execute([a, b, bias])[0]):
        checks.outputs(fusion, [out], expected)
