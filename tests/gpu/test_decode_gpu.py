"""GPU tier: the decode kernel (few activation rows, the weight streamed once) against float64,
random data, outputs poisoned before each call, through the bound (fast) launch and the checked
one."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

SHAPES = [(1, 4096, 4096), (5, 1000, 520), (8, 2048, 8192), (16, 1040, 1024), (3, 16, 64)]
CASES = list(itertools.product(SHAPES, (mp.float16, mp.bfloat16), ("none", "bias_gelu")))


def _fusion(m: int, n: int, k: int, dtype: object, epilogue: str) -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        w = fd.define_tensor([n, k], dtype=dtype)
        if epilogue == "bias_gelu":
            bias = fd.define_tensor([n], dtype=dtype)
            y = fd.ops.gelu(fd.ops.linear(x, w, bias))
        else:
            y = fd.ops.linear(x, w)
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


@pytest.mark.parametrize(
    ("shape", "dtype", "epilogue"),
    CASES,
    ids=[f"{m}x{n}x{k}_{d.label}_{e}" for (m, n, k), d, e in CASES],
)
def test_decode_matches_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, dtype: object, epilogue: str
) -> None:
    fusion = _fusion(*shape, dtype, epilogue)
    inputs = checks.inputs(fusion, np.random.default_rng(5))
    compiled = checks.run(fusion, pm, inputs)
    assert compiled.spec.scheduler == "decode"


@pytest.mark.parametrize(("warps", "stages"), [(1, 1), (2, 4), (4, 3), (8, 2)])
def test_every_warp_split_and_depth(
    pm: mp.PluginManager, checks: Checks, warps: int, stages: int
) -> None:
    """Each legal K split over warps and chunks in flight, on a ragged K (the last chunk half
    past it) and N (the last CTA's rows clamped)."""
    fusion = _fusion(7, 1000, 1480, mp.bfloat16, "bias_gelu")
    inputs = checks.inputs(fusion, np.random.default_rng(6))
    compiled = checks.run(fusion, pm, inputs, {"splitk_factor": warps, "stages": stages})
    assert (compiled.params.splitk_factor, compiled.params.stages) == (warps, stages)


@pytest.mark.parametrize(("m", "warps", "stages"), [(1, 4, 3), (16, 2, 4), (9, 8, 1)])
def test_two_row_tiles(
    pm: mp.PluginManager, checks: Checks, m: int, warps: int, stages: int
) -> None:
    """32 weight rows a CTA, two row tiles a warp: ragged N (the last CTA's 8 rows) and K."""
    fusion = _fusion(m, 1000, 1480, mp.bfloat16, "bias_gelu")
    tile = (8 * -(-m // 8), 32, 64)
    overrides = {"cta_tile": tile, "warp_tile": tile, "splitk_factor": warps, "stages": stages}
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(7)), overrides)
    assert compiled.kernel_name.endswith(f"_w{warps}_u{stages}_r2")


def test_the_checked_launch_path(
    pm: mp.PluginManager, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MMAPLUG_FAST_LAUNCH=0: every argument checked against the kernel's signature."""
    monkeypatch.setenv("MMAPLUG_FAST_LAUNCH", "0")
    fusion = _fusion(2, 512, 512, mp.float16, "bias_gelu")
    checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(7)))


BATCHED = [((32, 1, 4096, 128), mp.bfloat16), ((8, 16, 4096, 4096), mp.bfloat16),
           ((3, 5, 1000, 520), mp.float16), ((4, 8, 2048, 2048), mp.bfloat16)]  # fmt: skip


def _batched(batch: int, m: int, n: int, k: int, dtype: object) -> mp.Fusion:
    """gelu(a @ b) of *batch* products, each its own activations and weight (K-inner)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([batch, m, k], dtype=dtype, stride_order=[2, 1, 0])
        b = fd.define_tensor([batch, k, n], dtype=dtype, stride_order=[2, 0, 1])
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.matmul(a, b)), dtype))
    return fd.fusion


@pytest.mark.parametrize(
    ("shape", "dtype", "fast"),
    [(s, d, True) for s, d in BATCHED] + [(BATCHED[2][0], BATCHED[2][1], False)],
    ids=[f"{b}x{m}x{n}x{k}_{d.label}" for (b, m, n, k), d in BATCHED] + ["checked"],
)
def test_batched_products_match_float64(
    checks: Checks, monkeypatch: pytest.MonkeyPatch, shape: tuple, dtype: object, fast: bool
) -> None:
    """A batch of products in one launch (a CTA row per product), through the bound launch and
    the checked one (MMAPLUG_FAST_LAUNCH=0); hopper blocked, which takes the batches of more
    than 8 rows where it plans."""
    if not fast:
        monkeypatch.setenv("MMAPLUG_FAST_LAUNCH", "0")
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    fusion = _batched(*shape, dtype)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(8)))
    assert compiled.spec.scheduler == "decode"


def test_a_batch_of_8_rows_plans_decode(pm: mp.PluginManager, checks: Checks) -> None:
    """With every scheduler: 4 products of 8 rows and 4 KiB weight rows run on decode's CTAs
    of 4 warps (run 192)."""
    fusion = _batched(*BATCHED[3][0], mp.bfloat16)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(9)))
    assert compiled.spec.scheduler == "decode"
    assert compiled.params.splitk_factor == 4


def test_a_batch_of_short_weight_rows_plans_hopper_swapped(
    pm: mp.PluginManager, checks: Checks
) -> None:
    """With every scheduler: 32 products of one row over 256-byte weight rows (1,024 tiles of
    128 rows) run on hopper's transposed product, two consumers of 64 weight rows a tile and
    the epilogue staged (run 339: 9.76 -> 7.87 us against decode's CTAs of one warp)."""
    fusion = _batched(*BATCHED[0][0], mp.bfloat16)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(9)))
    assert compiled.spec.scheduler == "hopper"
    params = compiled.params
    assert params.swap_ab and params.use_smem_epilogue
    assert (params.cta_tile.m, params.warp_tile.m) == (128, 64)


def _horizontal(m: int, n: int, k: int, dtype: object, kind: str) -> mp.Fusion:
    """x [M, K] against weights [N, K] sharing it: the llama FFN ``silu(x @ W1.T) * (x @
    W3.T)`` (``ffn``) or q, k and v as three outputs (``qkv``)."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=dtype)
        h = 3 if kind == "qkv" else 2
        ys = [fd.ops.linear(x, fd.define_tensor([n, k], dtype=dtype)) for _ in range(h)]
        if kind == "qkv":
            for y in ys:
                fd.add_output(fd.ops.cast(y, dtype))
        else:
            fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(ys[0]), ys[1]), dtype))
    return fd.fusion


HORIZONTAL = [
    ((1, 14336, 4096), mp.bfloat16, "ffn", None),  # llama 8B's FFN, a decode step
    ((16, 4096, 4096), mp.bfloat16, "ffn", None),  # 16 rows of 8 KiB weight rows: kept
    ((4, 1000, 520), mp.float16, "ffn", (2, 3)),  # ragged N and K
    ((1, 8192, 8192), mp.bfloat16, "ffn", (8, 3)),  # 16 warps a CTA: the most that fit
    ((16, 1040, 1024), mp.float16, "ffn", (4, 4)),
    ((3, 1024, 4096), mp.bfloat16, "qkv", None),
    ((9, 520, 1040), mp.float16, "qkv", (1, 1)),
    ((16, 1000, 1024), mp.bfloat16, "ffn", (2, 3, 32)),  # two row tiles, the last CTA's 8 rows
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "dtype", "kind", "plan"),
    HORIZONTAL,
    ids=[f"{m}x{n}x{k}_{d.label}_{kind}_{p}" for (m, n, k), d, kind, p in HORIZONTAL],
)
def test_horizontal_fusions_match_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, dtype: object, kind: str, plan: tuple
) -> None:
    """A horizontal fusion is one decode kernel, each product's warps in one CTA: with every
    scheduler, by default and with *plan*'s (warps a product, chunks in flight[, weight rows a
    CTA])."""
    fusion = _horizontal(*shape, dtype, kind)
    overrides = {"splitk_factor": plan[0], "stages": plan[1]} if plan else None
    if plan and len(plan) > 2:  # (and the CTA's weight rows)
        tile = (8 * -(-shape[0] // 8), plan[2], 64)
        overrides = {**(overrides or {}), "cta_tile": tile, "warp_tile": tile}
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(10)), overrides)
    assert compiled.spec.scheduler == "decode"
    assert compiled.kernel_name.endswith("_h3" if kind == "qkv" else "_h2")


def test_unaligned_rows_run_on_a_kernel_planned_without_decode() -> None:
    """A view whose data starts off 16 bytes is declined; execute runs it on another kernel
    (ampere: hopper is blocked, its TMA would decline the view too)."""
    assert torch is not None
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    compiled = mp.compile(_fusion(2, 64, 64, mp.float16, "none"), pm=pm)
    x = torch.randn(2, 72, device="cuda", dtype=torch.float16)[:, 1:65]
    w = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    with pytest.warns(mp.FallbackWarning, match="the decode kernel declines these tensors"):
        (out,) = compiled.execute([x, w])
    ref = x.double() @ w.double().T
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
