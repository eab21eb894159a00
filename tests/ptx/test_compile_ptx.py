"""mp.compile plans, schedules and emits PTX for a preset device, with no GPU needed."""

from __future__ import annotations

import pytest

import mmaplug as mp
from mmaplug.demo import example_fusion

pytestmark = pytest.mark.ptx


def _compile(m: int, n: int, k: int, device: str) -> mp.CompiledFusion:
    pm = mp.make_plugin_manager(load_entrypoints=False)
    return mp.compile(example_fusion(m, n, k), device, pm=pm)


@pytest.fixture(scope="module")
def hopper_compiled() -> mp.CompiledFusion:
    """h200's default plan for 1024x1024x256: a 128x64 CTA of two consumer warpgroups (~10 s)."""
    return _compile(1024, 1024, 256, "h200")


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
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx  # the TMA producer warpgroup
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx  # the two consumer warpgroups
    assert "mma.sync" not in ptx and "cp.async.cg" not in ptx


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
