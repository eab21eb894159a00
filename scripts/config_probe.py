"""Configurations of one problem set side by side, as CUDA-graph replays against cuBLAS in the
same run (BENCHMARKS.md runs 86 and 88): every output is checked against float64 first and a
wrong one is not timed. On the device machine, after the README's install::

    python scripts/config_probe.py splitk   # hopper split-K 1-32 on four tiles (run 86)
    python scripts/config_probe.py decode   # the decode kernel past M = 16 (run 88)
    python scripts/config_probe.py skinny   # hopper tiles and split-K at M = 32-512 (run 92)
    python scripts/config_probe.py fp8      # FP8 ping-pong against the default (run 92)
    python scripts/config_probe.py swap     # skinny rows as the transposed product (run 98)
    python scripts/config_probe.py decode_swap  # M <= 16: the decode kernel against the swap
    python scripts/config_probe.py fp8_swap     # FP8 skinny rows swapped
    python scripts/config_probe.py decode_long  # 9-16 rows, llama-70B weights, swap vs decode
    python scripts/config_probe.py decode_wave  # decode warps where the CTAs fill about one wave
    python scripts/config_probe.py fp8_decode_waves  # FP8 decode warps by waves against run 96's
    python scripts/config_probe.py decode_one_warp  # one warp a CTA past one wave, short rows
    python scripts/config_probe.py decode_past_one_wave  # FP8 rows, 9-16 FP8 rows to hopper
    python scripts/config_probe.py fp8_few_tiles  # FP8 9-16 rows on few swapped tiles: splits
    python scripts/config_probe.py fp8_few_rule  # FP8 9-16 rows about the few-tiles rule
    python scripts/config_probe.py fp8_lt_tiles  # FP8 decode rows on cuBLASLt's tile shapes
    python scripts/config_probe.py fp8_two_tiles  # FP8 rows of 9-16: decode warps and hopper
    python scripts/config_probe.py fp8_unroll   # FP8 decode with 6 and 8 chunks in flight
    python scripts/config_probe.py row_tiles    # decode CTAs of 32 weight rows (two row tiles)
    python scripts/config_probe.py kcluster     # split-K summed in the cluster vs the workspace
    python scripts/config_probe.py clusters     # clusters of 1/2/4, persistent grids cut or whole
    python scripts/config_probe.py cluster2x2   # large problems in pairs along M or N, and 2x2
    python scripts/config_probe.py ffn_tiles    # the llama FFN at 24-128 rows on narrower tiles
    python scripts/config_probe.py ffn_tiles_fp8  # the e4m3 FFN at 24-96 rows on narrower tiles
    python scripts/config_probe.py halves       # skinny rows swapped in parts, clusters along N
    python scripts/config_probe.py swap64       # the swap at 64 rows against the old default
    python scripts/config_probe.py swap_wide    # 96-512 rows: the transposed product, N up to 256
    python scripts/config_probe.py odd          # small, odd and batched problems: tiles, fixed cost
    python scripts/config_probe.py bk_ab        # the 128/256-deep 16-bit defaults at 64 of K
    python scripts/config_probe.py skinny_ab    # the 64-deep tie, the swap of 65-112 rows: A/B
    python scripts/config_probe.py deep_ab      # one consumer's tiles tied to 64 of K: A/B
    python scripts/config_probe.py narrow       # skinny rows on narrow N tiles, deep rings
    python scripts/config_probe.py narrow_ab    # the narrow streaming tiles against the old default
    python scripts/config_probe.py fp8_block    # block scales: tiles, K depth, rings, clusters
    python scripts/config_probe.py fp8_halves   # block scales on 64x256 warp tiles (chunks)
    python scripts/config_probe.py fp8_block_clusters  # 128x192 block-scaled in clusters of 2-4
    python scripts/config_probe.py swizzle      # the persistent tile order's groups (L2 reuse)
    python scripts/config_probe.py swizzle_ab   # the grouped tile order against the old default
    python scripts/config_probe.py overlap      # 128x128 against 128x256 tiles, bare and fused
    python scripts/config_probe.py fp8_fused    # FP8 defaults bare and fused, per row and tensor
    python scripts/config_probe.py tma_ab       # the epilogue's TMA stores against thread stores
    python scripts/config_probe.py tma_forced   # TMA stores forced where the rule keeps threads'
    python scripts/config_probe.py tma_fill     # TMA stores forced on tiles the rows do not fill
    python scripts/config_probe.py streamk      # the default plans with stream-K's tail pieces
    python scripts/config_probe.py fp8_pingpong  # FP8 on cuBLASLt's ping-pong 128x128 tiles
    python scripts/config_probe.py fp8_pairs    # FP8 targets under 12 waves: CTA pairs or alone
    python scripts/config_probe.py fp8_pairs_focus  # run 229's winners and losers, 3 rounds
    python scripts/config_probe.py fused_pp     # 4096^3 bias + GELU: ping-pong against the default
    python scripts/config_probe.py swap_split   # swapped skinny rows with K split 2 or 4
    python scripts/config_probe.py swizzle_wave  # the wave's output in hopper_swizzle: A/B
    python scripts/config_probe.py skinny_pairs  # one-wave rows of 96-512 in pairs along M
    python scripts/config_probe.py fp8_pp_pairs  # FP8 targets on ping-pong 128x128 pairs along N
    python scripts/config_probe.py fp8_wide_n   # e4m3 4096x28672x4096: clusters, order, ping-pong
    python scripts/config_probe.py fp8_pp_order  # ping-pong pairs along N in either tile order
    python scripts/config_probe.py fp8_scale_product  # FP8 sums scaled once by the scales' product
    python scripts/config_probe.py wide_n  # tiles of the widths between 64 and 256: A/B
    python scripts/config_probe.py wide_n_wave  # one-wave grids on 128 or 96 columns
    python scripts/config_probe.py tall   # tiles of 256 rows where they save whole waves: A/B
    python scripts/config_probe.py tall_widths  # tiles of 256 rows, 128-160 wide
    python scripts/config_probe.py tall_pairs   # 256x160 defaults alone or in CTA pairs
    python scripts/config_probe.py swap_staged  # swapped defaults (staged) against registers
    python scripts/config_probe.py batched_short  # short-row batches: decode or hopper swapped
    python scripts/config_probe.py fp8_decode_swap  # FP8 decode rows: decode or hopper swapped
    python scripts/config_probe.py cluster_start  # short clustered kernels (two installs: A/B)
    python scripts/config_probe.py fp8_chunks_ab  # block-scaled chunks and 128x192 (two installs)
    python scripts/config_probe.py narrow_pairs  # 16-bit 64-row tiles: pairs along M or alone
    python scripts/config_probe.py one_consumer  # the same grids on two consumers; K cut odd
    python scripts/config_probe.py k_depth  # 64x128x128 one-wave defaults: 64 of K, two consumers
    python scripts/config_probe.py wide_k  # wide weights' 64x128x64 defaults against 128 of K
    python scripts/config_probe.py odd_pitch  # rows not 128 bytes apart: pairs along M or alone

``splitk`` times the deep-K and weight-streaming problems of run 86 with ``splitk_factor``
1-32 on the default tile and three others. ``decode`` raises the decode scheduler's ``MAX_M``
to 64 in this process only and times its warps and chunks in flight beside hopper's default.
``skinny`` times the serving corpus's weight-streaming rows (M = 32-512) on five tiles
with split-K 1, 2 and 4. ``fp8`` times ping-pong consumers (one warpgroup's epilogue under the
other's main loop) against the default on FP8 products, bare and with bias + GELU, against
``torch._scaled_mm``. A configuration the rules refuse is named on stderr and skipped.

Each plan's graph is replayed alone by default. ``--in-turn`` replays it in turn with
cuBLAS's, as ``mmaplug targets`` does (each reported time then comes from those turns, and so
does cuBLAS's of the plan's line): at the 700 W cap a kernel's time can depend on what ran
before it, and runs 280-285 ranked the same block-scaled kernels one way replayed alone and
the other way in turn (docs/decisions.md, "Block-scaled FP8 against its target")::

    python scripts/config_probe.py fp8_chunks_ab --in-turn
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from unittest import mock

from ncu_probe import OVERRIDES, SWAPPED, parse_spec, problem_and_overrides, swap_split

import mmaplug as mp
import mmaplug.cuda.tensormap as tensormap
import mmaplug.plugins.decode.limits as decode_limits
import mmaplug.tune.targets as tune_targets
from mmaplug.cli.bench import torch_call
from mmaplug.errors import MatmulError
from mmaplug.heuristics.default.grid import work_units
from mmaplug.heuristics.default.streaming import STREAMING_STAGES
from mmaplug.ir.dtypes import DType
from mmaplug.planning.params import TileShape
from mmaplug.runtime.compile import compile as compile_fusion
from mmaplug.runtime.prebuild import prebuild
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.measure import graph_us, interleaved_graph_us, rel_error
from mmaplug.tune.work import problem_inputs, reference


def _wgmma_tiles(
    cta: tuple[int, int, int], warp: tuple[int, int, int] | None = None, k: int = 16, **extra: Any
) -> dict[str, Any]:
    """Overrides of hopper's tiles: *cta* over *warp* (*cta* when None), the wgmma of the warp
    tile's N and the operand type's K (16, or 32 for FP8), and the fields of *extra*."""
    warp = warp or cta
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, warp[1], k), **extra}


TILES: dict[str, dict[str, Any]] = {
    "default": {},
    "64x64x128": _wgmma_tiles((64, 64, 128), stages=4),
    "128x64x128": _wgmma_tiles((128, 64, 128), (64, 64, 128), stages=4),
    "128x128x64": _wgmma_tiles((128, 128, 64), (64, 128, 64), stages=5),
}
SKINNY_TILES: dict[str, dict[str, Any]] = {
    "default": {},
    "64x128x128": _wgmma_tiles((64, 128, 128), stages=4),
    "64x256x64": _wgmma_tiles((64, 256, 64), stages=4),
    "128x128x64": TILES["128x128x64"],
    "128x256x64": _wgmma_tiles((128, 256, 64), (64, 256, 64), stages=4),
}
SKINNY_SHAPES = [(32, 6144, 4096), (32, 8192, 28672), (48, 4096, 14336), (64, 28672, 4096),
                 (64, 8192, 8192), (96, 6144, 4096), (192, 4096, 14336), (256, 8192, 8192),
                 (384, 28672, 4096), (512, 10240, 8192), (512, 4096, 4096)]  # fmt: skip
SPLIT_SHAPES = [(256, 256, 16384), (128, 128, 32768), (64, 512, 28672), (512, 512, 65536),
                (32, 6144, 4096), (64, 8192, 8192), (96, 6144, 4096), (256, 8192, 8192),
                (1024, 1024, 8192)]  # fmt: skip
DECODE_SHAPES = [(32, 6144, 4096), (32, 8192, 28672), (64, 8192, 8192), (64, 28672, 4096),
                 (24, 10240, 8192), (48, 4096, 14336), (16, 4096, 14336)]  # fmt: skip
DECODE_SETS = [None] + [{"splitk_factor": w, "stages": s} for w in (4, 8) for s in (1, 2, 3)]


def splitk_jobs() -> list[tuple[TuneProblem, str, Any]]:
    jobs = []
    for m, n, k in SPLIT_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        for name, tile in TILES.items():
            for split in (1, 2, 4, 8, 16, 32):
                if split > 4 and k < 16384:
                    continue
                jobs.append((problem, f"{name} split {split}", {**tile, "splitk_factor": split}))
    return [(p, label, _compiled(p, overrides=ov)) for p, label, ov in jobs]


def skinny_jobs() -> list[tuple[TuneProblem, str, Any]]:
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in SKINNY_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        for name, tile in SKINNY_TILES.items():
            for split in (1, 2, 4) if tile else (None,):
                ov = {**tile, "splitk_factor": split} if tile else None
                jobs.append((problem, f"{name} split {split or 'default'}",
                             _compiled(problem, overrides=ov, pm=hopper)))  # fmt: skip
    return jobs


FP8_SETS: dict[str, dict[str, Any] | None] = {
    "default": None,
    **{
        f"pingpong 64x{n}x128 s{s}": _wgmma_tiles(
            (64, n, 128), k=32, stages=s, tiling_strategy="persistent_pingpong"
        )
        for n, s in ((256, 4), (256, 5), (128, 4), (128, 6))
    },
}


FP8_PROBLEMS = [((4096, 4096, 4096), "tensor"), ((4096, 4096, 4096), "row"),
                ((8192, 8192, 8192), "row"), ((2048, 14336, 5120), "row")]  # fmt: skip


def fp8_jobs() -> list[tuple[TuneProblem, str, Any]]:
    jobs = []
    for (m, n, k), scale in FP8_PROBLEMS:
        for epilogue in ("none", "bias_gelu"):
            problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale,
                                  epilogue=epilogue)  # fmt: skip
            jobs += [(problem, f"{scale} {epilogue} {name}", _compiled(problem, overrides=ov))
                     for name, ov in FP8_SETS.items()]  # fmt: skip
    return jobs


SWAP_SHAPES = [(32, 6144, 4096), (32, 4096, 4096), (64, 4096, 4096), (32, 8192, 28672),
               (48, 4096, 14336), (64, 28672, 4096), (64, 8192, 8192), (32, 1024, 16384),
               (64, 512, 28672), (16, 8192, 8192)]  # fmt: skip


def swap_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Each skinny row as itself (the default) and as its transposed product W X^T (its M the
    weight's rows, its N the activations) on tiles of 64 or 128 weight rows: what an operand
    swap would run, timed against cuBLAS on the original row."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in SWAP_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        swapped = TuneProblem(m=n, n=m, k=k, dtype="bfloat16")
        for bm, bk, stages in ((64, 128, 8), (64, 64, 12), (128, 64, 8), (128, 128, 5)):
            for split in (1, 2, 4):
                ov = _wgmma_tiles((bm, m, bk), (64, m, bk), splitk_factor=split)
                label = f"swap {bm}x{m}x{bk} s{{s}} split {split}"
                jobs += _deepest_job(swapped, ov, range(stages, 2, -1), hopper, label)
    return jobs


def _deepest(problem: TuneProblem, overrides: dict, depths: Any, pm: Any) -> tuple[int, Any] | None:
    """The first of *depths* stages that the rules allow with *overrides*, and its compiled
    fusion (the deepest ring that fits, for depths in descending order); None if none."""
    for depth in depths:
        try:
            ov = {**overrides, "stages": depth}
            return depth, compile_fusion(problem.fusion(), overrides=ov, pm=pm)
        except MatmulError:
            continue
    return None


def _deepest_job(
    problem: TuneProblem, overrides: dict, depths: Any, pm: Any, label: str
) -> list[tuple[TuneProblem, str, Any]]:
    """``_deepest`` as a job list: none, or *problem* under *label* (its ``{s}`` the stages)."""
    if found := _deepest(problem, overrides, depths, pm):
        depth, compiled = found
        return [(problem, label.format(s=depth), compiled)]
    return []


DECODE_SWAP_SHAPES = [
    (m, n, k)
    for m in (1, 2, 4, 8, 12, 16)
    for n, k in ((4096, 4096), (8192, 8192), (4096, 14336), (6144, 4096))
]


def decode_swap_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Decode rows (M <= 16) on the decode kernel (the default there) and on hopper's
    transposed product (hopper's default with decode blocked)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in DECODE_SWAP_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "decode default", _compiled(problem)))
        jobs.append((problem, "hopper default", _compiled(problem, pm=hopper)))
    return jobs


FP8_SWAP_SHAPES = [(m, n, k) for m in (24, 32, 48) for n, k in ((6144, 4096), (8192, 8192),
                                                               (4096, 14336))]  # fmt: skip


def fp8_swap_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """FP8 skinny rows (per-row scales, e4m3) on hopper's default and on its transposed
    product with 128- and 256-deep K tiles (the deepest ring that fits)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in FP8_SWAP_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="row")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        cols = 8 * -(-m // 8)
        for bk in (128, 256):
            ov = _wgmma_tiles((64, cols, bk), k=32, **SWAPPED)
            jobs += _deepest_job(problem, ov, (8, 6, 5, 4), hopper, f"swap 64x{cols}x{bk} s{{s}}")
    return jobs


FP8_FEW_TILES = [  # (m, n, k, scale): FP8 rows of 9-16 activations whose 64-row swapped tiles
    # fill half the SMs or less (16x4096x4096 per tensor: 0.75 of cuBLASLt, run 196)
    (16, 4096, 4096, "tensor"), (16, 4096, 4096, "row"), (12, 4096, 4096, "tensor"),
    (16, 2048, 8192, "tensor"), (16, 4096, 2048, "tensor"), (16, 6144, 4096, "tensor"),
]  # fmt: skip


def fp8_few_tiles_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_FEW_TILES`` on the default (hopper's transposed product), on it split 2 and 4 ways
    over K (through the workspace and summed in the cluster), on 128-deep stages, and on the
    decode kernel at 4 and 8 warps (hopper blocked)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    decode_only = mp.make_plugin_manager(block=["ampere", "hopper"])
    jobs = []
    for m, n, k, scale in FP8_FEW_TILES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        cols = 8 * -(-m // 8)
        for split in (2, 4):
            ov = _wgmma_tiles((64, cols, 256), k=32, splitk_factor=split, **SWAPPED)
            jobs += _deepest_job(
                problem, ov, (8, 6, 4), hopper, f"swap 64x{cols}x256 s{{s}} split {split}"
            )
            ov = {**ov, "splitk_in_cluster": True}
            jobs += _deepest_job(
                problem, ov, (8, 6, 4), hopper, f"swap 64x{cols}x256 s{{s}} cluster split {split}"
            )
        ov = _wgmma_tiles((64, cols, 128), k=32, **SWAPPED)
        jobs += _deepest_job(problem, ov, (12, 10, 8), hopper, f"swap 64x{cols}x128 s{{s}}")
        for warps in (4, 8):
            ov = {"splitk_factor": warps, "stages": 4}
            compiled = _compiled(problem, pm=decode_only, overrides=ov)
            jobs.append((problem, f"decode {warps} warps", compiled))
    return jobs


FP8_LT_ROWS = [  # (m, n, k): FP8 decode rows against cuBLASLt's own tiles (run 206's ncu:
    # 64x8 tiles in pairs along the activations at 16x4096x4096, 64x8 in fours along the weight
    # at M <= 8, 128x16 and 128x8 in pairs along the weight on 28672x4096)
    (16, 4096, 4096), (12, 4096, 4096), (8, 4096, 4096), (16, 8192, 8192), (16, 28672, 4096),
    (8, 8192, 8192), (8, 28672, 4096), (16, 6144, 4096), (16, 2048, 8192),
]  # fmt: skip


def fp8_lt_tiles_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_LT_ROWS`` (e4m3 per tensor) on the default and on hopper's transposed product in
    cuBLASLt's shapes: 64x8 tiles alone and in CTA pairs sharing the weight tile (rows of 9-16:
    two activation tiles), 64x16 and 128x16 tiles in pairs sharing the activation tile."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in FP8_LT_ROWS:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
        jobs.append((problem, "default", _compiled(problem)))
        cols = 8 * -(-m // 8)
        shapes = [((64, 8, 128), None, (1, 1)), ((64, 8, 128), None, (1, 2)),
                  ((64, 8, 256), None, (1, 2)), ((64, cols, 128), None, (2, 1)),
                  ((128, cols, 128), (64, cols, 128), (1, 1)),
                  ((128, cols, 128), (64, cols, 128), (2, 1))]  # fmt: skip
        for cta, warp, cluster in shapes:
            if cluster == (1, 2) and m <= 8:
                continue  # one activation tile: nothing to pair along it
            ov = _wgmma_tiles(cta, warp, k=32, cluster_dims=cluster, **SWAPPED)
            label = f"swap {'x'.join(map(str, cta))} s{{s}} cl{cluster[0]}x{cluster[1]}"
            jobs += _deepest_job(problem, ov, (16, 12, 10, 8, 6, 4), hopper, label)
    return jobs


FP8_FEW_RULE = [  # (m, n, k, scale): FP8 rows of 9-16 about "hopper's swapped tiles fill at most
    # half the SMs and weight rows of at most 8 KiB": inside (decode), outside (hopper)
    (16, 1040, 1024, "tensor"), (16, 2048, 8192, "row"), (12, 2048, 8192, "tensor"),
    (16, 4096, 2048, "tensor"), (16, 4096, 4096, "tensor"), (16, 4096, 4096, "row"),
    (12, 4096, 4096, "row"), (9, 4096, 4096, "tensor"), (16, 4096, 8192, "tensor"),
    (16, 3072, 8192, "tensor"), (16, 4224, 4096, "tensor"), (16, 4288, 4096, "tensor"),
    (16, 2048, 16384, "tensor"), (16, 4096, 16384, "tensor"),
]  # fmt: skip


def fp8_few_rule_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_FEW_RULE`` on hopper's plan (decode blocked) and decode's (hopper blocked), twice,
    interleaved."""
    pms = {
        "hopper": mp.make_plugin_manager(block=["decode", "ampere"]),
        "decode": mp.make_plugin_manager(block=["ampere", "hopper"]),
    }
    jobs = []
    for m, n, k, scale in FP8_FEW_RULE:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
        jobs += [(problem, label, _compiled(problem, pm=pm)) for label, pm in pms.items()] * 2
    return jobs


DECODE_LONG_SHAPES = [
    (m, n, k)
    for m in (9, 12, 16)
    for n, k in ((57344, 8192), (10240, 8192), (8192, 28672), (28672, 4096))
]


def decode_long_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows of 9-16 activations against llama-70B-sized weights (several waves of 64-row
    tiles): the decode kernel (the default there) against hopper's transposed product."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in DECODE_LONG_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "decode default", _compiled(problem)))
        cols = 8 * -(-m // 8)
        ov = _wgmma_tiles((64, cols, 128), stages=8, **SWAPPED)
        jobs.append(
            (problem, f"swap 64x{cols}x128 s8", _compiled(problem, overrides=ov, pm=hopper))
        )
    return jobs


KCLUSTER_SHAPES = [(64, 4096, 4096), (32, 1024, 16384), (32, 2048, 8192), (56, 6144, 4096),
                   (32, 6144, 4096), (64, 8192, 8192), (48, 4096, 14336), (64, 512, 28672),
                   (128, 4096, 4096), (256, 256, 16384), (512, 512, 16384),
                   (1024, 1024, 16384)]  # fmt: skip
KCLUSTER_TILES = {"64x64x256": ((64, 64, 256), None), "64x128x128": ((64, 128, 128), None),
                  "128x128x64": ((128, 128, 64), (64, 128, 64)),
                  "64x256x64": ((64, 256, 64), None)}  # fmt: skip


def kcluster_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Skinny and deep-K problems on hopper's default and with split-K 2-8 summed in the
    cluster (``splitk_in_cluster``) on four tiles and, up to 64 rows, the transposed product,
    each with the deepest ring that fits; the workspace's split-K beside it on the same tiles."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in KCLUSTER_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        sets = [(name, _wgmma_tiles(cta, warp, swap_ab=False, use_smem_epilogue=False,
                                    tiling_strategy="persistent"))
                for name, (cta, warp) in KCLUSTER_TILES.items()]  # fmt: skip
        if m <= 64:
            cols = 8 * -(-m // 8)
            sets.append((f"swap 64x{cols}x128", _wgmma_tiles((64, cols, 128), **SWAPPED)))
        for name, tiles in sets:
            for split in (2, 4, 8):
                for cluster in (True, False):
                    ov = {**tiles, "splitk_factor": split, "splitk_in_cluster": cluster}
                    how = "cluster" if cluster else "workspace"
                    label = f"{name} s{{s}} split {split} {how}"
                    jobs += _deepest_job(problem, ov, range(8, 2, -1), hopper, label)
    return jobs


CLUSTER_SHAPES = [(16, 8192, 8192), (24, 8192, 8192), (32, 4096, 4096), (32, 6144, 4096),
                  (32, 8192, 28672), (48, 4096, 14336), (56, 6144, 4096), (64, 4096, 4096),
                  (64, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 8192),
                  (2048, 14336, 5120)]  # fmt: skip
WHOLE = " whole"  # a label's suffix: the persistent grid of clusters launched uncut


def cluster_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Hopper's default (the transposed product up to 64 rows) beside the same plan in clusters
    of 1, 2 and 4 CTAs along M (multicasting B: the activations where swapped), each with the
    deepest ring that fits; every clustered plan also with its persistent grid uncut."""
    return _clustered(CLUSTER_SHAPES, ((1, 1), (2, 1), (4, 1)), whole=True)


CLUSTER2X2_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120),
                     (512, 10240, 8192), (4096, 6144, 4096), (1000, 1000, 1000)]  # fmt: skip


def cluster2x2_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Large problems (bf16) on hopper's default (CTA pairs along M where it chooses them) and
    on its tiles in clusters of 2 along M, 2 along N and 2x2 (A and B both multicast: a quarter
    fewer operand bytes out of L2 than pairs), each with the deepest ring that fits."""
    return _clustered(CLUSTER2X2_SHAPES, ((2, 1), (1, 2), (2, 2)), whole=False)


def _clustered(shapes: Any, clusters: Any, *, whole: bool) -> list[tuple[TuneProblem, str, Any]]:
    """Each bf16 problem of *shapes* on hopper's default, then on its plan in each of
    *clusters* with the deepest ring up to the default's that fits (*whole*: each clustered
    plan also with its persistent grid uncut)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in shapes:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        default = _compiled(problem, pm=hopper)
        jobs.append((problem, "default", default))
        if default is None:
            continue
        for dims in clusters:
            ov = {"cluster_dims": dims}
            found = _deepest(problem, ov, range(default.params.stages, 2, -1), hopper)
            if not found:
                print(f"skipped {problem.key} cluster {dims}: refused", file=sys.stderr)
                continue
            depth, compiled = found
            label = f"cluster {dims[0]}x{dims[1]} s{depth}"
            jobs.append((problem, label, compiled))
            if whole and dims != (1, 1):
                ov = {"cluster_dims": dims, "stages": depth}
                uncut = compile_fusion(problem.fusion(), overrides=ov, pm=hopper)
                jobs.append((problem, label + WHOLE, uncut))
    return jobs


FFN_TILE_SHAPES = [(24, 14336, 4096), (32, 14336, 4096), (48, 14336, 4096), (64, 14336, 4096),
                   (96, 14336, 4096), (128, 14336, 4096), (32, 28672, 8192),
                   (64, 28672, 8192)]  # fmt: skip


def _ffn_tiles(
    problems: Sequence[TuneProblem], cta_k: int, k: int
) -> list[tuple[TuneProblem, str, Any]]:
    """Each FFN of *problems* on hopper's default and on 64 and 32 columns a product (*cta_k*
    of K a stage, wgmma K *k*), each with the deepest ring that fits."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for problem in problems:
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for columns in (64, 32):
            ov = _wgmma_tiles((64, 2 * columns, cta_k), k=k)
            jobs += _deepest_job(problem, ov, range(8, 2, -1), hopper, f"n_out {columns} s{{s}}")
    return jobs


def ffn_tiles_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The llama FFN (``swiglu``: two products sharing x, one horizontal kernel) at 24-128 rows
    on hopper's default (64-row tiles of 128 columns a product) and on 64 and 32 columns a
    product (twice and four times the CTAs), each with the deepest ring that fits."""
    problems = [TuneProblem(m=m, n=n, k=k, dtype="bfloat16", epilogue="swiglu")
                for m, n, k in FFN_TILE_SHAPES]  # fmt: skip
    return _ffn_tiles(problems, 64, 16)


FFN_FP8_SHAPES = [(24, 14336, 4096), (32, 14336, 4096), (48, 14336, 4096), (64, 14336, 4096),
                  (96, 14336, 4096), (32, 28672, 8192)]  # fmt: skip


def ffn_tiles_fp8_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``ffn_tiles`` for e4m3 products, per tensor and per row, 128 of K a stage."""
    problems = [
        TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale, epilogue="swiglu")
        for (m, n, k), scale in itertools.product(FFN_FP8_SHAPES, ("tensor", "row"))
    ]
    return _ffn_tiles(problems, 128, 32)


HALVES_SHAPES = [(64, 4096, 4096), (48, 4096, 4096), (40, 4096, 4096), (64, 4096, 8192),
                 (64, 4096, 14336), (48, 4096, 14336), (64, 2048, 8192), (32, 2048, 8192),
                 (64, 1024, 16384), (32, 1024, 16384), (64, 512, 28672), (64, 8192, 8192),
                 (56, 6144, 4096), (64, 6144, 4096)]  # fmt: skip


HALVES_SETS = (("whole", 1, (1, 1)), ("halves", 2, (1, 1)), ("halves", 2, (1, 2)),
               ("quarters", 4, (1, 4)))  # fmt: skip


def halves_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Skinny rows on hopper's default and as the transposed product with every activation
    row in one tile (the swap's default) or in two or four tiles of a part of the rows (more
    CTAs), each weight tile read from L2 by each or multicast to a cluster along N; split-K
    1, 2 and 4 without a cluster; the deepest ring that fits. Then large problems with
    clusters along N (multicasting A) beside the default."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in HALVES_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for name, parts, cluster in HALVES_SETS:
            cols = 8 * -(-m // (8 * parts))
            for split in (1, 2, 4) if cluster == (1, 1) else (1,):
                ov = _wgmma_tiles((64, cols, 128), splitk_factor=split, cluster_dims=cluster,
                                  **SWAPPED)  # fmt: skip
                label = f"swap 64x{cols} {name} c{cluster[1]} s{{s}} split {split}"
                jobs += _deepest_job(problem, ov, range(8, 2, -1), hopper, label)
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 5120)):
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for dims in ((2, 1), (1, 2), (1, 4)):
            ov = {"cluster_dims": dims}
            jobs.append((problem, f"cluster {dims}", _compiled(problem, overrides=ov, pm=hopper)))
    return jobs


SWAP64_SHAPES = [(64, 4096, 8192), (64, 4096, 14336), (60, 4096, 14336), (64, 4096, 28672),
                 (64, 4096, 4096), (64, 8192, 8192), (56, 4096, 14336),
                 (64, 5120, 8192)]  # fmt: skip


def swap64_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows of 56-64 activations, fp16 and bf16, on hopper's default and on the default
    planned without ``SWAP_OVER_SPLIT_M`` (the swap at 64 rows where the unswapped tiles
    split K: run 110's A/B)."""
    from mmaplug.heuristics.default import streaming as default

    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in SWAP64_SHAPES:
        for dtype in ("bfloat16", "float16"):
            problem = TuneProblem(m=m, n=n, k=k, dtype=dtype)
            jobs.append((problem, "default", _compiled(problem, pm=hopper)))
            rule, default.SWAP_OVER_SPLIT_M = default.SWAP_OVER_SPLIT_M, {}  # type: ignore[misc]
            try:
                jobs.append((problem, "old default", _compiled(problem, pm=hopper)))
            finally:
                default.SWAP_OVER_SPLIT_M = rule  # type: ignore[misc]
    return jobs


SWAP_WIDE_SHAPES = [(96, 6144, 4096), (128, 6144, 4096), (96, 4096, 14336), (192, 4096, 14336),
                    (128, 8192, 8192), (256, 8192, 8192), (128, 28672, 4096), (384, 28672, 4096),
                    (512, 10240, 8192), (512, 4096, 4096), (256, 4096, 4096)]  # fmt: skip


def swap_wide_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows of 96-512 activations on hopper's default, on unswapped 64x256 tiles, and as the
    transposed product with the activation rows as the wgmma's N (all of them up to 256, else
    in two parts), 64 or 128 weight rows a CTA, 64 or 128 of K a stage, split-K 1, 2 and 4
    (4 at K >= 8192), the deepest ring that fits: cuBLAS runs ``64x192_64x6_2x1_splitK`` of
    the transposed product at 192x4096x14336 (run 92)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in SWAP_WIDE_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for bk in (64, 128):
            ov = _wgmma_tiles((64, 256, bk))
            jobs += _deepest_job(problem, ov, range(8, 2, -1), hopper, f"64x256x{bk} s{{s}}")
        cols = 8 * -(-m // 8) if m <= 256 else 8 * -(-m // 16)
        for bm in (64, 128):
            for bk in (64, 128):
                for split in (1, 2, 4) if k >= 8192 else (1, 2):
                    ov = _wgmma_tiles((bm, cols, bk), (64, cols, bk), splitk_factor=split,
                                      **SWAPPED)  # fmt: skip
                    label = f"swap {bm}x{cols}x{bk} s{{s}} split {split}"
                    jobs += _deepest_job(problem, ov, range(8, 1, -1), hopper, label)
    return jobs


ODD_PROBLEMS = [(1, 1000, 1000, 1000), (1, 64, 128, 64), (1, 128, 256, 512), (1, 2048, 2048, 2048),
                (16, 2048, 2048, 128), (32, 1, 4096, 128), (1, 777, 1111, 4096)]  # fmt: skip
ODD_TILES: dict[str, dict[str, Any]] = {
    "64x128x64": _wgmma_tiles((64, 128, 64)),
    "128x128x64": _wgmma_tiles((128, 128, 64), (64, 128, 64)),
    "128x64x64": _wgmma_tiles((128, 64, 64), (64, 64, 64)),
    "64x256x64": _wgmma_tiles((64, 256, 64)),
    "128x256x64": _wgmma_tiles((128, 256, 64), (64, 256, 64)),
    "64x64x128": _wgmma_tiles((64, 64, 128)),
}


def odd_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Small, odd and batched problems (batch, M, N, K) on hopper's default and six tiles with
    the deepest ring that fits, one tile per CTA or persistent, alone, split 2 (batch 1) or in
    CTA pairs along M: what is fixed cost (a 64x128x64 product is one tile and one stage) and
    what the tiles change."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for batch, m, n, k in ODD_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, batch=batch, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for name, tiles in ODD_TILES.items():
            for strategy in ("persistent", "one_tile_per_cta"):
                for split, cluster in ((1, 1), (2, 1), (1, 2)) if batch == 1 else ((1, 1), (1, 2)):
                    ov = {**tiles, "tiling_strategy": strategy, "splitk_factor": split,
                          "cluster_dims": (cluster, 1)}  # fmt: skip
                    label = f"{name} s{{s}} {strategy} split {split} c{cluster}"
                    jobs += _deepest_job(problem, ov, range(8, 1, -1), hopper, label)
    return jobs


BK_AB_PROBLEMS = [(64, 28672, 4096), (64, 8192, 8192), (96, 6144, 4096), (192, 4096, 14336),
                  (256, 8192, 8192), (512, 4096, 4096), (128, 14336, 4096), (1536, 1000, 7168),
                  (4096, 16, 4096), (8192, 64, 8192), (96, 4096, 14336), (777, 1111, 4096),
                  (96, 28672, 4096), (112, 4096, 4096), (80, 8192, 8192)]  # fmt: skip


def bk_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Problems whose default 16-bit tile takes 128 or 256 of K a stage (nvFuser's tie-break:
    fewer K stages once a CTA runs 10 or more) against the same tile at 64 of K with the
    deepest ring that fits (up to 8), twice interleaved; rows of 65-127 activations also as
    the transposed product (the swap's tile, N = the rows)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in BK_AB_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        default = _compiled(problem, pm=hopper)
        if default is None:
            continue
        params = default.params
        cta, warp = params.cta_tile, params.warp_tile
        pair = [(problem, "default", default)]
        for bk in (64, 128):
            if bk >= cta.k:
                continue
            ov = {"cta_tile": (cta.m, cta.n, bk), "warp_tile": (warp.m, warp.n, bk),
                  "instruction_tile": params.instruction_tile}  # fmt: skip
            pair += _deepest_job(problem, ov, range(8, 2, -1), hopper, f"bk {bk} s{{s}}")
        if 64 < m < 128:
            cols = 8 * -(-m // 8)
            ov = _wgmma_tiles((64, cols, 128), **SWAPPED)
            pair += _deepest_job(problem, ov, range(8, 2, -1), hopper, f"swap 64x{cols}x128 s{{s}}")
        jobs += pair * 2
    return jobs


SKINNY_AB_SHAPES = [(64, 28672, 4096), (64, 8192, 8192), (96, 6144, 4096), (192, 4096, 14336),
                    (256, 8192, 8192), (512, 4096, 4096), (128, 14336, 4096), (1536, 1000, 7168),
                    (777, 1111, 4096), (96, 4096, 14336), (80, 8192, 8192), (112, 4096, 4096),
                    (72, 4096, 4096), (120, 8192, 8192), (128, 6144, 4096),
                    (256, 4096, 4096)]  # fmt: skip


def skinny_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows the 64-deep tie and the swap of 65-112 rows change, bf16 and fp16 (96x6144x4096
    and 512x4096x4096 also with bias + GELU), with and without both rules
    (``HOPPER_TIE_MIN_TILE`` past any tile, ``SWAP_WIDE_M`` empty; ``_default_ab``)."""
    problems = [TuneProblem(m=m, n=n, k=k, dtype=dtype) for m, n, k in SKINNY_AB_SHAPES
                for dtype in ("bfloat16", "float16")]  # fmt: skip
    problems += [TuneProblem(m=m, n=n, k=k, dtype="bfloat16", epilogue="bias_gelu")
                 for m, n, k in ((96, 6144, 4096), (512, 4096, 4096))]  # fmt: skip
    return _default_ab(problems, {"HOPPER_TIE_MIN_TILE": 1 << 30, "SWAP_WIDE_M": {}})


DEEP_AB_SHAPES = [(64, 28672, 4096), (64, 8192, 8192), (192, 4096, 14336), (777, 1111, 4096),
                  (128, 6144, 4096), (120, 8192, 8192), (256, 4096, 4096), (192, 6144, 4096),
                  (128, 4096, 4096), (160, 8192, 8192), (256, 5120, 4096)]  # fmt: skip


def deep_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows whose one-consumer 64x128 or 64x192 tile a 64-deep tie moves to 64 of K in the
    deepest ring (8 or 6 stages: the bytes in flight of 4 or 3 stages of 128), bf16 and fp16
    (192x4096x14336 also with bias + GELU), against the default without the tie
    (``_default_ab``; run 135 with the rule of every tile 128 wide a warp tile)."""
    problems = [TuneProblem(m=m, n=n, k=k, dtype=dtype) for m, n, k in DEEP_AB_SHAPES
                for dtype in ("bfloat16", "float16")]  # fmt: skip
    problems.append(TuneProblem(m=192, n=4096, k=14336, dtype="bfloat16", epilogue="bias_gelu"))
    return _default_ab(problems, {"HOPPER_TIE_MIN_TILE": 1 << 30})


def _bind_whole(compiled: Any, inputs: Any) -> Any:
    """*compiled* run on *inputs* with its persistent cluster grid left whole: the bound launch
    keeps the grid it is bound with, so only this first call runs under the patch."""
    import mmaplug.plugins.hopper.artifact as artifact

    cut = artifact.resident_grid
    artifact.resident_grid = lambda kernel, grid, *rest: grid
    try:
        return compiled.execute(inputs)
    finally:
        artifact.resident_grid = cut


def decode_jobs() -> list[tuple[TuneProblem, str, Any]]:
    decode_limits.MAX_M = 64  # type: ignore[misc]  # this process only
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in DECODE_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs += [(problem, f"decode {ov or 'default'}", _compiled(problem, overrides=ov))
                 for ov in DECODE_SETS]  # fmt: skip
        jobs.append((problem, "hopper default", _compiled(problem, pm=hopper)))
    return jobs


def _compiled(problem: TuneProblem, **how: Any) -> Any:
    try:
        return compile_fusion(problem.fusion(), **how)
    except MatmulError as error:
        print(f"skipped {problem.key} {how}: {error}", file=sys.stderr)
        return None


NARROW_SHAPES = [(64, 4096, 4096), (64, 6144, 4096), (56, 6144, 4096), (32, 6144, 4096),
                 (32, 2048, 8192), (64, 2048, 8192), (64, 4096, 8192), (64, 8192, 8192),
                 (32, 1024, 16384), (64, 1024, 16384), (64, 512, 28672)]  # fmt: skip
NARROW_TILES = ((16, 128), (32, 64), (32, 128), (64, 64), (64, 128))


def narrow_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Skinny rows unswapped on tiles of every activation row by 16-64 weight rows (cuBLAS's
    ``64x32_64x16_1x2`` at 64x4096x4096: twice our CTAs, K 64 a stage, 16 stages, A multicast
    to a pair along N), with the deepest ring that fits, alone or in clusters of 2 and 4 along
    N, split-K 1, 2 and 4 (8 at K >= 16384), beside hopper's default."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in NARROW_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for cols, depth in NARROW_TILES:
            for cluster in (1, 2, 4) if cols < 64 else (1, 2):
                for split in (1, 2, 4, 8) if k >= 16384 else (1, 2, 4) if k >= 8192 else (1, 2):
                    ov = _wgmma_tiles((64, cols, depth), cluster_dims=(1, cluster),
                                      splitk_factor=split)  # fmt: skip
                    label = f"64x{cols}x{depth} s{{s}} c{cluster} split {split}"
                    jobs += _deepest_job(problem, ov, range(20, 2, -1), hopper, label)
    return jobs


NARROW_AB_SHAPES = [(64, 4096, 4096), (60, 4096, 4096), (64, 6144, 4096), (64, 8192, 8192),
                    (64, 4096, 8192), (64, 4096, 14336), (64, 4096, 28672),
                    (64, 5120, 8192)]  # fmt: skip


def _ab(
    problems: list[TuneProblem],
    patches: list[tuple[Any, str, Any]],
    plain: str,
    patched: str,
    patched_first: bool = False,
) -> list[tuple[TuneProblem, str, Any]]:
    """Each of *problems* on hopper planned and built as it is (label *plain*) and with each
    ``(owner, attribute, value)`` of *patches* set while it compiles (label *patched*), each
    pair twice, interleaved (the patched one first with *patched_first*)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for problem in problems:
        as_is = _compiled(problem, pm=hopper)
        with contextlib.ExitStack() as stack:
            for owner, name, value in patches:
                stack.enter_context(mock.patch.object(owner, name, value))
            changed = _compiled(problem, pm=hopper)
        pair = [(problem, plain, as_is), (problem, patched, changed)]
        jobs += (pair[::-1] if patched_first else pair) * 2
    return jobs


def _default_ab(
    problems: list[TuneProblem], rules: dict[str, Any]
) -> list[tuple[TuneProblem, str, Any]]:
    """Each of *problems* on hopper's default and on the default planned with the default
    heuristic's constants *rules* set to their values there (the rules' old default), each
    pair twice, interleaved; each constant is patched in every module of the default that
    binds it (where it is defined and where it is imported by name)."""
    from mmaplug.heuristics.default import ampere, decode, grid, hopper, hopper_tiles, streaming

    modules = (hopper, hopper_tiles, streaming, ampere, decode, grid)
    patches = [(m, rule, off) for rule, off in rules.items() for m in modules if hasattr(m, rule)]
    return _ab(problems, patches, "default", "old default")


def narrow_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows the narrow streaming tiles change, fp16 and bf16 (64x4096x4096 also with bias +
    GELU), with and without ``STREAMING_NARROW_N`` (``_default_ab``)."""
    problems = [TuneProblem(m=m, n=n, k=k, dtype=dtype) for m, n, k in NARROW_AB_SHAPES
                for dtype in ("bfloat16", "float16")]  # fmt: skip
    problems.append(TuneProblem(m=64, n=4096, k=4096, dtype="bfloat16", epilogue="bias_gelu"))
    return _default_ab(problems, {"STREAMING_NARROW_N": ()})


FP8_BLOCK_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 14336, 5120)]


def fp8_block_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Block-scaled e4m3 (1x128 / 128x128) on 128x128 tiles of 128 or 256 of K a stage, the
    deepest ring that fits, alone or in clusters of 2 and 4 along M or 2 along N, beside the
    default; the same tiles per tensor, where the promotion is absent (what the tile costs by
    itself)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in FP8_BLOCK_SHAPES:
        for scale in ("block", "tensor"):
            problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
            jobs.append((problem, "default", _compiled(problem, pm=hopper)))
            for depth in (128, 256):
                for cluster in ((1, 1), (2, 1), (4, 1), (1, 2)):
                    ov = _wgmma_tiles((128, 128, depth), (64, 128, depth), k=32,
                                      cluster_dims=cluster)  # fmt: skip
                    label = f"128x128x{depth} s{{s}} c{cluster[0]}x{cluster[1]}"
                    jobs += _deepest_job(problem, ov, range(8, 1, -1), hopper, label)
    return jobs


FP8_HALVES_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 14336, 5120),
                     (4096, 28672, 4096), (4096, 4096, 14336)]  # fmt: skip


def fp8_halves_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Block-scaled e4m3 on 64x256 warp tiles (promoted by column chunks) in 128x256 tiles of
    two consumers with 3 or 4 stages, or alone, or ping-pong, beside the default (since run
    125 the first of them), the 128x128x256 tile (the default before) and the 128x256 tile per
    tensor (the same tile without promotion)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in FP8_HALVES_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="block")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        old = _wgmma_tiles((128, 128, 256), (64, 128, 256), k=32, stages=3)
        jobs.append((problem, "128x128x256 s3", _compiled(problem, pm=hopper, overrides=old)))
        for stages in (3, 4):
            ov = _wgmma_tiles((128, 256, 128), (64, 256, 128), k=32, stages=stages)
            jobs.append((problem, f"128x256x128 s{stages}",
                         _compiled(problem, pm=hopper, overrides=ov)))  # fmt: skip
        for strategy in ("persistent", "persistent_pingpong"):
            ov = _wgmma_tiles((64, 256, 128), (64, 256, 128), k=32, stages=4,
                              tiling_strategy=strategy)  # fmt: skip
            jobs.append((problem, f"64x256x128 s4 {strategy}",
                         _compiled(problem, pm=hopper, overrides=ov)))  # fmt: skip
        tensor = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
        ov = _wgmma_tiles((128, 256, 128), (64, 256, 128), k=32, stages=4)
        jobs.append((tensor, "per tensor 128x256x128 s4",
                     _compiled(tensor, pm=hopper, overrides=ov)))  # fmt: skip
    return jobs


FP8_BLOCK_CLUSTER_SHAPES = [(8192, 8192, 8192), (4096, 28672, 4096), (4096, 57344, 8192),
                            (4096, 6144, 4096), (2048, 14336, 5120)]  # fmt: skip


def fp8_block_clusters_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Block-scaled e4m3 with 192 sums a consumer in clusters along one axis (legal since
    runs 275-278): the default, the 64x256 chunks alone, and 128x192 (and 128x160) tiles
    straddling two blocks of B's scales alone, in pairs and fours along M (B multicast) and
    along N (A multicast)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k in FP8_BLOCK_CLUSTER_SHAPES:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="block")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        chunks = _wgmma_tiles((128, 256, 128), (64, 256, 128), k=32, stages=4, cluster_dims=(1, 1))
        jobs.append((problem, "chunks alone", _compiled(problem, pm=hopper, overrides=chunks)))
        for width, clusters in ((192, ((1, 1), (2, 1), (4, 1), (1, 2), (1, 4))), (160, ((2, 1),))):
            for cluster in clusters:
                ov = _wgmma_tiles((128, width, 128), (64, width, 128), k=32, stages=4,
                                  cluster_dims=cluster)  # fmt: skip
                label = f"128x{width} c{cluster[0]}x{cluster[1]}"
                jobs.append((problem, label, _compiled(problem, pm=hopper, overrides=ov)))
    return jobs


SWIZZLE_PROBLEMS = [((8192, 8192, 8192), "float8_e4m3fn", "block"),
                    ((8192, 8192, 8192), "float8_e4m3fn", "tensor"),
                    ((4096, 4096, 4096), "float8_e4m3fn", "tensor"),
                    ((2048, 14336, 5120), "float8_e4m3fn", "block"),
                    ((2048, 14336, 5120), "float8_e4m3fn", "tensor"),
                    ((4096, 28672, 4096), "float8_e4m3fn", "tensor"),
                    ((8192, 8192, 8192), "bfloat16", ""), ((4096, 4096, 4096), "bfloat16", ""),
                    ((2048, 14336, 5120), "bfloat16", ""),
                    ((4096, 28672, 4096), "bfloat16", ""),
                    ((16384, 4096, 4096), "bfloat16", "")]  # fmt: skip
SWIZZLES = [("row_major", g) for g in (2, 4, 8, 16)] + [("column_major", g) for g in (1, 8)]


#: the fp8 corpus's per-row rows below cuBLASLt, whose 128x256 default read 1.1-3.3x the
#: bytes cuBLASLt's kernel read from DRAM (ncu, run 148), and a bf16 one
SWIZZLE_ROW_PROBLEMS = [((4096, 6144, 4096), "float8_e4m3fn", "row"),
                        ((4096, 4096, 4096), "float8_e4m3fn", "row"),
                        ((4096, 10240, 8192), "float8_e4m3fn", "row"),
                        ((3000, 5008, 2048), "float8_e4m3fn", "row"),
                        ((4096, 6144, 4096), "bfloat16", "")]  # fmt: skip


def swizzle_jobs(problems: Any = None) -> list[tuple[TuneProblem, str, Any]]:
    """Hopper's default plans of large products (*problems*, ``SWIZZLE_PROBLEMS`` when None)
    walked in groups of 2-16 tiles along M (row major) or 1 and 8 along N (column major): the
    tiles the 132 persistent CTAs hold at once then share A and B panels in L2, where one row
    of tiles spans all of B."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (m, n, k), dtype, scale in problems or SWIZZLE_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale)
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for order, group in SWIZZLES:
            ov = {"cta_order": order, "grid_swizzle_factor": group}
            jobs.append((problem, f"{order} g{group}", _compiled(problem, pm=hopper,
                                                                 overrides=ov)))  # fmt: skip
        if scale == "block":  # the 128-deep tile in pairs, which lost to the default in g1
            for group in (1, 8):
                ov = _wgmma_tiles((128, 128, 128), (64, 128, 128), k=32, stages=6,
                                  cluster_dims=(2, 1), grid_swizzle_factor=group)  # fmt: skip
                jobs.append((problem, f"128x128x128 s6 c2x1 g{group}",
                             _compiled(problem, pm=hopper, overrides=ov)))  # fmt: skip
        if problems:  # the default last as well (a kernel timed late runs slower, run 140)
            jobs.append((problem, "default", jobs[-len(SWIZZLES) - 1][2]))
    return jobs


SWIZZLE_AB_PROBLEMS = [((8192, 8192, 8192), "float8_e4m3fn", "block"),
                       ((8192, 8192, 8192), "float8_e4m3fn", "tensor"),
                       ((8192, 8192, 8192), "float8_e4m3fn", "row"),
                       ((8192, 8192, 8192), "bfloat16", ""), ((8192, 8192, 8192), "float16", ""),
                       ((4096, 4096, 4096), "bfloat16", ""), ((4096, 4096, 4096), "float16", ""),
                       ((4096, 28672, 4096), "bfloat16", ""),
                       ((16384, 4096, 4096), "bfloat16", ""),
                       ((8192, 28672, 8192), "bfloat16", "")]  # fmt: skip


def swizzle_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Products whose default plan ``hopper_swizzle`` groups, with and without groups
    (``HOPPER_SWIZZLE_L2_SHARE`` 0: never; ``_default_ab``)."""
    problems = [TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale)
                for (m, n, k), dtype, scale in SWIZZLE_AB_PROBLEMS]  # fmt: skip
    return _default_ab(problems, {"HOPPER_SWIZZLE_L2_SHARE": 0})


OVERLAP_PROBLEMS = [((4096, 4096, 4096), "bfloat16", ""), ((4096, 4096, 4096), "float16", ""),
                    ((8192, 8192, 8192), "bfloat16", ""),
                    ((2048, 14336, 5120), "bfloat16", ""),
                    ((4096, 4096, 4096), "float8_e4m3fn", "tensor"),
                    ((4096, 4096, 4096), "float8_e4m3fn", "row"),
                    ((8192, 8192, 8192), "float8_e4m3fn", "tensor")]  # fmt: skip


def overlap_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """What an epilogue overlapped with the next tile's main loop could win: hopper's default
    (128x256 tiles) and cooperative 128x128 tiles (two 64x128 consumers, whose 64 accumulators
    a thread leave room for a second set) with the deepest ring, bare and with bias + GELU."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (m, n, k), dtype, scale in OVERLAP_PROBLEMS:
        wk = 32 if scale else 16
        bk = 128 if scale else 64
        for epilogue in ("none", "bias_gelu"):
            problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale, epilogue=epilogue)
            jobs.append((problem, f"{epilogue} default", _compiled(problem, pm=hopper)))
            ov = _wgmma_tiles((128, 128, bk), (64, 128, bk), k=wk, tiling_strategy="persistent")
            for cluster in ((1, 1), (2, 1)):
                ovc = {**ov, "cluster_dims": cluster}
                label = f"{epilogue} 128x128x{bk} c{cluster[0]} s{{s}}"
                jobs += _deepest_job(problem, ovc, range(8, 2, -1), hopper, label)
    return jobs


FP8_FUSED_PROBLEMS = [((4096, 4096, 4096), "row", "none"), ((4096, 4096, 4096), "row", "bias"),
                      ((4096, 4096, 4096), "row", "bias_gelu"),
                      ((4096, 4096, 4096), "tensor", "none"),
                      ((4096, 4096, 4096), "tensor", "bias_gelu"),
                      ((8192, 8192, 8192), "row", "none"), ((8192, 8192, 8192), "row", "bias_gelu"),
                      ((2048, 14336, 5120), "row", "none"),
                      ((2048, 14336, 5120), "row", "bias_gelu"),
                      ((4096, 28672, 4096), "row", "bias_gelu"),
                      ((4096, 4096, 4096), "", "none"),
                      ((4096, 4096, 4096), "", "bias_gelu")]  # fmt: skip


def fp8_fused_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """e4m3 products on hopper's default plan, bare and with a bias (and GELU), per-row and
    per-tensor scales, and a bf16 one (no scale): what the fused epilogue costs against the
    bare kernel (run on two trees for an A/B of an epilogue change, BENCHMARKS.md run 139)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (m, n, k), scale, epilogue in FP8_FUSED_PROBLEMS:
        dtype = "float8_e4m3fn" if scale else "bfloat16"
        problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale, epilogue=epilogue)
        jobs.append((problem, f"{scale} {epilogue}", _compiled(problem, pm=hopper)))
    return jobs


_T = _wgmma_tiles
#: the serving rows furthest below cuBLAS (run 143, ncu): each beside the tile, split and
#: cluster cuBLAS's kernel name reports for it (first) and neighbours of both
ANCHOR_SETS: list[tuple[tuple[int, int, int, int], list[dict[str, Any]]]] = [
    ((1, 1000, 1000, 1000), [_T((128, 64, 64), (64, 64, 64), cluster_dims=c)
                             for c in ((1, 2), (1, 1), (2, 1))]
     + [_T((64, 128, 64), cluster_dims=(1, 2)), _T((64, 64, 64))]),
    ((1, 96, 6144, 4096), [_T((64, 96, bk), swap_ab=True, cluster_dims=c)
                           for bk in (64, 128) for c in ((4, 1), (2, 1), (1, 1))]),
    ((16, 2048, 2048, 128), [_T((256, 128, 64), (128, 128, 64), cluster_dims=c)
                             for c in ((1, 2), (2, 1), (1, 1))]
     + [_T((128, 256, 64), (64, 256, 64), cluster_dims=(1, 1)),
        _T((128, 128, 64), (64, 128, 64), cluster_dims=(1, 1))]),
    ((1, 512, 10240, 8192), [_T((128, 160, 64), (64, 160, 64)),
                             _T((128, 160, 64), (64, 160, 64), cluster_dims=(2, 1)),
                             _T((256, 128, 64), (128, 128, 64), cluster_dims=(1, 2)),
                             _T((128, 256, 64), (64, 256, 64), cluster_dims=(1, 1))]),
    ((1, 64, 512, 28672), [_T((64, 32, 64), splitk_factor=s, cluster_dims=c)
                           for s, c in ((8, (1, 2)), (8, (1, 1)), (16, (1, 1)))]
     + [_T((64, 64, 64), splitk_factor=s) for s in (8, 16)]),
    ((1, 256, 256, 16384), [_T((64, 64, 64), splitk_factor=s) for s in (6, 8)]
     + [_T((64, 64, 64), splitk_factor=8, cluster_dims=(1, 4)),
        _T((128, 128, 64), (64, 128, 64), splitk_factor=8),
        _T((128, 128, 64), (64, 128, 64), splitk_factor=16),
        _T((64, 128, 64), splitk_factor=16)]),
]  # fmt: skip


def anchor_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``ANCHOR_SETS``: the default plan, then each set with the deepest ring that fits."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (batch, m, n, k), sets in ANCHOR_SETS:
        problem = TuneProblem(m=m, n=n, k=k, batch=batch, dtype="bfloat16")
        jobs.append((problem, "default", _compiled(problem, pm=hopper)))
        for ov in sets:
            (bm, bn, bk), wm = ov["cta_tile"], ov["warp_tile"][0]
            swap = " swap" if ov.get("swap_ab") else ""
            label = (f"{bm}x{bn}x{bk}/w{wm} s{{s}} split {ov.get('splitk_factor', 1)} "
                     f"c{ov.get('cluster_dims', (1, 1))}{swap}")  # fmt: skip
            jobs += _deepest_job(problem, ov, range(16, 2, -1), hopper, label)
    return jobs


PLANS_AB_PROBLEMS = [TuneProblem(m=m, n=n, k=k, batch=b, dtype=dtype, scale=scale, epilogue=epi)
                     for b, m, n, k, dtype, scale, epi in (
                         (1, 256, 256, 16384, "bfloat16", "", "none"),
                         (1, 256, 256, 16384, "float16", "", "none"),
                         (1, 64, 512, 28672, "bfloat16", "", "none"),
                         (1, 64, 512, 28672, "float16", "", "bias_gelu"),
                         (1, 512, 10240, 8192, "bfloat16", "", "none"),
                         (1, 512, 10240, 8192, "float16", "", "bias_gelu"),
                         (2, 200, 136, 9000, "bfloat16", "", "none"),
                         (2, 200, 136, 9000, "float16", "", "bias_gelu"),
                         (1, 1000, 1040, 528, "float8_e4m3fn", "tensor", "none"),
                         (1, 1000, 1040, 528, "float8_e4m3fn", "row", "none"))]  # fmt: skip
#: the heuristic's rules of runs 144-147 at their old values
PLANS_AB_OLD = {"PARTIAL_BYTES": 8, "HOPPER_INSTR_N": (256, 192, 128, 64)}


def _ring_jobs(problem: TuneProblem, depths: Any, pm: Any) -> list[tuple[TuneProblem, str, Any]]:
    """*problem*'s default plan in each of *depths* stages (``main`` drops the ones the rules
    refuse, which ``_compiled`` reports)."""
    return [(problem, f"default s{depth}", _compiled(problem, pm=pm, overrides={"stages": depth}))
            for depth in depths]  # fmt: skip


def plans_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The plans the rules of runs 144-147 change, new and old default (``_default_ab``), and
    each split plan's tiles in deeper rings (what the default's cap of stages leaves)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = _default_ab(PLANS_AB_PROBLEMS, PLANS_AB_OLD)
    for problem in PLANS_AB_PROBLEMS:
        default = _compiled(problem, pm=hopper)
        if default is None or default.params.splitk_factor == 1:
            continue
        jobs += _ring_jobs(problem, (8, 10, 13), hopper)
    for dtype in ("bfloat16", "float16"):  # run 143's best at 64x512x28672: 64 of K, 13 stages
        problem = TuneProblem(m=64, n=512, k=28672, dtype=dtype)
        ov = _wgmma_tiles((64, 64, 64), splitk_factor=16, stages=13)
        jobs.append((problem, "64x64x64 s13 split 16", _compiled(problem, pm=hopper, overrides=ov)))
    return jobs


SPLIT_RING_PROBLEMS = [TuneProblem(m=m, n=n, k=k, dtype=dtype)
                       for m, n, k in ((256, 256, 16384), (128, 128, 32768), (64, 512, 28672),
                                       (512, 512, 65536), (32, 1024, 16384))
                       for dtype in ("bfloat16", "float16")]  # fmt: skip


def split_ring_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The deep-K problems' default split plans (the deepest ring up to 8 stages) and the same
    tiles in rings of 6 (the old cap) and 10-16 stages where they fit, the default timed first
    and last."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for problem in SPLIT_RING_PROBLEMS:
        default = _compiled(problem, pm=hopper)
        jobs.append((problem, "default", default))
        jobs += _ring_jobs(problem, (6, 10, 12, 13, 16), hopper)
        jobs.append((problem, "default", default))
    return jobs


SPLIT_AB_SETS = [
    ((64, 512, 28672), [_wgmma_tiles((64, 128, 64), splitk_factor=32, stages=6),
                        _wgmma_tiles((64, 64, 128), splitk_factor=16, stages=6),
                        _wgmma_tiles((64, 64, 64), splitk_factor=16, stages=6),
                        _wgmma_tiles((64, 64, 64), splitk_factor=16, stages=8)]),
    ((256, 256, 16384), [_wgmma_tiles((128, 128, 64), (64, 128, 64), splitk_factor=32, stages=6),
                         _wgmma_tiles((64, 128, 64), splitk_factor=16, stages=6),
                         _wgmma_tiles((64, 128, 64), splitk_factor=16, stages=8)]),
    ((128, 128, 32768), [_wgmma_tiles((64, 64, 64), splitk_factor=32, stages=6),
                         _wgmma_tiles((64, 64, 64), splitk_factor=32, stages=8)]),
]  # fmt: skip


def split_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Deep-K split plans (the old default's first, then run 144's tiles, 64 of K and a deeper
    ring), bf16 and fp16, each set timed three times interleaved."""
    jobs = []
    for (m, n, k), sets in SPLIT_AB_SETS:
        for dtype in ("bfloat16", "float16"):
            problem = TuneProblem(m=m, n=n, k=k, dtype=dtype)
            built = []
            for ov in sets:
                (bm, bn, bk), stages = ov["cta_tile"], ov["stages"]
                label = f"{bm}x{bn}x{bk} s{stages} split {ov['splitk_factor']}"
                built.append((problem, label, _compiled(problem, overrides=ov)))
            jobs += built * 3
    return jobs


FP8_ANCHOR_PROBLEMS = [((4096, 6144, 4096), "row"), ((3000, 5008, 2048), "row"),
                       ((4096, 10240, 8192), "row"), ((4096, 28672, 4096), "row"),
                       ((4096, 4096, 4096), "row"), ((128, 4096, 4096), "tensor")]  # fmt: skip
_W256 = _wgmma_tiles((128, 256, 128), (64, 256, 128), k=32)
FP8_ANCHOR_SETS = [{**_W256, "cluster_dims": c} for c in ((1, 1), (2, 1), (1, 2))] + [
    _wgmma_tiles((128, 128, 128), (64, 128, 128), k=32, cluster_dims=c) for c in ((1, 1), (2, 1))
] + [_wgmma_tiles((256, 128, 128), (128, 128, 128), k=32, cluster_dims=(1, 2)),
     _wgmma_tiles((128, 160, 128), (64, 160, 128), k=32), _wgmma_tiles((64, 128, 256), k=32),
     _wgmma_tiles((64, 64, 256), k=32, cluster_dims=(1, 2))]  # fmt: skip


def fp8_anchor_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The fp8 corpus's rows below cuBLASLt (run 141) on the default and on 128x256 tiles alone
    and in pairs along M or N, 128x128 and 256x128 tiles, 128x160, and narrow tiles, each with
    the deepest ring that fits (the default timed first and last)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (m, n, k), scale in FP8_ANCHOR_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
        default = _compiled(problem, pm=hopper)
        jobs.append((problem, "default", default))
        for ov in FP8_ANCHOR_SETS:
            (bm, bn, bk), wm = ov["cta_tile"], ov["warp_tile"][0]
            label = f"{bm}x{bn}x{bk}/w{wm} s{{s}} c{ov.get('cluster_dims', (1, 1))}"
            jobs += _deepest_job(problem, ov, range(8, 2, -1), hopper, label)
        jobs.append((problem, "default", default))
    return jobs


TMA_AB_PROBLEMS = [
    TuneProblem(m=2048, n=2048, k=128, batch=16, dtype="bfloat16"),
    TuneProblem(m=2048, n=2048, k=128, batch=16, dtype="float16"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float16"),
    TuneProblem(m=8192, n=8192, k=8192, dtype="bfloat16"),
    TuneProblem(m=2048, n=14336, k=5120, dtype="bfloat16"),
    TuneProblem(m=512, n=10240, k=8192, dtype="bfloat16"),
    TuneProblem(m=16384, n=1024, k=512, dtype="bfloat16"),
    TuneProblem(m=8192, n=8192, k=8192, dtype="float8_e4m3fn", scale="block"),
    TuneProblem(m=2048, n=14336, k=5120, dtype="float8_e4m3fn", scale="block"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="block"),
]


TMA_FORCED_PROBLEMS = [
    TuneProblem(m=4096, n=4096, k=4096, dtype="bfloat16", epilogue="bias_gelu"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float16", epilogue="bias_gelu"),
    TuneProblem(m=1000, n=1000, k=1000, dtype="bfloat16"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="row"),
    TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="row", epilogue="bias_gelu"),
    TuneProblem(m=8192, n=8192, k=8192, dtype="float8_e4m3fn", scale="tensor"),
]


def _tma_forced_ab(problems: list[TuneProblem]) -> list[tuple[TuneProblem, str, Any]]:
    """*problems* on their default plan and with TMA stores forced on wherever the chunks can
    take them (``tma_storable``), each pair twice, interleaved, the forced one first."""
    import mmaplug.plugins.hopper.artifact as artifact

    patches = [(artifact, "stores_by_tma", lambda cfg, spec: cfg.tma_storable)]
    return _ab(problems, patches, "default", "tma stores (forced)", True)


def tma_forced_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Rows ``stores_by_tma`` leaves to the threads' stores (epilogues with arithmetic, one tile
    a CTA) with TMA stores forced on (runs 151-152's rows outside the rule)."""
    return _tma_forced_ab(TMA_FORCED_PROBLEMS)


TMA_FILL_PROBLEMS = [
    TuneProblem(m=1, n=4096, k=128, batch=32, dtype="bfloat16"),
    TuneProblem(m=1, n=4096, k=128, batch=32, dtype="float16"),
    TuneProblem(m=8, n=4096, k=256, batch=64, dtype="bfloat16"),
    TuneProblem(m=48, n=2048, k=512, batch=16, dtype="bfloat16"),
]


def tma_fill_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Casts-only batched problems of fewer rows than a tile, whose chunks ``stores_by_tma``
    leaves to the threads' stores, with TMA stores forced on (runs 158-159)."""
    return _tma_forced_ab(TMA_FILL_PROBLEMS)


def tma_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The packed epilogue's chunks stored by TMA (where ``stores_by_tma`` takes it) against the
    consumers' 16-byte stores, each pair twice, interleaved: store-bound, square, llama and
    skinny rows, block-scaled FP8 (run 153; runs 151-152 forced TMA stores on every packed
    epilogue: ``tma_forced`` times the rows the rule then left to the threads' stores)."""
    import mmaplug.plugins.hopper.artifact as artifact

    patches = [(artifact, "TMA_STORES", False)]
    return _ab(TMA_AB_PROBLEMS, patches, "tma stores", "thread stores")


STREAMK_PROBLEMS = [  # (m, n, k, dtype, scale): tails of many or few tiles, all-tail grids
    (512, 10240, 8192, "bfloat16", None), (4096, 4096, 4096, "bfloat16", None),
    (8192, 8192, 8192, "bfloat16", None), (2048, 14336, 5120, "bfloat16", None),
    (4096, 28672, 4096, "float8_e4m3fn", "row"), (4096, 28672, 4096, "float8_e4m3fn", "tensor"),
    (4096, 6144, 4096, "float8_e4m3fn", "row"), (8192, 8192, 8192, "float8_e4m3fn", "row"),
    (96, 6144, 4096, "bfloat16", None), (384, 28672, 4096, "bfloat16", None),
    (256, 256, 16384, "bfloat16", None), (128, 128, 32768, "bfloat16", None),
    (64, 512, 28672, "bfloat16", None),
]  # fmt: skip
STREAMK_PIECES = (2, 3, 4, 6, 8, 16, 32)


def streamk_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Each problem's default plan, and the same plan with stream-K (its last, partly filled
    wave's tiles cut into 2-8 pieces of K; deep-K plans' split-K factor and up), each twice,
    interleaved."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for m, n, k, dtype, scale in STREAMK_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale)
        default = _compiled(problem, pm=hopper)
        if default is None:
            continue
        plan = default.params.as_dict()
        split = plan["splitk_factor"]
        pieces = [p for p in STREAMK_PIECES if (p <= 8 and split == 1) or split <= p <= 4 * split]
        variants = [("default", default)]
        for p in pieces:
            ov = {**plan, "tiling_strategy": "persistent_streamk", "splitk_factor": p,
                  "splitk_in_cluster": False, "cluster_dims": (1, 1)}  # fmt: skip
            variants.append((f"stream-K {p}", _compiled(problem, pm=hopper, overrides=ov)))
        jobs += [(problem, label, c) for label, c in variants] * 2
    return jobs


STREAMK_SUMS = ["4096x4096x4096/bfloat16@sk2", "4096x28672x4096/float8_e4m3fn-row@sk4",
                "512x10240x8192/bfloat16@sk3", "96x6144x4096/bfloat16@sk4",
                "4096x4096x4096/bfloat16@sk8"]  # fmt: skip


def streamk_sums_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Stream-K plans whose last piece's sums spilled before they went group by group (e4m3
    per row in 4 pieces, bf16 in 8) and three more, twice; run in two trees alternately to
    A/B a change of the fix-up (BENCHMARKS.md runs 172-173)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for spec in STREAMK_SUMS:
        problem, overrides = problem_and_overrides(parse_spec(spec))
        assert overrides is OVERRIDES[spec.partition("@")[2]]
        jobs += [(problem, spec, _compiled(problem, pm=hopper, overrides=overrides))] * 2
    return jobs


DECODE_WARP_ROWS = [  # (m, n, k): the serving corpus's decode rows whose best measured plan in
    # run 179's sweep had 2 warps (10240x8192, 57344x8192, 16x10240x8192) and their neighbours
    (1, 10240, 8192), (4, 10240, 8192), (8, 10240, 8192), (16, 10240, 8192),
    (1, 57344, 8192), (8, 57344, 8192), (1, 28672, 4096), (8, 8192, 8192), (1, 6144, 4096),
]  # fmt: skip


DECODE_WAVE_ROWS = [  # (m, n, k): one m tile (17 warps an SM) at 576-1024 CTAs of 16 weight
    # rows, which fit one wave at 2 warps but not at 4; two m tiles (12 warps an SM) at 256-3584
    (1, 9216, 4096), (1, 11008, 4096), (8, 12288, 4096), (1, 14336, 4096), (8, 14336, 4096),
    (1, 16384, 2048), (1, 13824, 5120), (16, 6144, 4096), (16, 8192, 8192), (12, 10240, 8192),
    (16, 4096, 14336), (16, 8192, 28672), (16, 14336, 4096), (16, 28672, 4096),
    (16, 57344, 8192), (9, 57344, 8192),
]  # fmt: skip


def _decode_warps(
    problems: list[TuneProblem], hopper: bool = False, stages: int = 3, warps: Any = (2, 4, 8)
) -> list[tuple]:
    """Each problem on its default plan (and, with *hopper*, on hopper's: decode blocked) and
    on the decode kernel (hopper blocked) with each of *warps* warps and *stages* chunks in
    flight, twice, interleaved."""
    pms = {"default": mp.make_plugin_manager(block=["ampere"])}
    if hopper:
        pms["hopper"] = mp.make_plugin_manager(block=["decode", "ampere"])
    decode_only = mp.make_plugin_manager(block=["ampere", "hopper"])
    jobs = []
    for problem in problems:
        built = [(problem, label, _compiled(problem, pm=pm)) for label, pm in pms.items()]
        for count in warps:
            overrides = {"splitk_factor": count, "stages": stages}
            forced = _compiled(problem, pm=decode_only, overrides=overrides)
            built.append((problem, f"decode {count} warps", forced))
        jobs += built * 2
    return jobs


def decode_warps_jobs(rows: Any = None) -> list[tuple[TuneProblem, str, Any]]:
    """The decode rows (bf16; *rows*, default ``DECODE_WARP_ROWS``): ``_decode_warps``."""
    return _decode_warps(
        [TuneProblem(m=m, n=n, k=k, dtype="bfloat16") for m, n, k in rows or DECODE_WARP_ROWS]
    )


FP8_DECODE_WAVE_ROWS = [  # (m, n, k): FP8 rows where the one-wave rule (FP8's registers:
    # 12 warps an SM) and run 96's FP8 rule disagree (2,112 rows or fewer: 8 warps against 4;
    # 264-396 CTAs of long rows: 4 against 2; 397-792 CTAs of 4 KiB rows: 2 against 4), and
    # two where they agree
    (1, 2048, 4096), (4, 2048, 8192), (1, 6144, 8192), (8, 6144, 8192), (1, 8192, 4096),
    (1, 10240, 4096), (4, 12288, 4096), (1, 8192, 8192), (1, 28672, 4096),
]  # fmt: skip


#: run 334's decode rows under cuBLAS on the decode kernel (H100: bf16 28672x4096 on one warp
#: 0.962-0.965, 8192x8192 and 8192x28672 on 4 warps 0.981-0.997; e4m3 8192x8192 on 2 warps
#: 0.959-0.965, 8x4096x4096 on 4 0.916) and four bf16 rows over it (1.03-1.08)
DECODE_UNDER_ROWS = [(1, 28672, 4096), (8, 28672, 4096), (1, 8192, 8192), (8, 8192, 8192),
                     (1, 8192, 28672), (8, 8192, 28672), (1, 10240, 8192), (1, 57344, 8192),
                     (1, 4096, 14336), (1, 6144, 4096)]  # fmt: skip
FP8_DECODE_UNDER_ROWS = [(1, 8192, 8192), (8, 8192, 8192), (8, 4096, 4096), (1, 28672, 4096),
                         (8, 28672, 4096)]  # fmt: skip


def decode_under_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``DECODE_UNDER_ROWS`` (bf16, 3 chunks in flight) and ``FP8_DECODE_UNDER_ROWS`` (e4m3 per
    tensor, 4) on the default, hopper's transposed product and the decode kernel's 1, 2, 4 and 8
    warps, twice, interleaved."""
    bf16 = [TuneProblem(m=m, n=n, k=k, dtype="bfloat16") for m, n, k in DECODE_UNDER_ROWS]
    fp8 = [TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
           for m, n, k in FP8_DECODE_UNDER_ROWS]  # fmt: skip
    warps = (1, 2, 4, 8)
    return _decode_warps(bf16, hopper=True, warps=warps) + _decode_warps(
        fp8, hopper=True, stages=4, warps=warps
    )


#: 16-bit decode rows of 1-8 activations (the decode kernel's since runs 101-105) over llama
#: weights, where hopper's transposed product led on an H100 in run 340 (28672x4096 79.7
#: against 83.9 us) or lost (10240x8192 63.5 against 60.2)
DECODE_HANDOFF_ROWS = [TuneProblem(m=m, n=n, k=k, dtype="bfloat16")
                       for m, (n, k) in itertools.product((1, 4, 8), (
                           (4096, 4096), (6144, 4096), (4096, 14336), (8192, 8192),
                           (10240, 8192), (14336, 4096), (28672, 4096), (8192, 28672),
                           (57344, 8192), (2048, 8192), (20480, 4096), (2048, 65536)))]  # fmt: skip


def decode_handoff_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``DECODE_HANDOFF_ROWS`` on the decode kernel's default (hopper blocked) and on hopper's
    transposed product (decode blocked), three rounds in turn, cuBLAS beside."""
    return _decode_or_hopper(DECODE_HANDOFF_ROWS, default=False)


#: deep-K problems whose default splits 128x256 or 128x192 tiles (run 340: at 512x512x65536
#: cuBLAS's 128x128 tiles split 8 ran 59.4 us against the default's 128x256 split 16, 65.4)
DEEP_SPLIT_SHAPES = [(512, 512, 65536), (512, 512, 32768), (256, 1024, 32768), (1024, 512, 16384),
                     (2048, 256, 16384), (128, 2048, 32768), (512, 384, 16384), (768, 384, 8192),
                     (384, 384, 32768), (256, 768, 16384), (1024, 1024, 16384), (768, 768, 8192),
                     (2048, 512, 8192), (384, 2048, 16384)]  # fmt: skip


def deep_split_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``DEEP_SPLIT_SHAPES`` (bf16) on the default and on 128x256, 128x192, 128x128 and 64x192
    tiles of 64 of K split as the default splits them (``hopper_splitk``), and unsplit 64x128
    tiles of 128 of K, the deepest ring of 6-4 stages each, three rounds in turn."""
    from mmaplug.heuristics.default.hopper import hopper_splitk

    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    device = mp.get_device()

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        built = [("default", _compiled(problem, pm=hopper))]
        for cta, warp in (
            ((128, 256, 64), (64, 256, 64)),
            ((128, 192, 64), (64, 192, 64)),
            ((128, 128, 64), (64, 128, 64)),
            ((64, 192, 64), (64, 192, 64)),
        ):
            split = hopper_splitk(problem.problem(), device, TileShape(*cta))
            tiles = _wgmma_tiles(cta, warp, splitk_factor=split, cluster_dims=(1, 1))
            if found := _deepest(problem, tiles, (6, 5, 4), hopper):
                built.append((f"{cta[0]}x{cta[1]} k{split} s{found[0]}", found[1]))
        tiles = _wgmma_tiles((64, 128, 128), splitk_factor=1, cluster_dims=(1, 1))
        if found := _deepest(problem, tiles, (6, 5, 4), hopper):
            built.append((f"64x128x128 unsplit s{found[0]}", found[1]))
        return [(label, compiled) for label, compiled in built if compiled is not None]

    problems = [TuneProblem(m=m, n=n, k=k, dtype="bfloat16") for m, n, k in DEEP_SPLIT_SHAPES]
    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


#: deep-K problems whose 128x256 tiles split 4 ways no longer split: as many units as unsplit
#: 64x128 tiles, as many outputs each, 4096 of K each or less (``SPLIT_RIVAL``; run 342:
#: 2048x512x8192 27.6 us unsplit against 35.9 split), and 3072x256x32768, which stays split:
#: (dtype, m, n, k, the width of the split tile)
DEEP_UNITS_SHAPES = [
    *(("bfloat16", m, n, k, 256) for m, n, k in (
        (256, 4096, 16384), (512, 2048, 8192), (512, 2048, 16384), (768, 1024, 8192),
        (768, 1024, 16384), (1024, 1024, 8192), (1024, 1024, 16384), (1536, 512, 8192),
        (1536, 512, 16384), (2048, 512, 8192), (2048, 512, 16384), (3072, 256, 16384),
        (4096, 256, 16384), (3072, 256, 32768))),
    *(("float8_e4m3fn", m, n, 16384, 256) for m, n in (
        (256, 4096), (512, 2048), (768, 1024), (1024, 1024), (1536, 512), (2048, 512),
        (3072, 256), (4096, 256))),
]  # fmt: skip


def deep_units_jobs(shapes: list = DEEP_UNITS_SHAPES) -> list[tuple[TuneProblem, str, Any]]:
    """*shapes* on the default and on the split it had (128-row tiles of 64 of K, 128 for FP8,
    split as ``split_to_one_wave`` splits them), with unsplit 64x128 tiles of 128 of K (FP8:
    256) beside, the deepest ring of 6-4 stages each, three rounds in turn."""
    from mmaplug.heuristics.default.grid import split_to_one_wave
    from mmaplug.heuristics.default.hopper_tiles import HOPPER_SPLITK_MAX

    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    device = mp.get_device()
    jobs = []
    for dtype, m, n, k, width in shapes:
        scale = "tensor" if dtype.startswith("float8") else None
        problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale)
        depth, inst_k = (128, 32) if scale else (64, 16)
        cta = (128, width, depth)
        split = split_to_one_wave(problem.problem(), device, TileShape(*cta), HOPPER_SPLITK_MAX)
        built = [("default", _compiled(problem, pm=hopper))]
        split_tiles = _wgmma_tiles(
            cta, (64, width, depth), inst_k, splitk_factor=split, cluster_dims=(1, 1)
        )
        if found := _deepest(problem, split_tiles, (6, 5, 4), hopper):
            built.append((f"128x{width} k{split} s{found[0]}", found[1]))
        unsplit = _wgmma_tiles((64, 128, 2 * depth), k=inst_k, splitk_factor=1, cluster_dims=(1, 1))
        if found := _deepest(problem, unsplit, (6, 5, 4), hopper):
            built.append((f"64x128x{2 * depth} unsplit s{found[0]}", found[1]))
        jobs.append((problem, [(lbl, c) for lbl, c in built if c is not None]))
    return _in_turn(iter(jobs), rounds=3)


FP8_DEEP_BYTES_SHAPES = [
    ("float8_e4m3fn", m, n, 32768, 256)
    for m, n in ((128, 8192), (512, 2048), (1024, 1024), (2048, 512), (3072, 256))
]


def fp8_deep_bytes_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``deep_units_jobs`` on ``FP8_DEEP_BYTES_SHAPES``: e4m3 splits of 8192 of K a unit (8 KiB
    of each row, as 16-bit ones of 4096) against unsplit 64x128x256 tiles."""
    return deep_units_jobs(FP8_DEEP_BYTES_SHAPES)


def fp8_decode_waves_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """FP8 (e4m3, per tensor) decode rows on the default and 2, 4 and 8 warps, 4 chunks:
    whether one warp rule, by waves, serves FP8 too."""
    problems = [
        TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
        for m, n, k in FP8_DECODE_WAVE_ROWS
    ]
    return _decode_warps(problems, stages=4)


DECODE_ONE_WARP_ROWS = [  # (batch, m, n, k): rows whose default may go to one warp a CTA
    # (one wave of it alone, or short rows past one wave) and batches of short rows decode keeps
    (32, 1, 4096, 128), (64, 1, 4096, 1024), (32, 8, 4096, 512), (64, 8, 4096, 256),
    (64, 4, 4096, 256), (8, 1, 4096, 256), (4, 8, 2048, 128), (16, 2, 4096, 512),
    (1, 1, 28672, 4096), (1, 8, 28672, 4096), (1, 1, 20480, 4096), (1, 4, 24576, 4096),
]  # fmt: skip


def decode_one_warp_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``DECODE_ONE_WARP_ROWS`` (bf16) and FP8 16x57344x8192 (per row) on the default, hopper's
    plan and 1, 2 and 4 decode warps (3 chunks; FP8 4)."""
    problems = [
        TuneProblem(m=m, n=n, k=k, batch=b, dtype="bfloat16") for b, m, n, k in DECODE_ONE_WARP_ROWS
    ]
    fp8 = [TuneProblem(m=16, n=57344, k=8192, dtype="float8_e4m3fn", scale="row")]
    warps = (1, 2, 4)
    return _decode_warps(problems, True, 3, warps) + _decode_warps(fp8, True, 4, warps)


FP8_DECODE_ROWS = [  # (m, n, k): FP8 (e4m3, per row) rows past one wave of one warp (1,584
    # CTAs of one m tile), and 9-16 rows that hopper's transposed product may stream faster
    (1, 28672, 4096), (8, 28672, 4096), (16, 57344, 8192), (12, 57344, 8192), (16, 8192, 8192),
    (16, 14336, 8192), (16, 10240, 8192), (16, 28672, 4096), (16, 8192, 4096), (16, 4096, 16384),
]  # fmt: skip


def decode_rows_past_one_wave_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_DECODE_ROWS`` and bf16 rows past one wave of one warp (2x57344x8192,
    8x57344x8192) on the default, hopper's plan and 1, 2 and 4 decode warps."""
    fp8 = [
        TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="row")
        for m, n, k in FP8_DECODE_ROWS
    ]
    bf16 = [TuneProblem(m=m, n=57344, k=8192, dtype="bfloat16") for m in (2, 8)]
    warps = (1, 2, 4)
    return _decode_warps(fp8, True, 4, warps) + _decode_warps(bf16, True, 3, warps)


FP8_WIDE_ROWS = [  # (m, n, k): FP8 (e4m3, per tensor) rows of 9-16 activations (two m tiles
    # of the decode kernel), few and many weight blocks, for the widened FP8 mma (run 209)
    (16, 4096, 4096), (12, 4096, 4096), (9, 4096, 4096), (16, 2048, 8192), (16, 1040, 1024),
    (16, 6144, 4096), (16, 8192, 8192), (16, 28672, 4096), (16, 10240, 8192), (16, 4096, 14336),
]  # fmt: skip


def fp8_two_tiles_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_WIDE_ROWS``: ``_decode_warps`` with hopper's plan, 1-8 warps of 4 chunks."""
    fp8 = [
        TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
        for m, n, k in FP8_WIDE_ROWS
    ]
    return _decode_warps(fp8, True, 4, (1, 2, 4, 8))


FP8_UNROLL_ROWS = [  # (m, n, k): FP8 (e4m3, per tensor) decode rows where more chunks in flight
    # may pay: a weight L2 holds (16 MiB) and long rows past one wave (run 210)
    (16, 4096, 4096), (12, 4096, 4096), (16, 2048, 8192), (16, 6144, 4096), (8, 4096, 4096),
    (8, 8192, 8192), (8, 28672, 4096), (4, 8192, 8192),
]  # fmt: skip


def fp8_unroll_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_UNROLL_ROWS`` on the default and on 2 and 4 decode warps with 4, 6 and 8 chunks in
    flight (past the rules' 4: ``UNROLLS`` raised in this process only)."""
    decode_limits.UNROLLS = (1, 2, 3, 4, 6, 8)  # type: ignore[misc]  # this process only
    decode_only = mp.make_plugin_manager(block=["ampere", "hopper"])
    jobs = []
    for m, n, k in FP8_UNROLL_ROWS:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
        built = [(problem, "default", _compiled(problem))]
        for warps in (2, 4):
            for chunks in (4, 6, 8):
                ov = {"splitk_factor": warps, "stages": chunks}
                compiled = _compiled(problem, pm=decode_only, overrides=ov)
                built.append((problem, f"decode {warps} warps {chunks} chunks", compiled))
        jobs += built * 2
    return jobs


ROW_TILE_ROWS = [  # (m, n, k, dtype): decode rows where the activations' loads weigh (9-16 rows
    # of FP8: run 208; two that hopper's swap takes by default), 16 bf16 rows of 4 KiB weight
    # rows (decode's), and rows of 1-8 for what a CTA of 32 weight rows costs there
    (16, 4096, 4096, "float8_e4m3fn"), (12, 4096, 4096, "float8_e4m3fn"),
    (16, 2048, 8192, "float8_e4m3fn"), (16, 1040, 1024, "float8_e4m3fn"),
    (16, 8192, 4096, "float8_e4m3fn"), (16, 28672, 4096, "float8_e4m3fn"),
    (16, 4096, 2048, "bfloat16"),
    (8, 4096, 4096, "float8_e4m3fn"), (8, 28672, 4096, "float8_e4m3fn"),
    (1, 4096, 4096, "float8_e4m3fn"), (8, 4096, 4096, "bfloat16"), (8, 6144, 4096, "bfloat16"),
    (4, 6144, 4096, "bfloat16"), (1, 6144, 4096, "bfloat16"), (8, 28672, 4096, "bfloat16"),
]  # fmt: skip


def row_tiles_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``ROW_TILE_ROWS`` (per tensor where FP8) on the default, twice, and on the decode kernel
    of two row tiles (32 weight rows a CTA) with 2, 4 and 8 warps of 2-4 chunks in flight."""
    decode_only = mp.make_plugin_manager(block=["ampere", "hopper"])
    jobs = []
    for m, n, k, dtype in ROW_TILE_ROWS:
        scale = "tensor" if "float8" in dtype else ""
        problem = TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale)
        tile = (8 * -(-m // 8), 32, 128 if scale else 64)
        jobs += [(problem, "default", _compiled(problem))] * 2
        for warps, chunks in itertools.product((2, 4, 8), (2, 3, 4)):
            ov = {"cta_tile": tile, "warp_tile": tile, "splitk_factor": warps, "stages": chunks}
            compiled = _compiled(problem, pm=decode_only, overrides=ov)
            jobs.append((problem, f"32 rows {warps} warps {chunks} chunks", compiled))
    return jobs


DECODE_BATCHED = [  # (batch, m, n, k): batches of products of at most 16 rows, own weights each
    (32, 1, 4096, 128), (8, 16, 4096, 4096), (16, 1, 4096, 4096), (64, 8, 4096, 256),
    (4, 4, 14336, 4096), (2, 8, 28672, 4096), (8, 1, 4096, 14336), (8, 8, 4096, 4096),
    (4, 16, 4096, 4096), (64, 1, 4096, 1024), (8, 1, 8192, 2048), (2, 16, 10240, 8192),
]  # fmt: skip


def decode_batched_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Batched decode-sized products (bf16): ``_decode_warps`` with hopper's plan (runs
    181-182)."""
    problems = [
        TuneProblem(m=m, n=n, k=k, batch=b, dtype="bfloat16") for b, m, n, k in DECODE_BATCHED
    ]
    return _decode_warps(problems, hopper=True)


SHORT_K_PROBLEMS = [  # (batch, m, n, k, dtype): output-bound grids of 1-4 K tiles a unit, and
    # 8-32 K tiles (where CTA pairs start to pay)
    (1, 4096, 4096, 64, "bfloat16"), (1, 8192, 8192, 64, "bfloat16"),
    (1, 4096, 4096, 128, "bfloat16"), (16, 2048, 2048, 128, "bfloat16"),
    (1, 8192, 4096, 256, "bfloat16"), (1, 4096, 4096, 64, "float16"),
    (1, 8192, 8192, 512, "bfloat16"), (1, 8192, 8192, 1024, "bfloat16"),
    (1, 8192, 8192, 2048, "bfloat16"),
]  # fmt: skip
SHORT_K_TILES: dict[str, dict[str, Any]] = {
    "default": {},
    "128x256 alone": _wgmma_tiles((128, 256, 64), (64, 256, 64), stages=4, cluster_dims=(1, 1)),
    "128x256 pairs M": _wgmma_tiles((128, 256, 64), (64, 256, 64), stages=4, cluster_dims=(2, 1)),
    "128x256 pairs N": _wgmma_tiles((128, 256, 64), (64, 256, 64), stages=4, cluster_dims=(1, 2)),
    "256x128 alone": _wgmma_tiles((256, 128, 64), (128, 128, 64), stages=4, cluster_dims=(1, 1)),
    "256x128 pairs N": _wgmma_tiles((256, 128, 64), (128, 128, 64), stages=4, cluster_dims=(1, 2)),
    "128x128 pairs N": _wgmma_tiles((128, 128, 64), (64, 128, 64), stages=6, cluster_dims=(1, 2)),
}


def short_k_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Output-bound grids (K of 64-256: a unit's main loop is one to four K tiles and its
    epilogue writes most of the bytes) on hopper's default and on cuBLAS's shapes for them
    (``nvjet_sm90_tst_256x128_64x4_1x2``: 256x128 tiles in pairs along N, ncu run 174), twice."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for batch, m, n, k, dtype in SHORT_K_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, batch=batch, dtype=dtype)
        built = [(label, _compiled(problem, pm=hopper, overrides=ov or None))
                 for label, ov in SHORT_K_TILES.items()]  # fmt: skip
        jobs += [(problem, label, compiled) for label, compiled in built] * 2
    return jobs


L2_256 = " l2=256"  # a label's suffix: its tensor maps fetch 256 bytes of L2 a request
#: the FP8 targets' rows (issue 24), bare, and 4096^3 with bias + GELU
FP8_PINGPONG_PROBLEMS = [((4096, 4096, 4096), "row", "none"), ((4096, 6144, 4096), "row", "none"),
                         ((4096, 28672, 4096), "row", "none"), ((8192, 8192, 8192), "row", "none"),
                         ((2048, 14336, 5120), "row", "none"), ((4096, 10240, 8192), "row", "none"),
                         ((4096, 4096, 4096), "tensor", "none"),
                         ((4096, 6144, 4096), "tensor", "none"),
                         ((8192, 8192, 8192), "tensor", "none"),
                         ((4096, 4096, 4096), "row", "bias_gelu"),
                         ((4096, 4096, 4096), "tensor", "bias_gelu")]  # fmt: skip


def fp8_pingpong_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The FP8 targets' rows on cuBLASLt's plan for them (ncu, run 226: ``nvjet_sm90_qqtst_
    128x128_128x6_1x2_h``: ping-pong consumers each owning a 128x128 tile, 128 of K in 6
    stages, CTA pairs) beside the default, timed first and last, and both with tensor maps
    that promote L2 fetches to 256 bytes."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for (m, n, k), scale, epilogue in FP8_PINGPONG_PROBLEMS:
        problem = TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale,
                              epilogue=epilogue)  # fmt: skip
        sets: list[tuple[str, dict | None]] = [("default", None), ("default" + L2_256, None)]
        for stages, cluster in ((6, (1, 1)), (6, (2, 1)), (6, (1, 2)), (5, (1, 2))):
            ov = _wgmma_tiles((128, 128, 128), k=32, stages=stages, cluster_dims=cluster,
                              tiling_strategy="persistent_pingpong")  # fmt: skip
            sets.append((f"pingpong 128x128x128 s{stages} c{cluster[0]}x{cluster[1]}", ov))
        sets += [(sets[-2][0] + L2_256, sets[-2][1]), ("default again", None)]
        jobs += [(problem, label, _compiled(problem, pm=hopper, overrides=ov))
                 for label, ov in sets]  # fmt: skip
    return jobs


def _alone_and_paired(problem: TuneProblem, pm: Any) -> tuple[Any, Any]:
    """*problem*'s default plan, and the plan the default heuristic makes for it with
    ``HOPPER_CLUSTER_MIN_WAVES`` at 0 (CTA pairs along M, the tile order recomputed for them)."""
    import mmaplug.heuristics.default.hopper as default_hopper

    alone = _compiled(problem, pm=pm)
    with mock.patch.object(default_hopper, "HOPPER_CLUSTER_MIN_WAVES", 0):
        return alone, _compiled(problem, pm=pm)


def fp8_pairs_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The FP8 targets' rows whose default runs alone (under ``HOPPER_CLUSTER_MIN_WAVES``):
    the plan the heuristic makes with that floor at 0 (CTA pairs along M, the tile order
    recomputed for them), the default, pairs along N, the first two timed twice in turn.
    cuBLASLt runs its 128x256 FP8 tiles in pairs at 4096^3 (ncu, run 228)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    jobs = []
    for problem in tune_targets.problems():
        if not problem.dtype.startswith("float8") or problem.m < 256:
            continue
        alone, pairs = _alone_and_paired(problem, hopper)
        if None in (pairs, alone) or pairs.kernel_name == alone.kernel_name:
            continue  # paired already, or (block scales) not pairable
        along_n = _compiled(problem, pm=hopper, overrides={"cluster_dims": (1, 2)})
        jobs += [(problem, "pairs along M", pairs), (problem, "default (alone)", alone),
                 (problem, "pairs along N", along_n), (problem, "pairs along M again", pairs),
                 (problem, "default again", alone)]  # fmt: skip
    return jobs


def _in_turn(
    planned: Iterable[tuple[TuneProblem, list[tuple[str, Any]]]], rounds: int
) -> list[tuple[TuneProblem, str, Any]]:
    """Each problem's labelled plans (none: skipped) for *rounds* rounds in turn (labels
    numbered by round), each round starting one plan later than the one before, after one
    warm-up timing of the first problem's first plan (run 227: a cool GPU ran the first
    problem 18% faster). The plan timed first in a round ran slower in runs 242 and 244 by as
    much as two plans differed (docs/decisions.md, the tile order in groups), so no plan keeps
    one place."""
    jobs: list[tuple[TuneProblem, str, Any]] = []
    for problem, sets in planned:
        if not sets:  # (no plan built)
            continue
        if not jobs:
            jobs.append((problem, "warm-up", sets[0][1]))
        for r in range(rounds):
            turn = sets[r % len(sets) :] + sets[: r % len(sets)]
            jobs += [(problem, f"{label} {r}", compiled) for label, compiled in turn]
    return jobs


def _in_other_order(
    problem: TuneProblem, plan: Any, pm: Any, overrides: dict | None = None
) -> tuple[int, int, Any]:
    """*plan*'s tile order in groups (``grid_swizzle_factor``), the other order (1 where it
    groups by 8, else 8), and *problem* built with *overrides* in that other order."""
    group = plan.params.grid_swizzle_factor
    other = 1 if group > 1 else 8
    flipped = {**(overrides or {}), "grid_swizzle_factor": other}
    return group, other, _compiled(problem, pm=pm, overrides=flipped)


def _problems(rows: Iterable[tuple[Any, ...]]) -> list[TuneProblem]:
    """The TuneProblems of *rows* ``((m, n, k), dtype, scale)``, each with an epilogue after
    its scale where given."""
    return [TuneProblem(m=m, n=n, k=k, dtype=dtype, scale=scale, epilogue=(*rest, "none")[0])
            for (m, n, k), dtype, scale, *rest in rows]  # fmt: skip


#: run 229's FP8 rows where pairs won (4096^3 per row, 4096x6144x4096) and lost (2048x14336x5120,
#: 4096x8192x8192 per tensor) or tied, for three rounds in turn after a warm-up
FP8_PAIRS_FOCUS = [((4096, 6144, 4096), "row"), ((4096, 6144, 4096), "tensor"),
                   ((4096, 4096, 4096), "row"), ((2048, 14336, 5120), "row"),
                   ((2048, 14336, 5120), "tensor"), ((4096, 8192, 8192), "tensor"),
                   ((4096, 10240, 8192), "row")]  # fmt: skip


def fp8_pairs_focus_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_PAIRS_FOCUS`` in CTA pairs along M (the plan with ``HOPPER_CLUSTER_MIN_WAVES``
    at 0) and alone (the default), three rounds in turn; the first pair plan is timed once
    before as a warm-up (run 227: a cool GPU ran the first problem 18% faster)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        alone, pairs = _alone_and_paired(problem, hopper)
        return [("pairs along M", pairs), ("alone", alone)]

    problems = (TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
                for (m, n, k), scale in FP8_PAIRS_FOCUS)  # fmt: skip
    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


#: the fused-epilogue targets (4096^3 bias + GELU, 16-bit and FP8) and their bare rows: ping-pong
#: consumers hide one tile's epilogue under the other's main loop (run 233, base clocks: the FP8
#: ping-pong kernel fused 171-173 K cycles against the cooperative default's 180 K)
FUSED_PP_PROBLEMS = [((4096, 4096, 4096), "float8_e4m3fn", "row", "none"),
                     ((4096, 4096, 4096), "float8_e4m3fn", "row", "bias_gelu"),
                     ((4096, 4096, 4096), "float8_e4m3fn", "tensor", "none"),
                     ((4096, 4096, 4096), "float8_e4m3fn", "tensor", "bias_gelu"),
                     ((8192, 8192, 8192), "float8_e4m3fn", "row", "bias_gelu"),
                     ((2048, 14336, 5120), "float8_e4m3fn", "row", "bias_gelu"),
                     ((4096, 4096, 4096), "bfloat16", "", "none"),
                     ((4096, 4096, 4096), "bfloat16", "", "bias_gelu"),
                     ((4096, 4096, 4096), "float16", "", "none"),
                     ((4096, 4096, 4096), "float16", "", "bias_gelu")]  # fmt: skip


def fused_pp_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FUSED_PP_PROBLEMS`` on the default and on ping-pong consumers owning 128x128 or 64x256
    tiles (the deepest ring that fits), two rounds in turn after a warm-up."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        wk = 128 if problem.scale else 64
        found_sets = [("default", _compiled(problem, pm=hopper))]
        for cta in ((128, 128, wk), (64, 256, wk)):
            ov = _wgmma_tiles(cta, k=32 if problem.scale else 16, cluster_dims=(1, 1),
                              tiling_strategy="persistent_pingpong")  # fmt: skip
            if found := _deepest(problem, ov, (8, 7, 6, 5, 4), hopper):
                found_sets.append((f"pp {cta[0]}x{cta[1]} s{found[0]}", found[1]))
        return found_sets

    return _in_turn(((p, sets(p)) for p in _problems(FUSED_PP_PROBLEMS)), rounds=2)


#: the swapped weight-streaming rows furthest below cuBLAS (run 235, ncu: cuBLAS splits K in
#: two over 128 CTAs in pairs, ``nvjet_sm90_tst_64x32_64x16_2x1_v_bz_splitK``, where our
#: swapped tile runs 64 CTAs unsplit)
SWAP_SPLIT_PROBLEMS = [((32, 4096, 4096), "bfloat16", ""), ((16, 4096, 4096), "bfloat16", ""),
                       ((64, 4096, 4096), "bfloat16", ""), ((32, 6144, 4096), "bfloat16", ""),
                       ((24, 4096, 4096), "bfloat16", ""), ((32, 4096, 4096), "float16", ""),
                       ((16, 4096, 4096), "float8_e4m3fn", "tensor"),
                       ((32, 4096, 4096), "float8_e4m3fn", "tensor")]  # fmt: skip


def swap_split_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``SWAP_SPLIT_PROBLEMS``: the default against the swapped tile with K split 2 or 4,
    summed in the cluster of the splits or through the workspace, two rounds in turn."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    default = mp.make_plugin_manager(block=["ampere"])  # (decode plans the 16-row FP8 one)

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        found_sets = [("default", _compiled(problem, pm=default))]
        for split, cluster in ((2, True), (2, False), (4, True), (4, False)):
            ov = swap_split(split, cluster)
            where = "in cluster" if cluster else "workspace"
            if found := _deepest(problem, ov, (8, 6, 5, 4), hopper):
                found_sets.append((f"swap split {split} {where} s{found[0]}", found[1]))
        return found_sets

    return _in_turn(((p, sets(p)) for p in _problems(SWAP_SPLIT_PROBLEMS)), rounds=2)


#: the rows whose default the wave's output moves into groups of 8 (``hopper_swizzle``: on the
#: H200 the first three, on the H100 the first four; the fifth moved on the H100 until run 242
#: timed it slower, the walk no longer than a group's wave) and a row it leaves alone
SWIZZLE_WAVE_PROBLEMS = [((4096, 6144, 4096), "float8_e4m3fn", "row", "none"),
                         ((4096, 6144, 4096), "float8_e4m3fn", "tensor", "none"),
                         ((4096, 6144, 4096), "float8_e4m3fn", "block", "none"),
                         ((3000, 5000, 2048), "float16", "", "none"),
                         ((2048, 14336, 5120), "bfloat16", "", "bias_gelu"),
                         ((4096, 4096, 4096), "float8_e4m3fn", "row", "none")]  # fmt: skip


def swizzle_wave_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``SWIZZLE_WAVE_PROBLEMS`` on the default and on the default's plan in the other tile
    order (``grid_swizzle_factor`` 1 where the default groups by 8, else 8: which rows the
    rule moves depends on the device's L2), the large ones also in CTA pairs along M (fewer L2
    bytes, runs 229-231), three rounds in turn after a warm-up."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=hopper)) is None:
            return []
        group, other, flipped = _in_other_order(problem, default, hopper)
        found_sets = [(f"default g{group}", default), (f"g{other}", flipped)]
        if problem.m >= 4096 and default.params.cluster_dims == (1, 1):  # and in CTA pairs
            paired = _compiled(problem, pm=hopper, overrides={"cluster_dims": (2, 1)})
            found_sets += [(f"pairs along M g{group}", paired)] if paired else []
        return found_sets

    return _in_turn(((p, sets(p)) for p in _problems(SWIZZLE_WAVE_PROBLEMS)), rounds=3)


#: one-wave rows of 96-512 activations whose default runs two or more M tiles alone (below
#: ``HOPPER_CLUSTER_MIN_WAVES``): their weight tile could be shared by a pair along M
SKINNY_PAIRS_PROBLEMS = [((128, 4096, 4096), "float8_e4m3fn", "tensor"),
                         ((128, 4096, 4096), "float8_e4m3fn", "row"),
                         ((96, 6144, 4096), "bfloat16", ""), ((192, 4096, 14336), "bfloat16", ""),
                         ((256, 5120, 4096), "bfloat16", ""), ((512, 4096, 4096), "bfloat16", ""),
                         ((384, 28672, 4096), "bfloat16", ""),
                         ((512, 10240, 8192), "bfloat16", "")]  # fmt: skip


def skinny_pairs_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``SKINNY_PAIRS_PROBLEMS`` on the default, on its plan (unswapped) in CTA pairs along M
    that share the weight tile, each with the deepest ring that fits, and for FP8 on
    cuBLASLt's plan at 128x4096x4096 (``64x64_128x13_2x1``: 64x64 tiles, 128 of K, the
    deepest ring, in pairs along M; BENCHMARKS.md run 238); three rounds, turns rotating."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    paired = ("pairs along M", {"cluster_dims": (2, 1), "swap_ab": False})
    lt = ("64x64x128 pairs along M", _wgmma_tiles((64, 64, 128), k=32, cluster_dims=(2, 1)))

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=hopper)) is None:
            return []
        found_sets = [("default", default)]
        for label, ov in (paired, lt) if problem.is_fp8 else (paired,):
            if found := _deepest(problem, ov, range(16, 2, -1), hopper):
                found_sets.append((f"{label} s{found[0]}", found[1]))
        return found_sets

    return _in_turn(((p, sets(p)) for p in _problems(SKINNY_PAIRS_PROBLEMS)), rounds=3)


#: 16-bit problems whose default tiles have 64 rows (one consumer warpgroup; BENCHMARKS.md runs
#: 302-303: on the producer's tail, pairs along M won 13-16% at 1000^3 and 777x1111x4096 and
#: lost 38-44% where 3 or 5 M tiles pair unevenly): the rest of the class, for a default rule
NARROW_PAIRS_PROBLEMS = [((1000, 1000, 1000), "float16", ""), ((1000, 1000, 1000), "bfloat16", ""),
                         ((768, 768, 768), "float16", ""), ((1024, 1024, 1024), "float16", ""),
                         ((1024, 1024, 1024), "bfloat16", ""), ((1000, 1000, 4096), "bfloat16", ""),
                         ((1000, 1000, 2048), "float16", ""), ((512, 512, 512), "float16", ""),
                         ((1024, 1536, 2048), "bfloat16", ""), ((640, 2048, 2048), "float16", ""),
                         ((256, 4096, 4096), "bfloat16", ""), ((128, 8192, 1024), "bfloat16", ""),
                         ((128, 4096, 4096), "bfloat16", ""), ((777, 1111, 4096), "float16", ""),
                         ((192, 4096, 4096), "bfloat16", ""),
                         ((320, 4096, 4096), "bfloat16", "")]  # fmt: skip


def narrow_pairs_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``NARROW_PAIRS_PROBLEMS`` on the default plan and on the same plan with its cluster
    toggled (CTA pairs along M where the default runs alone, alone where it pairs); three
    rounds in turn, turns rotating."""
    return _pairs_toggled(NARROW_PAIRS_PROBLEMS)


#: one-wave 16-bit problems whose operand rows are not 128 bytes apart (K * 2 % 128: after
#: the tensor maps became parameters pairs along M ran fp16 1000^3 in 8.7-8.9 us against the
#: default's 11.0-11.3, and lost at 1024^3, run 313), and beside them their aligned twins
ODD_PITCH_PROBLEMS = [
    ((1000, 1000, 1000), "float16", ""), ((1000, 1000, 1024), "float16", ""),
    ((1024, 1024, 1000), "float16", ""), ((1024, 1024, 1008), "float16", ""),
    ((1024, 1024, 1024), "float16", ""), ((768, 768, 1000), "float16", ""),
    ((1000, 1000, 2000), "bfloat16", ""), ((1000, 1000, 2048), "bfloat16", ""),
    ((1000, 1000, 3000), "float16", ""), ((512, 2048, 1000), "bfloat16", ""),
    ((1000, 1000, 4000), "bfloat16", ""),
]  # fmt: skip


def odd_pitch_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``ODD_PITCH_PROBLEMS`` as ``narrow_pairs`` times its problems."""
    return _pairs_toggled(ODD_PITCH_PROBLEMS)


def _pairs_toggled(rows: Iterable[tuple[Any, ...]]) -> list[tuple[TuneProblem, str, Any]]:
    """The problems of *rows* on their default plan and on it with its cluster toggled, three
    rounds in turn."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=hopper)) is None:
            return []
        alone = default.spec.params.cluster_dims == (1, 1)
        other = {"cluster_dims": (2, 1) if alone else (1, 1)}
        toggled = _compiled(problem, pm=hopper, overrides=other)
        label = "pairs along M" if alone else "alone"
        return [("default", default)] + ([(label, toggled)] if toggled else [])

    return _in_turn(((p, sets(p)) for p in _problems(rows)), rounds=3)


#: cuBLASLt's FP8 per-row plan at 4096x8192x8192 (ncu, run 252: ``nvjet_sm90_qqtst_128x128_
#: 128x6_1x2_h``): ping-pong consumers owning 128x128 tiles, 128 of K in 6 stages, in pairs
#: along N that share the A tile
FP8_PINGPONG_ALONG_N = _wgmma_tiles((128, 128, 128), k=32, stages=6, cluster_dims=(1, 2),
                                    tiling_strategy="persistent_pingpong")  # fmt: skip


def fp8_pp_pairs_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The FP8 targets' large rows (per tensor and per row, bare and fused) on the default and
    on ``FP8_PINGPONG_ALONG_N``, two rounds in turn after a warm-up."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=hopper)) is None:
            return []
        pp = _compiled(problem, pm=hopper, overrides=FP8_PINGPONG_ALONG_N)
        return [("default", default)] + ([("pingpong 128x128 pairs along N", pp)] if pp else [])

    problems = [p for p in tune_targets.problems()
                if p.dtype.startswith("float8") and p.m >= 2048 and p.scale != "block"]  # fmt: skip
    return _in_turn(((p, sets(p)) for p in problems), rounds=2)


def fp8_wide_n_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """e4m3 4096x28672x4096 per tensor and per row, the one target row where ping-pong pairs
    along N beat the default (run 254, ``fp8_pp_pairs``): the default (pairs along M, the
    plain column walk), its tile alone, in groups of 8 and in pairs along N, and ping-pong
    128x128 tiles alone and in pairs either way; three rounds in turn."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    pp = FP8_PINGPONG_ALONG_N
    variants = [("alone", {"cluster_dims": (1, 1)}), ("groups of 8", {"grid_swizzle_factor": 8}),
                ("pairs along N", {"cluster_dims": (1, 2)}),
                ("pingpong 128x128 alone", {**pp, "cluster_dims": (1, 1)}),
                ("pingpong 128x128 pairs along M", {**pp, "cluster_dims": (2, 1)}),
                ("pingpong 128x128 pairs along N", pp)]  # fmt: skip

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        found = [("default", _compiled(problem, pm=hopper))]
        found += [(label, _compiled(problem, pm=hopper, overrides=ov)) for label, ov in variants]
        return [(label, compiled) for label, compiled in found if compiled]

    problems = _problems([((4096, 28672, 4096), "float8_e4m3fn", "tensor"),
                          ((4096, 28672, 4096), "float8_e4m3fn", "row")])  # fmt: skip
    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


def fp8_pp_order_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The FP8 targets' large rows per row (bare) on the default and on
    ``FP8_PINGPONG_ALONG_N`` in the default heuristic's tile order and in the other one
    (groups of 8 or none): run 254 lost 6-20% on it where the order grouped; two rounds in
    turn."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (pp := _compiled(problem, pm=hopper, overrides=FP8_PINGPONG_ALONG_N)) is None:
            return []
        group, other, flipped = _in_other_order(problem, pp, hopper, FP8_PINGPONG_ALONG_N)
        return [("default", _compiled(problem, pm=hopper)),
                (f"pingpong pairs along N g{group}", pp),
                (f"pingpong pairs along N g{other}", flipped)]  # fmt: skip

    problems = [p for p in tune_targets.problems()
                if p.dtype.startswith("float8") and p.m >= 2048 and p.scale == "row"
                and p.epilogue == "none"]  # fmt: skip
    return _in_turn(((p, sets(p)) for p in problems), rounds=2)


def _patched_in_turn(
    problems: Iterable[TuneProblem], patch: tuple[Any, str, Any], plain: str, patched: str
) -> list[tuple[TuneProblem, str, Any]]:
    """Each of *problems* on hopper planned and built as it is (label *plain*) and with the
    ``(owner, attribute, value)`` of *patch* set while it compiles (label *patched*), three
    rounds in turn (``_in_turn``; ``_ab`` pairs them twice instead)."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        as_is = _compiled(problem, pm=hopper)
        with mock.patch.object(*patch):
            changed = _compiled(problem, pm=hopper)
        return [(plain, as_is), (patched, changed)]

    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


def _one_scale_then_the_other(self: TuneProblem, fd: Any, a: Any, b: Any) -> Any:
    """``TuneProblem._scaled_mm`` (no ``swiglu``) as ``scaled_mm`` was written before the
    scales' product: the sum times ``scale_a``, then ``scale_b``, then the bias, in bfloat16
    (after a float32 GELU where fused); its inputs in the same order."""
    shape_a, shape_b = self.scale_shapes
    y = fd.ops.matmul(a, b)
    for shape in (shape_a, shape_b):
        scale = fd.define_tensor(list(shape), DType.float32)
        if len(shape) == 1:
            scale = fd.ops.broadcast_in_dim(scale, [1, 1], [1])
        y = fd.ops.mul(y, scale)
    if self.epilogue == "bias_gelu":
        y = fd.ops.gelu(fd.ops.add(y, fd.define_tensor([self.n], DType.bfloat16)))
    return fd.ops.cast(y, DType.bfloat16)


def fp8_scale_product_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The FP8 targets per tensor (bare and with bias + GELU) and two per-row rows, as
    ``scaled_mm`` builds them (the scales' product, one multiply an element per tensor) and
    as it built them before (one scale, then the other), three rounds in turn."""
    rows = {(4096, 4096, 4096), (4096, 28672, 4096)}
    problems = [p for p in tune_targets.problems()
                if p.dtype.startswith("float8") and p.m >= 128 and p.scale in ("tensor", "row")
                and (p.scale == "tensor" or (p.m, p.n, p.k) in rows)]  # fmt: skip

    patch = (TuneProblem, "_scaled_mm", _one_scale_then_the_other)
    return _patched_in_turn(problems, patch, "scales' product", "one scale, then the other")


WIDE_N_PROBLEMS = [TuneProblem(m=m, n=n, k=k, dtype=dtype)
                   for m, n, k, dtype in ((384, 28672, 4096, "bfloat16"),
                                          (512, 10240, 8192, "bfloat16"),
                                          (4095, 4097, 4096, "float16"))]  # fmt: skip


def wide_n_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """The corpus rows whose default tile the widths between 64 and 256 change (tiles of
    several waves, ``HOPPER_FILL_N``), on the default and on the default without them, three
    rounds in turn (runs 264-265 timed the seven rows that searching them for every grid
    changed: commit 3f059b9)."""
    from mmaplug.heuristics.default import hopper as default_hopper

    patch = (default_hopper, "HOPPER_FILL_N", ())
    return _patched_in_turn(WIDE_N_PROBLEMS, patch, "wider widths", "old widths")


#: 16-bit rows whose default tiles of 256 rows (two 128x160 consumers, ``HOPPER_TALL_N``) change:
#: the share of an SM's outputs over whole waves they save is 17% at 5000x2048, 6% at 3000x5000,
#: 5000x6144, 6144x5000 and 3333x4444, 5% at 2048x5000, 2% at 4096x14336, 4096x28672 and
#: 8192x14336 (run 328; run 325 timed the rows that widths of 128-160 changed before the search
#: kept 160 alone, and run 327 those widths: ``tall_widths``)
TALL_PROBLEMS = [TuneProblem(m=m, n=n, k=k, dtype=dtype, epilogue=epilogue)
                 for m, n, k, dtype, epilogue in (
                     (3000, 5000, 2048, "float16", "none"),
                     (3000, 5000, 2048, "bfloat16", "bias_gelu"),
                     (5000, 2048, 2048, "float16", "none"),
                     (5000, 2048, 2048, "float16", "bias_gelu"),
                     (2048, 5000, 2048, "bfloat16", "none"),
                     (3000, 5000, 4096, "bfloat16", "none"),
                     (5000, 6144, 4096, "float16", "none"),
                     (6144, 5000, 4096, "bfloat16", "none"),
                     (3333, 4444, 5632, "bfloat16", "none"),
                     (4096, 14336, 4096, "float16", "none"),
                     (4096, 28672, 4096, "bfloat16", "none"),
                     (8192, 14336, 4096, "bfloat16", "none"))]  # fmt: skip


def tall_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``TALL_PROBLEMS`` on the default with tiles of 256 rows searched and without
    (``HOPPER_TALL_N`` empty), three rounds in turn."""
    from mmaplug.heuristics.default import hopper as default_hopper

    patch = (default_hopper, "HOPPER_TALL_N", ())
    return _patched_in_turn(TALL_PROBLEMS, patch, "256-row tiles", "without")


#: rows the default swaps (the output's transpose in the kernel), by the width of its tile:
#: 96 (the large row under 0.93), 64, 48, 32 and 16 activations, and FP8 per row
SWAP_STAGED_PROBLEMS = [
    TuneProblem(m=96, n=6144, k=4096, dtype="bfloat16"),
    TuneProblem(m=96, n=6144, k=4096, dtype="float16", epilogue="bias_gelu"),
    TuneProblem(m=112, n=8192, k=8192, dtype="bfloat16"),
    TuneProblem(m=48, n=4096, k=14336, dtype="bfloat16"),
    TuneProblem(m=32, n=4096, k=4096, dtype="bfloat16"),
    TuneProblem(m=32, n=8192, k=28672, dtype="bfloat16"),
    TuneProblem(m=16, n=6144, k=4096, dtype="bfloat16"),
    TuneProblem(m=32, n=6144, k=4096, dtype="float8_e4m3fn", scale="row"),
]


def swap_staged_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``SWAP_STAGED_PROBLEMS`` on their default (swapped, the epilogue staged through shared
    memory since run 333, in the deepest ring of ``STREAMING_STAGES`` beside it) and the same
    plan with the epilogue from registers in the deepest ring that fits, three rounds in turn
    (the epilogue ncu found costing 96x6144x4096 its gap to cuBLAS, run 331)."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=pm)) is None:
            return []
        registers = _deepest(problem, {"use_smem_epilogue": False}, STREAMING_STAGES, pm)
        both = [(f"default s{default.params.stages}", default)]
        return both + ([(f"registers s{registers[0]}", registers[1])] if registers else [])

    return _in_turn(((p, sets(p)) for p in SWAP_STAGED_PROBLEMS), rounds=3)


#: FP8 decode rows that stay on the decode kernel (at most 8 rows; its FP8 mma.sync is emulated
#: on sm_90) and 9-16 rows that go to hopper: run 334's worst decode rows among them
FP8_DECODE_ROWS = [TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="tensor")
                   for m, (n, k) in itertools.product((1, 4, 8, 16), ((4096, 4096), (8192, 8192),
                                                                      (28672, 4096)))]  # fmt: skip


def fp8_decode_swap_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_DECODE_ROWS`` on the decode kernel (hopper blocked) and on hopper's transposed
    product (decode blocked: 64 weight rows, the rows as a wgmma N of 8 or 16, 256 of K a stage,
    the epilogue staged since run 334), three rounds in turn, cuBLASLt beside."""
    return _decode_or_hopper(FP8_DECODE_ROWS, default=True)


def _decode_or_hopper(
    problems: list[TuneProblem], default: bool
) -> list[tuple[TuneProblem, str, Any]]:
    """Each of *problems* on the decode kernel (hopper blocked) and on hopper's plan (decode
    blocked), with *default* on the default plan first, three rounds in turn."""
    pms = {"decode": mp.make_plugin_manager(block=["hopper", "ampere"]),
           "hopper": mp.make_plugin_manager(block=["decode", "ampere"])}  # fmt: skip
    if default:
        pms = {"default": None, **pms}

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        built = [(label, _compiled(problem, pm=pm)) for label, pm in pms.items()]
        return [(label, compiled) for label, compiled in built if compiled is not None]

    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


#: batches of decode-sized products around the short-row hand-off's bounds (256-byte weight
#: rows, more 128-row tiles than SMs): rows of 128-512 bytes, 1-16 rows, 8-64 products
BATCHED_SHORT_PROBLEMS = [TuneProblem(m=m, n=n, k=k, batch=b, dtype="bfloat16")
                          for b, m, n, k in ((32, 1, 4096, 96), (32, 1, 4096, 192),
                                             (32, 4, 4096, 256), (16, 8, 4096, 128),
                                             (8, 1, 4096, 128), (5, 1, 4096, 128),
                                             (64, 12, 1024, 128), (32, 16, 2048, 64),
                                             (32, 1, 4096, 512))]  # fmt: skip


def batched_short_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``BATCHED_SHORT_PROBLEMS`` on the default (decode, or hopper's transposed product on two
    consumers where decode hands the batch over: run 339), on the decode kernel (hopper
    blocked) and on that transposed product (decode blocked; where the default is not it, the
    same tiles forced), three rounds in turn."""
    decode = mp.make_plugin_manager(block=["hopper", "ampere"])
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        cols = 8 * -(-problem.m // 8)
        tiles = _wgmma_tiles((128, cols, 128), (64, cols, 128), **SWAPPED)
        swapped = {**tiles, "use_smem_epilogue": True}
        built = [("default", _compiled(problem)), ("decode", _compiled(problem, pm=decode))]
        found = _deepest(problem, swapped, (6, 5, 4), hopper)
        built += [(f"swapped 128x{cols} s{found[0]}", found[1])] if found else []
        return [(label, compiled) for label, compiled in built if compiled is not None]

    return _in_turn(((p, sets(p)) for p in BATCHED_SHORT_PROBLEMS), rounds=3)


#: run 325's rows where 256x152 tiles lost (the first six) or another width won, on tiles of 256
#: rows 128-160 wide (run 327)
TALL_WIDTH_PROBLEMS = [TuneProblem(m=m, n=n, k=k, dtype=dtype)
                       for m, n, k, dtype in ((3000, 5000, 2048, "float16"),
                                              (3000, 5000, 2048, "bfloat16"),
                                              (2048, 5000, 2048, "float16"),
                                              (4096, 5000, 4096, "bfloat16"),
                                              (3000, 14336, 4096, "bfloat16"),
                                              (8192, 6144, 4096, "bfloat16"),
                                              (1536, 3072, 4096, "bfloat16"),
                                              (5000, 2048, 2048, "float16"))]  # fmt: skip


def tall_width_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``TALL_WIDTH_PROBLEMS`` on the default without tiles of 256 rows (``HOPPER_TALL_N``
    empty) and on 256-row tiles of two 128xW consumers, W of 128, 144, 152 and 160, each in
    the deepest ring up to 6 stages, three rounds in turn."""
    from mmaplug.heuristics.default import hopper as default_hopper

    pm = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        with mock.patch.object(default_hopper, "HOPPER_TALL_N", ()):
            built = [("without", _compiled(problem, pm=pm))]
        for width in (128, 144, 152, 160):
            tiles = _wgmma_tiles((256, width, 64), (128, width, 64))
            if found := _deepest(problem, tiles, range(6, 1, -1), pm):
                built.append((f"256x{width} s{found[0]}", found[1]))
        return built

    return _in_turn(((p, sets(p)) for p in TALL_WIDTH_PROBLEMS), rounds=3)


def tall_pairs_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``TALL_PROBLEMS`` (the rows the default puts on 256x160 tiles; the first eight) alone
    and in CTA pairs along M (sharing B) or N (sharing A), three rounds in turn: 256x160's
    consumers wait on its 3 stages (ncu, run 331), and cuBLAS runs its 256x152 tiles in
    pairs (``1x2``)."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        built = [("alone", _compiled(problem, pm=pm))]
        for cluster in ((2, 1), (1, 2)):
            paired = _compiled(problem, pm=pm, overrides={"cluster_dims": cluster})
            if paired is not None:
                built.append((f"pairs {cluster[0]}x{cluster[1]}", paired))
        return built

    return _in_turn(((p, sets(p)) for p in TALL_PROBLEMS[:8]), rounds=3)


_CONSUMER_PAIRS_96 = {"128x128": ((128, 128, 64), (64, 128, 64)),
                      "128x96": ((128, 96, 64), (64, 96, 64))}  # fmt: skip
WIDE_N_WAVE_SETS = [  # one-wave grids: 96 tiles of 128 columns, or 128-132 of 96 (bf16)
    ((1536, 1000, 7168), _CONSUMER_PAIRS_96),
    ((1000, 1536, 7168), _CONSUMER_PAIRS_96),
    ((768, 2048, 8192), _CONSUMER_PAIRS_96),
    ((2048, 768, 8192), _CONSUMER_PAIRS_96),
    ((192, 4096, 14336), {"64x128": ((64, 128, 128), None), "64x96": ((64, 96, 128), None),
                          "64x96 k64": ((64, 96, 64), None)}),
    # rows of 192-256 whose default the widths would move if searched for one wave too
    ((256, 5120, 4096), {"64x192 k64": ((64, 192, 64), None), "64x160": ((64, 160, 128), None),
                         "64x160 k64": ((64, 160, 64), None)}),
    ((256, 6144, 4096), {"64x192 k64": ((64, 192, 64), None),
                         "128x96": _CONSUMER_PAIRS_96["128x96"]}),
    ((256, 3072, 4096), {"64x128": ((64, 128, 128), None), "64x96": ((64, 96, 128), None)}),
    ((192, 10240, 4096), {"64x256 k64": ((64, 256, 64), None),
                          "128x160": ((128, 160, 64), (64, 160, 64))}),
]  # fmt: skip


def wide_n_wave_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """One-wave grids (``WIDE_N_WAVE_SETS``, bf16) on their default tile and on the width
    between that fills more SMs (96 or 160 columns), in the deepest ring up to 6 stages, three
    rounds in turn: where a narrower tile's fuller wave pays (run 266 timed the first five)."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])

    def sets(problem: TuneProblem, tiles: dict) -> list[tuple[str, Any]]:
        built = []
        for label, (cta, warp) in tiles.items():
            found = _deepest(problem, _wgmma_tiles(cta, warp), range(6, 1, -1), pm)
            if found is not None:
                built.append((f"{label} s{found[0]}", found[1]))
        return built

    planned = ((TuneProblem(m=m, n=n, k=k, dtype="bfloat16"), tiles)
               for (m, n, k), tiles in WIDE_N_WAVE_SETS)  # fmt: skip
    return _in_turn(((p, sets(p, tiles)) for p, tiles in planned), rounds=3)


#: one-wave 16-bit grids whose default tile is 64 rows (one consumer), and beside 1024^3 the
#: same grid with K cut to rows that are no multiple of 128 bytes (1000, 1008) or are (960,
#: 1088): run 304 timed 1000^3 at 11.5 us and 1024^3 at 7.5 on one kernel and one grid
ONE_CONSUMER_PROBLEMS = [
    ((1000, 1000, 1000), "float16", ""), ((1000, 1000, 1000), "bfloat16", ""),
    ((1024, 1024, 1024), "float16", ""), ((768, 768, 768), "float16", ""),
    ((1024, 1536, 2048), "bfloat16", ""), ((640, 2048, 2048), "float16", ""),
    ((1000, 1000, 4096), "bfloat16", ""), ((1000, 1000, 2048), "float16", ""),
]  # fmt: skip
ODD_K_PROBLEMS = [((1024, 1024, k), "float16", "") for k in (960, 1000, 1008, 1088)]
#: two consumers a CTA (two m64 warp tiles along M) on the widths that keep the grid to one wave
TWO_CONSUMER_TILES = {"128x64": ((128, 64, 64), (64, 64, 64)), **_CONSUMER_PAIRS_96}


def one_consumer_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``ONE_CONSUMER_PROBLEMS`` on their default (64-row tiles, one consumer) and on
    those of ``TWO_CONSUMER_TILES`` that keep the grid to one wave, alone, in the deepest ring
    up to 6 stages, and ``ODD_K_PROBLEMS`` on their default alone; three rounds in turn."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])
    planned = _beside_default(ONE_CONSUMER_PROBLEMS, pm, _two_consumers)
    alone = {"cluster_dims": (1, 1)}  # (K = 1000 pairs by default since run 316)
    planned += [(p, [("default", _compiled(p, pm=pm, overrides=alone))])
                for p in _problems(ODD_K_PROBLEMS)]  # fmt: skip
    return _in_turn(planned, rounds=3)


#: one-wave problems whose default was one consumer's 64x128 tile at 128 of K in 4 stages (run
#: 306: 128x96 tiles at 64 of K ran 15-26% faster on two of them); each default beside the
#: same tile at the other depth (64 of K in the deepest ring up to 8 stages, or 128 in the
#: deepest up to 6) and two consumers' tiles at 64 of K in the deepest ring up to 6, where their
#: grid stays one wave; three rounds in turn (run 312)
K_DEPTH_PROBLEMS = [
    ((1000, 1000, 4096), "bfloat16", ""), ((1000, 1000, 2048), "float16", ""),
    ((777, 1111, 4096), "float16", ""), ((1024, 1024, 4096), "float16", ""),
    ((1024, 1024, 2048), "bfloat16", ""), ((512, 2048, 4096), "float16", ""),
    ((256, 4096, 4096), "bfloat16", ""), ((192, 4096, 14336), "bfloat16", ""),
]  # fmt: skip


def k_depth_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``K_DEPTH_PROBLEMS`` on their default, on its tile at the other K depth (``k64
    s<stages>`` or ``k128 s<stages>``) and on those of ``TWO_CONSUMER_TILES`` that keep the
    grid to one wave."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])
    return _in_turn(_beside_default(K_DEPTH_PROBLEMS, pm, _other_depth, _two_consumers), rounds=3)


def _beside_default(
    rows: Iterable[tuple[Any, ...]], pm: Any,
    *others: Callable[[TuneProblem, Any, Any], list[tuple[str, Any]]],
) -> list[tuple[TuneProblem, list[tuple[str, Any]]]]:  # fmt: skip
    """Each problem of *rows* with its labelled plans: its default on *pm*, then what each of
    *others* (``_other_depth``, ``_two_consumers``) builds beside it from the default's spec
    (none where the default does not build)."""

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        if (default := _compiled(problem, pm=pm)) is None:
            return []
        return [("default", default)] + [
            built for other in others for built in other(problem, default.spec, pm)
        ]

    return [(p, sets(p)) for p in _problems(rows)]


def _other_depth(problem: TuneProblem, spec: Any, pm: Any) -> list[tuple[str, Any]]:
    """*problem* on *spec*'s tile at the other K depth: 64 in the deepest ring up to 8 stages
    where *spec* takes 128, else 128 in the deepest up to 6 (labelled ``k<K> s<stages>``)."""
    cta, warp = spec.params.cta_tile, spec.params.warp_tile
    k, depths = (64, range(8, 2, -1)) if cta.k == 128 else (128, range(6, 1, -1))
    other = _wgmma_tiles((cta.m, cta.n, k), (warp.m, warp.n, k))
    found = _deepest(problem, other, depths, pm)
    return [(f"k{k} s{found[0]}", found[1])] if found is not None else []


def _two_consumers(problem: TuneProblem, spec: Any, pm: Any) -> list[tuple[str, Any]]:
    """*problem* on those of ``TWO_CONSUMER_TILES`` that keep *spec*'s grid to one wave, alone,
    each in the deepest ring up to 6 stages (labelled ``<tile> s<stages>``)."""
    built = []
    for label, (tile, warp) in TWO_CONSUMER_TILES.items():
        if work_units(spec.problem, TileShape(*tile)) > spec.device.sm_count:
            continue  # more than one wave
        ov = _wgmma_tiles(tile, warp, cluster_dims=(1, 1))
        if (found := _deepest(problem, ov, range(6, 1, -1), pm)) is not None:
            built.append((f"{label} s{found[0]}", found[1]))
    return built


#: FP8 (e4m3, per tensor unless named) problems whose default was, before run 345, 128 outputs a
#: row tile by two consumers of 64x64 warp tiles (128x64), which tie in bytes with one
#: consumer's 64x128 warp tile (run 344: 64x128x256 ran 12-26% faster on three deep-K shapes
#: of four): unsplit below and past one wave, deep K, and split
FP8_CONSUMER_PROBLEMS = [
    *(((m, n, k), "float8_e4m3fn", "tensor") for m, n, k in (
        (1024, 1024, 1024), (1024, 1024, 4096), (768, 1024, 2048), (512, 2048, 2048),
        (2048, 512, 4096), (128, 8192, 1024), (128, 8192, 4096), (8192, 128, 4096),
        (256, 4096, 4096), (4096, 256, 4096), (192, 4096, 4096), (1536, 512, 8192),
        (5120, 128, 32768), (512, 512, 8192), (256, 256, 32768), (128, 1024, 16384),
        (1024, 192, 8192))),
    ((1024, 1024, 4096), "float8_e4m3fn", "row"), ((256, 4096, 4096), "float8_e4m3fn", "row"),
]  # fmt: skip


#: 16-bit problems whose default is one consumer's 64x128 tile spanning N in one column, the
#: FP8 case where two consumers' 128x64 led by 2-3% (run 345: e4m3 8192x128x4096,
#: 5120x128x32768); 16-bit ties go to the one consumer (``HOPPER_WARP_GRIDS``)
CONSUMER_16_PROBLEMS = [((m, 128, k), "bfloat16", "") for m, k in (
    (8192, 4096), (8192, 16384), (5120, 32768), (5120, 2048), (1024, 8192))]  # fmt: skip


def fp8_consumers_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``FP8_CONSUMER_PROBLEMS`` on their default and on the other arrangements of its 128
    outputs a row tile (``_consumer_jobs``)."""
    return _consumer_jobs(FP8_CONSUMER_PROBLEMS)


def consumers_16_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``CONSUMER_16_PROBLEMS`` likewise."""
    return _consumer_jobs(CONSUMER_16_PROBLEMS)


def _consumer_jobs(rows: list[tuple[Any, ...]]) -> list[tuple[TuneProblem, str, Any]]:
    """*rows* on their default and on the other arrangements of its 128 outputs a row tile
    (two consumers of 64x64 along M or N, one of 64x128), the default's K a stage, stages,
    split and pairing kept, the tile order for the grid; three rounds in turn."""
    from mmaplug.heuristics.default.grid import cta_order_for, tile_grid

    pm = mp.make_plugin_manager(block=["decode", "ampere"])
    arrangements = {"two 64x64 along M": ((128, 64), (64, 64)),
                    "two 64x64 along N": ((64, 128), (64, 64)),
                    "one 64x128": ((64, 128), (64, 128))}  # fmt: skip

    def others(problem: TuneProblem, spec: Any, pm: Any) -> list[tuple[str, Any]]:
        params, built = spec.params, []
        for label, ((m, n), (wm, wn)) in arrangements.items():
            if (params.cta_tile.m, params.cta_tile.n, params.warp_tile.n) == (m, n, wn):
                continue  # the default itself
            cta = (m, n, params.cta_tile.k)
            order = cta_order_for(*tile_grid(spec.problem, TileShape(*cta)))
            ov = _wgmma_tiles(
                cta, (wm, wn, params.cta_tile.k), params.instruction_tile.k,
                stages=params.stages, splitk_factor=params.splitk_factor,
                cta_order=order.name, cluster_dims=tuple(params.cluster_dims),
            )  # fmt: skip
            if (compiled := _compiled(problem, pm=pm, overrides=ov)) is not None:
                built.append((label, compiled))
        return built

    return _in_turn(_beside_default(rows, pm, others), rounds=3)


#: wide-weight problems (N >= 16 M) on 64x128 tiles, each default beside the same tile at the
#: other K depth, three rounds in turn (run 315): past one row tile the default takes 64 of K
#: in 8 stages (run 312's rule) against 128 in 4, at one row tile (the last four) the reverse
WIDE_K_PROBLEMS = [
    ((128, 6144, 4096), "bfloat16", ""), ((128, 8192, 8192), "float16", ""),
    ((160, 4096, 4096), "bfloat16", ""), ((192, 4096, 4096), "bfloat16", ""),
    ((224, 4096, 8192), "float16", ""), ((256, 4096, 14336), "bfloat16", ""),
    ((128, 5120, 2048), "bfloat16", ""), ((192, 5120, 2048), "float16", ""),
    ((64, 8192, 8192), "bfloat16", ""), ((64, 28672, 4096), "bfloat16", ""),
    ((32, 28672, 4096), "bfloat16", ""), ((64, 10240, 8192), "bfloat16", ""),
]  # fmt: skip


def wide_k_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``WIDE_K_PROBLEMS`` on their default and on its tile at the other K depth (``k128
    s<stages>`` past one row tile, ``k64 s<stages>`` at one)."""
    pm = mp.make_plugin_manager(block=["decode", "ampere"])
    return _in_turn(_beside_default(WIDE_K_PROBLEMS, pm, _other_depth), rounds=3)


#: short kernels whose plan runs in clusters, each beside the same plan alone, and one long
#: clustered default: run in two installs (the cluster's first barrier released or relaxed)
#: in alternating processes, each with its own cache (docs/decisions.md, "A cluster's first
#: barrier"); at 16 rows cuBLASLt's plan, ``ncu_probe.py``'s ``@lt8``
CLUSTER_START_SETS = [
    (TuneProblem(m=1000, n=1000, k=1000, dtype="float16"),
     {"alone": {"cluster_dims": (1, 1)}, "pairs along M": {"cluster_dims": (2, 1)},
      "2x2": {"cluster_dims": (2, 2)}}),
    (TuneProblem(m=128, n=4096, k=4096, dtype="float8_e4m3fn", scale="tensor"),
     {"alone": {"cluster_dims": (1, 1)}, "pairs along M": {"cluster_dims": (2, 1)}}),
    (TuneProblem(m=64, n=4096, k=4096, dtype="bfloat16"),
     {"alone": {"cluster_dims": (1, 1)}, "pairs along N": {"cluster_dims": (1, 2)}}),
    (TuneProblem(m=16, n=4096, k=4096, dtype="float8_e4m3fn", scale="tensor"),
     {"64x8 alone": {"lt8": {"cluster_dims": (1, 1)}}, "64x8 pairs along N": {"lt8": {}}}),
    (TuneProblem(m=32, n=4096, k=4096, dtype="bfloat16"),
     {"alone": {"cluster_dims": (1, 1)},
      "split 2 in cluster": {"splitk_factor": 2, "splitk_in_cluster": True,
                             "cluster_dims": (1, 1)}}),
    (TuneProblem(m=4096, n=28672, k=4096, dtype="float8_e4m3fn", scale="row"), {"default": {}}),
]  # fmt: skip


def cluster_start_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """``CLUSTER_START_SETS``, each plan on hopper, three rounds in turn; a plan ``{"lt8":
    changes}`` is ``ncu_probe.OVERRIDES["lt8"]`` with *changes*."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])

    def overrides(ov: dict) -> dict | None:
        return {**OVERRIDES["lt8"], **ov["lt8"]} if "lt8" in ov else ov or None

    def sets(problem: TuneProblem, plans: dict) -> list[tuple[str, Any]]:
        return [(label, _compiled(problem, pm=hopper, overrides=overrides(ov)))
                for label, ov in plans.items()]  # fmt: skip

    return _in_turn(((p, sets(p, plans)) for p, plans in CLUSTER_START_SETS), rounds=3)


#: block-scaled problems where the 64x256 chunks or 128x192 pairs are the default (runs
#: 275-279), for ``fp8_chunks_ab`` (runs 280-281)
FP8_CHUNKS_SHAPES = [(8192, 8192, 8192), (4096, 28672, 4096), (2048, 14336, 5120),
                     (4096, 4096, 4096), (4096, 10240, 8192), (4096, 6144, 4096),
                     (4096, 4096, 14336), (4096, 8192, 28672)]  # fmt: skip


def fp8_chunks_ab_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """Block-scaled e4m3: the 64x256 chunks alone and in pairs along M, and 128x192 in pairs
    along M (between them the defaults), three rounds in turn, each plan replayed alone; run
    in two installs (runs 280-281: the chunk loop of branch ``chunk-overlap``) in alternating
    processes, each with its own cache. ``mmaplug targets --issue 24`` times the defaults in
    turn with cuBLASLt's replays, and there the same kernels ranked otherwise (runs 283-285,
    docs/decisions.md, "Block-scaled FP8 against its target")."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    plans = {
        "chunks alone": OVERRIDES["w256"],
        "chunks pairs": OVERRIDES["w256c"],
        "128x192 pairs": OVERRIDES["b192c4"],  # (the default's plan)
    }

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        return [(label, _compiled(problem, pm=hopper, overrides=ov))
                for label, ov in plans.items()]  # fmt: skip

    problems = [TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale="block")
                for m, n, k in FP8_CHUNKS_SHAPES]  # fmt: skip
    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


#: the two large block-scaled rows where 128x192 in pairs runs: the default at 8192^3
FP8_DRAIN_SHAPES = [(8192, 8192, 8192), (4096, 28672, 4096)]


def fp8_drain_jobs() -> list[tuple[TuneProblem, str, Any]]:
    """e4m3 128x192 in pairs at 4 stages, the 8192^3 block-scaled default's plan, per tensor
    and block-scaled, three rounds in turn, each replayed alone; block-scaled 128x128 tiles
    of two scale blocks a stage (one group in flight while the first block is promoted: a
    drain every other block) and of one block a stage beside them. Run in main's install
    and in the trees of two branches (docs/targets.md): ``drain-probe``, whose per-tensor
    loop waits for every stage's wgmmas (``wait_group(0)``, as the block-scaled loop must
    before it promotes), says how much of the promotion's 1.17x (run 346) is each
    consumer's tensor-core queue running empty once a stage; ``dual-partials`` runs the
    128x128 tiles of one block a stage in its dual loop."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    problems = [TuneProblem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale)
                for m, n, k in FP8_DRAIN_SHAPES for scale in ("tensor", "block")]  # fmt: skip

    def sets(problem: TuneProblem) -> list[tuple[str, Any]]:
        plans = {"128x192 pairs": "b192c4"}
        if problem.scale == "block":  # the block-scaled loops beside it
            plans |= {"128x128x256 pairs": "p256c", "128x128 pairs": "t128c2"}
        return [(label, _compiled(problem, pm=hopper, overrides=OVERRIDES[how]))
                for label, how in plans.items()]  # fmt: skip

    return _in_turn(((p, sets(p)) for p in problems), rounds=3)


def main(which: str, in_turn: bool = False) -> None:
    jobs = [
        job
        for job in {
            "splitk": splitk_jobs,
            "decode": decode_jobs,
            "decode_warps": decode_warps_jobs,
            "decode_wave": lambda: decode_warps_jobs(DECODE_WAVE_ROWS),
            "fp8_decode_waves": fp8_decode_waves_jobs,
            "decode_one_warp": decode_one_warp_jobs,
            "decode_past_one_wave": decode_rows_past_one_wave_jobs,
            "fp8_few_tiles": fp8_few_tiles_jobs,
            "fp8_few_rule": fp8_few_rule_jobs,
            "fp8_lt_tiles": fp8_lt_tiles_jobs,
            "decode_batched": decode_batched_jobs,
            "fp8_two_tiles": fp8_two_tiles_jobs,
            "fp8_unroll": fp8_unroll_jobs,
            "skinny": skinny_jobs,
            "fp8": fp8_jobs,
            "swap": swap_jobs,
            "decode_swap": decode_swap_jobs,
            "fp8_swap": fp8_swap_jobs,
            "decode_long": decode_long_jobs,
            "kcluster": kcluster_jobs,
            "clusters": cluster_jobs,
            "cluster2x2": cluster2x2_jobs,
            "ffn_tiles": ffn_tiles_jobs,
            "ffn_tiles_fp8": ffn_tiles_fp8_jobs,
            "row_tiles": row_tiles_jobs,
            "halves": halves_jobs,
            "swap64": swap64_jobs,
            "swap_wide": swap_wide_jobs,
            "odd": odd_jobs,
            "bk_ab": bk_ab_jobs,
            "skinny_ab": skinny_ab_jobs,
            "deep_ab": deep_ab_jobs,
            "narrow": narrow_jobs,
            "narrow_ab": narrow_ab_jobs,
            "fp8_block": fp8_block_jobs,
            "fp8_halves": fp8_halves_jobs,
            "fp8_block_clusters": fp8_block_clusters_jobs,
            "swizzle": swizzle_jobs,
            "swizzle_rows": lambda: swizzle_jobs(SWIZZLE_ROW_PROBLEMS),
            "swizzle_ab": swizzle_ab_jobs,
            "overlap": overlap_jobs,
            "fp8_fused": fp8_fused_jobs,
            "anchors": anchor_jobs,
            "plans_ab": plans_ab_jobs,
            "split_rings": split_ring_jobs,
            "split_ab": split_ab_jobs,
            "fp8_anchors": fp8_anchor_jobs,
            "tma_ab": tma_ab_jobs,
            "tma_fill": tma_fill_jobs,
            "tma_forced": tma_forced_jobs,
            "streamk": streamk_jobs,
            "short_k": short_k_jobs,
            "streamk_sums": streamk_sums_jobs,
            "fp8_pingpong": fp8_pingpong_jobs,
            "fp8_pairs": fp8_pairs_jobs,
            "fp8_pairs_focus": fp8_pairs_focus_jobs,
            "fused_pp": fused_pp_jobs,
            "swap_split": swap_split_jobs,
            "swizzle_wave": swizzle_wave_jobs,
            "skinny_pairs": skinny_pairs_jobs,
            "fp8_pp_pairs": fp8_pp_pairs_jobs,
            "fp8_wide_n": fp8_wide_n_jobs,
            "fp8_pp_order": fp8_pp_order_jobs,
            "fp8_scale_product": fp8_scale_product_jobs,
            "wide_n": wide_n_jobs,
            "wide_n_wave": wide_n_wave_jobs,
            "tall": tall_jobs,
            "tall_widths": tall_width_jobs,
            "tall_pairs": tall_pairs_jobs,
            "swap_staged": swap_staged_jobs,
            "batched_short": batched_short_jobs,
            "fp8_decode_swap": fp8_decode_swap_jobs,
            "decode_under": decode_under_jobs,
            "deep_split": deep_split_jobs,
            "deep_units": deep_units_jobs,
            "fp8_deep_bytes": fp8_deep_bytes_jobs,
            "decode_handoff": decode_handoff_jobs,
            "cluster_start": cluster_start_jobs,
            "fp8_chunks_ab": fp8_chunks_ab_jobs,
            "fp8_drain": fp8_drain_jobs,
            "narrow_pairs": narrow_pairs_jobs,
            "one_consumer": one_consumer_jobs,
            "fp8_consumers": fp8_consumers_jobs,
            "consumers_16": consumers_16_jobs,
            "k_depth": k_depth_jobs,
            "wide_k": wide_k_jobs,
            "odd_pitch": odd_pitch_jobs,
        }[which]()
        if job[2]
    ]
    start = time.time()
    prebuild([compiled for _, _, compiled in jobs], workers=14)
    print(f"built {len(jobs)} configurations in {time.time() - start:.0f} s", flush=True)
    seen: dict[str, tuple[Any, Any, Any, float]] = {}
    for problem, label, compiled in jobs:
        if problem.key not in seen:
            inputs = problem_inputs(problem)
            torch_fn = torch_call(problem, inputs)
            seen[problem.key] = (inputs, reference(problem, inputs), torch_fn,
                                 graph_us(torch_fn))  # fmt: skip
        inputs, ref, torch_fn, theirs = seen[problem.key]
        bind = _bind_whole if label.endswith(WHOLE) else lambda c, i: c.execute(i)
        promoted = mock.patch.object(tensormap, "L2_PROMOTION", 256)
        with promoted if label.endswith(L2_256) else contextlib.nullcontext():  # maps encoded
            error = rel_error(bind(compiled, inputs)[0], ref)
            call = lambda c=compiled, i=inputs: c.execute(i)  # noqa: E731
            if error >= 1e-2:
                ours = float("nan")
            elif in_turn:  # (cuBLAS's time from the same turns)
                both = interleaved_graph_us({"ours": call, "torch": torch_fn})
                ours, theirs = both["ours"], both["torch"]
            else:
                ours = graph_us(call)
        batch = f"{problem.batch}x" if problem.batch > 1 else ""
        print(f"{batch}{problem.m}x{problem.n}x{problem.k:<6} {label:<44} ours {ours:8.1f} us  "
              f"cuBLAS {theirs:8.1f} us  ratio {theirs / ours:5.2f}  err {error:.1e}  "
              f"{compiled.kernel_name}", flush=True)  # fmt: skip
    if which == "clusters":
        from mmaplug.cuda import driver

        print(f"resident clusters (kernel, context, block, smem, cluster -> count): "
              f"{driver._clusters}")  # fmt: skip


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--in-turn"]
    main(args[0] if args else "splitk", in_turn="--in-turn" in sys.argv[1:])
