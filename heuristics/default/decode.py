"""The default decode parameters: warps splitting K by waves, chunks in flight by operand
width."""

from __future__ import annotations

from typing import Final

from mmaplug.analysis.problem import MatmulProblem
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TileShape
from mmaplug.planning.scheduler import resident_ctas

from .asker import Asker, scheduler_object
from .grid import ceil_div

__all__ = ["decode_params"]

# Warps of a decode CTA, splitting K: the most of DECODE_WARP_COUNTS whose CTAs the SMs hold at
# once (one wave; the decode scheduler's resources name its registers, which differ by operand
# width and chunks in flight). A wave cut short leaves its last CTAs streaming alone with too
# few bytes in flight: at 529-1,056 CTAs of one m tile 2 warps (one wave) led 4 by 2-10%
# (1x10240x8192 46.0 -> 42.3 us, 16x10240x8192 48.8 -> 46.1, 1x9216x4096 23.9 -> 21.5), at
# 512 CTAs 4 warps led 2 (34.6 against 36.4), at 1,057-2,244 one warp, the one count in one
# wave, led 2 (1x28672x4096 59.1 against 59.5, 1x20480x4096 43.1 against 46.2). Past one wave,
# weight rows of at most DECODE_SHORT_ROW_BYTES take one warp: their last wave is short, and a
# warp's own costs (its setup, its share of the sum in shared memory) are not. 32 x 1x4096xK
# (8,192 CTAs) against 2 warps: K = 128 12.1 -> 9.1 us, 192 17.6 -> 13.9, 512 35.5 -> 34.1,
# 768 52.3 -> 49.4, 1024 66.0 -> 64.7, but 256 19.6 -> 20.3; 32 x 8x4096x128 13.5 -> 10.5,
# 16 x 2x4096x512 20.3 -> 19.2, 64 x 8x4096x256 40.8 -> 39.6. Longer rows take the one of
# DECODE_MANY_WAVES_WARPS whose last wave is fuller: one warp lost 1.6-5% there at 57344x8192
# (1 row 217.1 -> 220.5 us, 2 rows 214.3 -> 225.2) and 16% with FP8 1x28672x4096 (31.1 ->
# 36.1, 1.13 waves), tied at 4x14336x4096 (runs 180-183, 190-193). FP8 (12 warps an SM, by
# its registers) follows the same rule: where it disagreed with run 96's own FP8 rule it won
# 11-24% (1x6144x8192 4 warps 12.6-13.1 against 14.7-15.3 us, 1x8192x4096 2 warps 7.2-7.3
# against 8.7, 1x10240x4096 8.3 against 10.3), tied at 128 CTAs (8 warps 4.3 against 4.3-4.4)
# and lost 1.5-3% at 4x2048x8192 (6.8 against 6.6-6.7; run 188)
DECODE_WARP_COUNTS: Final = (8, 4, 2, 1)
DECODE_MANY_WAVES_WARPS: Final = (4, 2)
DECODE_SHORT_ROW_BYTES: Final = 2048
# K chunks a decode warp loads before their mmas, by operand bytes: FP8 four, the best or within
# 2% of it on all FP8 decode problems of run 96's sweep (three lost 1-10% there)
DECODE_UNROLL: Final = {2: 3, 1: 4}
# A horizontal fusion's products (a decode FFN reading x once for W1 and W3) take 2 warps each
# and 3 chunks in flight, FP8 too: of the sweep of 1-8 warps and 1-4 chunks on six FFNs (8B
# at 1, 4 and 16 rows, 70B at 1, FP8 per tensor at 1 row and per row at 16; H100, run 222)
# this was the best on every one. The single-product rule's choices reached 0.935-0.994 of it,
# and 0.122 on the FP8 16-row FFN (4 warps, 4 chunks: 412 against 50.5 us; one timing)
DECODE_HORIZONTAL_WARPS: Final = 2
DECODE_HORIZONTAL_UNROLL: Final = 3


def decode_params(problem: MatmulProblem, device: Device) -> MatmulParams:
    """The default decode parameters: the most warps splitting K (``splitk_factor``) whose CTAs
    (one per ``cta_tile.n`` weight rows and product of the batch) the SMs hold at once (by the
    scheduler's ``resources``); where none is, one for weight rows of at most
    ``DECODE_SHORT_ROW_BYTES``, else those of ``DECODE_MANY_WAVES_WARPS`` whose last wave is
    fuller; ``DECODE_UNROLL`` chunks in flight (measured on the H200: BENCHMARKS.md, "Decode
    kernel", runs 89, 96, 180-188 and 190-193). No more warps than a row has K chunks (a short K
    of a batched product: a warp without a chunk only holds registers). A horizontal fusion's
    products each take ``DECODE_HORIZONTAL_WARPS`` warps and ``DECODE_HORIZONTAL_UNROLL``
    chunks where the SMs hold such a CTA, else warps as above (the resources count them all).
    One row tile (16 weight rows a CTA): two were 1-27% slower at 8-16 rows and level or 5%
    faster only at 1-8 rows of 4096x4096 (H100, run 223), so they are left to the tuner."""
    scheduler = scheduler_object("decode")
    asker = Asker(scheduler, problem, device)
    cta = asker.spaces["cta_tile"].values[0]  # the activation rows, one row tile, a K chunk
    assert isinstance(cta, TileShape)

    def plan(warps: int, unroll: int) -> MatmulParams:
        return asker.params(cta_tile=cta, warp_tile=cta, splitk_factor=warps, stages=unroll)

    if problem.horizontal > 1:
        warps = min(DECODE_HORIZONTAL_WARPS, ceil_div(problem.k, cta.k))
        params = plan(warps, DECODE_HORIZONTAL_UNROLL)
        if _resident(asker, params):
            return params
    ctas = problem.batch * ceil_div(problem.n, cta.n)
    unroll = DECODE_UNROLL[problem.operand_dtype.itemsize]
    # (0: more warps than an SM holds, as a horizontal fusion's products multiply them)
    resident = {w: _resident(asker, plan(w, unroll)) for w in DECODE_WARP_COUNTS}
    one_wave = [w for w in DECODE_WARP_COUNTS if ctas <= resident[w]]
    many = [w for w in DECODE_MANY_WAVES_WARPS if resident[w]]
    if one_wave:
        most = one_wave[0]
    elif problem.k * problem.operand_dtype.itemsize <= DECODE_SHORT_ROW_BYTES or not many:
        most = 1
    else:
        most = max(many, key=lambda w: _last_wave(ctas, resident[w]))
    most = min(most, ceil_div(problem.k, cta.k))  # the row's chunks
    counts = asker.spaces["splitk_factor"].values
    warps = max(w for w in counts if isinstance(w, int) and w <= most and resident.get(w, 1))
    return plan(warps, unroll)


def _resident(asker: Asker, params: MatmulParams) -> int:
    """CTAs of *params* that the SMs hold at once, by the asked scheduler's resources."""
    resources = asker.scheduler.resources(params, asker.problem)
    return asker.device.sm_count * resident_ctas(resources, asker.device)


def _last_wave(ctas: int, resident: int) -> float:
    """The share of the *resident* CTAs' slots that the last wave of *ctas* fills (whole: 1)."""
    return ((ctas - 1) % resident + 1) / resident
