"""Horizontal fusion (issue 10 item 3): analysis, the epilogue program, planning, segmentation,
hopper's limits and generated source, and the hopper and decode kernels' bound launches, for
matmuls sharing operand A (docs/decisions.md)."""

from __future__ import annotations

import ctypes
import re
from typing import Any

import attrs
import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.epilogue import Instr
from mmaplug.heuristics.default import hopper_params
from mmaplug.planning.params import MatmulParams, TileShape, TilingStrategy
from mmaplug.plugins.ampere.scheduler import SCHEDULER as AMPERE
from mmaplug.plugins.hopper import limits
from mmaplug.plugins.hopper.scheduler import SCHEDULER as HOPPER
from mmaplug.runtime.segmented_fusion import SegmentedFusion

H = mp.float16
PM = mp.make_plugin_manager(load_entrypoints=False, strict=True)
RNG = np.random.default_rng(3)


def ffn(m: int = 64, n: int = 48, k: int = 32, *, dtype=H, b_k_inner: bool = True, h: int = 2):
    """silu(x @ W1.T) * (x @ W3.T) [* (x @ W4.T) for h = 3]: W [N, K] (K-major) or [K, N]."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        ws = [fd.define_tensor([n, k] if b_k_inner else [k, n], dtype=dtype) for _ in range(h)]
        op = fd.ops.linear if b_k_inner else fd.ops.matmul
        g, *rest = (op(x, w) for w in ws)
        y = fd.ops.silu(g)
        for u in rest:
            y = fd.ops.mul(y, u)
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def _inputs(fusion: mp.Fusion) -> list[np.ndarray]:
    """Small integers: the products are exact in float16, so roundings cannot differ."""
    return [RNG.integers(-2, 3, v.shape).astype(v.dtype.numpy) for v in fusion.inputs]


# -- analysis ---------------------------------------------------------------------------------


@pytest.mark.parametrize("b_k_inner", [True, False], ids=["linear", "matmul"])
def test_llama_ffn_is_horizontal_with_every_b_and_one_program(b_k_inner: bool) -> None:
    fusion = ffn(b_k_inner=b_k_inner)
    analysis = mp.analyze(fusion, pm=PM)
    problem = analysis.problem
    assert (problem.num_patterns, problem.horizontal) == (2, 2)
    assert (problem.m, problem.n, problem.k, problem.b_k_inner) == (64, 48, 32, b_k_inner)
    assert [b.name for b in analysis.bs] == [fusion.inputs[1].name, fusion.inputs[2].name]
    assert analysis.b == analysis.bs[0]
    instrs = analysis.epilogue.instrs
    # silu of accumulator 0 (the product with W1, the first B input) times accumulator 1
    assert instrs[0] == Instr(op="acc") and Instr(op="acc", arg=1) in instrs
    silu = next(i for i in instrs if i.op == "silu")
    assert instrs[silu.srcs[0]] == Instr(op="acc")
    assert "horizontal=2" in problem.describe()
    assert problem.without_extents() != attrs.evolve(problem, horizontal=1).without_extents()


def test_translation_and_analysis_keep_what_evaluate_computes() -> None:
    """The analysed copy computes what the user's fusion does (and what numpy does)."""
    fusion = ffn(b_k_inner=False)
    inputs = _inputs(fusion)
    x, w1, w3 = (np.asarray(t, np.float64) for t in inputs)
    g = x @ w1
    want = (g / (1 + np.exp(-g))) * (x @ w3)
    (before,) = mp.evaluate(fusion, inputs)
    (after,) = mp.evaluate(mp.analyze(fusion, pm=PM).fusion, inputs)
    np.testing.assert_array_equal(before, after)
    np.testing.assert_allclose(np.asarray(after, np.float64), want, rtol=2e-3, atol=2e-3)


def test_three_products_and_a_second_output() -> None:
    fusion = ffn(h=3)
    analysis = mp.analyze(fusion, pm=PM)
    assert analysis.problem.horizontal == 3 and len(analysis.bs) == 3
    assert {i.arg for i in analysis.epilogue.instrs if i.op == "acc"} == {None, 1, 2}


def test_separate_outputs_of_one_shared_a_are_horizontal() -> None:
    """q = x @ Wq.T, k = x @ Wk.T as two outputs: A's shared broadcast makes the N dims one
    loop, so one kernel stores both, each from its accumulator."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=H)
        wq, wk = fd.define_tensor([48, 32], dtype=H), fd.define_tensor([48, 32], dtype=H)
        fd.add_output(fd.ops.linear(x, wq))
        fd.add_output(fd.ops.linear(x, wk))
    analysis = mp.analyze(fd.fusion, pm=PM)
    assert (analysis.problem.n, analysis.problem.horizontal) == (48, 2)
    prog = analysis.epilogue
    assert [prog.instrs[o.src] for o in prog.outputs] == [
        Instr(op="cast", srcs=(0,), arg=H),
        Instr(op="cast", srcs=(prog.instrs.index(Instr(op="acc", arg=1)),), arg=H),
    ]


@pytest.mark.parametrize("case", ["two_as", "layouts"])
def test_matmuls_that_are_not_horizontal_have_no_problem(case: str) -> None:
    """Their dims would multiply into one meaningless problem (m = M1 * M2): the analysis
    refuses them, and mp.compile computes each matmul in a segment of its own."""

    def two_as(fd) -> None:  # noqa: ANN001
        x1, x2 = fd.define_tensor([64, 32], dtype=H), fd.define_tensor([64, 32], dtype=H)
        w1, w3 = fd.define_tensor([48, 32], dtype=H), fd.define_tensor([48, 32], dtype=H)
        fd.add_output(fd.ops.mul(fd.ops.linear(x1, w1), fd.ops.linear(x2, w3)))

    def layouts(fd) -> None:  # noqa: ANN001
        x = fd.define_tensor([64, 32], dtype=H)
        w1 = fd.define_tensor([48, 32], dtype=H)
        w3 = fd.define_tensor([48, 32], dtype=H, stride_order=[0, 1])
        fd.add_output(fd.ops.mul(fd.ops.linear(x, w1), fd.ops.linear(x, w3)))

    with mp.FusionDefinition() as fd:
        {"two_as": two_as, "layouts": layouts}[case](fd)
    with pytest.raises(mp.UnsupportedFusionError, match="2 matmuls are not one horizontal"):
        mp.analyze(fd.fusion, pm=PM)
    compiled = mp.compile(fd, device="h200", pm=PM)
    assert len(compiled.segments) >= 2 and len(compiled.kernels) == 2


# -- schedulers, planning, segmentation -------------------------------------------------------


def test_ampere_declines_horizontal_and_hopper_takes_it() -> None:
    problem = mp.matmul_problem(ffn(), pm=PM)
    refused = AMPERE.accepts(problem, mp.get_device("h200"))
    assert "horizontal fusion of 2 matmuls sharing operand A is built by the hopper" in (
        refused or ""
    )
    assert HOPPER.accepts(problem, mp.get_device("h200")) is None


def test_too_many_n_major_products_for_one_wgmma_are_declined() -> None:
    problem = attrs.evolve(mp.matmul_problem(ffn(b_k_inner=False), pm=PM), horizontal=5,
                           num_patterns=5)  # fmt: skip
    refused = HOPPER.accepts(problem, mp.get_device("h200"))
    assert re.search(r"5 matmuls: one wgmma of N <= 256 .* at most 4 fit", refused or "")


def test_hopper_preset_compiles_one_kernel() -> None:
    compiled = mp.compile(ffn(), "h200", pm=PM)
    assert isinstance(compiled, mp.CompiledFusion)
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith("_h2")
    assert "horizontal=2" in compiled.explain()


def test_ampere_preset_segments_one_kernel_per_matmul_and_explains_why() -> None:
    compiled = mp.compile(ffn(), "a100", pm=PM)
    assert isinstance(compiled, SegmentedFusion)
    assert [s.kind for s in compiled.segments] == ["matmul", "matmul"]
    text = " ".join(compiled.explain().split())
    assert "horizontal fusion of 2 matmuls sharing operand A is built by the hopper" in text
    assert "hopper: needs wgmma and TMA (sm_90a)" in text


def test_symbolic_ffn_is_one_hopper_kernel_per_shapes() -> None:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, 32], dtype=H)
        w1, w3 = fd.define_tensor([48, 32], dtype=H), fd.define_tensor([48, 32], dtype=H)
        fd.add_output(fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3)))
    compiled = mp.compile(fd, "h200", pm=PM)
    one = compiled.specialize([(16, 32), (48, 32), (48, 32)])
    assert isinstance(one, mp.CompiledFusion) and one.spec.problem.horizontal == 2


# -- hopper's limits and the default heuristic ------------------------------------------------


def _params(**changes: object) -> MatmulParams:
    base = dict(cta_tile=TileShape(128, 256, 64), warp_tile=TileShape(64, 256, 64),
                instruction_tile=TileShape(64, 256, 16), stages=4, async_gmem_load_operands=True,
                tiling_strategy=TilingStrategy.persistent, warp_specialized=True)  # fmt: skip
    return MatmulParams(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"splitk_factor": 2}, "splitk_factor", "products are combined in the epilogue"),
        ({"cluster_dims": (2, 1)}, "cluster_dims", "B multicast per tensor map"),
        ({"cta_tile": (64, 256, 64), "warp_tile": (64, 128, 64),
          "instruction_tile": (64, 128, 16)}, "warp_tile", "split the CTA tile along M only"),
        ({"cta_tile": (128, 200, 64), "warp_tile": (64, 200, 64),
          "instruction_tile": (64, 200, 16)}, "cta_tile", "must be whole 8-row swizzle groups"),
    ],
    ids=["splitk", "cluster", "warp_n", "cta_n"],
)  # fmt: skip
def test_hopper_limits_refuse_what_the_horizontal_kernel_lacks(changes, field, message) -> None:  # noqa: ANN001
    problem = mp.matmul_problem(ffn(2048, 14336, 5120), pm=PM)
    device = mp.get_device("h200")
    assert limits.violations(_params(), problem, device) == []
    found = limits.violations(_params(**changes), problem, device)
    assert [v.field for v in found if message in v.message] == [field], found


def test_smem_epilogue_needs_room_for_every_product_in_a_staged_row() -> None:
    """Three products of 24 columns: a staged row of 8 columns holds no chunk of each."""
    problem = mp.matmul_problem(ffn(256, 240, 128, h=3), pm=PM)
    tiles = {"cta_tile": (128, 72, 64), "warp_tile": (64, 72, 64), "instruction_tile": (64, 72, 16)}
    device = mp.get_device("h200")
    assert limits.violations(_params(**tiles), problem, device) == []
    found = limits.violations(_params(**tiles, use_smem_epilogue=True), problem, device)
    assert [v.field for v in found] == ["use_smem_epilogue"], found
    assert "warp_tile.n / 3 = 24; none fits" in found[0].message


def test_ping_pong_consumers_each_own_a_whole_horizontal_tile() -> None:
    problem = mp.matmul_problem(ffn(2048, 14336, 5120), pm=PM)
    p = _params(cta_tile=(64, 256, 64), tiling_strategy=TilingStrategy.persistent_pingpong)
    assert limits.violations(p, problem, mp.get_device("h200")) == []


def test_n_major_b_needs_whole_swizzle_rows_per_product() -> None:
    problem = mp.matmul_problem(ffn(256, 512, 128, b_k_inner=False), pm=PM)
    p = _params(cta_tile=(128, 64, 64), warp_tile=(64, 64, 64), instruction_tile=(64, 64, 16))
    (found,) = limits.violations(p, problem, mp.get_device("h200"))
    assert found.field == "cta_tile" and "64-column swizzle rows (N-major B)" in found.message
    assert "a multiple of 128" in found.message


@pytest.mark.parametrize(
    ("h", "b_k_inner", "cta"),
    [(2, True, (128, 256, 64)), (2, False, (128, 256, 64)), (3, True, (128, 192, 64)),
     (3, False, (128, 192, 64)), (4, False, (128, 256, 64))],
)  # fmt: skip
def test_default_heuristic_is_legal_for_horizontal(h: int, b_k_inner: bool, cta: tuple) -> None:
    problem = mp.matmul_problem(ffn(256, 1024, 512, b_k_inner=b_k_inner, h=h), pm=PM)  # cooperative
    device = mp.get_device("h200")
    params = hopper_params(problem, device)
    assert params.cta_tile.as_tuple() == cta and params.warp_tile.n == cta[1]
    assert tuple(params.cluster_dims) == (1, 1) and params.splitk_factor == 1
    assert params.use_smem_epilogue  # each has an output tile whose chunks fit a staged row
    assert limits.violations(params, problem, device) == []


@pytest.mark.parametrize("b_k_inner", [True, False])
def test_default_heuristic_takes_ping_pong_with_two_tiles_a_cta(b_k_inner: bool) -> None:
    """The llama FFN: 32 x 112 output tiles of 64 x 128 on 132 SMs; ping-pong consumers each
    own a 64 x 256 MMA tile, staging in a region of their own."""
    problem = mp.matmul_problem(ffn(2048, 14336, 5120, b_k_inner=b_k_inner), pm=PM)
    device = mp.get_device("h200")
    params = hopper_params(problem, device)
    assert params.tiling_strategy is TilingStrategy.persistent_pingpong
    assert params.cta_tile.as_tuple() == params.warp_tile.as_tuple() == (64, 256, 64)
    assert params.use_smem_epilogue and params.stages >= 4
    assert limits.violations(params, problem, device) == []
    # 2 x 8 tiles of 64 rows is fewer than two a CTA: two cooperative consumers along M
    small = hopper_params(mp.matmul_problem(ffn(128, 1024, 512), pm=PM), device)
    assert small.tiling_strategy is TilingStrategy.persistent
    assert small.cta_tile.as_tuple() == (128, 256, 64)


def test_default_heuristic_takes_one_consumer_for_small_m() -> None:
    """Rows of one 64-row tile: one consumer, 64 columns a product (twice the CTAs streaming
    the weights, the deepest ring that the K tiles fill: runs 222-223); more rows: 128."""
    h200 = mp.get_device("h200")
    for m, dtype, cta, ring in ((16, mp.float16, (64, 128, 64), 8),
                                (16, mp.float8_e4m3fn, (64, 128, 128), 4),
                                (96, mp.float16, (128, 256, 64), 4)):  # fmt: skip
        problem = mp.matmul_problem(ffn(m, 1024, 512, dtype=dtype), pm=PM)
        params = hopper_params(problem, h200)
        assert (params.cta_tile.as_tuple(), params.stages) == (cta, ring), (m, dtype)
        assert limits.violations(params, problem, h200) == []


# -- generated source -------------------------------------------------------------------------


def test_generated_source_loads_every_b_and_combines_partner_registers() -> None:
    pytest.importorskip("numba")
    compiled = mp.compile(ffn(256, 512, 128, b_k_inner=False), "h200", pm=PM)
    source = compiled.source
    assert "tmap_b1 = generic_addr(maps, 32)" in source
    # an N-major B: 64-column chunks 0, 1 from map 0, chunks 2, 3 from map 1, at n0 and n0 + 64
    loads = re.findall(r"tma_load_3d\(uint32\(dst \+ (\d+)\), (tmap_b1?), int32\(n0 \+ (\d+)\)",
                       source)  # fmt: skip
    assert loads == [("0", "tmap_b", "0"), ("8192", "tmap_b", "64"),
                     ("16384", "tmap_b1", "0"), ("24576", "tmap_b1", "64")]  # fmt: skip
    assert "n0 = int64(t_minor) * 128" in source or "n0 = int64(t_major) * 128" in source
    # staged: product 1 (64 registers further in the fragment) 16 columns right of product 0
    assert "use_smem_epilogue=True" in repr(compiled.spec.params)
    assert "sf[wrow + 0] = acc0[0]" in source and "sf[wrow + 16] = acc0[64]" in source
    assert "v1 = vp1_0" in source
    registers = mp.compile(
        ffn(256, 512, 128, b_k_inner=False), "h200", pm=PM, overrides={"use_smem_epilogue": False}
    ).source
    assert "v1 = spill[sp0 + 64]" in registers and "v1 = spill[sp0 + 65]" in registers


class Cai:
    """A device tensor as far as ``adapt`` reads one: its CUDA array interface."""

    def __init__(self, shape: tuple, address: int, strides: tuple | None = None,
                 typestr: str = "<f2") -> None:  # fmt: skip
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (address, False), "version": 3}  # fmt: skip


def test_bound_launch_takes_every_b_address_after_b(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path: a bound launch is called with A, B, B1, the outputs; the maps argument
    holds A's, B's and B1's maps in that order (encoded per address triple) and the output's
    address lands in its pointer slot."""
    pytest.importorskip("numba")
    from mmaplug.cuda.kernel_views import adapt
    from mmaplug.planning.artifact import LaunchArgs
    from mmaplug.plugins.hopper import artifact, maps

    compiled = mp.compile(ffn(256, 512, 128), "h200", pm=PM)
    an = compiled.analysis
    a, b, b1 = (adapt(Cai(t.shape, 0x100 * (i + 1)), t) for i, t in enumerate([an.a, *an.bs]))
    out = adapt(Cai(an.outputs[0].shape, 0x400), an.outputs[0])
    args = LaunchArgs(a=a, b=b, more_b=(b1,), epilogue_inputs=(), scalars=(), outputs=(out,),
                      problem=an.problem)  # fmt: skip
    encoded: list[int] = []
    launched: list[tuple[list[int], list[int]]] = []

    class Launch:
        def __init__(self, kernel: int, grid: tuple, block: tuple, smem: int, params, cl=1):  # noqa: ANN001
            self.params = params
            (slot,) = params.by_value_slots  # the maps, by value: the words the launch reads

            def run(stream: int) -> None:  # the words the launch reads, when it is queued
                words = (ctypes.c_uint64 * 48).from_address(params.ptrs[slot])
                pointers = [params.slots[s] for s in params.pointer_slots]
                launched.append(([int(w) for w in words[::16]], pointers))

            self.run = run

    def encode(spec: object, address: int) -> np.ndarray:
        encoded.append(address)
        return np.full(16, address, np.uint64)

    monkeypatch.setattr(maps, "encode", encode)
    monkeypatch.setattr(artifact, "loaded", lambda *a: 0)
    monkeypatch.setattr(artifact, "DriverLaunch", Launch)
    bound = compiled._artifact.bind(args)
    bound([0x1000, 0x2000, 0x3000, 0x4000], [], 0)
    bound([0x1000, 0x2000, 0x3000, 0x5000], [], 0)  # the same maps, another output
    bound([0x1000, 0x2000, 0x3100, 0x5000], [], 0)  # another B1: maps encoded anew
    assert encoded == [0x1000, 0x2000, 0x3000, 0x1000, 0x2000, 0x3100]
    first, second = [0x1000, 0x2000, 0x3000], [0x1000, 0x2000, 0x3100]
    assert launched == [(first, [0x4000]), (first, [0x5000]), (second, [0x5000])]


def _decode_ffn_launch(b1: Cai) -> tuple[Any, Any]:
    """The decode kernel of y = silu(x @ W1.T) * (x @ W3.T) as float16 and amax(y), x [3, 64],
    W [40, 64], and its LaunchArgs: A at 0x100, B at 0x200, *b1* as W3, y at 0x400, the amax
    at 0x500."""
    from mmaplug.cuda.kernel_views import adapt
    from mmaplug.planning.artifact import LaunchArgs

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([3, 64], dtype=H)
        w1, w3 = (fd.define_tensor([40, 64], dtype=H) for _ in "13")
        y = fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3))
        fd.add_output(fd.ops.cast(y, H))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    compiled = mp.compile(fd.fusion, "h200", pm=PM)
    an = compiled.analysis
    out, amax = an.outputs
    args = LaunchArgs(
        a=adapt(Cai((3, 64), 0x100), an.a), b=adapt(Cai((40, 64), 0x200), an.b),
        more_b=(adapt(b1, an.bs[1]),), epilogue_inputs=(), scalars=(),
        outputs=(adapt(Cai(tuple(out.shape), 0x400), out),
                 adapt(Cai(tuple(amax.shape), 0x500, typestr="<f4"), amax)),
        problem=an.problem,
    )  # fmt: skip
    return compiled, args


def test_decode_bound_launch_takes_every_weight_and_zeroes_the_amax(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decode kernel's fast path of a horizontal fusion with an amax, without a GPU: the
    addresses land in the pointer slots in launch order (A, B, B1, the outputs), the second
    weight's own row stride follows the shape, and the amax output is zeroed on the stream
    before the launch."""
    pytest.importorskip("numba")
    from mmaplug.cuda import launching
    from mmaplug.plugins.decode import artifact

    compiled, args = _decode_ffn_launch(Cai((40, 64), 0x300, strides=(256, 2)))  # 128 apart
    assert compiled.kernel_name == "decode_f16_m8_w1_u3_h2"  # K = 64: one chunk, one warp
    blocks: list[Any] = []
    events: list[tuple] = []

    class Launch:
        def __init__(self, kernel: int, grid: tuple, block: tuple, smem: int, params: Any) -> None:
            blocks.append(params)
            assert (grid, block) == ((3, 1, 1), (64, 1, 1))  # 40 rows; a warp a product
            self.run = lambda stream: events.append(
                ("launch", [params.slots[s] for s in params.pointer_slots])
            )

    monkeypatch.setattr(artifact, "loaded", lambda *a: 0)
    monkeypatch.setattr(artifact, "DriverLaunch", Launch)
    monkeypatch.setattr(launching.driver, "memset_d32",
                        lambda address, value, count, stream: events.append(
                            ("zero", address, value, count)))  # fmt: skip
    bound = compiled._artifact.bind(args)
    bound([0x1000, 0x2000, 0x3000, 0x4000, 0x5000], [], 0)
    assert events == [("zero", 0x5000, 0, 1), ("launch", [0x1000, 0x2000, 0x3000, 0x4000, 0x5000])]
    (params,) = blocks
    shape = list(params.slots)[7 * 5 :][:9]  # after 5 arrays of 7 slots: M, N, K, strides
    assert shape == [3, 40, 64, 64, 64, 0, 0, 128, 0]  # b1's rows 128 apart


def test_decode_declines_a_misaligned_second_weight_naming_it() -> None:
    """Each weight's rows must be 16-byte aligned for the decode kernel's loads: B operand 1
    is named."""
    pytest.importorskip("numba")
    from mmaplug.errors import DeclinedLaunchError

    compiled, args = _decode_ffn_launch(Cai((40, 64), 0x302))
    with pytest.raises(DeclinedLaunchError, match="B operand 1 .horizontal. must start 16-byte"):
        compiled._artifact.bind(args)
