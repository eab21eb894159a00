"""Run Ampere GEMM cases in Numba's CUDA simulator; one JSON line per case on stdout.

Invoked by test_ampere_kernel_sim.py in a subprocess with NUMBA_ENABLE_CUDASIM=1:
``python ampere_sim_cases.py NAME [NAME ...]`` (``all`` runs every case).
"""

from __future__ import annotations

import json
import sys
import time

from mmaplug.dtypes import DType
from mmaplug.plugins.ampere.harness import Case, config_for, run_case

SMALL = dict(cta_tile=(32, 32, 32), warp_tile=(16, 16, 32), stages=2)

CASES = {
    # name: (Case, config overrides)
    "tn_f16": (Case(m=40, n=24, k=40), SMALL),
    "tt_f16": (Case(m=40, n=24, k=40, b_k_inner=False), SMALL),
    "nn_f16": (Case(m=40, n=24, k=40, a_k_inner=False), SMALL),
    "nt_bf16": (Case(m=40, n=24, k=40, a_k_inner=False, b_k_inner=False, dtype=DType.bfloat16), SMALL),
    "splitk2_alpha_beta": (Case(m=32, n=32, k=96, epilogue="alpha_beta", batch=2),
                           dict(SMALL, splitk=2)),
    "bias_gelu_bk16_s3": (Case(m=32, n=48, k=56, epilogue="bias_gelu"),
                          dict(cta_tile=(32, 32, 16), warp_tile=(16, 16, 16), stages=3)),
    "odd_vec1_relu_aux": (Case(m=37, n=19, k=45, epilogue="relu_aux", b_k_inner=False),
                          dict(SMALL, cta_order="column_major", grid_swizzle=2)),
    # regressions found on the H200: the K start of prologue stage s >= 1 lost its parentheses
    # (odd K with 3+ stages read past the tile; split-K of M/N-inner operands read wrong K).
    "odd_k_stages3": (Case(m=37, n=21, k=21, epilogue="relu_aux"),
                      dict(cta_tile=(32, 32, 16), warp_tile=(16, 16, 16), stages=3)),
    "splitk2_nt": (Case(m=40, n=24, k=96, a_k_inner=False, b_k_inner=False), dict(SMALL, splitk=2)),
    "bk64_w32_pad_vec4": (Case(m=64, n=32, k=72, pad=4, a_k_inner=False, shared_b=True, batch=2),
                          dict(cta_tile=(64, 32, 64), warp_tile=(32, 32, 64), stages=2)),
}


def main(names: list[str]) -> int:
    if names == ["all"]:
        names = list(CASES)
    bad = 0
    for name in names:
        case, overrides = CASES[name]
        cfg = config_for(case, **overrides)
        t0 = time.time()
        res = run_case(case, cfg)
        res.update(name=name, seconds=round(time.time() - t0, 1), config=cfg.name)
        print(json.dumps(res), flush=True)
        bad += not res["ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
