"""mp.compile plans, schedules and emits PTX for a preset device, with no GPU needed."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp
from mmaplug.cli.demo import example_fusion
from mmaplug.runtime import dump

pytestmark = pytest.mark.ptx


def _compile(m: int, n: int, k: int, device: str, **overrides: object) -> mp.CompiledFusion:
    pm = mp.make_plugin_manager(load_entrypoints=False)
    return mp.compile(example_fusion(m, n, k), device, pm=pm, overrides=overrides)


@pytest.fixture(scope="module")
def hopper_compiled() -> mp.CompiledFusion:
    """h200's plan for 1024x1024x256 with a 128x64 CTA of two consumer warpgroups (~10 s)."""
    tiles = {"cta_tile": (128, 64, 64), "warp_tile": (64, 64, 64), "instruction_tile": (64, 64, 16)}
    return _compile(1024, 1024, 256, "h200", **tiles)


@pytest.fixture(scope="module")
def ampere_compiled() -> mp.CompiledFusion:
    """a100, where ampere is the only scheduler."""
    return _compile(256, 512, 128, "a100")


def test_hopper_ptx_holds_the_wgmma_pipeline(hopper_compiled: mp.CompiledFusion) -> None:
    """The h200 kernel targets sm_90a: TMA loads, mbarrier waits, wgmma, setmaxnreg per role."""
    ptx = hopper_compiled.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in ptx
    assert "cp.async.bulk.tensor.3d" in ptx
    assert "mbarrier.try_wait.parity" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 24" in ptx  # the TMA producer warpgroup
    assert "setmaxnreg.inc.sync.aligned.u32 240" in ptx  # the two consumer warpgroups
    assert "mma.sync" not in ptx and "cp.async.cg" not in ptx


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("epilogue", [False, True], ids=["bare", "bias_gelu"])
def test_hopper_default_kernel_links_whole(
    dtype: str, epilogue: bool, hopper_link_log: Callable[[object], str]
) -> None:
    """The h200 default 128x256 kernel, bare and with bias + GELU, linked as the launch path
    links it (NVVM IR through nvJitLink with -lto): ptxas keeps setmaxnreg (no C7504), keeps
    the wgmmas pipelined (no C7509) and spills nothing. Linked from PTX instead, nvJitLink 13.5
    compiles a separate unit: setmaxnreg ignored, every wgmma serialised, 220 bytes spilled."""
    from mmaplug.cli.bench import linear_fusion

    compiled = mp.compile(linear_fusion(4096, 4096, 4096, getattr(mp, dtype), epilogue), "h200")
    assert compiled.params.cta_tile.as_tuple() == (128, 256, 64)
    text = hopper_link_log(compiled._artifact.config)  # the HopperArtifact's kernel config
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


def test_hopper_kernels_take_their_tensor_maps_by_value(
    hopper_compiled: mp.CompiledFusion,
) -> None:
    """A's and B's maps are 256 bytes of grid-constant parameter: the prefetch and TMA read
    them at their generic address (``cvta.param``), and no CTA fences maps in global memory."""
    ptx = hopper_compiled.ptx
    assert re.search(r"\.param \.align 64 \.b8 \w+_param_4\[256\]", ptx)
    assert "cvta.param.u64" in ptx and "prefetch.tensormap" in ptx
    assert "fence.proxy.tensormap" not in ptx


def test_hopper_default_epilogue_stores_by_tma() -> None:
    """The bare 4096^3 default hands each packed chunk to a TMA tensor store: every writer
    fences its shared stores for the async proxy, one thread waits for the previous store's
    reads, issues and commits, and waits for all of them to read their chunks before the
    kernel ends; no thread stores a 16-byte vector of the output itself."""
    from mmaplug.cli.bench import linear_fusion

    compiled = mp.compile(linear_fusion(4096, 4096, 4096, mp.bfloat16, False), "h200")
    assert compiled._artifact.config.tma_stores
    ptx = compiled.ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert "cp.async.bulk.commit_group" in ptx
    assert "cp.async.bulk.wait_group.read 0" in ptx
    assert "st.global.v4" not in ptx
    # the output's map goes by value after A's and B's: 384 bytes, read by the consumers too
    assert re.search(r"\.param \.align 64 \.b8 \w+_param_4\[384\]", ptx)
    assert "fence.proxy.tensormap" not in ptx


@pytest.mark.parametrize(
    ("layout", "cluster"),
    [
        ("k_inner", (2, 1)),
        ("n_inner", (2, 1)),
        ("k_inner", (1, 2)),
        ("m_inner", (1, 2)),
        ("k_inner", (2, 2)),
        ("m_inner", (2, 2)),
    ],
)
def test_hopper_cluster_kernel_links_whole(
    layout: str, cluster: tuple[int, int], hopper_link_log: Callable[[object], str]
) -> None:
    """The CTA-pair kernels (cluster_dims=(2, 1): B multicast; (1, 2): A multicast; remote
    releases, one cluster barrier, relaxed after the init fence) and the 2x2 ones (both
    multicast, masks by rank) link like the default one: setmaxnreg kept, wgmmas pipelined,
    nothing spilled (a pair's producer spilled 164 bytes in 24 registers, see
    tiles.REGISTER_SPLITS). *layout*: the shared operand's (B's along M, A's along N; A's of a
    2x2 cluster)."""
    x_order = [0, 1] if layout == "m_inner" else [1, 0]  # x [M, K], K-major unless m_inner
    w_order = [1, 0] if layout == "n_inner" else [0, 1]  # W [K, N], K-major unless n_inner
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([4096, 4096], dtype=mp.float16, stride_order=x_order)
        w = fd.define_tensor([4096, 4096], dtype=mp.float16, stride_order=w_order)
        fd.add_output(fd.ops.matmul(x, w))
    compiled = mp.compile(fd.fusion, "h200", overrides={"cluster_dims": cluster})
    config = compiled._artifact.config
    assert (config.cluster_m, config.cluster_n) == cluster
    k_inner = config.b_k_inner if cluster == (2, 1) else config.a_k_inner
    assert k_inner is (layout == "k_inner")
    ptx = compiled.ptx
    assert "multicast::cluster" in ptx and "barrier.cluster.wait" in ptx and "mapa" in ptx
    # the one cluster barrier only publishes the barriers' init (its fence releases it); at
    # exit the producer's tail, not a cluster barrier, waits out the peers' arrivals
    assert re.findall(r"barrier\.cluster\.arrive\.(\w+);", ptx) == ["relaxed"]
    assert ptx.index("fence.mbarrier_init.release.cluster") < ptx.index("arrive.relaxed")
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


@pytest.mark.parametrize(
    "overrides",
    [
        {"tiling_strategy": "persistent_pingpong", "cta_tile": (128, 128, 64), "stages": 5},
        {"cta_tile": (256, 128, 64), "stages": 3},
    ],
    ids=["pingpong_128x128", "cooperative_256x128"],
)
def test_packed_epilogue_128_rows_spills_nothing(
    overrides: dict, hopper_link_log: Callable[[object], str]
) -> None:
    """Consumers of 128-row warp tiles (two 64-row fragment blocks) with bias + GELU: the packed
    epilogue takes one block's chunk per step, so ptxas keeps everything in registers (both
    blocks at once spilled 288 / 192 bytes, the ping-pong kernel 1.30x its bare time, run 43)."""
    from mmaplug.cli.bench import linear_fusion

    tiles = {"warp_tile": (128, 128, 64), "instruction_tile": (64, 128, 16)}
    fusion = linear_fusion(4096, 4096, 4096, mp.float16, True)
    compiled = mp.compile(fusion, "h200", overrides={**overrides, **tiles})
    config = compiled._artifact.config
    assert config.warp_tile[0] == 128 and config.packed_stores
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


@pytest.mark.parametrize(
    ("width", "stages", "bias_gelu", "cluster"),
    [(152, 4, False, (1, 1)), (160, 3, True, (1, 1)), (160, 3, True, (2, 1))],
    ids=["256x152", "256x160_bias_gelu", "256x160_bias_gelu_pairs"],
)
def test_160_accumulators_a_thread_spill_nothing(
    width: int, stages: int, bias_gelu: bool, cluster: tuple[int, int],
    hopper_link_log: Callable[[object], str],
) -> None:  # fmt: skip
    """Two consumers of 128x152 or 128x160 warp tiles (``tiles.MAX_ACCUMULATORS``: that many
    float32 accumulators a thread), staged epilogue, alone and in pairs: ptxas keeps
    setmaxnreg, pipelines the wgmmas and spills nothing (the evidence for the limit)."""
    from mmaplug.cli.bench import linear_fusion

    tiles = {"cta_tile": (256, width, 64), "warp_tile": (128, width, 64),
             "instruction_tile": (64, width, 16), "stages": stages}  # fmt: skip
    fusion = linear_fusion(3000, 5000, 2048, mp.bfloat16, bias_gelu)
    compiled = mp.compile(fusion, "h200", overrides={**tiles, "cluster_dims": cluster})
    config = compiled._artifact.config
    assert config.accumulators == width and (config.cluster_m, config.cluster_n) == cluster
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


@pytest.mark.skipif(dump.sass_tool() is None, reason="no cuobjdump or nvdisasm on PATH")
def test_swapped_staged_epilogue_stores_rows_not_elements() -> None:
    """The swapped 96-row default (64x96 tiles, the output's transpose) stages its epilogue:
    the chunks go through shared memory transposed and leave as 8-byte rows. From registers
    each of a thread's 48 elements is stored by itself (2-byte STG, one address each: the code
    ncu found to cost our 96x6144x4096 kernel its gap to cuBLAS, run 331), in over 1.6 times
    the code. Nothing is spilled."""
    from mmaplug.cli.bench import linear_fusion

    fusion = linear_fusion(96, 6144, 4096, mp.bfloat16, False)
    staged = mp.compile(fusion, "h200")
    plain = mp.compile(fusion, "h200", overrides={"use_smem_epilogue": False})
    assert staged.params.swap_ab and staged.params.use_smem_epilogue
    assert plain.params.swap_ab and staged.params.cta_tile == plain.params.cta_tile

    def count(sass: str, pattern: str) -> int:
        return len(re.findall(pattern, sass))

    ours, theirs = staged.sass, plain.sass
    instructions = r"(?m)^\s+/\*[0-9a-f]{4}\*/"
    assert count(theirs, r"STG\.E\.U16") == 48
    assert count(ours, r"STG\.E\.64") >= 1 and count(ours, r"\bSTS\b") == 48
    assert count(ours, instructions) < 0.6 * count(theirs, instructions)
    assert "STL" not in ours and "LDL" not in ours


@pytest.mark.parametrize("scale", ["row", "tensor"])
def test_fp8_tile_inputs_held_through_the_main_loop_spill_nothing(
    scale: str, hopper_link_log: Callable[[object], str]
) -> None:
    """The FP8 default (128x256 tiles, 64x256 consumers, 128 accumulators a thread) with bias +
    GELU: its per-row (or per-tensor) scales and its column inputs are loaded before the main
    loop and held through it, and ptxas still keeps everything in registers."""
    from mmaplug.tune.corpus import TuneProblem

    problem = TuneProblem(
        m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale=scale, epilogue="bias_gelu"
    )
    config = mp.compile(problem.fusion(), "h200")._artifact.config
    assert config.warp_tile[:2] == (64, 256) and config.packed_stores
    text = hopper_link_log(config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


def test_ampere_ptx_holds_the_mma_sync_pipeline(ampere_compiled: mp.CompiledFusion) -> None:
    """The a100 kernel for linear+bias+GELU uses cp.async, ldmatrix and mma.sync on sm_80."""
    ptx = ampere_compiled.ptx
    assert ".target sm_80" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx
    assert "wgmma" not in ptx


@pytest.mark.parametrize("compiled", ["hopper_compiled", "ampere_compiled"])
def test_accumulators_stay_in_registers(compiled: str, request: pytest.FixtureRequest) -> None:
    """No local-memory traffic: the unrolled fragments and accumulators never spill to the stack."""
    ptx = request.getfixturevalue(compiled).ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


def test_compiled_fusion_reports_plan(
    hopper_compiled: mp.CompiledFusion, ampere_compiled: mp.CompiledFusion
) -> None:
    """params, provenance and kernel_name describe the plan the kernel was built from."""
    assert hopper_compiled.spec.scheduler == "hopper"
    assert hopper_compiled.params.cta_tile.as_tuple() == (128, 64, 64)
    assert hopper_compiled.params.instruction_tile.as_tuple() == (64, 64, 16)
    assert hopper_compiled.provenance.base == "default"
    assert hopper_compiled.kernel_name == "hopper_float16_kk_128x64x64_w64x64_s4_sk1_se_ps"
    assert ampere_compiled.spec.scheduler == "ampere"
    assert ampere_compiled.params.instruction_tile.as_tuple() == (16, 8, 16)
    assert ampere_compiled.provenance.base == "default"
    assert ampere_compiled.kernel_name.startswith("ampere_float16_kk_")


@pytest.mark.parametrize(
    "overrides",
    [
        {"swap_ab": False, "cta_tile": (64, 64, 256), "warp_tile": (64, 64, 256),
         "splitk_factor": 2},
        {"swap_ab": False, "cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64),
         "splitk_factor": 8},
        {"swap_ab": True, "cta_tile": (128, 32, 128), "warp_tile": (64, 32, 128),
         "splitk_factor": 4},
    ],
    ids=["pairs_of_64x64", "eight_of_128x128_two_consumers", "swapped_four_two_consumers"],
)  # fmt: skip
def test_cluster_reduction_is_one_kernel_without_spills(
    overrides: dict, hopper_link_log: Callable[[object], str]
) -> None:
    """Split-K summed in the cluster (bias + GELU, 32 x 4096 x 4096): one entry, partials
    read through distributed shared memory behind cluster-scope barriers, nothing spilled
    (two consumers' producer spilled 8-32 bytes at the pairs' 40 registers: it runs at 56)."""
    from mmaplug.cli.bench import linear_fusion

    n = overrides["warp_tile"][1]
    inst = {"instruction_tile": (64, n, 16), "use_smem_epilogue": False, "stages": 3}
    fusion = linear_fusion(32, 4096, 4096, mp.bfloat16, True)
    compiled = mp.compile(
        fusion, "h200", overrides={**overrides, **inst, "splitk_in_cluster": True}
    )
    assert compiled.kernel_name.endswith("_kc")
    ptx = compiled.ptx
    assert ptx.count(".entry") == 1, "a second kernel"
    assert re.search(r"ld\.shared::cluster\.f32", ptx)
    assert re.search(r"mbarrier\.try_wait\.parity\.acquire\.cluster", ptx)
    assert re.search(r"fence\.acq_rel\.cluster", ptx)
    text = hopper_link_log(compiled._artifact.config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text
