"""The cluster's split-K reduction (``HopperKernelConfig.splitk_cluster``): the ``splitk`` CTAs
of a tile are one cluster, and each sums a slice of the tile over their partials in
distributed shared memory, then applies the fusion's epilogue there.

Per work unit, in every CTA of the cluster (the consumers only; the producer runs ahead):

1. wait until every CTA read this CTA's previous partial (``red`` + 8, ``splitk`` arrivals);
2. store the accumulators at their fragment positions in the partial tile (rows of
   ``cta n + 1`` floats: a column walk touches 32 banks);
3. a consumer barrier, then one thread fences at cluster scope and arrives on every CTA's
   ``red`` barrier; everyone waits for its own (``splitk`` arrivals: every partial written);
4. the CTA of rank r takes elements ``[r, r + 1) * ceil(bm * bn / splitk)`` of the tile
   (consecutive threads on consecutive output columns: the kernel's columns, or its rows with
   ``swap_ab``), sums the ``splitk`` partials in rank order (the reduce kernel's order, so
   the sums are the same) and runs the epilogue program on each;
5. a consumer barrier, then one thread arrives on every CTA's ``red`` + 8: its slice is read.

The kernel's closing ``cluster_sync`` keeps each CTA's shared memory alive until its peers are
done with it.
"""

from __future__ import annotations

from mmaplug.codegen.emitter import EPILOGUE_VARS as ev
from mmaplug.codegen.emitter import Emitter, emit_epilogue_body

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS as kv
from .smem import MBARRIER_BYTES
from .tiles import WARPGROUP

__all__ = ["REDUCTION_BARRIER", "emit_cluster_reduction", "emit_reduction_setup"]

#: The named barrier of the consumers of one CTA (1-2: staged chunks, 3-4: ping-pong turns).
REDUCTION_BARRIER = 5


def _tile(cfg: HopperKernelConfig) -> str:
    """Shared address of this CTA's partial tile (after the two barriers)."""
    return f"{kv.red} + {2 * MBARRIER_BYTES}"


def emit_reduction_setup(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Once per consumer thread: the parity, and the partial tile of every rank of the cluster
    as a shared::cluster address (``peer{r}``)."""
    em(f"{kv.rph} = 0")
    for r in range(cfg.splitk):
        em(f"{kv.peer}{r} = mapa_shared(uint32({_tile(cfg)}), uint32({r}))")


def emit_cluster_reduction(em: Emitter, cfg: HopperKernelConfig, accs: list[str]) -> None:
    """One work unit's reduction and epilogue (see the module's steps)."""
    bm, bn, _ = cfg.cta_tile
    wm, wn, _ = cfg.warp_tile
    stride, splits = cfg.reduction_stride, cfg.splitk
    threads = WARPGROUP * cfg.consumers
    full, read = f"uint32({kv.red})", f"uint32({kv.red} + {MBARRIER_BYTES})"
    em(f"mbarrier_wait_cluster({read}, {kv.rph} ^ 1)  # every rank read the last partial")
    tile = f"({_tile(cfg)} - {kv.base}) // 4"  # (float index)
    em(
        f"rd_row = {tile} + ({kv.cm} * {wm} + 16 * {kv.w} + {kv.lane} // 4) * {stride} "
        f"+ {kv.cn} * {wn} + 2 * ({kv.lane} % 4)"
    )
    for r, acc in enumerate(accs):  # register 4q + 2h + e: row 8h (+ 64r), column 8q + e
        for q in range(wn // 8):
            for h in range(2):
                for e in range(2):
                    off = (64 * r + 8 * h) * stride + 8 * q + e
                    em(f"{kv.sf}[rd_row + {off}] = {acc}[{4 * q + 2 * h + e}]")
    _emit_announce(em, cfg, full, "this CTA's partial is written")
    em(f"mbarrier_wait_cluster({full}, {kv.rph})  # every rank's partial is written")
    per = -(-bm * bn // splits)
    em(f"rd_e = int64({kv.rank}) * {per} + {kv.tid} - {WARPGROUP}")
    em(f"rd_end = min({bm * bn}, (int64({kv.rank}) + 1) * {per})")
    em("while rd_e < rd_end:")
    with em.indent():
        if cfg.swap_ab:  # consecutive threads on the kernel's rows: the output's columns
            em(f"rd_c = rd_e // {bm}")
            em(f"rd_r = rd_e - rd_c * {bm}")
        else:
            em(f"rd_r = rd_e // {bn}")
            em(f"rd_c = rd_e - rd_r * {bn}")
        em(f"if {kv.m0} + rd_r < M and {kv.n0} + rd_c < N:")
        with em.indent():
            em(f"rd_o = uint32(4 * (rd_r * {stride} + rd_c))")
            em(f"{ev.v} = ld_shared_cluster_f32({kv.peer}0 + rd_o)")
            for r in range(1, splits):
                em(f"{ev.v} += ld_shared_cluster_f32({kv.peer}{r} + rd_o)")
            row, col = (ev.col, ev.row) if cfg.swap_ab else (ev.row, ev.col)
            em(f"{row} = {kv.m0} + rd_r")
            em(f"{col} = {kv.n0} + rd_c")
            emit_epilogue_body(em, cfg.epilogue)
        em(f"rd_e += {threads}")
    _emit_announce(em, cfg, read, "this CTA's slice of every partial is read")
    em(f"{kv.rph} ^= 1")


def _emit_announce(em: Emitter, cfg: HopperKernelConfig, bar: str, what: str) -> None:
    """The consumers meet; one thread fences at cluster scope and arrives on *bar* in every
    CTA of the cluster (*what*: the news)."""
    em(f"named_barrier_sync({REDUCTION_BARRIER}, {WARPGROUP * cfg.consumers})  # {what}")
    em(f"if {kv.tid} == {WARPGROUP}:  # the first consumer thread")
    with em.indent():
        em("fence_acq_rel_cluster()")
        for rank in range(cfg.splitk):
            em(f"mbarrier_arrive_cluster(mapa_shared({bar}, uint32({rank})))")
