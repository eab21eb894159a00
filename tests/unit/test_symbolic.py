"""Symbolic (-1) extents: definition, mp.evaluate, binding and checking shapes, per-class plans."""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.ir.symbolic import concretize
from mmaplug.runtime.specialize import SymbolicFusion
from mmaplug.testing import HookRecorder, registered

H = mp.float16
K, N = 48, 24


def _linear(m: int = -1, n: int = N, k: int = K, bias: bool = True) -> mp.FusionDefinition:
    """``gelu(x[m, k] @ w[n, k]^T + b[n])`` in float16."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=H)
        w = fd.define_tensor([n, k], dtype=H)
        b = fd.define_tensor([n], dtype=H) if bias else None
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), H))
    return fd


def _arrays(rng: np.random.Generator, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.standard_normal(s).astype(np.float16) for s in shapes]


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    from math import erf

    y = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    y = y.astype(np.float16).astype(np.float64)  # linear's half result, as a kernel rounds it
    return 0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))


# -- definition --------------------------------------------------------------------------------


def test_minus_one_is_a_symbolic_iteration_dim():
    """-1 gives a symbolic iteration dim; ops carry it to their outputs (1 stays broadcast)."""
    fd = _linear()
    x, w = fd.fusion.inputs[:2]
    assert x.shape == (-1, K) and x.domain[0].is_symbolic and not x.domain[0].is_broadcast
    assert fd.fusion.outputs[0].shape == (-1, N)
    assert "float16[-1, 48]" in repr(fd)


def test_symbolic_meets_static_and_broadcast():
    """A symbolic dim agrees with any static extent (which the result keeps) and wins over 1."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], dtype=H)
        b = fd.define_tensor([-1, 16], dtype=H)
        c = fd.define_tensor([1, -1], dtype=mp.float32)
        y = fd.ops.matmul(a, b)  # K: symbolic x symbolic; N static
        z = fd.ops.add(y, c)
        fd.add_output(z)
        w = fd.define_tensor([8, 16], dtype=H)
        fd.add_output(fd.ops.add(a, w))  # a's symbolic dims meet static ones
    assert y.shape == (-1, 16) and z.shape == (-1, 16)
    assert fd.fusion.outputs[1].shape == (8, 16)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda fd, x: fd.ops.squeeze(x, [0]), r"squeeze: dim 0 of T0 has a symbolic extent"),
        (
            lambda fd, x: fd.ops.broadcast_in_dim(x, [-1, -1, K], [1, 2]),
            r"new dim at position 0 has extent -1; -1 keeps an input dim's extent",
        ),
        (
            lambda fd, x: fd.define_tensor([0, 4], dtype=H),
            r"shape \[0, 4\] must hold positive ints below 2\*\*31 or -1",
        ),
        (
            lambda fd, x: fd.ops.linear(x, fd.define_tensor([N, K + 1], dtype=H)),
            r"linear: K of input T0 is 48 but K of weight T1 is 49",
        ),
    ],
    ids=["squeeze_symbolic", "broadcast_new_dim_minus_one", "extent_zero", "static_k_mismatch"],
)
def test_definition_rejects(build, match):  # noqa: ANN001
    """Symbolic extents keep the definition-time checks that need no concrete extent."""
    with pytest.raises(mp.FusionError, match=match), mp.FusionDefinition() as fd:
        build(fd, fd.define_tensor([-1, K], dtype=H))


def test_broadcast_in_dim_minus_one_keeps_the_input_extent():
    """-1 at a position fed by an input dim keeps that dim (symbolic or static)."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, K], dtype=H)
        y = fd.ops.broadcast_in_dim(x, [1, -1, -1], [1, 2])
        fd.add_output(y)
    assert y.shape == (1, -1, K) and y.domain[0].is_broadcast and y.domain[1].is_symbolic


# -- the reference executor ----------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 7, 40])
def test_evaluate_takes_any_extent(m: int):
    """mp.evaluate binds the symbolic extents from its inputs; M = 1 is a real row."""
    rng = np.random.default_rng(m)
    x, w, b = _arrays(rng, (m, K), (N, K), (N,))
    (out,) = mp.evaluate(_linear(), [x, w, b])
    assert out.shape == (m, N) and out.dtype == np.float16
    np.testing.assert_allclose(out, _reference(x, w, b), rtol=2e-3, atol=2e-3)


def test_evaluate_every_dim_symbolic_batched():
    """Batch, M, N and K all symbolic, with a residual sharing three of them."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1, -1], dtype=H)
        b = fd.define_tensor([-1, -1, -1], dtype=H)
        r = fd.define_tensor([-1, -1, -1], dtype=mp.float32)
        fd.add_output(fd.ops.add(fd.ops.matmul(a, b), r))
    rng = np.random.default_rng(1)
    for batch, m, n, k in ((1, 1, 1, 1), (3, 5, 2, 7)):
        av, bv = _arrays(rng, (batch, m, k), (batch, k, n))
        rv = rng.standard_normal((batch, m, n)).astype(np.float32)
        (out,) = mp.evaluate(fd, [av, bv, rv])
        ref = (av.astype(np.float64) @ bv.astype(np.float64)).astype(np.float16) + rv
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ([(3, K + 1), (N, K), (N,)], r"input T0 dim 1 was declared 48 \(a static extent; .*got 49"),
        ([(3, K), (N, K), (N + 1,)], r"input T2 dim 0 was declared 24 .*got 25"),
        ([(3,), (N, K), (N,)], r"input T0 was declared with shape \[-1, 48\] \(2 dims\); got"),
        ([(0, K), (N, K), (N,)], r"input T0 dim 0 \(symbolic\) is 0 .*extents run from 1"),
    ],
    ids=["static_k", "static_bias", "rank", "empty"],
)
def test_evaluate_names_input_dim_expected_and_given(shapes, match):  # noqa: ANN001
    """A shape that contradicts the definition: FusionError naming input, dim, both extents."""
    arrays = [np.zeros(s, np.float16) for s in shapes]
    with pytest.raises(mp.FusionError, match=match):
        mp.evaluate(_linear(), arrays)


def test_tied_symbolic_extents_must_agree():
    """Two symbolic dims one op ties together must get one extent."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, K], dtype=H)
        w = fd.define_tensor([-1, K], dtype=H)
        r = fd.define_tensor([-1, -1], dtype=mp.float32)
        fd.add_output(fd.ops.add(fd.ops.linear(x, w), r))
    arrays = [np.zeros((2, K), np.float16), np.zeros((3, K), np.float16)]
    arrays.append(np.zeros((2, 4), np.float32))
    with pytest.raises(mp.FusionError, match=r"input T2 dim 1 is 4, but .* input T1 dim 0 = 3"):
        mp.evaluate(fd, arrays)


# -- analysis needs concrete extents; extent-1 M and N are real roles --------------------------


def test_matmul_problem_of_a_symbolic_fusion_says_how():
    """analysis refuses symbolic extents, naming them and the way to concrete ones."""
    with pytest.raises(mp.UsageError, match=r"leaves T0 dim 0 symbolic.*symbolic\.concretize"):
        mp.matmul_problem(_linear())


@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 4096, 4096), (4096, 1, 4096), (1, 1, 64), (3, 24, 1), (1, 24, 16)]
)
def test_extent_one_in_the_definition_is_a_real_m_or_n(m: int, n: int, k: int):
    """x[1, K] @ W (decode), GEMV (N = 1), both, tiny K: the problem holds them as written."""
    problem = mp.matmul_problem(_linear(m, n, k))
    assert (problem.m, problem.n, problem.k, problem.batch) == (m, n, k, 1)
    # an extent-1 dim has no say in the layout: with K = 1, M (N) is the contiguous dim
    assert problem.a_k_inner == problem.b_k_inner == (k > 1)


def test_extent_one_matmul_batched_and_1x1():
    """torch.matmul [b, 1, K] @ [b, K, 1]: batch b, M = N = 1; both operands read along K."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([3, 1, 64], dtype=H)
        b = fd.define_tensor([3, 64, 1], dtype=H)
        fd.add_output(fd.ops.matmul(a, b))
    analysis = mp.analyze(fd)
    p = analysis.problem
    assert (p.batch, p.m, p.n, p.k, p.layout.value) == (3, 1, 1, 64, "TN")
    assert [r.value for r in analysis.outputs[0].dim_roles] == ["batch", "m", "n"]


@pytest.mark.parametrize("m", [1, 5])
def test_symbolic_extent_one_at_run_time_matches_the_static_one(m: int):
    """A symbolic M bound to 1 gives the problem and bindings of a definition written with 1."""
    concrete = concretize(_linear().fusion, [(m, K), (N, K), (N,)])
    static = mp.analyze(_linear(m))
    bound = mp.analyze(concrete)
    assert bound.problem == static.problem
    assert bound.outputs == static.outputs and bound.a.dim_roles == static.a.dim_roles


# -- compiled fusions: one plan per shape class, one kernel per configuration --------------------


@pytest.fixture
def a100_fusion(pm: mp.PluginManager) -> SymbolicFusion:
    compiled = mp.compile(_linear(), "a100", pm=pm)
    assert isinstance(compiled, SymbolicFusion)
    return compiled


def test_static_fusions_compile_as_before(pm: mp.PluginManager):
    """A definition without -1 still gives a CompiledFusion planned at compile time."""
    compiled = mp.compile(_linear(40), "a100", pm=pm)
    assert isinstance(compiled, mp.CompiledFusion)
    assert compiled.provenance.shape_class == ""
    assert "shape class" not in compiled.explain()


def test_nothing_is_planned_before_a_call(a100_fusion: SymbolicFusion):
    """spec and friends of a symbolic fusion name the symbolic dims until a call picks a class."""
    with pytest.raises(mp.UsageError, match=r"symbolic extents \(T0 dim 0\).*specialize"):
        _ = a100_fusion.spec
    assert a100_fusion.builds == 0


def test_compile_checks_the_definition_eagerly(pm: mp.PluginManager):
    """mp.compile analyses a symbolic fusion at once: one no kernel takes is segmented per
    call's shapes (issue 10 item 4), the refusal its reason."""
    from mmaplug.runtime.segmented_fusion import SymbolicSegments

    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([-1, K], dtype=mp.float32)
        w = fd.define_tensor([N, K], dtype=mp.float32)
        fd.add_output(fd.ops.linear(x, w))
    compiled = mp.compile(fd, "a100", pm=pm)
    assert isinstance(compiled, SymbolicSegments)
    assert "float32; tensor-core operands" in compiled.reason


def test_classes_planned_alike_share_one_kernel(a100_fusion: SymbolicFusion, pm: mp.PluginManager):
    """Each shape class is planned once; a kernel is built only for a new configuration (here
    decode's: M = 1 to 8 all round up to one 8-row tile)."""
    built: list[str] = []

    class Observer:
        @mp.hookimpl
        def mmaplug_kernel_built(self, spec: mp.KernelSpec) -> None:
            built.append(spec.provenance.shape_class)

    with registered(pm, Observer()), HookRecorder(pm) as recorder:
        specs = {m: a100_fusion.specialize([(m, K), (N, K), (N,)]).spec for m in (1, 2, 5, 8)}
        again = a100_fusion.specialize([(2, K), (N, K), (N,)])
        planned = recorder.getcalls("mmaplug_matmul_params")
    assert {s.params for s in specs.values()} == {specs[1].params}  # the heuristic agrees
    assert {s.scheduler for s in specs.values()} == {"decode"}
    assert a100_fusion.builds == 1 and built == [f"m=1 n={N} k={K} batch=1"]
    assert len(planned) == 4 and again.spec is specs[2]  # no plan for a class seen before
    assert [s.provenance.shape_class for s in specs.values()] == [
        f"m={m} n={N} k={K} batch=1" for m in (1, 2, 5, 8)
    ]
    assert "shape class: m=2 n=24 k=48 batch=1" in a100_fusion.explain()  # the latest: m=2
    big = a100_fusion.specialize([(8192, K), (N, K), (N,)])
    assert big.spec.params != specs[1].params and a100_fusion.builds == 2
    assert a100_fusion.spec is big.spec


def test_a_different_kernel_configuration_builds_again(pm: mp.PluginManager):
    """Symbolic K changes the operand vectors (what the kernel is specialised on): new kernel."""
    compiled = mp.compile(_linear(n=N, k=-1), "a100", pm=pm, overrides={"splitk_factor": 1})
    wide = compiled.specialize([(8, 64), (N, 64), (N,)])
    odd = compiled.specialize([(8, 63), (N, 63), (N,)])
    assert wide.spec.problem.vector_widths.a == 8 and odd.spec.problem.vector_widths.a == 1
    assert compiled.builds == 2 and wide.kernel_name != odd.kernel_name


def test_execute_names_the_input_dim_that_contradicts_the_definition(a100_fusion: SymbolicFusion):
    """execute checks shapes before anything runs: LaunchError with input, dim, both extents."""
    x, w, b = (np.zeros(s, np.float16) for s in ((3, K - 1), (N, K), (N,)))
    with pytest.raises(mp.LaunchError, match=r"execute: input T0 dim 1 was declared 48 .*got 47"):
        a100_fusion.execute([x, w, b])
    with pytest.raises(mp.LaunchError, match=r"takes 3 inputs; got 2"):
        a100_fusion.execute([x, w])
    assert a100_fusion.builds == 0


def test_hopper_plans_decode_and_declines_unaligned_small_k():
    """On h200 with the decode scheduler blocked: M = 1 (decode) goes to hopper; K = 6 rows are
    not 16-byte pitched: ampere."""
    pm = mp.make_plugin_manager(block=["decode"], load_entrypoints=False, strict=True)
    compiled = mp.compile(_linear(n=4096, k=-1), "h200", pm=pm)
    decode = compiled.specialize([(1, 4096), (4096, 4096), (4096,)])
    assert decode.spec.scheduler == "hopper" and decode.spec.problem.m == 1
    small_k = compiled.specialize([(1, 6), (4096, 6), (4096,)])
    assert small_k.spec.scheduler == "ampere"
    assert "TMA needs 16-byte aligned row pitches" in str(small_k.spec.provenance.candidates)
