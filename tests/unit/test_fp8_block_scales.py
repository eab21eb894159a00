"""Block-scaled FP8 (1x128 scales of A, 128x128 of B, DeepSeek-V3's recipe) through the IR,
mp.evaluate, analysis, planning and the hopper scheduler's rules (kernels: sim, ptx, gpu)."""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.patterns import DimRole, TensorRole
from mmaplug.heuristics.default import hopper_params
from mmaplug.ir.ops import SCALE_BLOCK, MatmulOp, ScaledMmaOp, several_scale_blocks
from mmaplug.planning.device import get_device
from mmaplug.planning.planner import NO_BLOCK_SCALES
from mmaplug.planning.scheduler import violations
from mmaplug.plugins.hopper.config import HopperKernelConfig
from mmaplug.plugins.hopper.kernel_codegen import generate_source
from mmaplug.plugins.hopper.scheduler import SCHEDULER as HOPPER
from mmaplug.plugins.hopper.tiles import (
    BLOCK_SUMS,
    block_columns,
    block_sums,
    block_tile,
    promoted_by_chunks,
    straddle_cuts,
    straddles,
)

H200 = get_device("h200")


def block_scaled(m: int, n: int, k: int, *, dtype=mp.float8_e4m3fn, b_k_inner=True,
                 bias=False, out=mp.bfloat16) -> mp.FusionDefinition:  # fmt: skip
    kb, nb = -(-k // 128), -(-n // 128)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=dtype)
        b = fd.define_tensor([k, n], dtype=dtype, stride_order=[0, 1] if b_k_inner else [1, 0])
        sa = fd.define_tensor([m, kb], dtype=mp.float32)
        sb = fd.define_tensor([kb, nb], dtype=mp.float32)
        extra = {"bias": fd.define_tensor([n], dtype=mp.bfloat16)} if bias else {}
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=out, **extra))
    return fd


def random_inputs(fd: mp.FusionDefinition, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]


def dequantized_reference(a, b, sa, sb) -> np.ndarray:  # noqa: ANN001
    """The block-scaled product written out block by block, in float64."""
    a, b, sa, sb = (np.asarray(x, np.float64) for x in (a, b, sa, sb))
    out = np.zeros((a.shape[0], b.shape[1]))
    for j in range(sa.shape[1]):
        ks = slice(j * SCALE_BLOCK, (j + 1) * SCALE_BLOCK)
        col_scale = np.repeat(sb[j], SCALE_BLOCK)[: b.shape[1]]
        out += (a[:, ks] @ b[ks]) * sa[:, j : j + 1] * col_scale[None, :]
    return out


def test_block_scales_make_a_scaled_mma_the_others_a_matmul() -> None:
    ops = {type(e) for e in block_scaled(64, 256, 384).fusion.exprs()}
    assert ScaledMmaOp in ops and MatmulOp not in ops
    with mp.FusionDefinition() as fd:  # per row: the product scaled in the epilogue
        a = fd.define_tensor([64, 384], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([384, 256], dtype=mp.float8_e4m3fn)
        sa = fd.define_tensor([64, 1], dtype=mp.float32)
        sb = fd.define_tensor([1, 256], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb))
    assert ScaledMmaOp not in {type(e) for e in fd.fusion.exprs()}


@pytest.mark.parametrize(("m", "n", "k"), [(16, 256, 384), (40, 200, 300), (8, 130, 260)])
def test_evaluate_scales_each_k_block_before_adding(m: int, n: int, k: int) -> None:
    """Ragged K (the last block shorter) and N (the last block of B's scales partial)."""
    fd = block_scaled(m, n, k, out=mp.float32)
    ins = random_inputs(fd)
    (got,) = mp.evaluate(fd, ins)
    want = dequantized_reference(*ins)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-5)
    # not the product scaled once: the scales differ per block
    plain = (ins[0].astype(np.float64) @ ins[1].astype(np.float64)) * ins[2][:, :1]
    assert not np.allclose(got, plain * ins[3][0, 0], rtol=1e-2)


def test_one_k_block_agrees_with_per_row_scaling() -> None:
    """K <= 128 and N <= 128: [M, 1] and [1, 1] are per-row and per-tensor scales, and block
    scales of one block are the same numbers, so either reading is one result."""
    fd = block_scaled(32, 96, 128)
    assert ScaledMmaOp not in {type(e) for e in fd.fusion.exprs()}  # read as per row
    ins = random_inputs(fd)
    (got,) = mp.evaluate(fd, ins)
    np.testing.assert_allclose(
        np.asarray(got, np.float64), dequantized_reference(*ins), rtol=2e-2, atol=1e-2
    )


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (([64, 3], [3, 1]), r"scale_b T3 is float32\[3, 1\]; .* \[64, 3\] and \[3, 2\]"),
        (([64, 2], [3, 2]), r"scale_a T2 .* \[64, 3\] and \[3, 2\] \(blocks of 1x128"),
        (([3, 64], [3, 2]), r"scale_a T2 is float32\[3, 64\]"),
    ],
)
def test_block_scale_shapes_are_checked(shapes: tuple, message: str) -> None:
    with pytest.raises(mp.FusionError, match=message):
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([64, 384], dtype=mp.float8_e4m3fn)
            b = fd.define_tensor([384, 256], dtype=mp.float8_e4m3fn)
            sa = fd.define_tensor(shapes[0], dtype=mp.float32)
            sb = fd.define_tensor(shapes[1], dtype=mp.float32)
            fd.ops.scaled_mm(a, b, sa, sb)


def _symbolic(m: int, k: int, scale_rows: int) -> mp.FusionDefinition:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([384, 256], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([scale_rows, 3], dtype=mp.float32)
        sb = fd.define_tensor([3, 2], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb))
    return fd


def test_a_symbolic_m_binds_the_scales_rows() -> None:
    """Block scales with a symbolic M (a serving batch): A's and its scale's rows are one dim,
    so every call plans a block-scaled problem of its rows, and rows that differ are refused."""
    compiled = mp.compile(_symbolic(-1, 384, -1), "h200")
    for m in (1, 40):
        spec = compiled.specialize([(m, 384), (384, 256), (m, 3), (3, 2)]).spec
        assert (spec.problem.m, spec.problem.block_scaled, spec.scheduler) == (m, True, "hopper")
    with pytest.raises(mp.LaunchError, match="input T2 dim 0 is 8, but .* input T0 dim 0 = 4"):
        compiled.specialize([(4, 384), (384, 256), (8, 3), (3, 2)])


@pytest.mark.parametrize(
    ("m", "k", "rows", "message"),
    [
        (-1, 384, 64, r"scale_a T2 is float32\[64, 3\]; .* \[-1, 3\] and \[3, 2\]"),
        (-1, -1, -1, r"scale_a .* ceil\(N / 128\)\] for a static K and N \(a symbolic one"),
    ],
)
def test_symbolic_extents_and_block_scales(m: int, k: int, rows: int, message: str) -> None:
    with pytest.raises(mp.FusionError, match=message):
        _symbolic(m, k, rows)


def test_block_scales_must_be_float32() -> None:
    with pytest.raises(mp.FusionError, match="scale_a T2 is bfloat16.*must be float32"):
        with mp.FusionDefinition() as fd:
            a = fd.define_tensor([64, 384], dtype=mp.float8_e4m3fn)
            b = fd.define_tensor([384, 256], dtype=mp.float8_e4m3fn)
            sa = fd.define_tensor([64, 3], dtype=mp.bfloat16)
            sb = fd.define_tensor([3, 2], dtype=mp.bfloat16)
            fd.ops.scaled_mm(a, b, sa, sb)


def test_analysis_binds_the_scales_by_block_and_marks_the_problem() -> None:
    from mmaplug.analysis.matmul_analysis import analyze

    fd = block_scaled(256, 512, 1024, bias=True)
    analysis = analyze(fd.fusion)
    assert analysis.problem.block_scaled and "block-scaled" in analysis.problem.describe()
    assert [s.role for s in analysis.scales] == [TensorRole.SCALE] * 2
    assert [s.index for s in analysis.scales] == [2, 3]
    assert [s.dim_roles for s in analysis.scales] == [
        (DimRole.M, DimRole.K),
        (DimRole.K, DimRole.N),
    ]
    assert [b.name for b in analysis.epilogue_inputs] == ["T4"]  # the bias only
    assert not mp.matmul_problem(block_scaled(64, 64, 64).fusion).block_scaled  # one block


@pytest.mark.parametrize("device", ["h200", None])
def test_one_row_is_a_row_of_a_block_scaled_product(device: str | None) -> None:
    """``scaled_mm`` states its roles as matmul does: one decode step's M = 1 is M, not a
    broadcast, so the block-scaled product of one row is a matmul problem (hopper's kernel);
    and the framework's ops, should a segment hold a ScaledMmaOp, scale each K block."""
    from mmaplug.runtime.framework_segments import backend_for, run_ops

    fd = block_scaled(1, 256, 384, bias=True)
    problem = mp.matmul_problem(fd.fusion)
    assert (problem.m, problem.n, problem.k, problem.block_scaled) == (1, 256, 384, True)
    if device:
        assert mp.plan_problem(problem, device).scheduler == "hopper"
        return
    inputs = random_inputs(fd, seed=3)
    (got,) = run_ops(fd.fusion, inputs, backend_for("numpy"))
    (want,) = mp.evaluate(fd, inputs)
    assert got.shape == (1, 256)
    np.testing.assert_allclose(np.float64(got), np.float64(want), rtol=1e-2, atol=1e-2)


def test_a_block_scaled_matmul_is_fused_alone() -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 256], dtype=mp.float8_e4m3fn)
        sx = fd.define_tensor([64, 2], dtype=mp.float32)
        ys = []
        for _ in range(2):
            w = fd.define_tensor([256, 256], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
            sw = fd.define_tensor([2, 2], dtype=mp.float32)
            ys.append(fd.ops.scaled_mm(x, w, sx, sw, out_dtype=mp.float32))
        fd.add_output(fd.ops.cast(fd.ops.mul(ys[0], ys[1]), mp.bfloat16))
    with pytest.raises(mp.UnsupportedFusionError, match="a block-scaled matmul is fused alone"):
        mp.matmul_problem(fd.fusion)


def test_only_a_scheduler_that_applies_block_scales_is_offered_one() -> None:
    compiled = mp.compile(block_scaled(256, 512, 1024), "h200")
    assert compiled.spec.scheduler == "hopper" and compiled.params.cta_tile.k == 128
    text = compiled.explain()
    assert text.count(NO_BLOCK_SCALES) == 2  # ampere and decode
    assert getattr(HOPPER, "block_scales", False) is True


def _problem(m: int = 4096, n: int = 4096, k: int = 4096) -> mp.MatmulProblem:
    return mp.matmul_problem(block_scaled(m, n, k).fusion)


@pytest.mark.parametrize(
    ("shape", "warp_n"),
    [((4096, 4096, 4096), 256), ((128, 7168, 2048), 64), ((8192, 2112, 7168), 256)],
)
def test_the_default_plan_keeps_one_scale_block_per_set_of_sums(shape: tuple, warp_n: int) -> None:
    """Large problems take the 64x256 warp tiles promoted by chunks (measured fastest, run 125),
    each set of partial sums within one block of B's scales; small ones narrower tiles."""
    problem = _problem(*shape)
    params = hopper_params(problem, H200)
    assert params.cta_tile.k in (SCALE_BLOCK, 2 * SCALE_BLOCK)
    assert params.warp_tile.n == warp_n
    assert block_columns(params.cta_tile.n, params.warp_tile.n)
    assert block_sums(params.warp_tile.as_tuple(), params.cta_tile.k) <= BLOCK_SUMS
    assert params.stages <= 4  # measured faster than 6 (BENCHMARKS.md, run 80)
    if params.cta_tile.k == 2 * SCALE_BLOCK:
        assert tuple(params.cluster_dims) == (1, 1)  # three sets of accumulators: no pairs
    assert violations(HOPPER, params, problem, H200) == []


@pytest.mark.parametrize("cluster", [(2, 1), (4, 1), (1, 2), (1, 4)])
@pytest.mark.parametrize(
    "tiles",
    [((128, 192, 128), (64, 192, 128)), ((128, 256, 128), (64, 256, 128)),
     ((128, 128, 256), (64, 128, 256))],
    ids=["straddling", "chunks", "two_blocks"],
)  # fmt: skip
def test_192_sums_run_in_clusters_along_one_axis(tiles: tuple, cluster: tuple) -> None:
    """No STL/LDL in these kernels since the warp-uniform warpgroup index (nvdisasm), and the
    pairs ran correct on the GPU (BENCHMARKS.md run 277): legal, in plans and in the generator."""
    problem = _problem(8192, 8192, 8192)
    (cta, warp), inst = tiles, {"instruction_tile": (64, tiles[1][1], 32)}
    params = hopper_params(problem, H200).with_overrides(
        cta_tile=cta, warp_tile=warp, cluster_dims=cluster, stages=3, **inst
    )
    assert block_sums(warp, cta[2]) == BLOCK_SUMS
    assert violations(HOPPER, params, problem, H200) == []
    HopperKernelConfig(
        operand_dtype=mp.float8_e4m3fn, cta_tile=cta, warp_tile=warp, block_scaled=True,
        cluster_m=cluster[0], cluster_n=cluster[1],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "tile", "cluster"),
    [
        ((8192, 8192, 8192), (128, 192), (2, 1)),  # fills its last wave 0.993 against 0.970
        ((4096, 28672, 4096), (128, 256), (1, 1)),  # 0.983 against 0.970: level, chunks kept
        ((4096, 6144, 4096), (128, 256), (1, 1)),  # 0.970 both
        ((4096, 10240, 8192), (128, 256), (1, 1)),  # the 192 tiles fill worse
    ],
)
def test_block_scaled_pairs_where_they_fill_the_last_wave_better(
    shape: tuple, tile: tuple, cluster: tuple
) -> None:
    """128x192 tiles in CTA pairs where they fill the last wave 2% of the SMs better than the
    64x256 chunks, which run alone (BENCHMARKS.md runs 275-278: in pairs 2-8% slower)."""
    params = hopper_params(_problem(*shape), H200)
    assert (params.cta_tile.m, params.cta_tile.n) == tile
    assert tuple(params.cluster_dims) == cluster
    assert params.stages == 4


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"cta_tile": (128, 128, 192), "warp_tile": (64, 128, 192)}, "cta_tile", "128, 256"),
        # over 128 sums a thread: a 2x2 cluster's consumers spill
        (
            {"cta_tile": (128, 128, 256), "warp_tile": (64, 128, 256), "cluster_dims": (2, 2)},
            "cluster_dims",
            "more than 128 sums",
        ),
        (
            {"cta_tile": (128, 192, 128), "warp_tile": (64, 192, 128), "cluster_dims": (2, 2)},
            "cluster_dims",
            "2x2 cluster",
        ),
        # 224 columns meet three blocks of B's scales where they start 96 into one
        ({"cta_tile": (64, 224, 128), "warp_tile": (64, 224, 128)}, "cta_tile", "divide 128"),
        # a tile straddling two blocks takes one block of K a stage
        (
            {"cta_tile": (128, 96, 256), "warp_tile": (64, 96, 256)},
            "cta_tile",
            "straddles two with cta_tile.k=128",
        ),
        # two consumers side by side along N: the second's columns are another scale block
        ({"cta_tile": (64, 256, 128), "warp_tile": (64, 128, 128)}, "cta_tile", "equal warp"),
        ({"cta_tile": (128, 128, 128), "warp_tile": (128, 128, 128)}, "warp_tile", "partial"),
        ({"cta_tile": (128, 256, 256), "warp_tile": (64, 256, 256)}, "warp_tile", "256 float32"),
    ],
)
def test_block_rules_name_what_a_block_needs(change: dict, field: str, words: str) -> None:
    problem = _problem()
    base = hopper_params(problem, H200)
    inst = {"instruction_tile": (64, change["warp_tile"][1], 32)}
    found = violations(HOPPER, base.with_overrides(**change, **inst), problem, H200)
    messages = " ".join(v.message + v.limit for v in found if v.field == field)
    assert words in messages, found


def test_the_generator_refuses_what_block_scaling_cannot_build() -> None:
    with pytest.raises(ValueError, match=r"must have k in \(128, 256\)"):
        HopperKernelConfig(
            operand_dtype=mp.float8_e4m3fn, cta_tile=(128, 96, 256), warp_tile=(64, 96, 256),
            block_scaled=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="n = warp_tile n"):
        HopperKernelConfig(
            operand_dtype=mp.float8_e4m3fn, cta_tile=(64, 256, 128), warp_tile=(64, 128, 128),
            block_scaled=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="holds 256 sums a thread"):
        HopperKernelConfig(
            operand_dtype=mp.float8_e4m3fn, cta_tile=(128, 256, 256), warp_tile=(64, 256, 256),
            block_scaled=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="consumers of a 2x2 cluster or of a cluster of splits"):
        HopperKernelConfig(
            operand_dtype=mp.float8_e4m3fn, cta_tile=(128, 128, 256), warp_tile=(64, 128, 256),
            cluster_m=2, cluster_n=2, block_scaled=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="block scales scale FP8 sums"):
        HopperKernelConfig(
            operand_dtype=mp.float16, cta_tile=(128, 128, 128), warp_tile=(64, 128, 128),
            block_scaled=True,
        )  # fmt: skip


def _block_kernel(cta: tuple, warp: tuple, **extra: object) -> tuple[str, list[str]]:
    """A block-scaled e4m3 kernel's source, and its wgmma calls (stripped lines) in order."""
    cfg = HopperKernelConfig(
        operand_dtype=mp.float8_e4m3fn, cta_tile=cta, warp_tile=warp, block_scaled=True, **extra
    )
    src = generate_source(cfg, sim=False)
    return src, [line.strip() for line in src.splitlines() if "= wgmma_e4m3(" in line]


def test_the_block_scaled_kernel_promotes_each_block_into_the_accumulators() -> None:
    """Per stage: fresh partial sums (scale-d 0 on the first wgmma), the next block's scales
    loaded while they run, a full wait, the stage released, then one promotion per 64-row
    block with this block's scales."""
    src, calls = _block_kernel((128, 128, 128), (128, 64, 128))
    assert len(calls) == 2 * 128 // 32 and all(c.startswith("part") for c in calls)
    assert [c.endswith(", 0)") for c in calls].count(True) == 2  # each block's first step
    loop = src[
        src.index(
            "wgmma_commit_group()", src.index("while k0 < ke", src.index("part0 = wgmma_zeros"))
        ) :
    ]
    order = [
        loop.index(s)
        for s in (
            "nlo0 = sfa[",
            "wgmma_wait_group(0)",
            "mbarrier_arrive(",
            "acc0 = wgmma_promote(acc0, part0, slo0 * sbsc, shi0 * sbsc)",
            "acc1 = wgmma_promote",
            "slo0 = nlo0",
        )
    ]
    assert order == sorted(order), order
    assert "wgmma_wait_group(1)" not in src


def test_a_stage_of_two_blocks_promotes_the_first_while_the_second_runs() -> None:
    """256-deep K tiles: the stage's scales loaded before its full barrier is waited on; the
    first block's wgmmas into psum, the second's into qsum, two groups; wait_group 1, promote
    psum, fenced ahead of wait_group 0 (or the compiler sinks it past that wait); wait_group
    0, release, promote qsum."""
    src, calls = _block_kernel((128, 128, 256), (64, 128, 256))
    assert [c.split(" =")[0] for c in calls] == ["psum0"] * 4 + ["qsum0"] * 4
    assert calls[0].endswith(", 0)") and calls[4].endswith(", 0)")
    loop = src[src.index("while k0 < ke:", src.index("psum0 = wgmma_zeros")) :]
    order = [
        loop.index(s)
        for s in (
            "slo00 = sfa[",
            "mbarrier_wait(",
            "psum0 = wgmma_e4m3(",
            "wgmma_commit_group()",
            "qsum0 = wgmma_e4m3(",
            "wgmma_wait_group(1)",
            "acc0 = wgmma_promote(acc0, psum0, slo00 * sbsc0, shi00 * sbsc0)",
            "acc0 = fence_operand(acc0)",
            "wgmma_wait_group(0)",
            "mbarrier_arrive(",
            "acc0 = wgmma_promote(acc0, qsum0, slo01 * sbsc1, shi01 * sbsc1)",
        )
    ]
    assert order == sorted(order), order


@pytest.mark.parametrize(
    ("cta", "warp", "strategy", "turns"),
    [
        ((128, 128, 128), (64, 128, 128), "persistent", True),
        ((128, 128, 256), (64, 128, 256), "persistent", False),  # three sets of sums
        ((64, 128, 128), (64, 128, 128), "persistent", False),  # one consumer
        ((128, 64, 128), (128, 64, 128), "persistent_pingpong", False),  # turns by unit
        ((128, 256, 128), (64, 256, 128), "persistent", False),  # promoted by chunks
    ],
)
def test_two_cooperative_consumers_issue_each_stage_in_turn(
    cta: tuple, warp: tuple, strategy: str, turns: bool
) -> None:
    """Two consumers sharing a block-scaled tile of one scale block a stage issue each stage's
    wgmmas in turn (the second waits on barrier 4 for the first's, the first on barrier 3 for
    the second's previous stage, and takes the second's last hand-over after its units);
    256-deep stages (no register to spare), one consumer, or ping-pong ones (whose main loops
    take turns by unit on the same barriers) do not."""
    src, _ = _block_kernel(cta, warp, pingpong=strategy == "persistent_pingpong")
    start = src.index("while k0 < ke:", src.index("acc0 = wgmma_zeros"))  # the consumer's
    loop = src[start : src.index("k0 += ", start)]
    steps = ("named_barrier_sync(3 + c, 256)", "mbarrier_wait(", "wgmma_commit_group()",
             "named_barrier_arrive(4 - c, 256)")  # fmt: skip
    if turns:
        order = [loop.index(step) for step in steps]
        assert order == sorted(order), order
    else:
        assert "named_barrier" not in loop
    assert ("if c == 0 and turn > 0:" in src) is turns


def test_a_wide_warp_tile_promotes_one_chunk_while_the_next_runs() -> None:
    """64x256 warp tiles: the stage's scales loaded before its full barrier; four 64-column
    chunks of wgmmas into two sets of partial sums in turn, each committed; after each chunk
    is issued the previous one is waited for (wait_group 1) and promoted with its block's
    scale of B; the last after wait_group 0 and the stage's release; the chunks joined."""
    src, calls = _block_kernel((128, 256, 128), (64, 256, 128))
    assert [c.split(" =")[0] for c in calls] == ["part0"] * 4 + ["qart0"] * 4 + ["part0"] * 4 + [
        "qart0"
    ] * 4
    assert "part0 = wgmma_zeros(32)" in src and "acc0c3 = wgmma_zeros(32)" in src
    loop = src[src.index("while k0 < ke:", src.index("acc0c0 = wgmma_zeros")) :]
    order = [
        loop.index(s)
        for s in (
            "bsc1 = sfb[kblk * sfb_k + bcol1]",
            "lo0 = sfa[",
            "mbarrier_wait(",
            "qart0 = wgmma_e4m3(",
            "wgmma_wait_group(1)",
            "acc0c0 = wgmma_promote(acc0c0, part0, lo0 * bsc0, hi0 * bsc0)",
            "acc0c1 = wgmma_promote(acc0c1, qart0, lo0 * bsc0, hi0 * bsc0)",
            "acc0c2 = wgmma_promote(acc0c2, part0, lo0 * bsc1, hi0 * bsc1)",
            "wgmma_wait_group(0)",
            "mbarrier_arrive(",
            "acc0c3 = wgmma_promote(acc0c3, qart0, lo0 * bsc1, hi0 * bsc1)",
            "acc0 = acc0c0 + acc0c1 + acc0c2 + acc0c3",
        )
    ]
    assert order == sorted(order), order
    assert "named_barrier" not in loop[: loop.index("acc0 = acc0c0")]


def test_the_tiles_that_straddle_two_blocks_of_b_scales() -> None:
    """Multiples of 32 that neither divide a block nor are whole blocks, whose columns meet
    at most two blocks from any origin a multiple of their width: 96, 160 and 192 (224 meets
    three from an origin 96 into a block; 200 and 136 are not multiples of 32)."""
    assert [n for n in range(8, 257, 8) if straddles(n)] == [96, 160, 192]
    assert straddle_cuts(96) == (64, 32)  # origins 0 and 32 lie in one block
    assert straddle_cuts(160) == (128, 96, 64, 32)
    assert straddle_cuts(192) == (128, 64)
    for n in (96, 160, 192):
        assert block_columns(n, n) and block_tile(SCALE_BLOCK, n, n)
        assert not block_tile(2 * SCALE_BLOCK, n, n)
        assert not block_columns(2 * n, n)  # two consumers side by side along N


@pytest.mark.parametrize("warp_n", [96, 160, 192])
def test_limits_accept_the_straddling_tiles_the_generator_builds(warp_n: int) -> None:
    """One rule in two places: a straddling tile at one block of K passes ``limits`` and
    builds; the same tile over two blocks of K fails both."""
    problem = _problem()
    base = hopper_params(problem, H200)
    for k, legal in ((SCALE_BLOCK, True), (2 * SCALE_BLOCK, False)):
        cta, warp = (128, warp_n, k), (64, warp_n, k)
        change = {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp_n, 32),
                  "stages": 4, "cluster_dims": (1, 1)}  # fmt: skip
        found = violations(HOPPER, base.with_overrides(**change), problem, H200)
        assert (found == []) is legal, found
        kind = dict(operand_dtype=mp.float8_e4m3fn, cta_tile=cta, warp_tile=warp)
        if legal:
            HopperKernelConfig(**kind, block_scaled=True)
        else:
            with pytest.raises(ValueError, match="block scales"):
                HopperKernelConfig(**kind, block_scaled=True)


def test_a_straddling_tile_promotes_each_cut_in_one_pass() -> None:
    """128x160 tiles: the next block of B's scales loaded beside the first (one past N reads
    the last), the columns before the first block's end from the tile's origin, and one
    promotion per cut: the first block's scales up to it, the next block's after it."""
    src, calls = _block_kernel((128, 160, 128), (64, 160, 128))
    assert len(calls) == 128 // 32 and all(c.startswith("part0 = wgmma_e4m3(") for c in calls)
    assert "bcol1 = min(n0 // 128 + 1, (N - 1) // 128) * sfb_n" in src
    assert "cut = 128 - n0 % 128" in src
    loop = src[src.index("wgmma_wait_group(0)", src.index("while k0 < ke")) :]
    split = "acc0 = wgmma_promote_split(acc0, part0, slo0 * sbsc, shi0 * sbsc, "
    order = [
        loop.index(s)
        for s in (
            "mbarrier_arrive(",
            "if cut == 128:",
            f"{split}slo0 * sbsc1, shi0 * sbsc1, 128)",
            "elif cut == 96:",
            f"{split}slo0 * sbsc1, shi0 * sbsc1, 96)",
            "elif cut == 64:",
            "else:",
            f"{split}slo0 * sbsc1, shi0 * sbsc1, 32)",
            "sbsc1 = nbsc1",
        )
    ]
    assert order == sorted(order), order
    assert "wgmma_promote(" not in loop  # every origin of a 160-column tile straddles
    src96, _ = _block_kernel((128, 96, 128), (64, 96, 128))
    tail = src96[src96.index("if cut == 64:") :]
    assert tail.index("else:") < tail.index("acc0 = wgmma_promote(acc0, part0, slo0 * sbsc")


def test_the_tiles_promoted_a_chunk_at_a_time() -> None:
    """Warp tiles of several whole blocks of B's scales (256, 384, ...): the hopper kernel's
    chunked promotion and the default heuristic's pairs both read ``several_scale_blocks``."""
    assert [n for n in range(8, 513, 8) if several_scale_blocks(n)] == [256, 384, 512]
    assert all(promoted_by_chunks(n) == several_scale_blocks(n) for n in range(8, 513, 8))
