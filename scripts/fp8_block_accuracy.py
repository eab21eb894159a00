"""Why block-scaled FP8 promotes its partial sums: accuracy tables on the GPU (issue 24).

Hopper's FP8 wgmma adds into its float32 accumulators with fewer bits (about 14). The
block-scaled kernel sums one block of 128 K in the tensor cores, then adds it to float32
registers scaled (the promotion); the tensorwise kernel sums all of K in the tensor cores, as
cuBLASLt does with ``use_fast_accum=True``. Two tables, for K = 1024 ... 16384::

    python scripts/fp8_block_accuracy.py [--m 1024 --n 1024] [--json OUT]

1. **Promotion** - the same e4m3 operands and unit scales, float32 output, relative Frobenius
   error against float64 of those operands: ours block-scaled (promoted every 128), ours
   tensorwise (not promoted), cuBLASLt default (promoted) and fast (not promoted).
2. **Quantisation** - float32 activations whose rows span 2**-8 ... 2**8 and weights whose
   128x128 blocks do too, quantised to e4m3 per tensor (one scale each, as per-tensor recipes)
   and per block (1x128 / 128x128, DeepSeek-V3), bfloat16 output, error against float64 of the
   unquantised product.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import mmaplug as mp

BLOCK = 128
E4M3_MAX = 448.0
KS = (1024, 2048, 4096, 8192, 16384)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def _rel_rows(got: torch.Tensor, want: torch.Tensor) -> float:
    """The mean over rows of each row's relative error: every token counts alike, however
    small its values (a Frobenius norm would see the largest rows only)."""
    err = (got.double() - want).norm(dim=1) / want.norm(dim=1)
    return float(err.mean())


def _fusion(m: int, n: int, k: int, scale: str, out: object) -> mp.Fusion:
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    shapes = {"block": ([m, kb], [kb, nb]), "tensor": ([], [])}[scale]
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([k, n], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor(shapes[0], dtype=mp.float32)
        sb = fd.define_tensor(shapes[1], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=out))
    return fd.fusion


def promotion(m: int, n: int, k: int, gen: torch.Generator) -> dict[str, float]:
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    want = a.double() @ w.double().t()
    one = torch.ones((), device="cuda")
    blocks = [
        torch.ones(m, k // BLOCK, device="cuda"),
        torch.ones(k // BLOCK, n // BLOCK, device="cuda"),
    ]
    row = {}
    for name, scale, scales in (
        ("ours_block", "block", blocks),
        ("ours_tensor", "tensor", [one, one]),
    ):
        (got,) = mp.compile(_fusion(m, n, k, scale, mp.float32)).execute([a, w.t(), *scales])
        row[name] = _rel(got, want)
    for name, fast in (("cublaslt_default", False), ("cublaslt_fast", True)):
        got = torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                               use_fast_accum=fast)  # fmt: skip
        row[name] = _rel(got, want)
    return row


def _quantise_blocks(x: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """*x* [R, K] in blocks of rows x 128: e4m3 values and float32 scales [R / rows, K / 128]."""
    r, k = x.shape
    blocks = x.reshape(r // rows, rows, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / E4M3_MAX
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn).reshape(r, k)
    return q, scale.float()


def quantisation(m: int, n: int, k: int, gen: torch.Generator) -> dict[str, float]:
    spread = lambda *s: 2.0 ** (16 * torch.rand(*s, device="cuda", generator=gen) - 8)  # noqa: E731
    x = torch.randn(m, k, device="cuda", generator=gen) * spread(m, 1)
    w = torch.randn(n, k, device="cuda", generator=gen)
    w = (
        w.reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK) * spread(n // BLOCK, 1, k // BLOCK, 1)
    ).reshape(n, k)
    want = x.double() @ w.double().t()
    row = {}
    xs, ws = x.abs().max() / E4M3_MAX, w.abs().max() / E4M3_MAX
    xq, wq = (x / xs).to(torch.float8_e4m3fn), (w / ws).to(torch.float8_e4m3fn)
    (got,) = mp.compile(_fusion(m, n, k, "tensor", mp.bfloat16)).execute(
        [xq, wq.t(), xs.reshape(()).float(), ws.reshape(()).float()]
    )
    row["per_tensor"] = _rel_rows(got, want)
    (xq, sx), (wq, sw) = _quantise_blocks(x, 1), _quantise_blocks(w, BLOCK)
    (got,) = mp.compile(_fusion(m, n, k, "block", mp.bfloat16)).execute(
        [xq, wq.t(), sx, sw.t().contiguous()]
    )
    row["per_block"] = _rel_rows(got, want)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"promotion (same e4m3 operands, unit scales, float32 out; m={args.m} n={args.n})")
    heads = ("ours block", "ours tensor", "cuBLASLt dflt", "cuBLASLt fast")
    print(f"{'K':>6} " + " ".join(f"{h:>{len(h) + 1}}" for h in heads))
    for k in KS:
        r = promotion(args.m, args.n, k, gen)
        rows.append({"table": "promotion", "k": k, **r})
        print(f"{k:>6} {r['ours_block']:>11.2e} {r['ours_tensor']:>12.2e} "
              f"{r['cublaslt_default']:>14.2e} {r['cublaslt_fast']:>14.2e}")  # fmt: skip
    print("quantisation (rows of A, blocks of B spanning 2**-8..2**8; bf16 out; mean row error)")
    print(f"{'K':>6} {'per tensor':>11} {'per block':>10}")
    for k in KS:
        r = quantisation(args.m, args.n, k, gen)
        rows.append({"table": "quantisation", "k": k, **r})
        print(f"{k:>6} {r['per_tensor']:>11.2e} {r['per_block']:>10.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
