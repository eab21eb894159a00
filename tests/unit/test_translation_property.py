"""Property test: random matmul fusions translate to MmaOp without changing what they compute.

Numerics. Translation may remove a half -> float32 round trip after a MatmulOp/LinearOp (the
float32 accumulator feeds the epilogue directly instead of its float16/bfloat16 rounding), and
a raw half output becomes round(round_f32(acc)) instead of round(acc). So per element

    |before - after| <= L * |round_half(pre) - pre|        (only matmul/linear forms)
                      + (ops + 2) * 2**-22 * scale            (float32 rounding of each op)
                      + 1 ulp of the output type               (only half outputs)

where ``pre`` is the exact matmul (+ linear bias), L bounds the epilogue's slope (|alpha| and
max|f'| of each unary op) and ``scale`` bounds the magnitudes involved. mul+sum and
fused_multiply_sum forms compute in float32 both before and after: only the float32 terms apply.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mmaplug as mp
from mmaplug.ir.ops import MmaOp

H, T, S = mp.float16, mp.bfloat16, mp.float32
NP = {H: np.float16, T: ml_dtypes.bfloat16, S: np.float32}
SLOPE = {"neg": 1.0, "relu": 1.0, "sin": 1.0, "sigmoid": 0.25, "silu": 1.1, "gelu": 1.13}


def _order(rank, swap=None):
    """Row-major stride_order, with the stride ranks of the two positions in *swap* exchanged."""
    order = list(range(rank))[::-1]
    if swap is not None:
        i, j = swap
        order[i], order[j] = order[j], order[i]
    return order


@st.composite
def matmul_cases(draw):
    """A recipe for a random matmul fusion (see the module docstring for what varies)."""
    return {
        "form": draw(st.sampled_from(["matmul", "linear", "mul_sum", "fms"])),
        "dtype": draw(st.sampled_from([H, T])),
        "m": draw(st.integers(2, 16)),
        "n": draw(st.integers(2, 16)),
        "k": draw(st.integers(2, 16)),
        "batch": draw(st.lists(st.integers(2, 3), max_size=2)),
        # how the batch dims appear: "both", "a_only" (B lower rank), "b_broadcast" (B has 1s),
        # "a_broadcast" (A has 1s: batch only in B, a documented rejection for matmul)
        "batch_mode": draw(st.sampled_from(["both", "a_only", "b_broadcast", "a_broadcast"])),
        "a_k_inner": draw(st.booleans()),
        "b_k_inner": draw(st.booleans()),
        "cast_operands": draw(st.booleans()),  # mul_sum: explicit casts to float32
        "linear_bias": draw(st.booleans()),
        "epilogue": draw(
            st.lists(st.sampled_from(["bias_n", "bias_m", "alpha_beta", *SLOPE]), max_size=3)
        ),
        "raw_output": draw(st.booleans()),
        "cast_output": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
        "alpha": draw(st.sampled_from([1.0, -0.5, 2.0, 0.125])),
        "beta": draw(st.sampled_from([0.0, 1.0, -1.5])),
    }


def _build(case):
    """Build the fusion; return it, the numpy 'pre' function, slope, op count, expected reject."""
    form, dt = case["form"], case["dtype"]
    m, n, k, batch = case["m"], case["n"], case["k"], case["batch"]
    mode = case["batch_mode"] if batch else "both"
    reject = None
    with mp.FusionDefinition() as fd:
        if form == "matmul":
            ab = [1] * len(batch) if mode == "a_broadcast" else batch
            bb = {
                "both": batch,
                "a_only": [],
                "b_broadcast": [1] * len(batch),
                "a_broadcast": batch,
            }[mode]
            ra, rb = len(ab) + 2, len(bb) + 2
            a = fd.define_tensor(
                [*ab, m, k], dt, _order(ra, None if case["a_k_inner"] else (ra - 2, ra - 1))
            )
            b = fd.define_tensor(
                [*bb, k, n], dt, _order(rb, (rb - 2, rb - 1) if case["b_k_inner"] else None)
            )
            acc = fd.ops.matmul(a, b)
            pre = lambda x, y, *_: np.matmul(x, y)  # noqa: E731
            if mode == "a_broadcast":
                reject = "non-consecutive"
            elif mode in ("a_only", "b_broadcast") and not case["a_k_inner"]:
                # B has no batch of its own: A's batch folds into M, with K between them
                reject = "M dims apart in memory"
        elif form == "linear":
            ra = len(batch) + 2
            a = fd.define_tensor(
                [*batch, m, k], dt, _order(ra, None if case["a_k_inner"] else (ra - 2, ra - 1))
            )
            w = fd.define_tensor([n, k], dt, _order(2, None if case["b_k_inner"] else (0, 1)))
            bias = fd.define_tensor([n], dt) if case["linear_bias"] else None
            acc = fd.ops.linear(a, w, bias)
            if batch and not case["a_k_inner"]:  # the batch folds into M, K between them
                reject = "M dims apart in memory"
            if bias is None:
                pre = lambda x, y, *_: x @ y.T  # noqa: E731
            else:
                pre = lambda x, y, z, *_: x @ y.T + z  # noqa: E731
        else:
            r = len(batch) + 3
            bshape = [1] * len(batch) if mode in ("b_broadcast", "a_broadcast") else batch
            a = fd.define_tensor(
                [*bshape, m, 1, k], dt, _order(r, None if case["a_k_inner"] else (r - 3, r - 1))
            )
            b = fd.define_tensor(
                [*bshape, 1, n, k], dt, _order(r, None if case["b_k_inner"] else (r - 2, r - 1))
            )
            if form == "fms":
                acc = fd.ops.fused_multiply_sum(a, b, [-1])
            else:
                if case["cast_operands"]:
                    a, b = fd.ops.cast(a, S), fd.ops.cast(b, S)
                acc = fd.ops.sum(fd.ops.mul(a, b), [-1])
            pre = lambda x, y, *_: np.matmul(x[..., :, 0, :], np.swapaxes(y[..., 0, :, :], -1, -2))  # noqa: E731
        if case["raw_output"]:
            fd.add_output(acc)
        out, slope, ops = acc, 1.0, 0
        shape = acc.shape
        for step in case["epilogue"]:
            if step == "bias_n":
                out = fd.ops.add(out, fd.define_tensor([shape[-1]], dt))
            elif step == "bias_m":
                bm = fd.define_tensor([shape[-2]], dt)
                out = fd.ops.add(
                    out, fd.ops.broadcast_in_dim(bm, [*shape[:-2], shape[-2], 1], [len(shape) - 2])
                )
            elif step == "alpha_beta":
                alpha, beta = fd.define_scalar(), fd.define_scalar()
                c = fd.define_tensor(list(shape), dt)
                out = fd.ops.add(fd.ops.mul(alpha, out), fd.ops.mul(c, beta))
                slope *= abs(case["alpha"])
                ops += 2
            else:
                out = getattr(fd.ops, step)(out)
                slope *= SLOPE[step]
            ops += 1
        if case["cast_output"]:
            out = fd.ops.cast(out, dt)
        if out is not acc or not case["raw_output"]:
            fd.add_output(out)
    return fd.fusion, pre, slope, ops, reject


def _inputs(fusion, case):
    rng = np.random.default_rng(case["seed"])
    vals, scalars = [], iter([case["alpha"], case["beta"]] * 4)
    for v in fusion.inputs:
        if isinstance(v, mp.TensorView):
            vals.append(rng.standard_normal(v.shape).astype(NP[v.dtype]))
        else:
            vals.append(next(scalars))
    return vals


def _ulp(x, dtype):
    """Distance from |x| to the next representable value of *dtype* (x as float64)."""
    t = NP[dtype]
    ax = np.abs(np.asarray(x, np.float64)).astype(t)
    return np.abs(np.nextafter(ax, np.array(np.inf, t)).astype(np.float64) - ax.astype(np.float64))


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=matmul_cases())
def test_translation_preserves_semantics(pm, case):
    """Translation succeeds, yields only MmaOp patterns, keeps the problem and the outputs."""
    fusion, pre_fn, slope, ops, reject = _build(case)
    inputs = _inputs(fusion, case)
    if reject is None:
        problem = mp.matmul_problem(fusion, pm=pm)
    else:
        with pytest.raises(mp.UnsupportedFusionError, match=reject):
            mp.matmul_problem(fusion, pm=pm)
        problem = None
    before = mp.evaluate(fusion, inputs)

    patterns = mp.translate_matmul_patterns(fusion, pm=pm)
    assert len(patterns) == 1
    assert all(p.kind == "mma" for p in patterns)
    kinds = [e.kind for e in fusion.exprs()]
    assert kinds.count("mma") == 1
    assert not {"matmul", "linear", "sum"} & set(kinds)
    assert all(isinstance(p.a, mp.TensorView) and isinstance(p.b, mp.TensorView) for p in patterns)
    assert any(
        isinstance(e, MmaOp) and e.inputs == [patterns[0].a, patterns[0].b] for e in fusion.exprs()
    )
    if problem is not None:
        assert mp.matmul_problem(fusion, pm=pm) == problem

    after = mp.evaluate(fusion, inputs)
    assert [o.dtype for o in after] == [o.dtype for o in before]
    assert [o.shape for o in after] == [o.shape for o in before]

    tensors = [np.asarray(x, np.float64) for x in inputs if not isinstance(x, float)]
    pre = pre_fn(*tensors)
    dt = case["dtype"]
    rounded_away = case["form"] in ("matmul", "linear")
    delta_pre = np.abs(pre.astype(NP[dt]).astype(np.float64) - pre) if rounded_away else 0.0
    magnitude = max([1.0] + [float(np.abs(t).max()) for t in tensors[2:]])
    scale = (np.abs(pre) + 3 * magnitude * 1.5 + 1.0) * max(1.0, abs(case["alpha"])) * 1.2**ops
    for b, a in zip(before, after, strict=True):
        b64, a64 = b.astype(np.float64), a.astype(np.float64)
        tol = slope * delta_pre + (ops + 2) * 2.0**-22 * scale
        if b.dtype != np.float32:
            tol = tol + np.maximum(_ulp(a64, dt), _ulp(b64, dt))
        excess = np.abs(b64 - a64) - tol
        assert np.all(np.isfinite(a64) == np.isfinite(b64))
        assert np.all(excess <= 0), (
            f"max excess {np.nanmax(excess)} at {np.unravel_index(np.nanargmax(excess), excess.shape)}"  # noqa: E501
            f"\n{fusion}"
        )
