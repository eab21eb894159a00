"""The nvMatmulHeuristics example plugin (examples/nvmmh_heuristic), without the library.

The conversion of a library config to ampere params is pure, so it is tested here with fake
configs shaped like the library's ``GemmConfig``. The module is loaded from the example's source
tree when the example is not installed; the proprietary library is never needed.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import CtaOrder, MatmulParams, TileShape
from mmaplug.planning.plan import plan_problem
from mmaplug.plugins.ampere import limits
from mmaplug.testing import registered

_SOURCE = Path(__file__).parents[1] / "examples/nvmmh_heuristic/src/mmaplug_nvmmh/__init__.py"


def _load() -> ModuleType:
    """``mmaplug_nvmmh`` as installed, else loaded from the example's source tree."""
    try:
        import mmaplug_nvmmh
    except ImportError:
        spec = importlib.util.spec_from_file_location("mmaplug_nvmmh", _SOURCE)
        assert spec is not None and spec.loader is not None
        mmaplug_nvmmh = importlib.util.module_from_spec(spec)
        sys.modules["mmaplug_nvmmh"] = mmaplug_nvmmh
        spec.loader.exec_module(mmaplug_nvmmh)
    return mmaplug_nvmmh


nvmmh = _load()

H200 = get_device("h200")
A100 = get_device("a100")


def problem(
    m: int = 4096,
    n: int = 4096,
    k: int = 4096,
    *,
    batch: int = 1,
    a_k_inner: bool = True,
    b_k_inner: bool = True,
    dtype: DType = DType.float16,
    vec: int = 8,
) -> MatmulProblem:
    return MatmulProblem(
        m=m,
        n=n,
        k=k,
        batch=batch,
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        operand_dtype=dtype,
        output_dtype=dtype,
        vector_widths=VectorWidths(a=vec, b=vec, epilogue=8),
    )


def config(
    cta=(128, 128, 32),
    warp=(64, 64, 32),
    instr=(16, 8, 16),
    *,
    stages=4,
    split_k=1,
    swizzle=1,
    cta_order=0,
    cluster=(1, 1),
) -> SimpleNamespace:
    """A fake config with the attributes of nvMatmulHeuristics' ``GemmConfig``."""
    return SimpleNamespace(
        layout="NT_ROW",
        precision="HSH",
        stages=stages,
        split_k=split_k,
        cta_tile_m=cta[0],
        cta_tile_n=cta[1],
        cta_tile_k=cta[2],
        warp_tile_m=warp[0],
        warp_tile_n=warp[1],
        warp_tile_k=warp[2],
        instr_tile_m=instr[0],
        instr_tile_n=instr[1],
        instr_tile_k=instr[2],
        cluster_m=cluster[0],
        cluster_n=cluster[1],
        swizzle_factor=swizzle,
        cta_order=cta_order,
    )


def convert(cfg, prob=None, device=H200) -> MatmulParams | None:
    prob = prob or problem()
    params = nvmmh.to_params(cfg, prob, device)
    if params is not None:
        assert limits.violations(params, prob, device) == []
    return params


# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_k_inner", "b_k_inner", "ours", "theirs"),
    [
        (True, True, "TN", "NT_ROW_MAJOR"),
        (True, False, "TT", "NN_ROW_MAJOR"),
        (False, True, "NN", "TT_ROW_MAJOR"),
        (False, False, "NT", "TN_ROW_MAJOR"),
    ],
)
def test_layout_letters_are_flipped(a_k_inner, b_k_inner, ours, theirs):
    """nvMatmulHeuristics' BLAS letters mean the opposite of our nvFuser letters, per operand."""
    prob = problem(a_k_inner=a_k_inner, b_k_inner=b_k_inner)
    assert prob.layout.value == ours
    assert nvmmh.nvmmh_layout(prob) == theirs


@pytest.mark.parametrize(
    ("device_name", "gpu"),
    [
        ("h200", "H200_SXM"),
        ("H100", "H100_SXM"),
        ("a100", "A100_SXM_80GB"),
        ("NVIDIA H200", "H200_SXM"),
        ("NVIDIA H100 PCIe", "H100_PCIE"),
        ("NVIDIA H100 NVL", "H100_NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100_SXM_80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100_PCIE_80GB"),
        ("NVIDIA GeForce RTX 2080", None),
    ],
)
def test_gpu_names(device_name, gpu):
    device = Device(
        name=device_name, cc=(9, 0), sm_count=132, smem_per_block_optin=232_448, smem_per_sm=1
    )
    assert nvmmh.nvmmh_gpu(device) == gpu


# --- conversion ----------------------------------------------------------------------------------


def test_plain_config_is_kept():
    """A config the ampere scheduler runs as is keeps every value the library chose."""
    params = convert(config(stages=5, swizzle=8, split_k=1))
    assert params == MatmulParams(
        cta_tile=(128, 128, 32),
        warp_tile=(64, 64, 32),
        instruction_tile=(16, 8, 16),
        stages=5,
        grid_swizzle_factor=8,
        use_smem_epilogue=True,  # what the ampere kernel builds, so the plan adjusts nothing
    )


def test_hopper_shaped_config_is_adapted():
    """wgmma instruction -> m16n8k16, cluster dropped, CTA order 1 -> column_major."""
    params = convert(
        config((128, 256, 64), (64, 64, 64), (64, 8, 16), stages=3, cta_order=1, cluster=(2, 1))
    )
    assert params is not None
    assert params.instruction_tile == TileShape(16, 8, 16)
    assert params.cluster_dims == (1, 1)
    assert params.cta_order is CtaOrder.column_major
    assert (params.cta_tile.as_tuple(), params.warp_tile.as_tuple()) == (
        (128, 256, 64),
        (64, 64, 64),
    )
    assert params.stages == 3


def test_sliced_k_warp_walks_whole_cta_k():
    """Our warps do not split K: warp k becomes the CTA's k."""
    params = convert(config((128, 128, 64), (64, 64, 32)))
    assert params is not None and params.warp_tile == TileShape(64, 64, 64)


def test_tf32_or_fp8_instruction_becomes_m16n8k16():
    params = convert(config(instr=(16, 8, 8)))
    assert params is not None and params.instruction_tile == limits.INSTRUCTION_TILE


def test_stages_capped_at_the_pipeline_maximum():
    params = convert(config(stages=limits.MAX_STAGES + 4))
    assert params is not None and params.stages == limits.MAX_STAGES


def test_stages_capped_at_the_k_loop():
    """k=64 with cta_k=32 is two K iterations: more stages than that are never filled."""
    params = convert(config(stages=6), problem(k=64))
    assert params is not None and params.stages == 2


def test_stages_capped_at_the_shared_memory():
    """256x128x64 fp16 is 48 KiB a stage: the H200's 227 KiB opt-in holds 4."""
    params = convert(config((256, 128, 64), (64, 128, 64), stages=8))
    assert params is not None and params.stages == 4


def test_no_cp_async_means_two_stages_and_sync_loads():
    """Operands that allow only 2-byte copies cannot use cp.async: at most 2 stages."""
    params = convert(config(stages=6), problem(vec=1))
    assert params is not None
    assert (params.async_gmem_load_operands, params.stages) == (False, 2)


def test_split_k_kept_and_capped():
    """Split-K is kept, but never above the K tiles (then one stage per split suffices)."""
    kept = convert(config(split_k=12, stages=8), problem(128, 256, 8192))
    assert kept is not None and (kept.splitk_factor, kept.stages) == (12, 8)
    capped = convert(config(split_k=1000), problem(k=256))
    assert capped is not None and (capped.splitk_factor, capped.stages) == (8, 1)


@pytest.mark.parametrize(
    "cfg",
    [
        config(warp=(24, 64, 32)),  # warp m not a multiple of 16
        config(warp=(64, 12, 32)),  # warp n not a multiple of 8
        config((128, 128, 24), (64, 64, 24)),  # k not a multiple of 16
        config((128, 96, 32), (64, 64, 32)),  # CTA not a multiple of the warp tile
        config((256, 256, 32), (16, 8, 32)),  # 512 warps: too many threads
        config(warp=(0, 64, 32)),  # an unset (zero) field
        config(stages=None, warp=(None, 64, 32)),  # GemmConfig's None defaults
        config(cta_order=7),  # an order we do not know
        config((1024, 1024, 128), (256, 256, 128)),  # not one stage fits in shared memory
    ],
    ids=["warp_m", "warp_n", "k16", "cta_warp", "threads", "zero", "none", "order", "smem"],
)
def test_configs_the_ampere_scheduler_cannot_run_are_skipped(cfg):
    assert convert(cfg) is None


def test_first_params_skips_to_the_next_config():
    bad, good = config(warp=(24, 64, 32)), config(stages=3)
    params = nvmmh.first_params([bad, good], problem(), H200)
    assert params is not None and params.stages == 3
    assert nvmmh.first_params([bad, bad], problem(), H200) is None
    assert nvmmh.first_params([], problem(), H200) is None


def test_a100_budget():
    """On the A100 (163 KiB opt-in) 256x128x64 fp16 holds 3 stages of 48 KiB."""
    params = convert(config((256, 128, 64), (64, 64, 64), stages=4), device=A100)
    assert params is not None and params.stages == 3


# --- the hook, with the library replaced -------------------------------------------------------


def test_query_without_the_library_is_empty(monkeypatch):
    monkeypatch.setattr(nvmmh, "_library", lambda: None)
    assert nvmmh.query_configs(problem(), H200) == ()


def test_query_skips_unknown_gpus_and_huge_problems(monkeypatch):
    def forbidden():
        raise AssertionError("the library must not be consulted")

    monkeypatch.setattr(nvmmh, "_library", forbidden)
    other = Device(
        name="rtx 2080", cc=(7, 5), sm_count=46, smem_per_block_optin=65536, smem_per_sm=65536
    )
    assert nvmmh.query_configs(problem(), other) == ()
    assert nvmmh.query_configs(problem(m=2**32), H200) == ()


def test_hook_defers_silently_without_the_library(monkeypatch, mmaplug_pm):
    """Not installed: no answer, no warning; the default heuristic answers."""
    monkeypatch.setattr(nvmmh, "_library", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nvmmh.mmaplug_matmul_params(problem(), H200, "ampere") is None
        with registered(mmaplug_pm, nvmmh):
            spec = plan_problem(problem(), H200, pm=mmaplug_pm)
    assert spec.provenance.base == "default"


def test_hook_answers_only_for_ampere(monkeypatch):
    monkeypatch.setattr(nvmmh, "query_configs", lambda *a, **k: (config(),))
    assert nvmmh.mmaplug_matmul_params(problem(), H200, "hopper") is None
    assert nvmmh.mmaplug_matmul_params(problem(), H200, "ampere") is not None


def test_hook_params_reach_the_plan(monkeypatch, mmaplug_pm):
    """With library answers faked, the first runnable config is the plan's base."""
    answers = (config(warp=(24, 64, 32)), config((256, 128, 64), (64, 64, 64), stages=4))
    monkeypatch.setattr(nvmmh, "query_configs", lambda *a, **k: answers)
    mmaplug_pm.set_blocked("hopper")  # nvmmh answers for ampere; on an H200 hopper outranks it
    with registered(mmaplug_pm, nvmmh):
        spec = plan_problem(problem(), H200, pm=mmaplug_pm)
    assert spec.provenance.base == "nvmmh"
    assert spec.params.cta_tile == TileShape(256, 128, 64)
    assert spec.params.stages == 4
    assert spec.params.use_smem_epilogue and spec.provenance.adjustments == ()
