"""Limits ≡ generator for the ampere scheduler, in Numba's CUDA simulator (run as a script).

``python ampere_limits_property.py SEED EXAMPLES`` (or ``regression NAME``) with
NUMBA_ENABLE_CUDASIM=1, started by test_ampere_limits_property.py. Hypothesis draws a small
ragged matmul fusion (m, n, k up to 50, batch 1-2, every layout, fp16/bf16, with or without a
bias + relu epilogue, with or without operand prologues whose op(0) is not 0) and ampere
parameters from a grid of tiles with the odd sizes 48, 80, 96; every set that
``limits.violations`` accepts is compiled through ``mp.compile`` for the a100 preset (decode
blocked) and must match ``mp.evaluate`` with every output written (the simulator poisons
outputs); every rejected set must carry Violations naming MatmulParams fields. One JSON line
with the counts is printed at the end.
"""

from __future__ import annotations

import copy
import json
import sys
import warnings

import numpy as np
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st
from limits_fusions import fusion_for  # tests/sim is the script's folder

import mmaplug as mp
from mmaplug.errors import InvalidParamsError, ParamAdjustedWarning
from mmaplug.planning.params import PARAM_NAMES, MatmulParams
from mmaplug.plugins.ampere import limits

A100 = mp.get_device("a100")  # sm_80: only the ampere scheduler applies, once decode is blocked
PM = mp.make_plugin_manager(load_entrypoints=False, block=["decode"])  # it takes M <= 16 first
CTA_MN = (16, 32, 48, 64, 80, 96)
WARP_MN = (16, 32, 48)
MAX_MACS = 150_000  # padded multiply-adds per example: ~2 s in the simulator
TILE_K = (16, 32, 48, 96)
# ragged extents, or multiples of 8 (16-byte rows: cp.async allowed)
EXTENTS = st.one_of(st.integers(2, 50), st.integers(1, 6).map(lambda x: 8 * x))
COUNTS: dict = {"accepted": 0, "rejected": 0, "fields": {}}


@st.composite
def cases(draw: st.DrawFn) -> dict:
    cm, cn = draw(st.sampled_from(CTA_MN)), draw(st.sampled_from(CTA_MN))
    wm = draw(st.sampled_from([w for w in WARP_MN if cm % w == 0]))
    wn = draw(st.sampled_from([w for w in WARP_MN if cn % w == 0]))
    if draw(st.integers(0, 9)) == 0:  # now and then a warp tile the kernel cannot take
        cn, wn = draw(st.sampled_from(((24, 8), (24, 24), (80, 40))))
    k = draw(st.sampled_from(TILE_K))
    shape, batch = tuple(draw(EXTENTS) for _ in "mnk"), draw(st.integers(1, 2))
    tiles = batch * -(-shape[0] // cm) * -(-shape[1] // cn) * -(-shape[2] // k)
    assume(tiles * cm * cn * k <= MAX_MACS)
    return dict(
        shape=shape,
        batch=batch,
        a_k_inner=draw(st.booleans()),
        b_k_inner=draw(st.booleans()),
        dtype=draw(st.sampled_from(("float16", "bfloat16"))),
        bias_relu=draw(st.booleans()),
        prologue=draw(st.sampled_from(("", "", "a", "b", "ab"))),
        params=dict(
            cta_tile=(cm, cn, k),
            warp_tile=(wm, wn, k),
            instruction_tile=(16, 8, 16),
            stages=draw(st.integers(1, 5)),
            splitk_factor=draw(st.sampled_from((1, 1, 2, 3))),
            grid_swizzle_factor=draw(st.sampled_from((1, 2, 3))),
            cta_order=draw(st.sampled_from(("row_major", "column_major"))),
            async_gmem_load_operands=draw(st.booleans()),
            prefetch_gap=draw(st.sampled_from((1, 1, 1, 2))),
            use_smem_epilogue=draw(st.booleans()),
        ),
    )


def check(case: dict) -> None:
    fusion = fusion_for(case)
    problem = mp.matmul_problem(fusion)
    assert (problem.a_k_inner, problem.b_k_inner) == (case["a_k_inner"], case["b_k_inner"])
    try:
        params = MatmulParams(**case["params"])
    except InvalidParamsError as error:
        found = list(error.violations)
    else:
        found = limits.violations(params, problem, A100)
    if found:
        COUNTS["rejected"] += 1
        for v in found:
            COUNTS["fields"][v.field] = COUNTS["fields"].get(v.field, 0) + 1
            assert v.field.partition(".")[0] in (*PARAM_NAMES, "device"), v
            assert v.message and v.limit, v
        return
    COUNTS["accepted"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParamAdjustedWarning)  # stages=1 is built as 2
        compiled = mp.compile(fusion, A100, pm=PM, overrides=params.as_dict())
    assert compiled.params.stages == max(2, params.stages), compiled.params
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype.numpy) for t in fusion.inputs]
    (got,) = compiled.execute(inputs)
    # the translated fusion: where the fusion casts the half product back to float32, kernels
    # read the float32 sum (docs/decisions.md, "Half arithmetic"); mp.evaluate of the fusion as
    # written rounds it, which a cancellation in the epilogue (bias) magnifies past any
    # tolerance relative to the result (seed 31: 0.0332 against 0.0352)
    translated = copy.deepcopy(fusion)
    mp.translate_matmul_patterns(translated, pm=PM)
    (want,) = mp.evaluate(translated, inputs)
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.all(np.isfinite(got64)), f"unwritten (NaN) outputs for {case}"
    rtol = 2.0**-7 if case["dtype"] == "bfloat16" else 2.0**-9
    atol = 1e-3 * np.sqrt(case["shape"][2])
    bad = np.abs(got64 - want64) > rtol * np.abs(want64) + atol
    assert not bad.any(), f"{int(bad.sum())} wrong elements, first {np.argwhere(bad)[:3].tolist()}"


def _regression(shape, a_k_inner, b_k_inner, cta, warp, **params) -> dict:  # noqa: ANN001
    base = dict(instruction_tile=(16, 8, 16), stages=2, splitk_factor=1)
    return dict(
        shape=shape, batch=1, a_k_inner=a_k_inner, b_k_inner=b_k_inner, dtype="float16",
        bias_relu=False, params=dict(base, cta_tile=cta, warp_tile=warp, **params),
    )  # fmt: skip


# The first three computed garbage or wrote past the smem tile before the swizzle fix (rows of
# 12, 12 and 10 16-byte units); the last two cover a 6-unit row (no swizzle before, the 2-unit
# form now) and async_gmem_load_operands=False (cp.async for A, plain loads for B).
REGRESSIONS = {
    "k96_k_inner": _regression((20, 24, 100), True, True, (16, 16, 96), (16, 16, 96)),
    "m96_a_m_inner": _regression((70, 16, 20), False, True, (96, 16, 16), (48, 16, 16)),
    "n80_b_n_inner": _regression((16, 70, 20), True, False, (16, 80, 16), (16, 80, 16)),
    "n48_b_n_inner_bk48": _regression((16, 40, 50), True, False, (16, 48, 48), (16, 48, 48)),
    "mixed_sync_loads": _regression(
        (24, 21, 40), True, False, (16, 16, 16), (16, 16, 16), async_gmem_load_operands=False
    ),
}


def main(seed_value: int, examples: int) -> int:
    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(cases())
    def property_(case: dict) -> None:
        check(case)

    property_()
    print(json.dumps(COUNTS), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "regression":
        check(REGRESSIONS[sys.argv[2]])
        print(json.dumps(COUNTS), flush=True)
        sys.exit(0 if COUNTS["accepted"] else 1)
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
