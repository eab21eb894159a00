"""The block-scaled main loops of the hopper kernel's generated source: partial sums promoted
to float32 every 128 of K with the scales of A's rows and B's column block, by stage, by
64-column chunks or by pairs of stages (docs/decisions.md, "FP8 block scales")."""

from __future__ import annotations

from mmaplug.codegen.emitter import Emitter
from mmaplug.ir.ops import SCALE_BLOCK

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS as kv
from .packed_epilogue import emit_input_prefetch
from .stage_codegen import (
    StageOperand,
    advance,
    emit_full_wait,
    emit_hand_over,
    emit_origin,
    emit_release,
    emit_stage_offsets,
    emit_stage_wgmmas,
    emit_turn,
    emit_turn_over,
    emit_wgmma_steps,
)
from .tiles import BLOCK_CHUNK, promoted_by_chunks, straddle_cuts, straddles, wgmma_k

__all__ = ["emit_block_scaled_loop"]


def emit_block_scaled_loop(
    em: Emitter, cfg: HopperKernelConfig, a: StageOperand, b: StageOperand, accs: list[str]
) -> None:
    """A work unit's main loop with block scales: each stage (one ``SCALE_BLOCK`` of K) is
    summed into fresh partial sums; once those wgmmas are done the stage is released and the
    partial sums are added to the accumulators, scaled by the thread's rows' scales of A times
    the tile's scale of B (DeepGEMM's promotion: FP8 wgmma adds with about 14 bits, so no more
    than one block is summed in the tensor cores). The scales of the next block are loaded
    while this block's wgmmas run, so their latency is a whole iteration away; the other
    consumer's wgmmas keep the tensor cores busy during a promotion."""
    stages, wn = cfg.stages, cfg.warp_tile[1]
    parts = [f"part{r}" for r in range(len(accs))]
    rows = [
        (f"{h}{r}", 64 * r + off) for r in range(len(accs)) for h, off in (("lo", 0), ("hi", 8))
    ]
    if promoted_by_chunks(wn):
        _emit_block_chunks_loop(em, cfg, a, b, accs, rows)
        return
    for acc in accs:
        em(f"{acc} = wgmma_zeros({wn // 2})")
    _emit_scale_rows(em, cfg, rows)
    em(f"bcol = ({kv.n0} // {SCALE_BLOCK}) * sfb_n")
    if cfg.cta_tile[2] == 2 * SCALE_BLOCK:
        _emit_block_pair_loop(em, cfg, a, b, accs, rows)
        return
    em(f"kblk = {kv.kb} // {SCALE_BLOCK}")
    b_cols = {"bsc": "bcol"}  # B's scale of each block the tile meets, and its column
    if straddles(wn):  # the next block of B's scales (one past N reads the last: zero sums)
        b_cols["bsc1"] = "bcol1"
        em(f"bcol1 = min({kv.n0} // {SCALE_BLOCK} + 1, (N - 1) // {SCALE_BLOCK}) * sfb_n")
        em(f"cut = {SCALE_BLOCK} - {kv.n0} % {SCALE_BLOCK}  # columns in the first block")
    b_names = list(b_cols)

    def load(prefix: str) -> None:  # raw loads: nothing reads them before they are needed
        a_scales = [(f"{prefix}{name}", name) for name, _ in rows]
        b_scales = [(f"{prefix}{name}", col) for name, col in b_cols.items()]
        _emit_scale_loads(em, "kblk", b_scales, a_scales)

    for name in (*b_names, *(name for name, _ in rows)):
        em(f"s{name} = float32(0)")
    em(f"if {kv.kb} < {kv.ke}:")
    with em.indent():
        load("s")
    em(f"{kv.k0} = {kv.kb}")
    em(f"while {kv.k0} < {kv.ke}:")
    with em.indent():
        emit_turn(em, cfg)
        emit_stage_wgmmas(em, cfg, a, b, parts, "0")  # fresh partial sums
        emit_turn_over(em, cfg)
        for name in (*b_names, *(name for name, _ in rows)):
            em(f"n{name} = s{name}")
        em("kblk += 1")
        em(f"if {kv.k0} + {SCALE_BLOCK} < {kv.ke}:  # the next block's scales, while these run")
        with em.indent():
            load("n")
        em("wgmma_wait_group(0)")
        for part in parts:
            em(f"{part} = fence_operand({part})")
        emit_release(em, stages, kv.s, cfg.multicast)
        _emit_promotion(em, accs, parts, wn)
        for name in (*b_names, *(name for name, _ in rows)):
            em(f"s{name} = n{name}")
        advance(em, stages)
        em(f"{kv.k0} += {cfg.cta_tile[2]}")
    if cfg.pingpong:
        emit_hand_over(em)


def _emit_promotion(em: Emitter, accs: list[str], parts: list[str], wn: int) -> None:
    """A stage's partial sums added to the accumulators with the scales loaded for it (``s``):
    one block of B's scales, or, for a tile that straddles two (``straddles``), the first
    block's up to its ``cut`` column and the next block's after it, one promotion generated
    for each cut the tile's origin allows (the branch is the same for the whole warp)."""

    def promote(cut: int) -> None:
        for r, (acc, part) in enumerate(zip(accs, parts, strict=True)):
            first = f"slo{r} * sbsc, shi{r} * sbsc"
            if cut >= wn:
                em(f"{acc} = wgmma_promote({acc}, {part}, {first})")
            else:
                nxt = f"slo{r} * sbsc1, shi{r} * sbsc1"
                em(f"{acc} = wgmma_promote_split({acc}, {part}, {first}, {nxt}, {cut})")

    if not straddles(wn):
        promote(wn)
        return
    cuts = straddle_cuts(wn)
    if wn < SCALE_BLOCK:  # origins whose tile lies in one block
        cuts += (wn,)
    for i, cut in enumerate(cuts):
        last = i == len(cuts) - 1
        em(f"if cut == {cut}:" if not i else f"elif cut == {cut}:" if not last else "else:")
        with em.indent():
            promote(cut)


def _emit_scale_rows(em: Emitter, cfg: HopperKernelConfig, rows: list[tuple[str, int]]) -> None:
    """The unit's origin, and the offsets of the thread's *rows* in A's scales."""
    emit_origin(em, cfg)  # the scales' rows and column block are the tile's
    emit_input_prefetch(em, cfg)
    em(f"srow = {kv.m0} + {kv.cm} * {cfg.warp_tile[0]} + 16 * {kv.w} + {kv.lane} // 4")
    for name, off in rows:  # rows past M read row M - 1; the epilogue drops them
        em(f"a{name} = min(srow + {off}, M - 1) * sfa_m")


def _emit_scale_loads(
    em: Emitter, kblk: str, b_scales: list[tuple[str, str]], a_scales: list[tuple[str, str]]
) -> None:
    """Scale block *kblk*'s scales: B's into each (name, column offset) of *b_scales*, then
    A's into each (name, row) of *a_scales*, the row one of ``_emit_scale_rows``'s."""
    for name, col in b_scales:
        em(f"{name} = sfb[{kblk} * sfb_k + {col}]")
    for name, row in a_scales:
        em(f"{name} = sfa[a{row} + {kblk} * sfa_k]")


def _emit_block_chunks_loop(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: StageOperand,
    b: StageOperand,
    accs: list[str],
    rows: list[tuple[str, int]],
) -> None:
    """Consumer tiles of whole scale blocks of columns (64x256, one block of K a stage): the
    stage's wgmmas are issued ``BLOCK_CHUNK`` columns at a time, into two sets of partial sums
    in turn, each set committed as a group; while one chunk's wgmmas run, the previous chunk's
    sums are promoted with their block's scale of B (128 accumulators and two sets of 32
    partial sums a thread: a set of a 128-column block beside a second would not fit). The
    chunks' accumulators are joined for the epilogue."""
    stages, wn = cfg.stages, cfg.warp_tile[1]
    chunks = wn // BLOCK_CHUNK
    sets = [[f"part{r}" for r in range(len(accs))], [f"qart{r}" for r in range(len(accs))]]
    split = [[f"{acc}c{q}" for q in range(chunks)] for acc in accs]
    for names in (*split, *sets):
        for name in names:
            em(f"{name} = wgmma_zeros({BLOCK_CHUNK // 2})")
    _emit_scale_rows(em, cfg, rows)
    # each block of B's scales the tile spans (one past N reads the last: its sums are zero)
    blocks = wn // SCALE_BLOCK
    em(f"bblk = ({kv.n0} + {kv.cn} * {wn}) // {SCALE_BLOCK}")
    em(f"blast = (N - 1) // {SCALE_BLOCK}")
    for h in range(blocks):
        em(f"bcol{h} = min(bblk + {h}, blast) * sfb_n")
    em(f"kblk = {kv.kb} // {SCALE_BLOCK}")
    steps = range(cfg.cta_tile[2] // wgmma_k(cfg.operand_dtype))

    def issue(q: int) -> None:
        parts = sets[q % 2]
        for part in parts:
            em(f"{part} = fence_operand({part})")
        em("wgmma_fence()")
        desc = f"db + uint64(({b.slice_offset(str(q * BLOCK_CHUNK))}) >> 4)" if q else "db"
        emit_wgmma_steps(em, cfg, a, b, parts, steps, "0", desc)
        em("wgmma_commit_group()")

    def promote(q: int, pending: int) -> None:
        parts = sets[q % 2]
        em(f"wgmma_wait_group({pending})")
        for part in parts:
            em(f"{part} = fence_operand({part})")
        if not pending:
            emit_release(em, stages, kv.s, cfg.multicast)
        h = q * BLOCK_CHUNK // SCALE_BLOCK
        for r, part in enumerate(parts):
            acc = split[r][q]
            em(f"{acc} = wgmma_promote({acc}, {part}, lo{r} * bsc{h}, hi{r} * bsc{h})")
            em(f"{acc} = fence_operand({acc})  # (before the set's next wgmmas)")

    em(f"{kv.k0} = {kv.kb}")
    em(f"while {kv.k0} < {kv.ke}:")
    with em.indent():
        b_scales = [(f"bsc{h}", f"bcol{h}") for h in range(blocks)]
        a_scales = [(name, name) for name, _ in rows]
        _emit_scale_loads(em, "kblk", b_scales, a_scales)  # in flight while the stage fills
        emit_full_wait(em)
        emit_stage_offsets(em, a, b)
        issue(0)
        for q in range(1, chunks):
            issue(q)
            promote(q - 1, 1)
        promote(chunks - 1, 0)
        em("kblk += 1")
        advance(em, stages)
        em(f"{kv.k0} += {cfg.cta_tile[2]}")
    if cfg.pingpong:
        emit_hand_over(em)
    for acc, names in zip(accs, split, strict=True):
        em(f"{acc} = {' + '.join(names)}  # the chunks, joined: one m64n{wn} accumulator")


def _emit_block_pair_loop(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: StageOperand,
    b: StageOperand,
    accs: list[str],
    rows: list[tuple[str, int]],
) -> None:
    """Stages of two scale blocks: the first block's wgmmas into partial sums ``p``, the
    second's into ``q``, each committed as a group; once the first group is done its sums are
    promoted while the second's run, then the second's. The stage's scales (both blocks) are
    loaded before its full barrier is waited on (loading them a stage ahead spilled: three sets
    of 64 accumulators leave no room)."""
    stages, bk = cfg.stages, cfg.cta_tile[2]
    steps = bk // wgmma_k(cfg.operand_dtype)
    ps = [f"psum{r}" for r in range(len(accs))]  # (p0, q0 ... are the packed epilogue's)
    qs = [f"qsum{r}" for r in range(len(accs))]
    for part in (*ps, *qs):
        em(f"{part} = wgmma_zeros({cfg.warp_tile[1] // 2})")

    def load(prefix: str, kblk: str) -> None:
        for h in (0, 1):  # a second block past K reads block 0: its sums are zero
            em(f"kb{h} = {kblk} + {h}")
            em(f"if kb{h} * {SCALE_BLOCK} >= {kv.ke}:")
            em(f"    kb{h} = 0")
            a_scales = [(f"{prefix}{name}{h}", name) for name, _ in rows]
            _emit_scale_loads(em, f"kb{h}", [(f"{prefix}bsc{h}", "bcol")], a_scales)

    em(f"{kv.k0} = {kv.kb}")
    em(f"while {kv.k0} < {kv.ke}:")
    with em.indent():
        load("s", f"{kv.k0} // {SCALE_BLOCK}")  # in flight while the stage fills
        emit_full_wait(em)
        for part in (*ps, *qs):
            em(f"{part} = fence_operand({part})")
        em("wgmma_fence()")
        emit_stage_offsets(em, a, b)
        emit_wgmma_steps(em, cfg, a, b, ps, range(steps // 2), "0")
        em("wgmma_commit_group()")
        emit_wgmma_steps(em, cfg, a, b, qs, range(steps // 2, steps), "0")
        em("wgmma_commit_group()")
        em("wgmma_wait_group(1)  # the first block is done; the second runs on")
        for part in ps:
            em(f"{part} = fence_operand({part})")
        for r, (acc, part) in enumerate(zip(accs, ps, strict=True)):
            em(f"{acc} = wgmma_promote({acc}, {part}, slo{r}0 * sbsc0, shi{r}0 * sbsc0)")
            # (or the compiler sinks the promotion past the next wait, which then waits for
            # both blocks: SASS of run 119)
            em(f"{acc} = fence_operand({acc})")
        em("wgmma_wait_group(0)")
        for part in qs:
            em(f"{part} = fence_operand({part})")
        emit_release(em, stages, kv.s, cfg.multicast)
        for r, (acc, part) in enumerate(zip(accs, qs, strict=True)):
            em(f"{acc} = wgmma_promote({acc}, {part}, slo{r}1 * sbsc1, shi{r}1 * sbsc1)")
        advance(em, stages)
        em(f"{kv.k0} += {bk}")
    if cfg.pingpong:
        emit_hand_over(em)
