"""Simulator tier of the conformance suite: a representative set of nvFuser's scenarios (and the
role orders of issue 10) through mp.compile → execute in Numba's CUDA simulator, at small sizes,
on the ampere and hopper schedulers, every output against mp.evaluate (outputs NaN-poisoned).

Cases run as jobs of this file on the simulator's worker processes (the ``simulate`` fixture,
NUMBA_ENABLE_CUDASIM=1; one JSON line each).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.sim

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}
AMPERE_SMALL = {"cta_tile": (32, 32, 32), "warp_tile": (32, 32, 32), "stages": 2}
HOPPER_SMALL = {"cta_tile": (64, 64, 64), "warp_tile": (64, 64, 64),
                "instruction_tile": (64, 64, 16), "stages": 2,
                "tiling_strategy": "persistent"}  # fmt: skip
# (scenario, device, sizes): the catalogue's scenarios at simulator sizes
CASES: dict[str, tuple[str, str, dict[str, int]]] = {
    "ampere_strided_batch_tn": ("sch_strided_batch_plain_tn", "a100", {}),
    "ampere_strided_batch_bias_nt": ("sch_strided_batch_bias_nt", "a100", {}),
    "ampere_strided_batch_alpha_beta_tt": ("sch_strided_batch_alpha_beta_tt", "a100", {}),
    "hopper_strided_batch_tn": ("sch_strided_batch_plain_tn", "h200", {"M": 64, "N": 64, "K": 64}),
    "ampere_mul_sum_swap_a_and_b": ("tr_swap_a_and_b", "a100", {}),
    "ampere_epilogue_bias_gelu_aux_tst": ("sch_epilogue_bias_gelu_aux_tst", "a100", {}),
    "ampere_mlp_silu_by_exp_reciprocal": ("mm_mlp_silu_by_exp_reciprocal", "a100", {}),
    "hopper_mlp_silu_by_exp_reciprocal": (
        "mm_mlp_silu_by_exp_reciprocal", "h200", {"M": 64, "N": 64, "K": 64}),
    "ampere_multiple_consecutive_dims": (
        "mm_multiple_consecutive_dims", "a100", {"M": 10, "M2": 4, "N": 6, "N2": 4}),
    "ampere_output_m_batch_n": ("roles_output_m_batch_n", "a100", {}),
    "hopper_output_m_batch_n_bias": (
        "roles_output_m_batch_n_bias", "h200", {"M": 64, "N": 64, "K": 64}),
    "hopper_strided_batch_bias_nn": (
        "sch_strided_batch_bias_nn", "h200", {"M": 64, "N": 64, "K": 64}),
    "ampere_mma_k_middle_permuted_nn": ("sch_hopper_fused_multiply_sum_bias_neg_nn", "a100", {}),
    "hopper_mma_k_middle_permuted_nn": (
        "sch_hopper_fused_multiply_sum_bias_neg_nn", "h200", {"M": 64, "N": 64, "K": 64}),
    "ampere_epilogue_input_transposed": ("roles_epilogue_input_transposed", "a100", {}),
    "hopper_epilogue_input_transposed": (
        "roles_epilogue_input_transposed", "h200", {"M": 64, "N": 64, "K": 64}),
    "ampere_operand_batch_inside_by_stride_order": (
        "roles_operand_batch_inside_by_stride_order", "a100", {}),
    # operand prologues: the ampere kernel computes sin(A), on the h200 too (hopper declines)
    "ampere_operand_prologue": ("sch_segment_matmul_op_prologue", "a100", {}),
    "ampere_linear_prologue_on_h200": ("sch_segment_linear_op_prologue", "h200", {"K": 45}),
}  # fmt: skip
# documented differences: mp.compile runs them as segments (kernels + framework ops)
SEGMENTED: dict[str, tuple[str, str, dict[str, int]]] = {
    "segmented_ampere_output_stride_order": ("py_matmul_stride_0123", "a100", {}),
    "segmented_ampere_output_n_m": ("roles_output_n_m", "a100", {}),
    "segmented_framework_float32_matmul": ("sch_segment_matmul_op_unsupported_dtype", "a100", {}),
    "segmented_ampere_llama2_ffn": ("sch_llama2_ffn", "a100", {}),
    "segmented_hopper_output_n_m": ("roles_output_n_m", "h200", {"M": 64, "N": 64, "K": 64}),
}  # fmt: skip


def run_case(name: str) -> dict[str, Any]:
    """Compile case *name* and execute it once (in this simulating process)."""
    import attrs
    import numpy as np

    import mmaplug as mp

    sys.path.insert(0, str(Path(__file__).parent))
    from test_conformance import SCENARIOS, random_inputs

    from mmaplug.runtime.segmented_fusion import SegmentedFusion

    scenario, device, sizes = {**CASES, **SEGMENTED}[name]
    sc = SCENARIOS[scenario]
    dims = {**sc.dims, "M": 40, "N": 24, "K": 48, "B": 2, **sizes}
    with mp.FusionDefinition() as fd:
        sc.build(fd, mp, dims)
    target = mp.get_device(device)
    if device == "h200":  # 2 SMs with room for one CTA each: persistent CTAs walk units
        target = attrs.evolve(target, sm_count=2, smem_per_sm=48 * 1024)
    small = HOPPER_SMALL if device == "h200" and not name.startswith("ampere") else AMPERE_SMALL
    # decode blocked: the tiles of `small` are the tensor-core kernels' (it would take the
    # batches of at most 16 rows on an a100)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["decode"])
    compiled = mp.compile(fd, target, pm=pm, overrides=small)
    assert isinstance(compiled, SegmentedFusion) == (name in SEGMENTED), type(compiled)
    inputs = random_inputs(fd.fusion, seed=5)
    outputs = []
    for tv, got, ref in zip(
        fd.fusion.outputs, compiled.execute(inputs), mp.evaluate(fd, inputs), strict=True
    ):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        outputs.append({
            "dtype": tv.dtype.label, "shape": list(got64.shape), "want": list(ref64.shape),
            "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
            "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
        })  # fmt: skip
    if name in SEGMENTED:
        kinds = [seg.kind for seg in compiled.segments]
        schedulers = [k.spec.scheduler for k in compiled.kernels.values()]
        return {"segments": kinds, "schedulers": schedulers, "outputs": outputs}
    return {"scheduler": compiled.spec.scheduler, "outputs": outputs}


@pytest.fixture(scope="module")
def sim_results(simulate: Any) -> dict[str, dict[str, Any]]:
    runs = simulate({name: [__file__, name] for name in {**CASES, **SEGMENTED}})
    return {name: run.outcome for name, run in runs.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_runs_on_its_scheduler_like_evaluate(sim_results: dict, name: str) -> None:
    """The scenario compiled for its scheduler, wrote every element, within tolerance."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["scheduler"] == name.split("_")[0], res
    for out in res["outputs"]:
        assert out["shape"] == out["want"], res
        assert out["unwritten"] == 0, res
        assert out["error"] < TOLERANCE[out["dtype"]], res


SEGMENTS = {
    "segmented_ampere_output_stride_order": (["matmul", "pointwise"], ["ampere"]),
    "segmented_ampere_output_n_m": (["matmul", "pointwise"], ["ampere"]),
    "segmented_framework_float32_matmul": (["framework"], []),
    "segmented_ampere_llama2_ffn": (["matmul", "matmul"], ["ampere", "ampere"]),
    "segmented_hopper_output_n_m": (["matmul", "pointwise"], ["hopper"]),
}


@pytest.mark.parametrize("name", sorted(SEGMENTED))
def test_segmented_fusion_runs_like_evaluate(sim_results: dict, name: str) -> None:
    """A fusion no kernel takes whole runs through mp.compile as segments: kernels where they
    can, framework ops (numpy arrays in the simulator) elsewhere; every output written, within
    tolerance of mp.evaluate."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert (res["segments"], res["schedulers"]) == SEGMENTS[name], res
    for out in res["outputs"]:
        assert out["shape"] == out["want"], res
        assert out["unwritten"] == 0, res
        assert out["error"] < TOLERANCE[out["dtype"]], res


if __name__ == "__main__":
    print(json.dumps(run_case(sys.argv[1])))
