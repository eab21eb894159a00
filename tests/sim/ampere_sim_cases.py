"""Run Ampere GEMM cases in Numba's CUDA simulator; one JSON line per case on stdout.

Invoked by test_ampere_kernel_sim.py in a subprocess with NUMBA_ENABLE_CUDASIM=1:
``python ampere_sim_cases.py NAME [NAME ...]`` (``all`` runs every case).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mmaplug.analysis.epilogue import EpilogueInput, EpilogueOutput, EpilogueProgram, Instr
from mmaplug.codegen import emitter
from mmaplug.codegen.emitter import REDUCE_VECTOR_MIN
from mmaplug.ir.dtypes import DType

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: ampere_harness
from ampere_harness import Case, config_for, run_case  # noqa: E402

SMALL = dict(cta_tile=(32, 32, 32), warp_tile=(16, 16, 32), stages=2)

# bias + exact GELU to fp16, plus the float32 pre-activation (acc + bias) as an aux output
BIAS_GELU_AUX = EpilogueProgram(
    inputs=(EpilogueInput(name="bias", dtype=DType.float16, axes=("n",)),),
    instrs=(
        Instr(op="acc"),
        Instr(op="input", arg=0),
        Instr(op="add", srcs=(0, 1)),
        Instr(op="gelu", srcs=(2,)),
    ),
    outputs=(
        EpilogueOutput(name="d", src=3, dtype=DType.float16),
        EpilogueOutput(name="pre", src=2, dtype=DType.float32),
    ),
)

CASES = {
    # name: (Case, config overrides)
    "tn_f16": (Case(m=40, n=24, k=40), SMALL),
    "tt_f16": (Case(m=40, n=24, k=40, b_k_inner=False), SMALL),
    "nn_f16": (Case(m=40, n=24, k=40, a_k_inner=False), SMALL),
    "nt_bf16": (
        Case(m=40, n=24, k=40, a_k_inner=False, b_k_inner=False, dtype=DType.bfloat16),
        SMALL,
    ),  # noqa: E501
    "splitk2_alpha_beta": (
        Case(m=32, n=32, k=96, epilogue="alpha_beta", batch=2),
        dict(SMALL, splitk=2),
    ),
    "bias_gelu_bk16_s3": (
        Case(m=32, n=48, k=56, epilogue="bias_gelu"),
        dict(cta_tile=(32, 32, 16), warp_tile=(16, 16, 16), stages=3),
    ),
    "odd_vec1_relu_aux": (
        Case(m=37, n=19, k=45, epilogue="relu_aux", b_k_inner=False),
        dict(SMALL, cta_order="column_major", grid_swizzle=2),
    ),
    # regressions found on the H200: the K start of prologue stage s >= 1 lost its parentheses
    # (odd K with 3+ stages read past the tile; split-K of M/N-inner operands read wrong K).
    "odd_k_stages3": (
        Case(m=37, n=21, k=21, epilogue="relu_aux"),
        dict(cta_tile=(32, 32, 16), warp_tile=(16, 16, 16), stages=3),
    ),
    "splitk2_nt": (Case(m=40, n=24, k=96, a_k_inner=False, b_k_inner=False), dict(SMALL, splitk=2)),
    # the split-K reduce kernel on an odd count of partials (2 x 37 x 19: one element a thread)
    # and, with its vector threshold lowered to 0 (REDUCE_VECTOR_MIN: 2**18 outputs on a GPU),
    # on 2 x 38 x 19, four elements a thread whose four cross rows (and, at element 722, the
    # batch); bias + GELU + aux on each
    "splitk3_odd_total_batch2": (
        Case(m=37, n=19, k=96, batch=2),
        dict(SMALL, splitk=3, epilogue=BIAS_GELU_AUX),
    ),
    "splitk3_vector_reduce_batch2": (
        Case(m=38, n=19, k=96, batch=2),
        dict(SMALL, splitk=3, epilogue=BIAS_GELU_AUX),
    ),
    # the vector epilogue (4 columns per thread): N odd, so every row is misaligned and the
    # last group of each row is partial (scalar stores); then N % 4 == 0 with a partial N tile
    # (8- and 16-byte stores), batch 2
    "odd_n_bias_gelu_aux": (
        Case(m=37, n=45, k=40),
        dict(SMALL, epilogue=BIAS_GELU_AUX, grid_swizzle=2),
    ),
    "n44_bias_gelu_aux_batch2": (
        Case(m=40, n=44, k=40, batch=2, b_k_inner=False),
        dict(SMALL, epilogue=BIAS_GELU_AUX),
    ),
    "bk64_w32_pad_vec4": (
        Case(m=64, n=32, k=72, pad=4, a_k_inner=False, shared_b=True, batch=2),
        dict(cta_tile=(64, 32, 64), warp_tile=(32, 32, 64), stages=2),
    ),
}


def main(names: list[str]) -> int:
    if names == ["all"]:
        names = list(CASES)
    bad = 0
    for name in names:
        case, overrides = CASES[name]
        emitter.REDUCE_VECTOR_MIN = 0 if "vector_reduce" in name else REDUCE_VECTOR_MIN
        cfg = config_for(case, **overrides)
        t0 = time.time()
        res = run_case(case, cfg)
        res.update(name=name, seconds=round(time.time() - t0, 1), config=cfg.name)
        print(json.dumps(res), flush=True)
        bad += not res["ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
