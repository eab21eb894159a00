"""GPU tier: the Ampere GEMM kernels on a real GPU (sm_80+), the full correctness matrix.

{fp16, bf16} x {TN, TT, NT, NN} x {no epilogue, bias+gelu, alpha*acc+beta*C, relu + fp32 aux}
x {split-K 1, 2} x {batch 1, 3}, plus the odd shape 504x136x248 and misaligned (vec 1/2/4)
cases. Random data, outputs poisoned with NaN before each launch, float64 reference, tolerance
by output dtype (tests/ampere_harness.py, run_case).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from mmaplug.ir.dtypes import DType

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: ampere_harness
from ampere_harness import EPILOGUES, Case, config_for, run_case  # noqa: E402

pytestmark = pytest.mark.sm80

TILES = dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), stages=3)
LAYOUTS = {"TN": (True, True), "TT": (True, False), "NT": (False, False), "NN": (False, True)}


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("splitk", [1, 2])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [DType.float16, DType.bfloat16], ids=["fp16", "bf16"])
def test_matrix(dtype: DType, layout: str, epilogue: str, splitk: int, batch: int) -> None:
    ak, bk = LAYOUTS[layout]
    case = Case(dtype=dtype, a_k_inner=ak, b_k_inner=bk, epilogue=epilogue, batch=batch,
                m=256, n=192, k=320, seed=batch)  # fmt: skip
    res = run_case(case, config_for(case, splitk=splitk, **TILES))
    assert res["ok"], res


@pytest.mark.parametrize(
    ("dtype", "layout"), list(itertools.product([DType.float16, DType.bfloat16], list(LAYOUTS)))
)
def test_odd_shape(dtype: DType, layout: str) -> None:
    ak, bk = LAYOUTS[layout]
    case = Case(dtype=dtype, a_k_inner=ak, b_k_inner=bk, epilogue="bias_gelu", m=504, n=136, k=248)
    res = run_case(case, config_for(case, **TILES))
    assert res["ok"], res


@pytest.mark.parametrize(
    ("case", "overrides"),
    [
        (Case(m=77, n=45, k=51, epilogue="relu_aux"), dict(TILES, cta_order="column_major")),
        (Case(m=130, n=66, k=98, pad=2, a_k_inner=False), dict(TILES, grid_swizzle=3)),
        (Case(m=200, n=300, k=100, pad=4, b_k_inner=False, shared_b=True, batch=2),
         dict(TILES, splitk=3)),
        (Case(m=300, n=520, k=200),
         dict(cta_tile=(128, 256, 32), warp_tile=(64, 64, 32), stages=4)),
    ],
    ids=["vec1", "vec2_swizzle", "vec4_splitk3", "tile128x256"],
)  # fmt: skip
def test_misaligned_and_other_tiles(case: Case, overrides: dict) -> None:
    res = run_case(case, config_for(case, **overrides))
    assert res["ok"], res
