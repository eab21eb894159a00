"""Kernel times under ncu: hopper's default plans and ``torch.matmul`` (cuBLAS) on the skinny
and deep-K rows, three calls each between cudaProfilerStart/Stop (BENCHMARKS.md run 109).

On the device machine, after the README's install::

    ncu --profile-from-start off --clock-control none --csv --page raw \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,\\
launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python scripts/ncu_probe.py > ncu.csv

Shapes given as arguments (``64x4096x4096 ...``, batched ``16x2048x2048x128``) replace the
default rows; a shape may name a dtype and FP8 scale (``8192x8192x8192/float8_e4m3fn-block``;
bf16 otherwise) and overrides of ``OVERRIDES`` on top of the default plan (``64x4096x4096@c2``:
the same plan in CTA pairs along N; ``@s8``, ``@m2s8``: in 8 stages, alone or in pairs
along M; ``.../float8_e4m3fn-block@t128c2``: FP8 on 128x128x128 tiles
in pairs along M; ``@lt64c2``: cuBLASLt's FP8 plan at 128 rows, 64x64x128 tiles in pairs
along M; ``@w256``: 64x256 warp tiles, block scales promoted by chunks; ``@b192``,
``@b160``: 128x192 or 128x160 tiles straddling two blocks of B's scales; ``@b192c``, ``@w256c``:
in CTA pairs along M; ``@b192c4``: 128x192 pairs at 4 stages, the 8192^3 block-scaled default's
plan, for its per-tensor twin; ``@p256c``: 128x128 tiles of two scale blocks a stage, in pairs
along M). An epilogue of the tune corpus follows the dtype after a ``+``
(``4096x4096x4096/bfloat16+bias_gelu``), and ``@tma`` builds the default plan with the packed
epilogue's TMA stores forced on (``artifact.stores_by_tma`` leaves fused epilogues to the
threads' stores: ``config_probe.py tma_forced``); ``@decode`` plans with the decode scheduler
allowed (``1x28672x4096@decode``: the decode kernel, BENCHMARKS.md run 172); ``@g8`` walks the
default plan's tiles in groups of 8 (run 241: the DRAM bytes of the order), ``@g1`` in none;
``@n96`` and ``@n128``: 16-bit 128x96 or 128x128 tiles, 64 of K a stage; ``@w152``,
``@w160``: 256x152 or 256x160 tiles of two 128-row consumers. ``@ss2`` and
``@ss2c``: the swapped skinny default with K split 2, through the workspace or in the cluster;
``@sw16c2``, ``@sw16c2k``, ``@sw8c2``: cuBLAS's 16-bit skinny decomposition (the transposed
product on 64x16 or 64x8 tiles in pairs along N sharing the weight; BENCHMARKS.md run 288);
``@sw96m4``, ``@sw96``: cuBLAS's 96-row plan, 64x96 tiles in 10 stages of 64, in fours along
the weight rows or alone (run 323).
Where the warps wait: run 112 read ``--section WarpStateStats --section
SchedulerStats --page details``; each kernel's stall reasons (run 116 added them to its
sections, BENCHMARKS.md)::

    ncu --profile-from-start off --clock-control none --csv --page raw --metrics \\
'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio',gpu__time_duration.sum \\
        python scripts/ncu_probe.py 64x4096x4096 64x4096x4096@c2 > stalls.csv

Each profiled range is announced by a ``RANGE`` line (problem and side) on stdout, in capture
order, so the CSV's kernel rows group by it: 3 calls of one or two kernels each. Every output
is checked against float64 first.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any
from unittest import mock

import mmaplug as mp
import mmaplug.plugins.hopper.artifact as hopper_artifact
from mmaplug.cli.bench import torch_call
from mmaplug.tune.corpus import TuneProblem
from mmaplug.tune.measure import rel_error
from mmaplug.tune.work import problem_inputs, reference

SHAPES = [(64, 64, 128), (64, 8192, 256), (64, 4096, 4096), (32, 6144, 4096), (56, 6144, 4096),
          (32, 1024, 16384), (32, 2048, 8192), (256, 256, 16384), (512, 512, 16384),
          (1024, 1024, 16384)]  # fmt: skip
CALLS = 3


def _fp8_tiles(cta: tuple[int, int, int], warp_m: int, stages: int) -> dict:
    """FP8 tiles: *cta* over warp tiles of *warp_m* rows, the wgmma of their N and K = 32."""
    warp = (warp_m, *cta[1:])
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, cta[1], 32),
            "stages": stages}  # fmt: skip


def _tiles16(cta: tuple[int, int, int], warp_m: int, stages: int) -> dict:
    """``_fp8_tiles`` for 16-bit operands (K = 16 a wgmma)."""
    return {**_fp8_tiles(cta, warp_m, stages), "instruction_tile": (64, cta[1], 16)}


# the transposed product as its default runs it: stored from registers, persistent CTAs
SWAPPED: dict[str, Any] = {
    "swap_ab": True,
    "use_smem_epilogue": False,
    "tiling_strategy": "persistent",
}


def _swapped(cta: tuple[int, int, int], stages: int) -> dict:
    """16-bit transposed-product tiles of one consumer (the swap's register epilogue)."""
    return {**_tiles16(cta, 64, stages), **SWAPPED}


def swap_split(split: int, in_cluster: bool) -> dict:
    """The default's swapped tile with K split *split*, summed in the cluster of the splits or
    through the workspace (also ``config_probe.py swap_split``'s plans)."""
    return {"swap_ab": True, "splitk_factor": split, "splitk_in_cluster": in_cluster,
            "use_smem_epilogue": False, "cluster_dims": (1, 1)}  # fmt: skip


_FP8_128 = _fp8_tiles((128, 128, 128), 64, 6)
# cuBLASLt's FP8 per-row plan (runs 226, 252): ping-pong consumers owning 128x128 tiles
_FP8_PINGPONG = {**_fp8_tiles((128, 128, 128), 128, 6), "tiling_strategy": "persistent_pingpong"}
OVERRIDES: dict[str, dict] = {
    "": {},
    "c2": {"cluster_dims": (1, 2)},
    "c4": {"cluster_dims": (1, 4)},
    # the same plan in pairs or fours along M (sharing the B tile)
    "m2": {"cluster_dims": (2, 1)},
    # the same plan alone, one CTA a cluster
    "a1": {"cluster_dims": (1, 1)},
    # the same plan in a deeper ring (cuBLAS's 64x128 tiles at 1024^3 take 8 stages of 64 of K),
    # alone and in pairs along M
    "s8": {"stages": 8},
    "m2s8": {"cluster_dims": (2, 1), "stages": 8},
    "m4": {"cluster_dims": (4, 1)},
    "t128": {**_FP8_128, "cluster_dims": (1, 1)},
    "t128c2": {**_FP8_128, "cluster_dims": (2, 1)},
    "t128c4": {**_FP8_128, "cluster_dims": (4, 1)},
    # cuBLASLt's FP8 plan at 128 rows (nvjet_sm90_qqtst_64x64_128x13_2x1, run 238): 64x64
    # tiles, 128 of K a stage, 13 stages, in pairs along M sharing the weight tile
    "lt64c2": {**_fp8_tiles((64, 64, 128), 64, 13), "cluster_dims": (2, 1)},
    # 64x256 warp tiles (block scales: promoted by 64-column chunks)
    "w256": {**_fp8_tiles((128, 256, 128), 64, 4), "cluster_dims": (1, 1)},
    # FP8 128x160 or 128x192 tiles (block scales: each tile straddles two blocks of B's)
    "b160": {**_fp8_tiles((128, 160, 128), 64, 5), "cluster_dims": (1, 1)},
    "b192": {**_fp8_tiles((128, 192, 128), 64, 5), "cluster_dims": (1, 1)},
    # the same in CTA pairs along M (the 8192^3 default's tile, at 5 stages: BENCHMARKS.md runs
    # 275-278), and the chunks in pairs (slower than alone)
    "b192c": {**_fp8_tiles((128, 192, 128), 64, 5), "cluster_dims": (2, 1)},
    "w256c": {**_fp8_tiles((128, 256, 128), 64, 4), "cluster_dims": (2, 1)},
    # the 8192^3 block-scaled default's own plan (its ring's 4 stages), for its per-tensor twin
    "b192c4": {**_fp8_tiles((128, 192, 128), 64, 4), "cluster_dims": (2, 1)},
    # block scales: 128x128 tiles of two scale blocks a stage (a group in flight while the
    # first block's sums are promoted), in pairs along M
    "p256c": {**_fp8_tiles((128, 128, 256), 64, 3), "cluster_dims": (2, 1)},
    # 16-bit 128x96 or 128x128 tiles of 64-deep stages, 6 of them (config_probe.py wide_n_wave)
    "n96": {**_tiles16((128, 96, 64), 64, 6), "cluster_dims": (1, 1)},
    "n128": {**_tiles16((128, 128, 64), 64, 6), "cluster_dims": (1, 1)},
    # 16-bit 256x152 or 256x160 tiles of two 128-row consumers (152 or 160 accumulators a
    # thread, as cuBLAS's nvjet_sm90_hsh_152x256 at 3000x5000x2048: 396 tiles, 3 whole waves;
    # 256x160 makes 512x10240x8192 one wave of 128)
    "w152": {**_tiles16((256, 152, 64), 128, 4), "cluster_dims": (1, 1)},
    "w160": {**_tiles16((256, 160, 64), 128, 3), "cluster_dims": (1, 1)},
    "tma": {},  # the default plan, its packed chunks stored by TMA (``built``)
    # the default plan's persistent tile order in groups of 8 along the stepped axis, or in none
    "g8": {"grid_swizzle_factor": 8},
    "g1": {"grid_swizzle_factor": 1},
    # the default plan with stream-K: the last wave's tiles in 2 or 3 pieces of K
    "sk2": {"tiling_strategy": "persistent_streamk", "splitk_factor": 2, "cluster_dims": (1, 1)},
    "sk3": {"tiling_strategy": "persistent_streamk", "splitk_factor": 3, "cluster_dims": (1, 1)},
    "sk4": {"tiling_strategy": "persistent_streamk", "splitk_factor": 4, "cluster_dims": (1, 1)},
    "sk8": {"tiling_strategy": "persistent_streamk", "splitk_factor": 8, "cluster_dims": (1, 1)},
    # the default plan with the decode scheduler allowed (M <= 16 rows: the decode kernel)
    "decode": {},
    # the decode kernel itself, with hopper blocked (where decode would hand the problem over)
    "decodek": {},
    # that plan alone (cuBLASLt's at 4096^3, run 226) and in pairs along N (at 4096x8192x8192)
    "pp": {**_FP8_PINGPONG, "cluster_dims": (1, 1)},
    "ppc2": {**_FP8_PINGPONG, "cluster_dims": (1, 2)},
    # cuBLASLt's FP8 16x4096x4096 shape: the transposed product on 64x8 tiles in pairs that
    # share the weight tile (BENCHMARKS.md run 208)
    "lt8": {
        **_fp8_tiles((64, 8, 128), 64, 16),
        "cluster_dims": (1, 2),
        "swap_ab": True,
        "use_smem_epilogue": False,
        "tiling_strategy": "persistent",
    },
    # the swapped skinny plan with K split 2, summed in the cluster of the splits or through the
    # workspace (cuBLAS runs bf16 32x4096x4096 split 2 over 128 CTAs; config_probe.py swap_split)
    "ss2c": swap_split(2, in_cluster=True),
    "ss2": swap_split(2, in_cluster=False),
    # cuBLAS's 16-bit skinny shape (run 287: nvjet_sm90_tst_64x16_64x16_1x2 at 32x4096x4096):
    # the transposed product on 64x16 tiles, 64 of K a stage, 16 stages, in pairs along N that
    # share the weight tile; with 128 of K and 8 stages; 64x8 tiles for 16 rows
    "sw16c2": {**_swapped((64, 16, 64), 16), "cluster_dims": (1, 2)},
    "sw16c2k": {**_swapped((64, 16, 128), 8), "cluster_dims": (1, 2)},
    "sw8c2": {**_swapped((64, 8, 64), 16), "cluster_dims": (1, 2)},
    # cuBLAS's 64-row shape (run 336: nvjet_sm90_tst_64x32_64x16_1x2 at 64x4096x4096), K 128
    "sw32c2k": {**_swapped((64, 32, 128), 8), "cluster_dims": (1, 2)},
    # cuBLAS's 96-row plan (run 323: nvjet_sm90_tst_64x96_64x10_4x1 at 96x6144x4096): 64x96
    # tiles of the transposed product, 64 of K a stage, 10 stages, in fours along the weight
    # rows that multicast the activations; and the same ring alone
    "sw96m4": {**_swapped((64, 96, 64), 10), "cluster_dims": (4, 1)},
    "sw96": {**_swapped((64, 96, 64), 10), "cluster_dims": (1, 1)},
    # batched decode rows (32 x 1x4096x128: cuBLAS's nvjet_sm90_tst_512x8_64x3_2x1, run 336)
    # as the transposed product: 64 or 128 weight rows a tile against the row as a wgmma N
    # of 8, 128 or 64 of K a stage, the persistent ring across the batches' tiles
    "sw8": {**_swapped((64, 8, 128), 8), "cluster_dims": (1, 1)},
    "sw8k": {**_swapped((64, 8, 64), 8), "cluster_dims": (1, 1)},
    "sw8w": {**_tiles16((128, 8, 128), 64, 6), **SWAPPED, "cluster_dims": (1, 1)},
    # the default of batches of 9-16 rows over short weight rows before run 338 (unswapped)
    "u256": {
        **_tiles16((64, 256, 64), 64, 5),
        "swap_ab": False,
        "cta_order": "column_major",
        "tiling_strategy": "persistent",
        "cluster_dims": (1, 1),
    },
    # deep K as cuBLAS splits it (run 340: nvjet_sm90_tst_128x128_64x6_2x1 splitK at
    # 512x512x65536): 128x128 tiles, 6 stages of 64 of K, K split 8, alone or in pairs along
    # M; and the default's 128x256 tiles split 8 (64 units) instead of 16
    "n128k8": {**_tiles16((128, 128, 64), 64, 6), "splitk_factor": 8, "cluster_dims": (1, 1)},
    "n128k8m2": {**_tiles16((128, 128, 64), 64, 6), "splitk_factor": 8, "cluster_dims": (2, 1)},
    "k8": {"splitk_factor": 8},
    # 16-bit ping-pong consumers owning 128x128 tiles (the sweep's best at 16 x 2048x2048x128,
    # run 335)
    "pp16": {
        **_tiles16((128, 128, 64), 128, 6),
        "tiling_strategy": "persistent_pingpong",
        "cluster_dims": (1, 1),
    },
}
# the swapped plans above with the epilogue staged, as the swap's default since run 334 (the
# splits summed in the cluster have their own epilogue)
OVERRIDES.update(
    {
        f"{how}s": {**OVERRIDES[how], "use_smem_epilogue": True}
        for how in (
            "lt8",
            "ss2",
            "sw16c2",
            "sw16c2k",
            "sw8c2",
            "sw32c2k",
            "sw96m4",
            "sw96",
            "sw8",
            "sw8k",
            "sw8w",
        )
    }
)


def built(
    problem: TuneProblem, overrides: dict, how: str, pm: mp.PluginManager, device: str | None = None
) -> mp.CompiledFusion:
    """*problem* compiled with *overrides* (for *device*, default the GPU's); with ``@tma``
    under a rule that stores every packed epilogue without a split-K workspace by TMA."""
    forced = mock.patch.object(
        hopper_artifact,
        "stores_by_tma",
        lambda cfg, spec: cfg.tma_storable,
    )
    with forced if how == "tma" else contextlib.nullcontext():
        return mp.compile(problem.fusion(), device, pm=pm, overrides=overrides or None)


def checked_sides(
    shapes: list[tuple[int, int, int, int, str, str]],
) -> list[tuple[TuneProblem, mp.CompiledFusion, dict[str, Callable[[], Any]]]]:
    """Each parsed spec's problem, our kernel for it (all built in parallel processes, each
    output then checked against float64) and the calls to time on one set of inputs: ours
    and cuBLAS's (``"ours"``, ``"cublas"``). The probes that time specs start here."""
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    pms = {"decode": mp.make_plugin_manager(block=["ampere"]),
           "decodek": mp.make_plugin_manager(block=["hopper", "ampere"])}  # fmt: skip
    planned = [problem_and_overrides(spec) for spec in shapes]
    ours = [built(p, ov, spec[-1], pms.get(spec[-1], hopper))
            for (p, ov), spec in zip(planned, shapes, strict=True)]  # fmt: skip
    mp.prebuild(ours, workers=14)
    found = []
    for (problem, _), compiled in zip(planned, ours, strict=True):
        inputs = problem_inputs(problem)
        error = rel_error(compiled.execute(inputs)[0], reference(problem, inputs))
        assert error < 1e-2, (problem.key, error)
        sides = {"ours": functools.partial(compiled.execute, inputs),
                 "cublas": torch_call(problem, inputs)}  # fmt: skip
        found.append((problem, compiled, sides))
    return found


def main(shapes: list[tuple[int, int, int, int, str, str]]) -> None:
    import torch

    for problem, compiled, calls in checked_sides(shapes):
        sides = (("ours " + compiled.kernel_name, calls["ours"]), ("cublas", calls["cublas"]))
        for side, call in sides:
            call()  # built, bound and warm before the profiled range
            torch.cuda.synchronize()
            print(f"RANGE {problem.key} {side}", flush=True)
            torch.cuda.profiler.start()
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


def parse_spec(arg: str) -> tuple[int, int, int, int, str, str]:
    """``[BATCHx]MxNxK[/dtype-scale[+epilogue]][@how]`` as (batch, m, n, k, kind, key of
    ``OVERRIDES``)."""
    what, _, how = arg.partition("@")
    extents, _, kind = what.partition("/")
    *batch, m, n, k = map(int, extents.split("x"))
    return (*(batch or [1]), m, n, k, kind or "bfloat16", how)


def problem_and_overrides(spec: tuple[int, int, int, int, str, str]) -> tuple[TuneProblem, dict]:
    """The problem a parsed spec names, and its overrides."""
    batch, m, n, k, kind, how = spec
    kind, _, epilogue = kind.partition("+")
    dtype, _, scale = kind.partition("-")
    problem = TuneProblem(
        m=m, n=n, k=k, batch=batch, dtype=dtype, scale=scale, epilogue=epilogue or "none"
    )
    return problem, OVERRIDES[how]


if __name__ == "__main__":  # mp.prebuild's workers import this module
    import sys

    main([parse_spec(a) for a in sys.argv[1:]] or [(1, *s, "bfloat16", "") for s in SHAPES])
