"""The consumers' view of a pipeline stage in the hopper kernel's generated source: the
operands' shared-memory geometry (``StageOperand``), the wgmmas over a stage, the ring's
release and advance, the tile origin, and two consumers taking turns at the tensor cores."""

from __future__ import annotations

from mmaplug.codegen.emitter import Emitter
from mmaplug.codegen.grid import emit_tile_decode
from mmaplug.ir.dtypes import DType
from mmaplug.ir.ops import SCALE_BLOCK

from .config import HopperKernelConfig
from .kernel_vars import KERNEL_VARS as kv
from .smem import MBARRIER_BYTES
from .tiles import (
    BOX_INNER,
    SWIZZLE_BYTES,
    WARPGROUP,
    WGMMA_K_BYTES,
    k_box,
    promoted_by_chunks,
    wgmma_k,
)

__all__ = [
    "StageOperand", "advance", "cluster_coords", "emit_empty_wait", "emit_full_wait",
    "emit_hand_over", "empty_barrier", "full_barrier",
    "emit_origin", "emit_release", "emit_stage_offsets", "emit_stage_wgmmas", "emit_turn",
    "emit_turn_over", "emit_wait_turn", "emit_wgmma_steps", "multicast_part", "takes_turns",
    "wgmma_imports",
]  # fmt: skip

# smem bytes of the 16 K-rows of one k16 step of an MN-major (16-bit) operand
_MN_STEP_BYTES = 16 * SWIZZLE_BYTES
# the wgmma of each operand type, and whether it takes transpose bits (FP8 is K-major only)
_WGMMA = {
    DType.float16: ("wgmma_f16", True),
    DType.bfloat16: ("wgmma_bf16", True),
    DType.float8_e4m3fn: ("wgmma_e4m3", False),
    DType.float8_e5m2: ("wgmma_e5m2", False),
}


class StageOperand:
    """Shared-memory geometry of operand A (rows = M) or B (rows = N) of one stage."""

    def __init__(self, cfg: HopperKernelConfig, name: str) -> None:
        bm, bn, bk = cfg.cta_tile
        self.name = name
        self.rows = bm if name == "a" else bn
        self.k_inner = cfg.a_k_inner if name == "a" else cfg.b_k_inner
        self.bk = bk
        self.kbox = k_box(cfg.operand_dtype)  # K elements of one swizzle row
        self.stage_bytes = self.rows * bk * cfg.operand_dtype.itemsize
        self.trans = 0 if self.k_inner else 1
        # K-major: BK/64 slabs of [rows][64 K]; MN-major: rows/64 chunks of [BK][64 rows]
        self.lbo = 16 if self.k_inner else bk * SWIZZLE_BYTES
        # a horizontal B stage stacks the h operands' tiles along N, `part` rows each
        self.maps = cfg.horizontal if name == "b" else 1
        self.part = self.rows // self.maps

    def boxes(self) -> list[tuple[int, str, str, int]]:
        """(smem offset in the stage, coordinate 0 expr, coordinate 1 expr, map) of each TMA
        box; map j > 0 is B operand j of a horizontal fusion."""
        r0 = kv.m0 if self.name == "a" else kv.n0
        if self.k_inner:  # rows [j * part, (j + 1) * part) of each K slab from map j
            return [
                (
                    (s * self.rows + j * self.part) * SWIZZLE_BYTES,
                    f"{kv.k0} + {s * self.kbox}",
                    r0,
                    j,
                )
                for s in range(self.bk // self.kbox)
                for j in range(self.maps)
            ]
        per = self.part // BOX_INNER  # 64-column chunk q comes from map q // per
        return [
            (q * self.bk * SWIZZLE_BYTES, f"{r0} + {(q % per) * BOX_INNER}", kv.k0, q // per)
            for q in range(self.rows // BOX_INNER)
        ]

    def multicast_boxes(self, part: str, parts: int) -> list[tuple[str, str, str]]:
        """The boxes this CTA of a cluster of *parts* loads for all (``part``: its cluster
        rank): a 1/parts share of each K slab's rows, or every parts-th 64-element swizzle
        row of an MN-major operand."""
        r0 = kv.n0 if self.name == "b" else kv.m0
        rows = self.rows // parts
        if self.k_inner:
            return [
                (
                    f"{s * self.rows * SWIZZLE_BYTES} + {part} * {rows * SWIZZLE_BYTES}",
                    f"{kv.k0} + {s * self.kbox}",
                    f"{r0} + {part} * {rows}",
                )
                for s in range(self.bk // self.kbox)
            ]
        return [
            (
                f"({parts * j} + {part}) * {self.bk * SWIZZLE_BYTES}",
                f"{r0} + ({parts * j} + {part}) * {BOX_INNER}",
                kv.k0,
            )
            for j in range(self.rows // BOX_INNER // parts)
        ]

    def slice_offset(self, row0: str) -> str:
        """Byte offset (expression) of the 64-row (A) / N-column (B) slice starting at *row0*."""
        if self.k_inner:
            return f"({row0}) * {SWIZZLE_BYTES}"
        return f"(({row0}) // {BOX_INNER}) * {self.bk * SWIZZLE_BYTES}"

    def step_offset(self, j: int) -> int:
        """Byte offset of wgmma K step *j* (k16, or k32 for FP8: 32 bytes) from the slice
        start."""
        if self.k_inner:
            slab, within = divmod(j, SWIZZLE_BYTES // WGMMA_K_BYTES)
            return slab * self.rows * SWIZZLE_BYTES + within * WGMMA_K_BYTES
        return j * _MN_STEP_BYTES


def wgmma_imports(dtype: DType) -> str:
    """The wgmma intrinsics a kernel imports: both 16-bit ones, or its FP8 one."""
    name, transposes = _WGMMA[dtype]
    return "wgmma_f16, wgmma_bf16" if transposes else name


def emit_origin(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Work unit ``u`` -> batch ``bt`` and tile origin ``m0``, ``n0`` (a consumer decodes them
    while its first wgmmas run)."""
    bm = cfg.cta_tile[0]
    # uint32 arithmetic, cast back at every step as in the tile decode (units < 2**31)
    if cfg.streamk:  # the tile over the batch is decoded with the K range
        em(f"tile = uint32(uint32({kv.ti}) % {kv.tiles32})")
        em(f"{kv.bt} = int64(uint32({kv.ti}) // {kv.tiles32})")
    else:
        em(f"tile = uint32(uint32({kv.u}) % {kv.tiles32})")
        splits = cfg.splitk if cfg.workspace_splitk else 1  # work units per tile
        em(f"{kv.bt} = int64(uint32({kv.u}) // {kv.tiles32} // uint32({splits}))")
    tm, tn = emit_tile_decode(
        em, "tile", cta_order=cfg.cta_order, grid_swizzle=cfg.grid_swizzle, unsigned=True
    )
    rank_m, rank_n = cluster_coords(cfg)
    if cfg.cluster_m > 1:  # the cluster's tiles are adjacent along M
        em(f"{kv.m0} = (int64({tm}) * {cfg.cluster_m} + {rank_m}) * {bm}")
    else:
        em(f"{kv.m0} = int64({tm}) * {bm}")
    if cfg.cluster_n > 1:  # the cluster's tiles are adjacent along N
        em(f"{kv.n0} = (int64({tn}) * {cfg.cluster_n} + {rank_n}) * {cfg.n_out}")
    else:
        em(f"{kv.n0} = int64({tn}) * {cfg.n_out}")


def cluster_coords(cfg: HopperKernelConfig) -> tuple[str, str]:
    """This CTA's place in its multicast cluster, along M and along N, as expressions: the
    cluster rank along a one-axis cluster's axis; in a 2x2 cluster (rank % 2, rank // 2), M
    fastest."""
    if cfg.cluster_m > 1 and cfg.cluster_n > 1:
        return f"({kv.rank} % {cfg.cluster_m})", f"({kv.rank} // {cfg.cluster_m})"
    return kv.rank, kv.rank


def multicast_part(cfg: HopperKernelConfig, operand: str) -> tuple[str, str]:
    """(which part of *operand*'s shared tile this CTA loads, the uint16 mask of the CTAs it
    multicasts the part into) as expressions. A cluster along one axis shares the tile among
    all its CTAs; a 2x2 cluster shares A's among the CTAs of a row (along N: same place along
    M) and B's among those of a column."""
    cm, cn = cfg.cluster_m, cfg.cluster_n
    if cm == 1 or cn == 1:
        return kv.rank, f"uint16({(1 << cfg.multicast) - 1})"
    rank_m, rank_n = cluster_coords(cfg)
    if operand == "a":  # ranks rank_m + cm * j
        row = sum(1 << (cm * j) for j in range(cn))
        return rank_n, f"uint16({row} << {rank_m})"
    return rank_m, f"uint16({(1 << cm) - 1} << ({cm} * {rank_n}))"  # ranks cm * rank_n + i


def advance(em: Emitter, stages: int) -> None:
    em(f"{kv.s} += 1")
    em(f"if {kv.s} == {stages}:")
    em(f"    {kv.s} = 0")
    em(f"    {kv.ph} ^= 1")


def takes_turns(cfg: HopperKernelConfig) -> bool:
    """Whether two cooperative consumers of block scales issue each stage's wgmmas in turn
    (``emit_turn``): with one scale block a stage. Stages of two keep three sets of
    accumulators, and the turns' bookkeeping then spilled (ptxas: 4-8 bytes); tiles promoted by
    chunks overlap their own promotion (``_emit_block_chunks_loop``)."""
    return (
        cfg.block_scaled
        and cfg.cta_tile[2] == SCALE_BLOCK
        and not promoted_by_chunks(cfg.warp_tile[1])
        and cfg.consumers == 2
        and not cfg.pingpong
    )


def emit_wait_turn(em: Emitter, taken: str) -> None:
    """The two consumers' turns (ping-pong main loops by unit, block-scaled stages by stage):
    consumer 1 waits on barrier 4 for consumer 0's hand-over, consumer 0 on barrier 3 for
    consumer 1's, but before its first turn (*taken*: the generated count of turns it had)."""
    em(f"if {kv.c} == 1 or {taken} > 0:")
    em(f"    named_barrier_sync(3 + {kv.c}, {2 * WARPGROUP})")


def emit_hand_over(em: Emitter) -> None:
    """The other consumer's turn (``emit_wait_turn``)."""
    em(f"named_barrier_arrive(4 - {kv.c}, {2 * WARPGROUP})")


def emit_turn(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Before a stage's wgmmas: with ``takes_turns``, the second consumer waits until the
    first has issued this stage's, the first until the second has issued the previous stage's.
    Woken by one full barrier, both would issue together, the tensor cores would interleave
    their wgmmas and both groups would end together, idling the tensor cores while both
    promote; in turn, one consumer promotes while the other's wgmmas run."""
    if takes_turns(cfg):
        emit_wait_turn(em, "turn")


def emit_turn_over(em: Emitter, cfg: HopperKernelConfig) -> None:
    """After a stage's wgmmas are issued: the other consumer's turn (``emit_turn``)."""
    if takes_turns(cfg):
        emit_hand_over(em)
        em("turn = 1")


def full_barrier(stage: str) -> str:
    """The shared address of ``full[stage]``, the ring's first barriers."""
    return f"uint32({kv.bar} + {MBARRIER_BYTES} * {stage})"


def emit_full_wait(em: Emitter) -> None:
    """Wait until stage ``s`` is full (its phase ``ph``)."""
    em(f"mbarrier_wait({full_barrier(kv.s)}, {kv.ph})")


def empty_barrier(stages: int, stage: str) -> str:
    """The shared address of ``empty[stage]``, after the ring's *stages* full barriers."""
    return f"uint32({kv.bar} + {MBARRIER_BYTES} * ({stages} + {stage}))"


def emit_empty_wait(em: Emitter, stages: int) -> None:
    """The producer waits until stage ``s`` is free (released in phase ``ph ^ 1``: every stage
    is free before its first fill)."""
    em(f"mbarrier_wait({empty_barrier(stages, kv.s)}, {kv.ph} ^ 1)")


def emit_stage_offsets(em: Emitter, a: StageOperand, b: StageOperand) -> None:
    """``oa``/``ob``: stage ``s``'s offsets of A's and B's tiles in descriptor units (16 B)."""
    em(f"oa = uint64({kv.s} * {a.stage_bytes >> 4})")
    em(f"ob = uint64({kv.s} * {b.stage_bytes >> 4})")


def emit_stage_wgmmas(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: StageOperand,
    b: StageOperand,
    accs: list[str],
    first: str,
) -> None:
    """Wait for stage ``s`` to be full and issue its wgmmas into *accs* (one per 64-row block
    and K step), committed as one group; *first* is the first step's scale-d (0 overwrites)."""
    emit_full_wait(em)
    for acc in accs:
        em(f"{acc} = fence_operand({acc})")
    em("wgmma_fence()")
    emit_stage_offsets(em, a, b)
    emit_wgmma_steps(
        em, cfg, a, b, accs, range(cfg.cta_tile[2] // wgmma_k(cfg.operand_dtype)), first
    )
    em("wgmma_commit_group()")


def emit_wgmma_steps(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: StageOperand,
    b: StageOperand,
    accs: list[str],
    steps: range,
    first: str,
    desc: str = "db",
) -> None:
    """The wgmmas of K *steps* of the stage at ``oa``/``ob`` into *accs*; *first* is the first
    step's scale-d, *desc* the descriptor of B's slice."""
    wgmma, transposes = _WGMMA[cfg.operand_dtype]
    trans = f", {a.trans}, {b.trans}" if transposes else ""
    for j in steps:
        sc = first if j == steps[0] else "1"
        db = f"{desc} + ob + uint64({b.step_offset(j) >> 4})"
        for r, acc in enumerate(accs):
            da = f"da{r} + oa + uint64({a.step_offset(j) >> 4})"
            em(f"{acc} = {wgmma}({acc}, {da}, {db}, {sc}{trans})")


def emit_release(em: Emitter, stages: int, stage: str, cluster: int) -> None:
    """Lane 0 of every consumer warp arrives on ``empty[stage]`` (none before the first tile),
    in every CTA of its cluster: each multicasts into the others' stages."""
    em(f"if {stage} >= 0 and {kv.lane} == 0:")
    empty = empty_barrier(stages, stage)
    if cluster == 1:
        em(f"    mbarrier_arrive({empty})")
        return
    for peer in range(cluster):
        em(f"    mbarrier_arrive_cluster(mapa_shared({empty}, uint32({peer})))")
