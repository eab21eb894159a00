"""GPU tier: operand prologues (issue 10 item 2) through mp.compile → execute on torch tensors.

Random data, outputs poisoned with NaN first (the caching allocator's free blocks), float64
reference (mp.evaluate of the fusion). Ragged K makes the zero-filled padding meet prologues
whose op(0) is not 0 (cos, exp, + scalar); every layout; split-K 1-3; batch; a bare float16 ->
bfloat16 cast; and on an sm_90 GPU the plan is ampere's (hopper declines prologues).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

LAYOUTS = {"TN": (True, True), "TT": (True, False), "NT": (False, False), "NN": (False, True)}


def _run(
    checks: Checks, fusion: mp.Fusion, pm: mp.PluginManager, seed: int,
    scheduler: str = "ampere", **overrides: object,
) -> Any:  # fmt: skip
    """Compile with *overrides* for *scheduler*; two calls on inputs uniform in ±2 (the padding's
    zeros meet op(0) != 0), checked against float64."""
    inputs = checks.inputs(fusion, np.random.default_rng(seed), uniform=2.0)
    compiled = checks.run(fusion, pm, inputs, overrides)
    assert compiled.spec.scheduler == scheduler
    return compiled


def _matmul(shape: tuple[int, int, int], layout: str, dtype: mp.DType, pro_a: Any, pro_b: Any,
            batch: int = 1) -> mp.Fusion:  # fmt: skip
    """cast(prologue_a(A) @ prologue_b(B)) with A [*, M, K], B [*, K, N] laid out as *layout*."""
    (m, n, k), (a_k, b_k) = shape, LAYOUTS[layout]
    lead = [batch] if batch > 1 else []
    inner = list(range(len(lead) + 1, -1, -1))
    swap = [*inner[:-2], inner[-1], inner[-2]]
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype, stride_order=inner if a_k else swap)
        b = fd.define_tensor([*lead, k, n], dtype, stride_order=swap if b_k else inner)
        y = fd.ops.matmul(pro_a(fd, a, dtype), pro_b(fd, b, dtype))
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def _cos_plus_s(fd: Any, x: Any, dtype: mp.DType) -> Any:
    return fd.ops.cast(fd.ops.add(fd.ops.cos(x), fd.define_scalar()), dtype)


def _exp_neg(fd: Any, x: Any, dtype: mp.DType) -> Any:
    return fd.ops.cast(fd.ops.exp(fd.ops.neg(x)), dtype)


@pytest.mark.parametrize("splitk", [1, 2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [mp.float16, mp.bfloat16], ids=["fp16", "bf16"])
def test_cos_plus_scalar_on_a_exp_on_b(
    pm: mp.PluginManager, checks: Checks, dtype: mp.DType, layout: str, splitk: int
) -> None:
    """Both operands with op(0) != 0 at a ragged K (200 = 6 * 32 + 8) and ragged M, N."""
    fusion = _matmul((384, 264, 200), layout, dtype, _cos_plus_s, _exp_neg)
    compiled = _run(checks, fusion, pm, seed=3, splitk_factor=splitk)
    assert compiled.params.splitk_factor == splitk


def test_sin_on_a_with_the_default_plan(pm: mp.PluginManager, checks: Checks) -> None:
    """linear(sin(x), w) at 504x136x248, whatever the default heuristic chooses."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([504, 248], dtype=mp.float16)
        w = fd.define_tensor([136, 248], dtype=mp.float16)
        fd.add_output(fd.ops.linear(fd.ops.cast(fd.ops.sin(x), mp.float16), w))
    _run(checks, fd.fusion, pm, seed=1)


@pytest.mark.sm90
def test_without_ampere_the_prologue_is_a_segment_before_hopper(checks: Checks) -> None:
    """ampere blocked on an sm_90 GPU: cos(A) + s in a pointwise segment, the hopper kernel
    after it (docs/decisions.md, "Operand prologues")."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    pm.set_blocked("ampere")
    fusion = _matmul((384, 264, 200), "TN", mp.bfloat16, _cos_plus_s, _exp_neg)
    compiled = _run(checks, fusion, pm, seed=5, scheduler="hopper")
    assert [s.kind for s in compiled.segments] == ["pointwise", "matmul"]


def test_batched_relu_and_scale_splitk3_odd_k(pm: mp.PluginManager, checks: Checks) -> None:
    """Batch 3, A M-inner with relu, B scaled by a constant, K = 129 (vector width 1), split-K 3."""
    relu = lambda fd, x, dt: fd.ops.cast(fd.ops.relu(x), dt)  # noqa: E731
    scale = lambda fd, x, dt: fd.ops.cast(fd.ops.mul(x, 0.25), dt)  # noqa: E731
    fusion = _matmul((200, 136, 129), "NN", mp.float16, relu, scale, batch=3)
    _run(checks, fusion, pm, seed=4, splitk_factor=3)


def test_float16_input_cast_to_bfloat16(pm: mp.PluginManager, checks: Checks) -> None:
    """A stored as float16 and cast to bfloat16 for a bfloat16 B: the mma runs in bfloat16."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([320, 256], dtype=mp.float16)
        b = fd.define_tensor([256, 192], dtype=mp.bfloat16, stride_order=[0, 1])
        fd.add_output(fd.ops.cast(fd.ops.matmul(fd.ops.cast(a, mp.bfloat16), b), mp.bfloat16))
    compiled = _run(checks, fd.fusion, pm, seed=5)
    assert compiled.spec.problem.operand_dtype is mp.bfloat16


def test_large_tiles_with_the_stage_rewrite(pm: mp.PluginManager, checks: Checks) -> None:
    """128x128x32 tiles, 4 stages, a 1000x1000x1000 problem (ragged in every dim)."""
    fusion = _matmul((1000, 1000, 1000), "TN", mp.float16, _cos_plus_s, _exp_neg)
    _run(checks, fusion, pm, seed=6, cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), stages=4)
