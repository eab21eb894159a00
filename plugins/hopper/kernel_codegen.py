"""Source generation of the warp-specialized, persistent TMA + mbarrier + wgmma GEMM kernel."""

from __future__ import annotations

from mmaplug.codegen.amax_epilogue import amax_flush, amax_imports, amax_init
from mmaplug.codegen.emitter import Emitter, emit_splitk_reduce, fp8_imports, jit_options
from mmaplug.codegen.grid import emit_tile_decode, emit_unsigned_divisors
from mmaplug.ir.dtypes import DType
from mmaplug.ir.ops import SCALE_BLOCK

from .config import (
    BLOCK_CHUNK,
    BOX_INNER,
    MBARRIER_BYTES,
    SMEM_ALIGN,
    STAGED_ROWS,
    SWIZZLE_BYTES,
    WARPGROUP,
    WGMMA_K_BYTES,
    HopperKernelConfig,
    k_box,
    kernel_params,
    promoted_by_chunks,
    wgmma_k,
)
from .epilogue_codegen import emit_epilogue, staged_program, trivial_epilogue
from .kernel_vars import KERNEL_VARS as kv
from .packed_epilogue import (
    emit_input_prefetch,
    emit_packed_setup,
    emit_packed_step_function,
    steps_called,
)
from .reduction_codegen import emit_reduction_setup
from .streamk_codegen import emit_streamk_fixup, emit_streamk_k_range, emit_streamk_units

# smem bytes of the 16 K-rows of one k16 step of an MN-major (16-bit) operand
_MN_STEP_BYTES = 16 * SWIZZLE_BYTES
# the wgmma of each operand type, and whether it takes transpose bits (FP8 is K-major only)
_WGMMA = {
    DType.float16: ("wgmma_f16", True),
    DType.bfloat16: ("wgmma_bf16", True),
    DType.float8_e4m3fn: ("wgmma_e4m3", False),
    DType.float8_e5m2: ("wgmma_e5m2", False),
}


class _Operand:
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


def generate_source(cfg: HopperKernelConfig, *, sim: bool) -> str:
    """Python source of ``hopper_gemm`` (+ ``hopper_splitk_reduce``) for *cfg*."""
    em = Emitter()
    em(f'"""Generated by mmaplug.plugins.hopper for {cfg.name}."""')
    em("import math")
    em("from mmaplug.cuda.mathfuncs import gelu")
    em("from numba import cuda, float32, int32, int64, uint8, uint16, uint32, uint64")
    em(
        "from mmaplug.cuda.intrinsics import global_addr, f16_to_f32, f32_to_f16, "
        "bf16_to_f32, f32_to_bf16, smem_addr, ld_shared_v4_f32, st_global_v2_b32, "
        "st_global_v4_b32"
    )
    em(
        "from mmaplug.cuda.sm90 import (shared_base, mbarrier_init, mbarrier_arrive, "
        "mbarrier_arrive_expect_tx, mbarrier_wait, fence_mbarrier_init, tma_load_3d, "
        "prefetch_tensormap, fence_tensormap_acquire, wgmma_fence, wgmma_commit_group, "
        f"wgmma_wait_group, {_wgmma_imports(cfg.operand_dtype)}, wgmma_zeros, fence_operand, "
        f"{'wgmma_promote, ' if cfg.block_scaled else ''}"
        "wgmma_desc, "
        "setmaxnreg_inc, setmaxnreg_dec, named_barrier_sync, named_barrier_arrive, warp_uniform)"
    )
    if cfg.cluster > 1:
        em(
            "from mmaplug.cuda.sm90 import (cluster_sync, mapa_shared, mbarrier_arrive_cluster, "
            "tma_load_3d_multicast)"
        )
    if cfg.splitk_cluster:
        em(
            "from mmaplug.cuda.sm90 import (fence_acq_rel_cluster, ld_shared_cluster_f32, "
            "mbarrier_wait_cluster)"
        )
    if cfg.streamk:
        em("from mmaplug.cuda.intrinsics import ld_global_cg_v4_f32")
        em("from mmaplug.cuda.sm90 import fence_acq_rel_gpu")
    if cfg.tma_stores:
        em(
            "from mmaplug.cuda.sm90 import (fence_proxy_async, tma_store_3d, bulk_commit_group, "
            "bulk_wait_group_read)"
        )
    if fp8 := fp8_imports(cfg.epilogue):  # the conversions of FP8 inputs, outputs, casts
        em(fp8)
    if amax := amax_imports(cfg.epilogue):  # the reductions of amax outputs
        em(amax)
    em()
    _emit_main(em, cfg, sim)
    prog = staged_program(cfg)
    if cfg.smem_epilogue and cfg.packed_stores and steps_called(prog):  # (resolved at build)
        emit_packed_step_function(em, cfg, prog, sim)
    if cfg.workspace_splitk:
        emit_splitk_reduce(em, cfg.epilogue, cfg.splitk, "hopper_splitk_reduce", sim)
    return em.text()


def _wgmma_imports(dtype: DType) -> str:
    """The wgmma intrinsics a kernel imports: both 16-bit ones, or its FP8 one."""
    name, transposes = _WGMMA[dtype]
    return "wgmma_f16, wgmma_bf16" if transposes else name


def _emit_decode(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Work unit ``u`` -> split ``sp``, its K range, batch ``bt``, tile origin ``m0``, ``n0``."""
    _emit_k_range(em, cfg)
    _emit_origin(em, cfg)


def _emit_k_range(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Work unit ``u`` -> split ``sp`` and its K range [``kb``, ``ke``): all a main loop needs."""
    if cfg.splitk == 1:
        em(f"{kv.sp} = 0")
        em(f"{kv.kb} = 0")
        em(f"{kv.ke} = K")
        return
    if cfg.streamk:
        emit_streamk_k_range(em, cfg)
        return
    if cfg.splitk_cluster:  # the cluster's CTAs are the unit's splits
        em(f"{kv.sp} = int64({kv.rank})")
    else:
        em(f"{kv.sp} = int64(uint32({kv.u}) // {kv.tiles32} % uint32({cfg.splitk}))")
    em(f"{kv.kb} = {kv.sp} * k_split")
    em(f"{kv.ke} = min(K, {kv.kb} + k_split)")


def _emit_grid_constants(em: Emitter, cfg: HopperKernelConfig) -> None:
    """The decode's divisors as uint32, once per CTA: the units' tile count and the tile
    order's (``mmaplug.codegen.grid.emit_unsigned_divisors``)."""
    em(f"{kv.tiles32} = uint32({kv.tiles})")
    emit_unsigned_divisors(em, cfg.cta_order, cfg.grid_swizzle)


def _emit_origin(em: Emitter, cfg: HopperKernelConfig) -> None:
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
    if cfg.cluster_m > 1:  # the cluster's tiles are adjacent along M
        em(f"{kv.m0} = (int64({tm}) * {cfg.cluster_m} + {kv.rank}) * {bm}")
    else:
        em(f"{kv.m0} = int64({tm}) * {bm}")
    if cfg.cluster_n > 1:  # the cluster's tiles are adjacent along N
        em(f"{kv.n0} = (int64({tn}) * {cfg.cluster_n} + {kv.rank}) * {cfg.n_out}")
    else:
        em(f"{kv.n0} = int64({tn}) * {cfg.n_out}")


def _advance(em: Emitter, stages: int) -> None:
    em(f"{kv.s} += 1")
    em(f"if {kv.s} == {stages}:")
    em(f"    {kv.s} = 0")
    em(f"    {kv.ph} ^= 1")


def _emit_main(em: Emitter, cfg: HopperKernelConfig, sim: bool) -> None:
    stages = cfg.stages
    a, b = _Operand(cfg, "a"), _Operand(cfg, "b")
    # every consumer warp releases each stage; with ping-pong only the owning warpgroup's
    consumer_warps = 4 if cfg.pingpong else 4 * cfg.consumers
    pair = cfg.multicast  # a stage is released by the consumers of every CTA sharing it
    cl = cfg.cluster
    stage_bytes = a.stage_bytes + b.stage_bytes
    em(f"@cuda.jit({jit_options(cfg.threads, sim, lto=True)})")
    em(f"def hopper_gemm({', '.join(kernel_params(cfg))}):")
    with em.indent():
        em("smem = cuda.shared.array(0, dtype=uint8)")
        em(f"{kv.tid} = cuda.threadIdx.x")
        em(f"{kv.base} = int64(shared_base(smem))")
        em(f"{kv.sa} = ({kv.base} + {SMEM_ALIGN - 1}) // {SMEM_ALIGN} * {SMEM_ALIGN}")
        em(f"{kv.sb} = {kv.sa} + {stages * a.stage_bytes}")
        barriers = "# full[s]: bar + 8s, empty[s]: bar + 8(S + s)"
        assert stages * stage_bytes % SMEM_ALIGN == 0  # (whole 8-row swizzle groups a stage)
        if cfg.tma_stores:  # staging before the barriers: a TMA box's swizzle is 1024-aligned
            em(f"{kv.stg} = {kv.sb} + {stages * b.stage_bytes}  # epilogue staging")
            em(f"{kv.sf} = cuda.shared.array(0, dtype=float32)  # the same bytes, as float32")
            em(f"{kv.bar} = {kv.stg} + {cfg.staging_bytes}  {barriers}")
        else:
            em(f"{kv.bar} = {kv.sb} + {stages * b.stage_bytes}  {barriers}")
        if cfg.smem_epilogue and not cfg.tma_stores:
            em(f"{kv.sf} = cuda.shared.array(0, dtype=float32)  # the same bytes, as float32")
            em(
                f"{kv.stg} = {kv.bar} + {2 * stages * MBARRIER_BYTES}  "
                "# epilogue staging, 16-byte aligned"
            )
        if cfg.streamk and not cfg.smem_epilogue:  # (the fix-up's counts)
            em(f"{kv.sf} = cuda.shared.array(0, dtype=float32)  # the same bytes, as float32")
        if cfg.splitk_cluster:
            em(f"{kv.sf} = cuda.shared.array(0, dtype=float32)  # the same bytes, as float32")
            em(
                f"{kv.red} = {kv.bar} + {2 * stages * MBARRIER_BYTES}  "
                f"# reduction barriers, then the partial tile at + {2 * MBARRIER_BYTES}"
            )
        em(f"if {kv.tid} == 0:")
        with em.indent():
            em(f"for i in range({stages}):")
            with em.indent():
                em(f"mbarrier_init(uint32({kv.bar} + {MBARRIER_BYTES} * i), 1)")
                em(
                    f"mbarrier_init(uint32({kv.bar} + {MBARRIER_BYTES} * ({stages} + i)), "
                    f"{consumer_warps * pair})"
                )
            if cfg.splitk_cluster:  # the cluster's partials written; this CTA's read by all
                em(f"mbarrier_init(uint32({kv.red}), {cl})")
                em(f"mbarrier_init(uint32({kv.red} + {MBARRIER_BYTES}), {cl})")
            em("fence_mbarrier_init()")
        if cl > 1:
            em("cluster_sync()  # the peer's barriers are initialised before anyone uses them")
            # a cluster of cl CTAs along x: %cluster_ctarank is blockIdx.x % cl and
            # %clusterid.x blockIdx.x // cl; read as the special registers NVVM rematerialises
            # (the producer runs in 24 registers)
            em(f"{kv.rank} = cuda.blockIdx.x % {cl}")
            em(f"{kv.u0} = cuda.blockIdx.x // {cl}")
            em(f"{kv.ustep} = cuda.gridDim.x // {cl}")
        else:
            em("cuda.syncthreads()")
            em(f"{kv.u0} = cuda.blockIdx.x")
            em(f"{kv.ustep} = cuda.gridDim.x")
        em(f"{kv.tiles} = tiles_m * tiles_n")
        _emit_grid_constants(em, cfg)
        if cfg.streamk:
            emit_streamk_units(em, cfg)
        # warp-uniform by construction, and said so: the consumers' wgmma descriptors, computed
        # from it, then live in uniform registers (no per-instruction R2UR; decisions.md)
        em(f"{kv.wg} = warp_uniform({kv.tid} // {WARPGROUP})")
        em(f"if {kv.wg} == 0:")
        with em.indent():
            _emit_producer(em, cfg, a, b, stage_bytes, sim)
        em("else:")
        with em.indent():
            _emit_consumer(em, cfg, a, b, sim)
        if cl > 1:
            em("cluster_sync()  # no CTA leaves while its peer may multicast into it")
    em()


def _emit_producer(
    em: Emitter, cfg: HopperKernelConfig, a: _Operand, b: _Operand, stage_bytes: int, sim: bool
) -> None:
    stages = cfg.stages
    if cfg.consumers == 2 and not sim:
        em(f"setmaxnreg_dec({cfg.registers[0]})")
    em(f"if {kv.tid} == 0:")
    with em.indent():
        tmaps = ["tmap_a", "tmap_b", *(f"tmap_b{j}" for j in range(1, cfg.horizontal))]
        for j, tmap in enumerate(tmaps):  # a 128-byte CUtensorMap each
            em(f"{tmap} = global_addr(maps, {16 * j})")
        for tmap in tmaps:
            em(f"fence_tensormap_acquire({tmap})")
        for tmap in tmaps:
            em(f"prefetch_tensormap({tmap})")
        em(f"{kv.s} = 0")
        em(f"{kv.ph} = 0")
        em(f"{kv.u} = {kv.u0}")
        em(f"while {kv.u} < units:")
        with em.indent():
            _emit_decode(em, cfg)
            em(f"ca = int32({kv.bt} * a_batched)")
            em(f"cb = int32({kv.bt} * b_batched)")
            em(f"{kv.k0} = {kv.kb}")
            em(f"while {kv.k0} < {kv.ke}:")
            with em.indent():
                em(
                    f"mbarrier_wait(uint32({kv.bar} + {MBARRIER_BYTES} * ({stages} + {kv.s})), "
                    f"{kv.ph} ^ 1)"
                )
                em(f"full = uint32({kv.bar} + {MBARRIER_BYTES} * {kv.s})")
                em(f"mbarrier_arrive_expect_tx(full, {stage_bytes})")
                loads = ((a, kv.sa, "tmap_a", "ca"), (b, kv.sb, "tmap_b", "cb"))
                for op, base, tmap, batch in loads:
                    em(f"dst = {base} + {kv.s} * {op.stage_bytes}")
                    shared = cfg.sharing(op.name)
                    if shared > 1:  # a part of the shared tile, landing in every CTA
                        for where, m0, m1 in op.multicast_boxes(kv.rank, shared):
                            em(
                                f"tma_load_3d_multicast(uint32(dst + {where}), {tmap}, "
                                f"int32({m0}), int32({m1}), {batch}, full, "
                                f"uint16({(1 << shared) - 1}))"
                            )
                        continue
                    for off, c0, c1, j in op.boxes():
                        em(
                            f"tma_load_3d(uint32(dst + {off}), {tmap}{j or ''}, int32({c0}), "
                            f"int32({c1}), {batch}, full)"
                        )
                _advance(em, stages)
                em(f"{kv.k0} += {cfg.cta_tile[2]}")
            em(f"{kv.u} += {kv.ustep}")


def _emit_consumer(
    em: Emitter, cfg: HopperKernelConfig, a: _Operand, b: _Operand, sim: bool
) -> None:
    stages = cfg.stages
    gm, _gn = cfg.consumer_grid
    wm, wn, _ = cfg.warp_tile
    blocks = wm // 64
    nacc = wn // 2
    if cfg.consumers == 2 and not sim:
        em(f"setmaxnreg_inc({cfg.registers[1]})")
    em(f"{kv.c} = {kv.wg} - 1")
    if cfg.pingpong:  # each consumer owns whole tiles
        em(f"{kv.cm} = 0")
        em(f"{kv.cn} = 0")
    else:
        em(f"{kv.cm} = {kv.c} % {gm}")
        em(f"{kv.cn} = {kv.c} // {gm}")
    em(f"{kv.t} = {kv.tid} - {WARPGROUP} * {kv.wg}")
    em(f"{kv.w} = {kv.t} // 32")
    em(f"{kv.lane} = {kv.t} % 32")
    for r in range(blocks):
        row0 = f"{kv.cm} * {wm} + {64 * r}"
        em(
            f"da{r} = wgmma_desc(uint32({kv.sa} + {a.slice_offset(row0)}), {a.lbo}, "
            f"{SMEM_ALIGN}, {SWIZZLE_BYTES})"
        )
    em(
        f"db = wgmma_desc(uint32({kv.sb} + {b.slice_offset(f'{kv.cn} * {wn}')}), {b.lbo}, "
        f"{SMEM_ALIGN}, {SWIZZLE_BYTES})"
    )
    accs = [f"acc{r}" for r in range(blocks)]
    for acc in accs:
        em(f"{acc} = wgmma_zeros({nacc})")
    if cfg.block_scaled and cfg.cta_tile[2] == SCALE_BLOCK and not promoted_by_chunks(wn):
        for r in range(blocks):  # one block's sums (two blocks and chunks keep their own)
            em(f"part{r} = wgmma_zeros({nacc})")
    if cfg.packed_stores:
        emit_packed_setup(em, cfg)
    elif cfg.smem_epilogue:
        stride = cfg.epilogue_stride
        em(
            f"{kv.sbase} = ({kv.stg} - {kv.base}) // 4 + {kv.c} * {STAGED_ROWS * stride}  "
            "# this consumer's chunk"
        )
        em(
            f"{kv.wrow} = {kv.sbase} + (16 * {kv.w} + {kv.lane} // 4) * {stride} "
            f"+ 2 * ({kv.lane} % 4)"
        )
    elif not (cfg.workspace_splitk or cfg.splitk_cluster or trivial_epilogue(cfg)):
        em(f"{kv.spill} = cuda.local.array({len(accs) * nacc}, dtype=float32)")
    if cfg.splitk_cluster:
        emit_reduction_setup(em, cfg)
    em(f"{kv.s} = 0")
    em(f"{kv.ph} = 0")
    em(f"{kv.u} = {kv.u0}")
    main_epilogue = staged_program(cfg)  # (the workspace's partials with split-K's reduce)
    for line in amax_init(main_epilogue):  # each thread's, over all its units
        em(line)
    if cfg.pingpong:
        em("mine = 0  # ping-pong: this consumer takes the CTA's units c, c + 2, c + 4, ...")
        em("turns = 0")
    if _takes_turns(cfg):
        em("turn = 0  # block scales: the consumers issue each stage's wgmmas in turn")
    em(f"while {kv.u} < units:")
    with em.indent():
        _emit_k_range(em, cfg)
        if cfg.pingpong:
            em(f"if mine != {kv.c}:  # the other consumer's unit: skip its stages in the ring")
            with em.indent():
                em(f"skip = ({kv.ke} - {kv.kb} + {cfg.cta_tile[2] - 1}) // {cfg.cta_tile[2]}")
                em("if skip < 0:")
                em("    skip = 0")
                em(f"{kv.s} += skip")
                em(f"{kv.ph} ^= ({kv.s} // {stages}) & 1")
                em(f"{kv.s} = {kv.s} % {stages}")
                em("mine ^= 1")
                em(f"{kv.u} += {kv.ustep}")
                em("continue")
            em("mine ^= 1")
            # main loops take turns (the other consumer has waited on every stage before this
            # unit's, so a parity wait is never two phases ahead); epilogues overlap them
            _emit_wait_turn(em, "turns")
            em("turns += 1")
        if cfg.block_scaled:
            _emit_block_scaled_loop(em, cfg, a, b, accs)
        else:
            _emit_k_loop(em, cfg, a, b, accs)
        if cfg.streamk:  # a tail tile's pieces meet; its last runs the epilogue
            emit_streamk_fixup(em, cfg, accs)
            em("if go:")
            with em.indent():
                emit_epilogue(em, cfg, accs)
        else:
            emit_epilogue(em, cfg, accs)
        em(f"{kv.u} += {kv.ustep}")
    if _takes_turns(cfg):  # the second consumer's last hand-over
        em(f"if {kv.c} == 0 and turn > 0:")
        em(f"    named_barrier_sync(3, {2 * WARPGROUP})")
    for line in amax_flush(main_epilogue, kv.lane):  # (the unit loop's end: converged warps)
        em(line)
    if cfg.tma_stores:  # the shared memory stays until the last stores have read it
        em(f"if {kv.t} == 0:")
        em("    bulk_wait_group_read(0)")


def _takes_turns(cfg: HopperKernelConfig) -> bool:
    """Whether two cooperative consumers of block scales issue each stage's wgmmas in turn
    (``_emit_turn``): with one scale block a stage. Stages of two keep three sets of
    accumulators, and the turns' bookkeeping then spilled (ptxas: 4-8 bytes); tiles promoted by
    chunks overlap their own promotion (``_emit_block_chunks_loop``)."""
    return (
        cfg.block_scaled
        and cfg.cta_tile[2] == SCALE_BLOCK
        and not promoted_by_chunks(cfg.warp_tile[1])
        and cfg.consumers == 2
        and not cfg.pingpong
    )


def _emit_wait_turn(em: Emitter, taken: str) -> None:
    """The two consumers' turns (ping-pong main loops by unit, block-scaled stages by stage):
    consumer 1 waits on barrier 4 for consumer 0's hand-over, consumer 0 on barrier 3 for
    consumer 1's, but before its first turn (*taken*: the generated count of turns it had)."""
    em(f"if {kv.c} == 1 or {taken} > 0:")
    em(f"    named_barrier_sync(3 + {kv.c}, {2 * WARPGROUP})")


def _emit_hand_over(em: Emitter) -> None:
    """The other consumer's turn (``_emit_wait_turn``)."""
    em(f"named_barrier_arrive(4 - {kv.c}, {2 * WARPGROUP})")


def _emit_turn(em: Emitter, cfg: HopperKernelConfig) -> None:
    """Before a stage's wgmmas: with ``_takes_turns``, the second consumer waits until the
    first has issued this stage's, the first until the second has issued the previous stage's.
    Woken by one full barrier, both would issue together, the tensor cores would interleave
    their wgmmas and both groups would end together, idling the tensor cores while both
    promote; in turn, one consumer promotes while the other's wgmmas run."""
    if _takes_turns(cfg):
        _emit_wait_turn(em, "turn")


def _emit_turn_over(em: Emitter, cfg: HopperKernelConfig) -> None:
    """After a stage's wgmmas are issued: the other consumer's turn (``_emit_turn``)."""
    if _takes_turns(cfg):
        _emit_hand_over(em)
        em("turn = 1")


def _emit_k_loop(
    em: Emitter, cfg: HopperKernelConfig, a: _Operand, b: _Operand, accs: list[str]
) -> None:
    """A work unit's main loop: every stage's wgmmas into the accumulators, one group in
    flight while the next is issued, each stage released once its group is done."""
    stages, nacc = cfg.stages, cfg.warp_tile[1] // 2
    em("scale = 0")
    em("prev = -1  # the stage whose wgmmas may still be reading it")
    em(f"{kv.k0} = {kv.kb}")
    em(f"while {kv.k0} < {kv.ke}:")
    with em.indent():
        _emit_stage_wgmmas(em, cfg, a, b, accs, "scale")
        em("if scale == 0:  # the unit's first wgmmas run: decode where its tile goes")
        with em.indent():
            _emit_origin(em, cfg)
            emit_input_prefetch(em, cfg)
        em("wgmma_wait_group(1)  # this tile's group may run on; the previous one is done")
        for acc in accs:
            em(f"{acc} = fence_operand({acc})")
        _emit_release(em, stages, "prev", cfg.multicast)
        em(f"prev = {kv.s}")
        _advance(em, stages)
        em("scale = 1")
        em(f"{kv.k0} += {cfg.cta_tile[2]}")
    if cfg.pingpong:  # every wgmma of this unit is issued: the other consumer's turn
        # (its wgmmas queue behind ours instead of waiting for the tensor cores to drain)
        _emit_hand_over(em)
    em("wgmma_wait_group(0)")
    for acc in accs:
        em(f"{acc} = fence_operand({acc})")
    _emit_release(em, stages, "prev", cfg.multicast)
    if cfg.splitk > 1:  # (extents are >= 1: only a trailing split's K range is empty)
        em("if scale == 0:  # an empty K range: the product is zero")
        with em.indent():
            for acc in accs:
                em(f"{acc} = wgmma_zeros({nacc})")
            _emit_origin(em, cfg)
            emit_input_prefetch(em, cfg)


def _emit_full_wait(em: Emitter) -> None:
    """Wait until stage ``s`` is full (its phase ``ph``)."""
    em(f"mbarrier_wait(uint32({kv.bar} + {MBARRIER_BYTES} * {kv.s}), {kv.ph})")


def _emit_stage_offsets(em: Emitter, a: _Operand, b: _Operand) -> None:
    """``oa``/``ob``: stage ``s``'s offsets of A's and B's tiles in descriptor units (16 B)."""
    em(f"oa = uint64({kv.s} * {a.stage_bytes >> 4})")
    em(f"ob = uint64({kv.s} * {b.stage_bytes >> 4})")


def _emit_stage_wgmmas(
    em: Emitter, cfg: HopperKernelConfig, a: _Operand, b: _Operand, accs: list[str], first: str
) -> None:
    """Wait for stage ``s`` to be full and issue its wgmmas into *accs* (one per 64-row block
    and K step), committed as one group; *first* is the first step's scale-d (0 overwrites)."""
    _emit_full_wait(em)
    for acc in accs:
        em(f"{acc} = fence_operand({acc})")
    em("wgmma_fence()")
    _emit_stage_offsets(em, a, b)
    _emit_wgmma_steps(
        em, cfg, a, b, accs, range(cfg.cta_tile[2] // wgmma_k(cfg.operand_dtype)), first
    )
    em("wgmma_commit_group()")


def _emit_wgmma_steps(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: _Operand,
    b: _Operand,
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


def _emit_block_scaled_loop(
    em: Emitter, cfg: HopperKernelConfig, a: _Operand, b: _Operand, accs: list[str]
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

    def load(prefix: str) -> None:  # raw loads: nothing reads them before they are needed
        a_scales = [(f"{prefix}{name}", name) for name, _ in rows]
        _emit_scale_loads(em, "kblk", [(f"{prefix}bsc", "bcol")], a_scales)

    for name in ("bsc", *(name for name, _ in rows)):
        em(f"s{name} = float32(0)")
    em(f"if {kv.kb} < {kv.ke}:")
    with em.indent():
        load("s")
    em(f"{kv.k0} = {kv.kb}")
    em(f"while {kv.k0} < {kv.ke}:")
    with em.indent():
        _emit_turn(em, cfg)
        _emit_stage_wgmmas(em, cfg, a, b, parts, "0")  # fresh partial sums
        _emit_turn_over(em, cfg)
        for name in ("bsc", *(name for name, _ in rows)):
            em(f"n{name} = s{name}")
        em("kblk += 1")
        em(f"if {kv.k0} + {SCALE_BLOCK} < {kv.ke}:  # the next block's scales, while these run")
        with em.indent():
            load("n")
        em("wgmma_wait_group(0)")
        for part in parts:
            em(f"{part} = fence_operand({part})")
        _emit_release(em, stages, kv.s, cfg.multicast)
        for r, (acc, part) in enumerate(zip(accs, parts, strict=True)):
            em(f"{acc} = wgmma_promote({acc}, {part}, slo{r} * sbsc, shi{r} * sbsc)")
        for name in ("bsc", *(name for name, _ in rows)):
            em(f"s{name} = n{name}")
        _advance(em, stages)
        em(f"{kv.k0} += {cfg.cta_tile[2]}")
    if cfg.pingpong:
        _emit_hand_over(em)


def _emit_scale_rows(em: Emitter, cfg: HopperKernelConfig, rows: list[tuple[str, int]]) -> None:
    """The unit's origin, and the offsets of the thread's *rows* in A's scales."""
    _emit_origin(em, cfg)  # the scales' rows and column block are the tile's
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
    a: _Operand,
    b: _Operand,
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
        _emit_wgmma_steps(em, cfg, a, b, parts, steps, "0", desc)
        em("wgmma_commit_group()")

    def promote(q: int, pending: int) -> None:
        parts = sets[q % 2]
        em(f"wgmma_wait_group({pending})")
        for part in parts:
            em(f"{part} = fence_operand({part})")
        if not pending:
            _emit_release(em, stages, kv.s, cfg.multicast)
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
        _emit_full_wait(em)
        _emit_stage_offsets(em, a, b)
        issue(0)
        for q in range(1, chunks):
            issue(q)
            promote(q - 1, 1)
        promote(chunks - 1, 0)
        em("kblk += 1")
        _advance(em, stages)
        em(f"{kv.k0} += {cfg.cta_tile[2]}")
    if cfg.pingpong:
        _emit_hand_over(em)
    for acc, names in zip(accs, split, strict=True):
        em(f"{acc} = {' + '.join(names)}  # the chunks, joined: one m64n{wn} accumulator")


def _emit_block_pair_loop(
    em: Emitter,
    cfg: HopperKernelConfig,
    a: _Operand,
    b: _Operand,
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
        _emit_full_wait(em)
        for part in (*ps, *qs):
            em(f"{part} = fence_operand({part})")
        em("wgmma_fence()")
        _emit_stage_offsets(em, a, b)
        _emit_wgmma_steps(em, cfg, a, b, ps, range(steps // 2), "0")
        em("wgmma_commit_group()")
        _emit_wgmma_steps(em, cfg, a, b, qs, range(steps // 2, steps), "0")
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
        _emit_release(em, stages, kv.s, cfg.multicast)
        for r, (acc, part) in enumerate(zip(accs, qs, strict=True)):
            em(f"{acc} = wgmma_promote({acc}, {part}, slo{r}1 * sbsc1, shi{r}1 * sbsc1)")
        _advance(em, stages)
        em(f"{kv.k0} += {bk}")
    if cfg.pingpong:
        _emit_hand_over(em)


def _emit_release(em: Emitter, stages: int, stage: str, cluster: int) -> None:
    """Lane 0 of every consumer warp arrives on ``empty[stage]`` (none before the first tile),
    in every CTA of its cluster: each multicasts into the others' stages."""
    em(f"if {stage} >= 0 and {kv.lane} == 0:")
    empty = f"uint32({kv.bar} + {MBARRIER_BYTES} * ({stages} + {stage}))"
    if cluster == 1:
        em(f"    mbarrier_arrive({empty})")
        return
    for peer in range(cluster):
        em(f"    mbarrier_arrive_cluster(mapa_shared({empty}, uint32({peer})))")
