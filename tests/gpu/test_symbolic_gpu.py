"""GPU tier: one compiled fusion with symbolic extents over a sweep of M, decode, GEMV, tiny K.

Each fusion is compiled once and executed on torch tensors of many shapes; every result is
compared with a float64 product computed by torch on the GPU, outputs poisoned (the caching
allocator's free blocks filled with NaN) before each call, each shape run twice (the second
call takes the bound launch). Kernel reuse is asserted: the fusion builds one kernel per
distinct planned configuration. Run on an H200 for both schedulers (hopper, then ampere alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.runtime.specialize import SymbolicFusion
from mmaplug.tune.measure import poison_free_memory, rel_error

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

M_SWEEP = (1, 2, 7, 16, 64, 127, 1000, 4096, 8192)
N = K = 4096
TOLERANCE = 1e-2  # relative (Frobenius) error of a float16 output
SCHEDULERS = [pytest.param("hopper", marks=pytest.mark.sm90), "ampere"]


def _check(compiled: Any, inputs: list, expected: Any, label: Callable[[], str]) -> None:
    """Two calls (the second takes the bound launch) on poisoned memory, against *expected*;
    *label* names the call's kernel or shape class (known only once a symbolic fusion ran)."""
    for _ in range(2):
        poison_free_memory(256 << 20)
        (out,) = compiled.execute(inputs)
        torch.cuda.synchronize()
        err = rel_error(out, expected)
        assert err < TOLERANCE, f"{label()}: relative error {err:.2e} (NaN: unwritten elements)"


def _linear_bias(m: int, n: int, k: int) -> mp.FusionDefinition:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=mp.float16)
        w = fd.define_tensor([n, k], dtype=mp.float16)
        b = fd.define_tensor([n], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.linear(x, w, b), mp.float16))
    return fd


def _inputs(m: int, n: int, k: int, seed: int) -> tuple[list, object]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x, w, b = (torch.randn(s, generator=g, device="cuda", dtype=torch.float64)
               for s in ((m, k), (n, k), (n,)))  # fmt: skip
    x, w, b = (t.half() for t in (x, w, b))
    expected = x.double() @ w.double().T + b.double()
    return [x, w, b], expected


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_one_fusion_runs_the_m_sweep(scheduler_pm: Callable, scheduler: str) -> None:
    """x[-1, 4096] @ W[4096, 4096]^T + b over M = 1 ... 8192: each M correct, one plan per
    shape class, one kernel per distinct planned configuration."""
    compiled = mp.compile(_linear_bias(-1, N, K), pm=scheduler_pm(scheduler))
    assert isinstance(compiled, SymbolicFusion)
    configs = set()
    for m in M_SWEEP:
        inputs, expected = _inputs(m, N, K, seed=m)
        _check(compiled, inputs, expected, lambda: compiled.provenance.shape_class)
        spec = compiled.spec
        assert spec.scheduler == scheduler and spec.problem.m == m
        assert spec.provenance.shape_class == f"m={m} n={N} k={K} batch=1"
        configs.add(spec.params)
    assert compiled.builds == len(configs) < len(M_SWEEP), configs


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(1, 4096, 4096), (16, 4096, 4096), (64, 1, 4096), (1, 1, 4096), (64, 4096, 16),
     (64, 4096, 8), (128, 4096, 1), (3, 100, 3)],
    ids=["decode", "decode16", "gemv_n1", "dot", "k16", "k8", "k1", "odd_small"],
)  # fmt: skip
def test_extent_one_and_tiny_k(
    scheduler_pm: Callable, scheduler: str, m: int, n: int, k: int
) -> None:
    """Decode, GEMV, a dot product and tiny K, both written into the definition and as
    symbolic extents bound at run time (hopper where TMA can load the operands: K = 1 reads
    them M/N-major; else ampere)."""
    inputs, expected = _inputs(m, n, k, seed=m + n + k)
    static = mp.compile(_linear_bias(m, n, k), pm=scheduler_pm(scheduler))
    symbolic = mp.compile(_linear_bias(-1, -1, -1), pm=scheduler_pm(scheduler))
    for compiled in (static, symbolic):
        _check(compiled, inputs, expected, lambda c=compiled: c.kernel_name)
        vec = compiled.spec.problem.vector_widths  # TMA needs 16-byte row pitches
        assert compiled.spec.scheduler == (scheduler if min(vec.a, vec.b) >= 8 else "ampere")
    assert static.spec.problem == symbolic.spec.problem
