"""GPU tier of the conformance suite (the lead runs it on the H200): every ported scenario that
mmaplug takes, at its source's sizes, through mp.compile → execute on torch tensors laid out as
the fusion declares them, for hopper and for ampere alone, against mp.evaluate in float64
(outputs NaN-poisoned; each scenario run twice, the second call on the bound launch)."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.errors import FallbackWarning
from mmaplug.tune.measure import poison_free_memory, rel_error

torch = pytest.importorskip("torch") if cuda_device_count() else None
sys.path.insert(0, str(Path(__file__).parent))
from test_conformance import SCENARIOS, build, random_inputs  # noqa: E402


def _cc() -> tuple[int, int]:
    return torch.cuda.get_device_capability() if cuda_device_count() else (0, 0)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.sm80,
    pytest.mark.skipif(_cc() < (8, 0), reason="needs a CUDA GPU with compute capability >= 8.0"),
    pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
]

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}
RUNS = sorted(name for name, sc in SCENARIOS.items() if sc.differ is None)
SCHEDULERS = [
    pytest.param(
        "hopper",
        marks=[pytest.mark.sm90, pytest.mark.skipif(_cc() != (9, 0), reason="needs sm_90")],
    ),
    "ampere",
]


def _device(tv: mp.TensorView, host: np.ndarray):  # noqa: ANN202
    """*host* on the GPU with the strides tv declares (its stride_order)."""
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(
        tv.dtype.label, torch.float32
    )
    order = [tv.no_reduction_domain.index(tv.domain[i]) for i in tv.alloc_order]
    stored = torch.tensor(np.ascontiguousarray(host.astype(np.float64).transpose(order)))
    return stored.to("cuda", dtype).permute(np.argsort(order).tolist())


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", RUNS)
def test_scenario_on_the_gpu_matches_evaluate(name: str, scheduler: str) -> None:
    fusion = build(name)
    block = ("hopper", "decode") if scheduler == "ampere" else ("decode",)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=block)
    compiled = mp.compile(fusion, pm=pm)
    host = random_inputs(fusion, seed=1)
    inputs = [
        _device(v, x) if isinstance(v, mp.TensorView) else x
        for v, x in zip(fusion.inputs, host, strict=True)
    ]
    # The kernel computes the translated fusion: a half result cast straight back to float32 is
    # read unrounded (docs/decisions.md, "Half arithmetic"), so that is the reference here;
    # tests/unit/test_translation_property.py bounds its distance from the untranslated one.
    translated = copy.deepcopy(fusion)
    mp.translate_matmul_patterns(translated, pm=pm)
    expected = mp.evaluate(translated, host)
    for _ in range(2):
        poison_free_memory()  # the outputs are allocated in NaN
        with warnings.catch_warnings():  # a launch hopper declines (TMA alignment) falls
            warnings.simplefilter("ignore", FallbackWarning)  # back; that kernel is checked too
            outputs = compiled.execute(inputs)
        torch.cuda.synchronize()
        for tv, got, ref in zip(fusion.outputs, outputs, expected, strict=True):
            got64 = got.double().cpu().numpy()
            assert np.all(np.isfinite(got64)), f"{name} {tv.name}: unwritten elements"
            err = rel_error(got64, ref)
            assert err < TOLERANCE[tv.dtype.label], f"{name} {tv.name}: relative error {err:.2e}"
    if scheduler == "ampere":
        assert compiled.spec.scheduler == "ampere"


DIFFER = sorted(name for name, sc in SCENARIOS.items() if sc.differ is not None)


@pytest.mark.parametrize("name", DIFFER)
def test_documented_difference_runs_segmented_on_torch(name: str) -> None:
    """What no kernel takes whole, mp.compile runs as segments: kernels plus torch ops, like
    evaluate (on the local GPU's scheduler)."""
    fusion = build(name)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(fusion, pm=pm)  # a SegmentedFusion unless a scheduler takes it whole
    host = random_inputs(fusion, seed=2)
    inputs = [
        _device(v, x) if isinstance(v, mp.TensorView) else x
        for v, x in zip(fusion.inputs, host, strict=True)
    ]
    with warnings.catch_warnings():  # as above: a declined hopper launch falls back
        warnings.simplefilter("ignore", FallbackWarning)
        outputs = compiled.execute(inputs)
    torch.cuda.synchronize()
    for tv, got, ref in zip(fusion.outputs, outputs, mp.evaluate(fusion, host), strict=True):
        got64 = got.double().cpu().numpy()
        assert got64.shape == ref.shape
        err = rel_error(got64, ref)
        assert err < TOLERANCE[tv.dtype.label] * 4, f"{name} {tv.name}: relative error {err:.2e}"
        order = sorted(range(got.dim()), key=lambda i: -got.stride(i))
        assert order == [tv.no_reduction_domain.index(tv.domain[i]) for i in tv.alloc_order]


PADDED = ["sch_strided_batch_plain_tn", "sch_strided_batch_bias_nn", "roles_output_m_batch_n",
          "roles_operand_batch_inside_by_stride_order", "py_linear_bias_nt"]  # fmt: skip


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", PADDED)
def test_strided_inputs_with_padded_rows(name: str, scheduler: str) -> None:
    """SCH StridedInputs: operands whose rows are padded (8 elements past their extent) are
    read by their strides, on either scheduler (hopper's TMA takes 16-byte multiples)."""
    fusion = build(name)
    block = ("hopper", "decode") if scheduler == "ampere" else ("decode",)
    compiled = mp.compile(fusion, pm=mp.make_plugin_manager(load_entrypoints=False, block=block))
    host = random_inputs(fusion, seed=3)
    inputs = []
    for v, x in zip(fusion.inputs, host, strict=True):
        if not isinstance(v, mp.TensorView):
            inputs.append(x)
            continue
        dense = _device(v, x)
        inner = max(range(dense.dim()), key=lambda i: -dense.stride(i))  # innermost dim
        shape = list(dense.shape)
        shape[inner] += 8
        padded = torch.zeros(shape, dtype=dense.dtype, device="cuda")
        order = sorted(range(dense.dim()), key=lambda i: -dense.stride(i))
        padded = padded.permute(order).contiguous().permute(np.argsort(order).tolist())
        view = padded.narrow(inner, 0, dense.shape[inner])
        view.copy_(dense)
        inputs.append(view)
    with warnings.catch_warnings():  # as above
        warnings.simplefilter("ignore", FallbackWarning)
        outputs = compiled.execute(inputs)
    torch.cuda.synchronize()
    for tv, got, ref in zip(fusion.outputs, outputs, mp.evaluate(fusion, host), strict=True):
        err = rel_error(got.double().cpu().numpy(), ref)
        assert err < TOLERANCE[tv.dtype.label], f"{name} {tv.name}: relative error {err:.2e}"
