"""Ampere GEMM on a real GPU: the correctness matrix, then timings against torch.matmul.

Run on the device machine (see DEVELOPERS.md for the install recipe):
    set -o pipefail; PYTHONUNBUFFERED=1 python scripts/device_ampere.py 2>&1 | tee $OUT/log
Options: ``--quick`` (fewer cases), ``--no-check``, ``--no-bench``, ``--workers N``.
Writes the tables to stdout and, when $OUT is set, to ``$OUT/ampere_results.json``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp_
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # ampere_harness

MATRIX_SHAPE = dict(m=256, n=192, k=320)
ODD_SHAPE = dict(m=504, n=136, k=248)
DEFAULT_TILES = dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), stages=3)


def _cases(quick: bool):
    from ampere_harness import EPILOGUES, Case

    from mmaplug.ir.dtypes import DType

    groups = {}  # config key -> list of (label, case, overrides)
    dtypes = (DType.float16, DType.bfloat16)
    layouts = list(itertools.product((True, False), (True, False)))
    for dt, (ak, bk), epi, sk in itertools.product(dtypes, layouts, EPILOGUES, (1, 2)):
        if quick and (epi in ("alpha_beta",) or (dt is DType.bfloat16 and sk == 2)):
            continue
        key = (dt.label, ak, bk, epi, sk)
        for batch in (1, 3):
            case = Case(
                dtype=dt,
                a_k_inner=ak,
                b_k_inner=bk,
                epilogue=epi,
                batch=batch,
                seed=batch,
                **MATRIX_SHAPE,
            )
            groups.setdefault(key, []).append((case, dict(DEFAULT_TILES, splitk=sk)))
    for dt, (ak, bk) in itertools.product(dtypes, layouts):
        case = Case(dtype=dt, a_k_inner=ak, b_k_inner=bk, epilogue="bias_gelu", **ODD_SHAPE)
        groups.setdefault(("odd", dt.label, ak, bk), []).append((case, dict(DEFAULT_TILES)))
    # misaligned strides: vec 1 (odd K), vec 2 / 4 (padded), grid swizzle + column-major order
    groups[("vec1",)] = [
        (Case(m=77, n=45, k=51, epilogue="relu_aux"), dict(DEFAULT_TILES, cta_order="column_major"))
    ]
    groups[("vec2",)] = [
        (Case(m=130, n=66, k=98, pad=2, a_k_inner=False), dict(DEFAULT_TILES, grid_swizzle=3))
    ]
    groups[("vec4",)] = [
        (
            Case(m=200, n=300, k=100, pad=4, b_k_inner=False, shared_b=True, batch=2),
            dict(DEFAULT_TILES, splitk=3),
        )
    ]
    groups[("big_tile",)] = [
        (Case(m=300, n=520, k=200), dict(cta_tile=(128, 256, 32), warp_tile=(64, 64, 32), stages=4))
    ]
    return list(groups.values())


def _worker(groups):
    from ampere_harness import config_for, run_case

    out = []
    for group in groups:
        for case, overrides in group:
            label = (
                f"{case.dtype.label} a_k_inner={case.a_k_inner} b_k_inner={case.b_k_inner} "
                f"{case.epilogue} {case.m}x{case.n}x{case.k} batch={case.batch} "
                f"splitk={overrides.get('splitk', 1)} tiles={overrides['cta_tile']}"
            )
            t0 = time.time()
            try:
                cfg = config_for(case, **overrides)
                res = run_case(case, cfg)
            except Exception as exc:  # noqa: BLE001 - report and keep going
                res = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc()[-1500:],
                }
            res["label"] = label
            res["seconds"] = round(time.time() - t0, 1)
            out.append(res)
    return out


def run_matrix(quick: bool, workers: int):
    groups = _cases(quick)
    chunks = [groups[i::workers] for i in range(workers)]
    ctx = mp_.get_context("spawn")
    t0 = time.time()
    with ctx.Pool(workers) as pool:
        results = [r for part in pool.map(_worker, chunks) for r in part]
    bad = [r for r in results if not r["ok"]]
    print(
        f"\n== correctness: {len(results) - len(bad)}/{len(results)} passed "
        f"({time.time() - t0:.0f} s, {workers} workers)"
    )
    for r in results:
        flag = "ok  " if r["ok"] else "FAIL"
        extra = (
            r.get("error", "")
            or f"max_err={r.get('max_err', 0):.3g} tol_ratio={r.get('tol_ratio', 0):.3f} "
            f"nan={r.get('nan', 0)}"
        )
        print(f"{flag} {r['label']}: {extra} ({r['seconds']} s)")
        if not r["ok"] and "trace" in r:
            print(r["trace"])
    return results


def bench_one(label, m, n, k, dtype_name, overrides, epilogue="none"):
    import numpy as np
    import torch
    from ampere_harness import epilogue_program
    from numba import cuda

    from mmaplug.ir.dtypes import DType
    from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, build
    from mmaplug.plugins.ampere.launch import _prepared, run_gemm
    from mmaplug.tune.measure import cuda_median_ms

    dt = DType[dtype_name]
    tdt = torch.float16 if dt is DType.float16 else torch.bfloat16
    x = torch.randn(m, k, device="cuda", dtype=tdt)
    w = torch.randn(n, k, device="cuda", dtype=tdt)
    bias = torch.randn(n, device="cuda", dtype=tdt)
    y = torch.empty(m, n, device="cuda", dtype=tdt)

    def u16(t):
        return cuda.as_cuda_array(t.view(torch.int16).reshape(-1)).view(np.uint16)

    prog = epilogue_program(epilogue, dt)
    cfg = AmpereKernelConfig(operand_dtype=dt, epilogue=prog, **overrides)
    ins = [(u16(bias), 0, 0, 1)] if epilogue == "bias_gelu" else []
    t0 = time.time()
    kern = build(cfg)

    def ours():
        run_gemm(
            cfg, (u16(x), 0, k), (u16(w), 0, k), ins, [], [(u16(y), 0, n)], m=m, n=n, k=k, batch=1
        )

    ours()
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    k_main = _prepared(kern, "ampere_gemm", cfg.smem_bytes)
    regs = k_main.regs_per_thread
    local = k_main.local_mem_per_thread
    ref = torch.nn.functional.linear(x, w)
    if epilogue == "bias_gelu":
        ref = torch.nn.functional.gelu(ref + bias)
    err = (y.float() - ref.float()).abs().max().item() / max(ref.float().abs().max().item(), 1e-6)
    t_ours = cuda_median_ms(ours, reps=7, inner=10, warmup=3)
    if epilogue == "bias_gelu":
        t_torch = cuda_median_ms(
            lambda: torch.nn.functional.gelu(torch.nn.functional.linear(x, w, bias)),
            reps=7,
            inner=10,
            warmup=3,
        )
    else:
        t_torch = cuda_median_ms(lambda: torch.matmul(x, w.t()), reps=7, inner=10, warmup=3)
    tflops = 2 * m * n * k / t_ours / 1e9
    row = dict(
        label=label,
        shape=f"{m}x{n}x{k}",
        dtype=dtype_name,
        epilogue=epilogue,
        config=cfg.name,
        cta_order=cfg.cta_order,
        grid_swizzle=cfg.grid_swizzle,
        ours_ms=round(t_ours, 4),
        torch_ms=round(t_torch, 4),
        ratio=round(t_torch / t_ours, 3),
        tflops=round(tflops, 1),
        regs=regs,
        local_bytes=local,
        smem=cfg.smem_bytes,
        compile_s=round(compile_s, 1),
        rel_err=float(f"{err:.3g}"),
    )
    print("  ".join(f"{k_}={v}" for k_, v in row.items()), flush=True)
    return row


def run_bench(quick: bool):
    t128 = dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), stages=3)
    variants = [
        ("128x128x32 w64x64 s4 swz8", dict(t128, stages=4, grid_swizzle=8)),
        ("128x128x32 w64x64 s3 swz8", dict(t128, grid_swizzle=8)),
        (
            "128x256x32 w64x64 s3 swz8",
            dict(cta_tile=(128, 256, 32), warp_tile=(64, 64, 32), stages=3, grid_swizzle=8),
        ),
        (
            "256x128x32 w64x64 s3 swz8",
            dict(cta_tile=(256, 128, 32), warp_tile=(64, 64, 32), stages=3, grid_swizzle=8),
        ),
        (
            "128x128x64 w64x64 s3 swz8",
            dict(cta_tile=(128, 128, 64), warp_tile=(64, 64, 64), stages=3, grid_swizzle=8),
        ),
        (
            "256x128x64 w64x64 s4 swz8",
            dict(cta_tile=(256, 128, 64), warp_tile=(64, 64, 64), stages=4, grid_swizzle=8),
        ),
    ]
    if quick:
        variants = variants[:2]
    rows = []
    print("\n== timing (CUDA-event medians; ratio = torch_ms / ours_ms)")
    for label, ov in variants:
        rows.append(_safe(bench_one, label, 4096, 4096, 4096, "float16", ov))
    ok = [r for r in rows if r and r.get("ours_ms")]
    best = min(ok, key=lambda r: r["ours_ms"]) if ok else None
    best_ov = dict(variants[rows.index(best)][1]) if best else t128
    print(f"best 4096^3 fp16 variant: {best and best['label']}")
    rows.append(
        _safe(bench_one, "best, bias+gelu", 4096, 4096, 4096, "float16", best_ov, "bias_gelu")
    )
    rows.append(_safe(bench_one, "best", 4096, 4096, 4096, "bfloat16", best_ov))
    rows.append(_safe(bench_one, "best", 8192, 8192, 8192, "float16", best_ov))
    rows.append(_safe(bench_one, "128x128 splitk1", 128, 4096, 4096, "float16", t128))
    rows.append(
        _safe(bench_one, "128x128 splitk4", 128, 4096, 4096, "float16", dict(t128, splitk=4))
    )
    return rows


def _safe(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        print(f"FAILED {args[:2]}: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        return {"label": args[0], "error": str(exc)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    args = ap.parse_args()
    import numba
    import numpy as np

    print(f"python {sys.version.split()[0]} numpy {np.__version__} numba {numba.__version__}")
    try:
        import torch

        print(f"torch {torch.__version__} device {torch.cuda.get_device_name()}")
    except Exception as exc:  # noqa: BLE001
        print(f"torch unavailable: {exc}")
    report = {}
    if not args.no_check:
        report["matrix"] = run_matrix(args.quick, args.workers)
    if not args.no_bench:
        report["bench"] = run_bench(args.quick)
    from probes import save_to_out

    save_to_out("ampere_results.json", report)
    failed = sum(1 for r in report.get("matrix", []) if not r["ok"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
