"""Conformance with nvFuser's matmul tests: every ported scenario through mp.evaluate (against
the source test's reference, in numpy) and through analysis and planning on a100 and h200.

Scenarios: nvf_scenarios*.py (each names its source file and test; NVIDIA/Fuser commit
81c4b22fd750d377d69e24928c32233162f6b2bd). A scenario with ``differ`` is one where mmaplug
deliberately differs from nvFuser: the tests assert our refusal to take it as one kernel and
that mp.compile runs it as segments instead (docs/decisions.md, "Conformance with nvFuser" and
"Segmentation", say why).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import planning_with
from mmaplug.plugins.decode.scheduler import SCHEDULER as DECODE
from mmaplug.plugins.hopper.scheduler import SCHEDULER as HOPPER
from mmaplug.runtime.framework_segments import backend_for, run_ops
from mmaplug.runtime.segmentation import evaluate_segments, segment
from mmaplug.runtime.segmented_fusion import SegmentedFusion
from mmaplug.tune.measure import rel_error

sys.path.insert(0, str(Path(__file__).parent))
import nvf_scenarios  # noqa: E402
import nvf_scenarios_cpp  # noqa: E402, F401 - registers its scenarios
import nvf_scenarios_sched  # noqa: E402, F401 - registers its scenarios
import roles_scenarios  # noqa: E402, F401 - role orders of issue 10 (not from nvFuser)

SCENARIOS = nvf_scenarios.SCENARIOS
TOLERANCE = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-5}  # sin etc. of rounded results


def build(name: str, dims: dict[str, int] | None = None) -> mp.Fusion:
    sc = SCENARIOS[name]
    with mp.FusionDefinition() as fd:
        sc.build(fd, mp, dims or sc.dims)
    return fd.fusion


def random_inputs(fusion: mp.Fusion, seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(v.shape).astype(v.dtype.numpy)
        if isinstance(v, mp.TensorView)
        else float(rng.uniform(-2, 2))
        for v in fusion.inputs
    ]


def test_the_catalogue_covers_every_source() -> None:
    """Every source file of the port contributes scenarios, each naming where it comes from."""
    sources = {sc.source.split()[0] for sc in SCENARIOS.values()}
    assert sources == {"PY", "OPI", "TR", "SCH", "MM", "ROLES"}
    assert len(SCENARIOS) >= 150


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_evaluate_matches_the_source_reference(name: str) -> None:
    """mp.evaluate computes what the nvFuser test's ATen reference computes."""
    sc = SCENARIOS[name]
    fusion = build(name)
    inputs = random_inputs(fusion)
    got = mp.evaluate(fusion, inputs)
    ref = sc.reference([np.asarray(x, np.float64) for x in inputs], sc.dims)
    assert len(got) == len(ref) == len(fusion.outputs)
    computed = [t for t in fusion.tensors() if t not in fusion.inputs]  # each op rounds
    tolerance = max(TOLERANCE[t.dtype.label] for t in computed)
    for tv, g, r in zip(fusion.outputs, got, ref, strict=True):
        assert g.shape == r.shape, (tv.name, g.shape, r.shape)
        assert rel_error(g, r) < tolerance, tv.name


@pytest.fixture(scope="module")
def hermetic() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


@pytest.fixture(scope="module")
def no_decode() -> mp.PluginManager:
    return mp.make_plugin_manager(block=["decode"], load_entrypoints=False, strict=True)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_planning_takes_it_or_refuses_as_documented(
    name: str, hermetic: Any, no_decode: Any
) -> None:
    """Analysis and planning on a100 and h200 take every scenario nvFuser's matmul scheduler
    takes, with nvFuser's layout and vector widths; a documented difference is our refusal.
    The tensor-core GEMMs (ampere, hopper) take each; decode takes exactly what it accepts
    as a plan asks it (beside hopper, which it hands some problems)."""
    sc = SCENARIOS[name]
    fusion = build(name)
    if sc.differ is not None:
        with pytest.raises(mp.MatmulError, match=sc.differ):
            problem = analyze(fusion, pm=hermetic).problem
            plan_problem(problem, mp.get_device("a100"), pm=hermetic)
        return
    problem = analyze(fusion, pm=hermetic).problem
    if sc.layout is not None:
        assert problem.layout == sc.layout
    if sc.vec is not None:
        widths = problem.vector_widths
        assert (widths.a, widths.b, widths.epilogue) == sc.vec
    for device in ("a100", "h200"):
        gpu = mp.get_device(device)
        gemm = plan_problem(problem, gpu, pm=no_decode).scheduler
        assert gemm == "ampere" if device == "a100" else gemm in ("ampere", "hopper")
        with planning_with({"decode": DECODE, "hopper": HOPPER}):
            takes = DECODE.accepts(problem, gpu) is None
        assert plan_problem(problem, gpu, pm=hermetic).scheduler == ("decode" if takes else gemm)


@pytest.mark.parametrize("name", sorted(n for n, sc in SCENARIOS.items() if sc.differ))
def test_documented_differences_segment_into_parts_that_compute_the_same(
    name: str, hermetic: Any
) -> None:
    """What we refuse as one kernel cuts into segments (issue 10 item 4) whose chained
    evaluation equals the whole fusion's, each matmul segment one a kernel takes."""
    fusion = build(name)
    segments = segment(fusion, pm=hermetic)
    assert len(segments) > 1 or segments[0].kind != "matmul"
    inputs = random_inputs(fusion)
    for got, want in zip(
        evaluate_segments(segments, fusion, inputs), mp.evaluate(fusion, inputs), strict=True
    ):
        assert rel_error(np.asarray(got), want) < 1e-6
    for seg in segments:
        if seg.kind == "matmul":
            analyze(seg.fusion, pm=hermetic)


@pytest.mark.parametrize("device", ["a100", "h200"])
@pytest.mark.parametrize("name", sorted(n for n, sc in SCENARIOS.items() if sc.differ))
def test_documented_differences_compile_as_segments(name: str, device: str, hermetic: Any) -> None:
    """mp.compile does not refuse what we do not take as one kernel: it compiles the segments,
    one kernel per matmul segment, and says why it cut (the refusal the scenario documents)."""
    fusion = build(name)
    compiled = mp.compile(fusion, device, pm=hermetic)
    if device == "h200" and not isinstance(compiled, SegmentedFusion):
        # the llama FFN: one horizontal hopper kernel on sm_90a, as nvFuser (docs/decisions.md,
        # "Horizontal fusion"); it still differs on sm_80
        assert compiled.spec.problem.horizontal > 1, compiled.explain()
        return
    assert isinstance(compiled, SegmentedFusion)
    assert compiled.segments == segment(fusion, pm=hermetic)
    kernels = [i for i, seg in enumerate(compiled.segments) if seg.kind == "matmul"]
    assert sorted(compiled.kernels) == kernels
    if device == "a100":
        assert re.search(SCENARIOS[name].differ, compiled.reason), compiled.reason
    assert compiled.explain().startswith("segmented (no single kernel takes this fusion): ")


@pytest.mark.parametrize("name", sorted(n for n, sc in SCENARIOS.items() if sc.differ))
def test_framework_ops_compute_the_segments_kernels_do_not(name: str, hermetic: Any) -> None:
    """The segments no kernel of ours runs, computed with framework array ops (numpy here: the
    model of the torch and CuPy backends), chain to what mp.evaluate gives for the fusion."""
    fusion = build(name)
    be = backend_for("numpy")
    env = dict(zip((v.name for v in fusion.inputs), random_inputs(fusion), strict=True))
    want = mp.evaluate(fusion, [env[v.name] for v in fusion.inputs])
    for seg in segment(fusion, pm=hermetic):
        args = [env[n] for n in seg.inputs]
        run = mp.evaluate if seg.kind == "matmul" else (lambda f, a: run_ops(f, a, be))
        env.update(zip(seg.outputs, run(seg.fusion, args), strict=True))
    computed = [t for t in fusion.tensors() if t not in fusion.inputs]
    tolerance = max(TOLERANCE[t.dtype.label] for t in computed)
    for tv, ref in zip(fusion.outputs, want, strict=True):
        got = np.asarray(env[tv.name])
        assert got.shape == ref.shape and got.dtype == ref.dtype
        assert rel_error(got, ref) < tolerance, tv.name
        if tv.stride_order != sorted(tv.stride_order, reverse=True):  # laid out as asked
            assert np.argsort(got.strides).tolist() == np.argsort(ref.strides).tolist()
