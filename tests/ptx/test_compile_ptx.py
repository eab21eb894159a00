"""mp.compile plans, schedules and emits PTX for a preset device, with no GPU needed."""

from __future__ import annotations

import pytest

import mmaplug as mp
from mmaplug.demo import example_fusion

pytestmark = pytest.mark.ptx


@pytest.fixture(scope="module")
def compiled() -> mp.CompiledFusion:
    pm = mp.make_plugin_manager(load_entrypoints=False)
    return mp.compile(example_fusion(256, 512, 128), "h200", pm=pm)


def test_ptx_holds_the_tensor_core_pipeline(compiled: mp.CompiledFusion) -> None:
    """The kernel for linear+bias+GELU uses cp.async, ldmatrix and mma.sync, and targets sm_90."""
    ptx = compiled.ptx
    assert ".target sm_90" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx


def test_accumulators_stay_in_registers(compiled: mp.CompiledFusion) -> None:
    """No local-memory traffic: the unrolled fragments and accumulators never spill to the stack."""
    ptx = compiled.ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


def test_compiled_fusion_reports_plan(compiled: mp.CompiledFusion) -> None:
    """params, provenance and kernel_name describe the plan the kernel was built from."""
    assert compiled.params.instruction_tile.as_tuple() == (16, 8, 16)
    assert compiled.provenance.base == "default"
    assert compiled.kernel_name.startswith("ampere_float16_kk_")
    assert compiled.spec.scheduler == "ampere"
