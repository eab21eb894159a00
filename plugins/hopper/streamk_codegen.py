"""Stream-K's fix-up (``HopperKernelConfig.streamk``): the pieces of a tail tile meet in the
workspace, and the consumers that finish a tile's last piece add them up and run the epilogue.

``sk_full`` tiles make whole waves of ``gridDim.x`` CTAs; the ``sk_rest`` tiles after them
(the tail) are cut along K into ``splitk`` pieces. The pieces come first, piece-major (unit
``piece * sk_rest + r`` is piece ``piece`` of tile ``sk_full + r``), so the CTAs of one round
walk neighbouring tiles over the same K range, as a whole wave does; the whole tiles follow
(unit ``sk_rest * splitk + t`` is tile ``t``). Pieces first is CUTLASS's order, so that the
fix-ups' stores and loads run beside other CTAs' main loops; measured no faster than pieces
last (BENCHMARKS.md runs 164-165).

The float32 workspace ``ws``: a counter per tail tile and consumer warpgroup (``sk_rest *
consumers`` words, 16-byte rounded), zeroed before each launch; then per tail tile, piece and
consumer the consumer's accumulators, interleaved by 4 registers (registers ``4g .. 4g + 3``
of thread ``t`` at ``(128 g + t) * 4``, so each 16-byte access of a warpgroup is 2 KiB in a
row).

Per piece, in each consumer warpgroup:

1. every thread stores its accumulators;
2. the warpgroup meets (named barrier ``STREAMK_BARRIER`` + c); its first thread fences
   (``fence.acq_rel.gpu``: the barrier made it observe the warpgroup's stores, so the fence
   releases them all), adds one to the tile's counter (a float32 atomic: exact for a few
   pieces), fences again (acquiring the other pieces' partials if it was the last) and
   leaves what it read in shared memory (one thread's fences, CUTLASS's pattern; a
   ``membar.gl`` in every thread instead timed the same, run 164);
3. the warpgroup meets again; the piece that read ``splitk - 1`` is the tile's last;
4. its warpgroup sums every piece's partials in piece order with L2 loads (``ld.global.cg``:
   an SM's L1 does not see other SMs' stores), its own as stored: the sums are the same
   whichever piece comes last. They become the accumulators, and the epilogue runs as for a
   whole tile. The other pieces skip the epilogue.
"""

from __future__ import annotations

from mmaplug.codegen.emitter import Emitter

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS as kv
from .smem import MBARRIER_BYTES
from .tiles import WARPGROUP

__all__ = [
    "STREAMK_BARRIER",
    "emit_streamk_fixup",
    "emit_streamk_k_range",
    "emit_streamk_units",
    "streamk_flag_offset",
]

#: The first of the consumers' named barriers of the fix-up (6 + c; 1-2: staged chunks, 3-4:
#: ping-pong turns, 5: the cluster reduction).
STREAMK_BARRIER = 6
_GROUP = 4 * WARPGROUP  # floats of one 16-byte access of a warpgroup


def streamk_flag_offset(cfg: HopperKernelConfig) -> int:
    """Bytes from the mbarriers to the fix-up's counts in shared memory: after the barriers
    and the epilogue staging that follows them (TMA stores stage before the barriers)."""
    staging = 0 if cfg.tma_stores else cfg.staging_bytes
    return 2 * cfg.stages * MBARRIER_BYTES + staging


def emit_streamk_units(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Once per CTA: the whole waves' units, the tail tiles, the launch's work units and the
    counters' words (the host sizes the workspace by the same rule, ``artifact``)."""
    em(f"sk_total = int64(batch) * {kv.tiles}")
    em(f"{kv.skfull} = sk_total // {kv.ustep} * {kv.ustep}")
    em(f"{kv.skrest} = sk_total - {kv.skfull}")
    em(f"sk_pieces = {kv.skrest} * {cfg.splitk}")
    em(f"units = {kv.skfull} + sk_pieces")
    em(f"sk_words = ({kv.skrest} * {cfg.consumers} + 3) // 4 * 4  # the counters, 16-byte rounded")


def emit_streamk_k_range(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Work unit ``u`` -> tile ``ti`` (over the batch), piece ``sp`` and its K range."""
    em(f"if {kv.u} < sk_pieces:  # a piece of a tail tile")
    with em.indent():
        em(f"{kv.sp} = int64({kv.u}) // {kv.skrest}")
        em(f"{kv.ti} = {kv.skfull} + int64({kv.u}) - {kv.sp} * {kv.skrest}")
        em(f"{kv.kb} = {kv.sp} * k_split")
        em(f"{kv.ke} = min(int64(K), {kv.kb} + k_split)")
    em("else:  # a whole tile")
    with em.indent():
        em(f"{kv.ti} = int64({kv.u}) - sk_pieces")
        em(f"{kv.sp} = int64(0)")
        em(f"{kv.kb} = int64(0)")
        em(f"{kv.ke} = int64(K)")


def emit_streamk_fixup(em: Emitter, cfg: HopperKernelConfig, accs: list[str]) -> None:
    """Steps 1-4 of the module's fix-up for the unit just computed; binds ``go``: whether
    this warpgroup runs the epilogue (a whole tile, or a tail tile's last piece)."""
    nacc, pieces, consumers = cfg.warp_tile[1] // 2, cfg.splitk, cfg.consumers
    groups = len(accs) * nacc // 4
    piece = consumers * groups * _GROUP  # floats between two pieces of a tile's partials
    em("go = True")
    em(f"if {kv.u} < sk_pieces:  # a piece: its partials, then the last piece sums them")
    with em.indent():
        em(f"sk_r = {kv.ti} - {kv.skfull}")
        em(
            f"sk_w = sk_words + ((sk_r * {pieces} + {kv.sp}) * {consumers} + {kv.c}) "
            f"* {groups * _GROUP} + 4 * {kv.t}"
        )
        for r, acc in enumerate(accs):
            for g in range(nacc // 4):
                words = ", ".join(f"{acc}[{4 * g + e}]" for e in range(4))
                em(f"st_global_v4_b32(ws, sk_w + {(r * nacc // 4 + g) * _GROUP}, {words})")
        flag = f"({kv.bar} + {streamk_flag_offset(cfg)} - {kv.base}) // 4 + {kv.c}"
        em(f"named_barrier_sync({STREAMK_BARRIER} + {kv.c}, {WARPGROUP})  # all stored")
        em(f"if {kv.t} == 0:  # release the warpgroup's partials, count, acquire the others'")
        with em.indent():
            em("fence_acq_rel_gpu()")
            em(f"sk_n = cuda.atomic.add(ws, sk_r * {consumers} + {kv.c}, float32(1))")
            em("fence_acq_rel_gpu()")
            em(f"{kv.sf}[{flag}] = sk_n")
        em(f"named_barrier_sync({STREAMK_BARRIER} + {kv.c}, {WARPGROUP})  # the count is read")
        em(f"go = {kv.sf}[{flag}] == float32({pieces - 1})")
        em("if go:  # the tile's last piece: every piece's partials, in piece order")
        with em.indent():
            em(f"sk_w0 = sk_w - {kv.sp} * {piece}  # piece 0")
            # group by group: a group's pieces loaded, then summed, so that only one group's
            # pieces are live (every name assigned once: NVVM's tuple building asks it)
            for i in range(groups):
                for p in range(pieces):
                    em(f"sk_p{p}_{i} = ld_global_cg_v4_f32(ws, sk_w0 + {p * piece + i * _GROUP})")
                for e in range(4):  # ((p0 + p1) + p2) + ...: piece order
                    total = " + ".join(f"sk_p{p}_{i}[{e}]" for p in range(pieces))
                    em(f"sk_s{4 * i + e} = {total}")
            for r, acc in enumerate(accs):  # (a tuple display's target: assigned once)
                em(f"sk_t{r} = ({', '.join(f'sk_s{r * nacc + i}' for i in range(nacc))})")
                em(f"{acc} = sk_t{r}")
