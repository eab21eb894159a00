"""Inline-PTX intrinsics for Hopper (sm_90a) kernels: mbarrier, TMA, wgmma, clusters, setmaxnreg."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from numba.cuda import types

from mmaplug.cuda import sm90_factories as F
from mmaplug.cuda.binding import bind

# Docs references (PTX ISA):
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-mbarrier
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async-bulk-tensor
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#asynchronous-warpgroup-level-matrix-instructions
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#miscellaneous-instructions-setmaxnreg
# https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-stmatrix
# Shared-memory addresses are 32-bit CTA-window byte addresses (`cvta.to.shared`), from
# shared_base plus offsets; `tmap` is the 64-bit generic global address of a 64-byte aligned
# 128-byte tensor map (mmaplug.cuda.tensormap.encode), e.g. `global_addr(maps, 16 * j)`.

__all__ = [
    "bulk_commit_group",
    "bulk_store",
    "bulk_wait_group",
    "bulk_wait_group_read",
    "cluster_ctarank",
    "cluster_id",
    "cluster_sync",
    "cluster_sync_after_init",
    "fence_mbarrier_init",
    "fence_operand",
    "fence_proxy_async",
    "fence_acq_rel_cluster",
    "fence_acq_rel_gpu",
    "fence_tensormap_acquire",
    "ld_shared_b32",
    "ld_shared_cluster_f32",
    "mapa_shared",
    "mbarrier_arrive",
    "mbarrier_arrive_cluster",
    "mbarrier_arrive_expect_tx",
    "mbarrier_init",
    "mbarrier_try_wait",
    "mbarrier_wait",
    "mbarrier_wait_cluster",
    "named_barrier_arrive",
    "named_barrier_sync",
    "prefetch_tensormap",
    "setmaxnreg_dec",
    "setmaxnreg_inc",
    "shared_base",
    "st_shared_b32",
    "stmatrix_x4",
    "stmatrix_x4_trans",
    "tma_load_2d",
    "tma_load_3d",
    "tma_load_3d_multicast",
    "tma_store_2d",
    "tma_store_3d",
    "warp_uniform",
    "wgmma_bf16",
    "wgmma_commit_group",
    "wgmma_desc",
    "wgmma_e4m3",
    "wgmma_e5m2",
    "wgmma_f16",
    "wgmma_fence",
    "wgmma_promote",
    "wgmma_promote_split",
    "wgmma_wait_group",
    "wgmma_zeros",
]


# --- Stubs: the declarations; bind (at the end) makes each its intrinsic or emulation. -----------


def shared_base(arr):
    """Return the uint32 CTA shared-window byte address of element 0 of shared array `arr`.

    Numba's generic pointer is cast to the shared state space (`cvta.to.shared`). Nothing about
    its alignment is promised: round up yourself (the simulator returns a base that is not
    1024-byte aligned on purpose).
    """


def mbarrier_init(bar, count):
    """Generate `mbarrier.init.shared::cta.b64 [bar], count`: phase 0, `count` arrivals expected.

    `bar` is the 8-byte aligned shared address of the 64-bit barrier. One thread initialises;
    then fence_mbarrier_init and a CTA barrier before anyone else uses it.
    """


def mbarrier_arrive(bar):
    """Generate `mbarrier.arrive.shared::cta.b64 _, [bar]`: one arrival (release, CTA scope)."""


def mbarrier_arrive_expect_tx(bar, nbytes):
    """Generate `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], nbytes`.

    Raises the phase's transaction count by `nbytes` (the total box bytes of every TMA that
    completes on `bar` this phase), then arrives once.
    """


def mbarrier_wait(bar, parity):
    """Spin on `mbarrier.try_wait.parity.shared::cta.b64` until the phase of parity `parity`
    completed; the loop lives in one asm block with `${:uid}`-unique labels.

    Waiting with parity 1 on a freshly initialised barrier returns at once (the phase before
    phase 0 counts as complete): producers wait `empty` with `phase ^ 1`.
    """


def mbarrier_wait_cluster(bar, parity):
    """mbarrier_wait with `.acquire.cluster` semantics: what other CTAs of the cluster wrote
    before their (fenced) remote arrives is visible once the phase completed."""


def mbarrier_try_wait(bar, parity):
    """Generate one `mbarrier.try_wait.parity.shared::cta.b64`; return uint32 1 when the phase
    with parity `parity` completed, else 0 (after a bounded hardware suspend)."""


def fence_mbarrier_init():
    """Generate `fence.mbarrier_init.release.cluster`: make mbarrier.init visible to the cluster."""


def fence_proxy_async():
    """Generate `fence.proxy.async.shared::cta`: order this thread's generic-proxy shared writes
    before later async-proxy accesses (wgmma operand reads, TMA stores)."""


def tma_load_2d(dst, tmap, c0, c1, bar):
    """Generate `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1}], [bar]`.

    Copies the box at int32 element coordinates (c0 innermost, c1) to shared `dst` (1024-byte
    aligned for 128B swizzle), zero-filling out-of-bounds elements, and completes the box bytes
    on the mbarrier `bar`. `c0` times the element size must be a multiple of 16 bytes (the H200
    raises an illegal instruction otherwise; the simulator a UsageError).
    """


def tma_load_3d(dst, tmap, c0, c1, c2, bar):
    """Generate `cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes
    [dst], [tmap, {c0, c1, c2}], [bar]`; see tma_load_2d."""


def tma_load_3d_multicast(dst, tmap, c0, c1, c2, bar, mask):
    """Generate `cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes
    .multicast::cluster [dst], [tmap, {c0, c1, c2}], [bar], mask`.

    The box lands at the same shared offset `dst` in every CTA of the cluster whose rank bit is
    set in the uint16 `mask`, and completes its bytes on the barrier at offset `bar` in each.
    Each receiving CTA's barrier must expect those bytes (arrive_expect_tx by its own producer).
    """


def cluster_ctarank():
    """Generate `mov.u32 %r, %cluster_ctarank`: this CTA's rank in its cluster (0 without one)."""


def cluster_id():
    """Generate `mov.u32 %r, %clusterid.x`: the index along x of this CTA's cluster."""


def mapa_shared(addr, rank):
    """Generate `mapa.shared::cluster.u32`: the shared::cluster address of the same offset as
    shared address `addr` in the CTA of cluster rank `rank` (for mbarrier_arrive_cluster)."""


def mbarrier_arrive_cluster(bar):
    """Generate `mbarrier.arrive.shared::cluster.b64 _, [bar]`: arrive on the barrier at
    shared::cluster address `bar` (a mapa_shared result: any CTA of the cluster).

    Default (.release.cta) semantics, as CUTLASS's ClusterBarrier: `.release.cluster` makes
    ptxas put MEMBAR.ALL.GPU before every arrive (seen in the SASS of the cluster kernel)."""


def ld_shared_cluster_f32(addr):
    """Generate `ld.shared::cluster.f32`: the float32 at shared::cluster address `addr` (a
    mapa_shared result: this CTA's shared memory or a peer's, distributed shared memory)."""


def fence_acq_rel_cluster():
    """Generate `fence.acq_rel.cluster`: order this thread's earlier memory accesses (and those
    a barrier made it observe) before its later ones at cluster scope, e.g. before a remote
    mbarrier arrive that announces shared-memory data to the cluster."""


def fence_acq_rel_gpu():
    """Generate `fence.acq_rel.gpu`: order this thread's earlier memory accesses (and those a
    barrier made it observe) before its later ones at GPU scope: before a relaxed atomic that
    announces global data (release), or after one that read such an announcement (acquire)."""


def cluster_sync():
    """Generate `barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire`: wait for
    every non-exited thread of the cluster. After mbarrier initialisation (before a peer may
    multicast into this CTA or arrive on its barriers) and before exit (while it still may)."""


def cluster_sync_after_init():
    """Generate `barrier.cluster.arrive.relaxed` then `barrier.cluster.wait.acquire`: the
    cluster_sync that follows `fence_mbarrier_init` (its pairing in the PTX ISA). The fence
    releases the barriers' initialisation to the cluster; a relaxed arrive orders nothing else,
    and so costs no `MEMBAR.ALL.GPU` (the release form's SASS)."""


def tma_store_2d(tmap, c0, c1, src):
    """Generate `cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [tmap, {c0, c1}], [src]`.

    Stores the box from shared `src` at non-negative element coordinates (c0, c1), clipped at
    the tensor's far edges (a negative c0 faulted on the H200; c0 16-byte aligned as for loads).
    Every writer of `src` runs fence_proxy_async and a barrier first; the issuing thread then
    runs bulk_commit_group and later bulk_wait_group(_read) itself.
    """


def tma_store_3d(tmap, c0, c1, c2, src):
    """Generate `cp.async.bulk.tensor.3d.global.shared::cta.bulk_group
    [tmap, {c0, c1, c2}], [src]`; see tma_store_2d."""


def bulk_store(dst, src, nbytes):
    """Generate `cp.async.bulk.global.shared::cta.bulk_group [dst], [src], nbytes`.

    Copies `nbytes` (a multiple of 16) contiguous bytes from shared `src` to the 64-bit global
    address `dst`, both 16-byte aligned, asynchronously. As for tma_store_2d: every writer of
    `src` runs fence_proxy_async and a barrier first; the issuing thread commits the copy into
    its bulk group and waits for it (bulk_wait_group_read before `src` is written again,
    bulk_wait_group before the kernel ends).
    """


def bulk_commit_group():
    """Generate `cp.async.bulk.commit_group`: close this thread's group of bulk stores."""


def bulk_wait_group_read(n):
    """Generate `cp.async.bulk.wait_group.read n` (`n` literal): at most `n` of this thread's
    bulk groups still read their shared source."""


def bulk_wait_group(n):
    """Generate `cp.async.bulk.wait_group n` (`n` literal): at most `n` of this thread's bulk
    groups pending, the older ones' writes complete."""


def prefetch_tensormap(tmap):
    """Generate `prefetch.tensormap [tmap]`: bring the 128-byte tensor map into the cache."""


def fence_tensormap_acquire(tmap):
    """Generate `fence.proxy.tensormap::generic.acquire.gpu [tmap], 128`.

    Needed once by the TMA-issuing thread before the first use of a map written to global
    memory by the host (API synchronisation does not acquire the tensormap proxy).
    """


def wgmma_fence():
    """Generate `wgmma.fence.sync.aligned` (all 128 threads of the warpgroup): order earlier
    register writes of accumulators before the next wgmma."""


def wgmma_commit_group():
    """Generate `wgmma.commit_group.sync.aligned`: close the group of uncommitted wgmmas."""


def wgmma_wait_group(n):
    """Generate `wgmma.wait_group.sync.aligned n` (`n` literal): at most `n` groups pending.

    Accumulators of an uncompleted wgmma must not be read: pass them through fence_operand
    after the wait.
    """


def wgmma_f16(acc, desc_a, desc_b, scale_d, trans_a, trans_b):
    """Generate `wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16` (SS form); return acc'.

    `acc` is a UniTuple(float32, N/2), N in 8..256 step 8 taken from its length; it is tied to
    the outputs. Thread t = 32 w + l of the warpgroup holds D[row, col] in register i with
    row = 16 w + l // 4 + 8 ((i >> 1) & 1), col = 8 (i >> 2) + 2 (l % 4) + (i & 1).
    `desc_a` (64x16 A) and `desc_b` (N x16 B) are wgmma_desc values. `scale_d` != 0 adds the
    product to acc (0 overwrites it). `trans_a`/`trans_b` are literal 0 (K-major) or 1 (A
    M-major / B N-major).
    """


def wgmma_bf16(acc, desc_a, desc_b, scale_d, trans_a, trans_b):
    """Generate `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16`; see wgmma_f16."""


def wgmma_e4m3(acc, desc_a, desc_b, scale_d):
    """Generate `wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3` (SS form); return acc'.

    As wgmma_f16, with 32 one-byte FP8 (e4m3) elements along K: a 64x32 A and an N x32 B, whose
    rows span the same 32 bytes as a k16 step of 16-bit ones. There are no transpose operands:
    FP8 wgmma reads K-major A and B only.
    """


def wgmma_e5m2(acc, desc_a, desc_b, scale_d):
    """Generate `wgmma.mma_async.sync.aligned.m64nNk32.f32.e5m2.e5m2`; see wgmma_e4m3."""


def wgmma_zeros(count):
    """Return a UniTuple(float32, count) of zeros (`count` literal): a fresh accumulator."""


def wgmma_promote(acc, part, scale_lo, scale_hi):
    """Return `fma(part, scale, acc)` element by element (float32 FMAs, nothing else).

    `acc` and `part` are accumulators of one wgmma shape; register i of a thread holds row
    16 w + l // 4 + 8 ((i >> 1) & 1) (see wgmma_f16), scaled by float32 `scale_lo` (its
    first row) or `scale_hi` (8 rows below): a block-scaled kernel's promotion of one K block's
    partial sums into the float32 accumulators.
    """


def wgmma_promote_split(acc, part, scale_lo, scale_hi, next_lo, next_hi, columns):
    """Return wgmma_promote's FMAs, the accumulator's first `columns` columns scaled by
    `scale_lo` / `scale_hi` and the rest by `next_lo` / `next_hi`.

    `columns` is a literal multiple of 8 below the accumulator's N: register i holds column
    8 (i >> 2) + 2 (l % 4) + (i & 1), so registers below `columns` // 2 take the first pair. A
    block-scaled tile that straddles two blocks of B's scales promotes its sums in one pass.
    """


def fence_operand(acc):
    """Return `acc` through an empty asm whose outputs are tied to its inputs (no instruction).

    A compiler fence (CUTLASS warpgroup_fence_operand): call it on the accumulators before
    wgmma_fence and after wgmma_wait_group so that no accumulator access moves into the async
    window (ptxas C7515 would serialise the wgmmas).
    """


def wgmma_desc(addr, lbo_bytes, sbo_bytes, swizzle):
    """Return the uint64 wgmma shared-memory matrix descriptor (plain integer arithmetic).

    Bits 0-13 `(addr & 0x3FFFF) >> 4`, 16-29 LBO >> 4, 32-45 SBO >> 4, base offset 0 (swizzled
    tiles must be 1024/512/256-byte aligned), 62-63 the layout: `swizzle` is the literal span in
    bytes 128 / 64 / 32 / 0, encoded 1 / 2 / 3 / 0.
    """


def setmaxnreg_inc(n):
    """Generate `setmaxnreg.inc.sync.aligned.u32 n` (literal 24..256, multiple of 8).

    All warps of the warpgroup execute it; the kernel needs launch_bounds=(threads, 1).
    """


def setmaxnreg_dec(n):
    """Generate `setmaxnreg.dec.sync.aligned.u32 n` (literal 24..256, multiple of 8)."""


def named_barrier_sync(barrier_id, nthreads):
    """Generate `bar.sync barrier_id, nthreads`: wait until `nthreads` (a multiple of 32) threads
    arrived at barrier `barrier_id` (1..15; 0 is syncthreads)."""


def named_barrier_arrive(barrier_id, nthreads):
    """Generate `bar.arrive barrier_id, nthreads`: count this thread without waiting."""


def stmatrix_x4(addr, r0, r1, r2, r3):
    """Generate `stmatrix.sync.aligned.m8n8.x4.shared.b16 [addr], {r0, r1, r2, r3}`.

    Lanes 8 j + r pass the 16-byte aligned shared address of row r of matrix j; register j of
    lane l holds matrix j's row l // 4, columns 2 (l % 4) (low half) and 2 (l % 4) + 1.
    """


def stmatrix_x4_trans(addr, r0, r1, r2, r3):
    """Generate `stmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: stmatrix_x4 of the transposes
    (register j of lane l holds column l // 4, rows 2 (l % 4) and 2 (l % 4) + 1)."""


def st_shared_b32(addr, value):
    """Generate `st.shared.b32 [addr], value` (an integer, stored as uint32, or a float32)."""


def ld_shared_b32(addr):
    """Generate `ld.shared.b32`: return the uint32 at 4-byte aligned shared address `addr`."""


def warp_uniform(x):
    """Generate `shfl.sync.idx.b32 d, x, 0, 0x1f, 0xffffffff`: lane 0's uint32 `x` in every lane.

    For a value equal in all lanes (a warpgroup index from threadIdx) it changes only what the
    compiler knows: the result is warp-uniform, so what is computed from it (wgmma descriptors)
    can live in uniform registers. Every lane of the warp must execute it.
    """


# --- Variant tables and instantiation ------------------------------------------------------------

U16, U32, U64 = types.uint16, types.uint32, types.uint64
_TMA_LOAD = "cp.async.bulk.tensor.{d}d.shared::cluster.global.mbarrier::complete_tx::bytes"
_TMA_STORE = "cp.async.bulk.tensor.{d}d.global.shared::cta.bulk_group"
_BULK_STORE = "cp.async.bulk.global.shared::cta.bulk_group"
_TRY_WAIT = "mbarrier.try_wait.parity.shared::cta.b64"
_TRY_WAIT_CLUSTER = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"
_STMATRIX = "stmatrix.sync.aligned.m8n8.x4{t}.shared.b16 [$0], {{$1, $2, $3, $4}};"

# stub -> (PTX text with $-operands, input types, output type or None).
ASM_VARIANTS: Final[dict[Any, tuple[str, tuple[Any, ...], Any]]] = {
    mbarrier_init: ("mbarrier.init.shared::cta.b64 [$0], $1;", (U32, U32), None),
    mbarrier_arrive: ("mbarrier.arrive.shared::cta.b64 _, [$0];", (U32,), None),
    mbarrier_arrive_expect_tx: (
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
        (U32, U32),
        None,
    ),
    mbarrier_wait: (
        "{\n.reg .pred p;\nmbar_wait_${:uid}:\n"
        f"{_TRY_WAIT} p, [$0], $1;\n"
        "@!p bra mbar_wait_${:uid};\n}",
        (U32, U32),
        None,
    ),
    mbarrier_wait_cluster: (
        "{\n.reg .pred p;\nmbar_wait_${:uid}:\n"
        f"{_TRY_WAIT_CLUSTER} p, [$0], $1;\n"
        "@!p bra mbar_wait_${:uid};\n}",
        (U32, U32),
        None,
    ),
    mbarrier_try_wait: (
        f"{{\n.reg .pred p;\n{_TRY_WAIT} p, [$1], $2;\nselp.u32 $0, 1, 0, p;\n}}",
        (U32, U32),
        U32,
    ),
    fence_mbarrier_init: ("fence.mbarrier_init.release.cluster;", (), None),
    fence_proxy_async: ("fence.proxy.async.shared::cta;", (), None),
    tma_load_2d: (
        _TMA_LOAD.format(d=2) + " [$0], [$1, {$2, $3}], [$4];",
        (U32, U64, U32, U32, U32),
        None,
    ),
    tma_load_3d: (
        _TMA_LOAD.format(d=3) + " [$0], [$1, {$2, $3, $4}], [$5];",
        (U32, U64, U32, U32, U32, U32),
        None,
    ),
    tma_load_3d_multicast: (
        _TMA_LOAD.format(d=3) + ".multicast::cluster [$0], [$1, {$2, $3, $4}], [$5], $6;",
        (U32, U64, U32, U32, U32, U32, U16),
        None,
    ),
    cluster_ctarank: ("mov.u32 $0, %cluster_ctarank;", (), U32),
    cluster_id: ("mov.u32 $0, %clusterid.x;", (), U32),
    mapa_shared: ("mapa.shared::cluster.u32 $0, $1, $2;", (U32, U32), U32),
    mbarrier_arrive_cluster: (
        "mbarrier.arrive.shared::cluster.b64 _, [$0];",
        (U32,),
        None,
    ),
    ld_shared_cluster_f32: ("ld.shared::cluster.f32 $0, [$1];", (U32,), types.float32),
    fence_acq_rel_cluster: ("fence.acq_rel.cluster;", (), None),
    fence_acq_rel_gpu: ("fence.acq_rel.gpu;", (), None),
    cluster_sync: ("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;", (), None),
    cluster_sync_after_init: (
        "barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait.acquire;",
        (),
        None,
    ),
    tma_store_2d: (_TMA_STORE.format(d=2) + " [$0, {$1, $2}], [$3];", (U64, U32, U32, U32), None),
    tma_store_3d: (
        _TMA_STORE.format(d=3) + " [$0, {$1, $2, $3}], [$4];",
        (U64, U32, U32, U32, U32),
        None,
    ),
    bulk_store: (_BULK_STORE + " [$0], [$1], $2;", (U64, U32, U32), None),
    bulk_commit_group: ("cp.async.bulk.commit_group;", (), None),
    prefetch_tensormap: ("prefetch.tensormap [$0];", (U64,), None),
    fence_tensormap_acquire: (
        "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;",
        (U64,),
        None,
    ),
    wgmma_fence: ("wgmma.fence.sync.aligned;", (), None),
    wgmma_commit_group: ("wgmma.commit_group.sync.aligned;", (), None),
    named_barrier_sync: ("bar.sync $0, $1;", (U32, U32), None),
    named_barrier_arrive: ("bar.arrive $0, $1;", (U32, U32), None),
    stmatrix_x4: (_STMATRIX.format(t=""), (U32,) * 5, None),
    stmatrix_x4_trans: (_STMATRIX.format(t=".trans"), (U32,) * 5, None),
    ld_shared_b32: ("ld.shared.b32 $0, [$1];", (U32,), U32),
    warp_uniform: ("shfl.sync.idx.b32 $0, $1, 0, 0x1f, 0xffffffff;", (U32,), U32),
}
_GROUPS = (range(0, 1 << 16), "a non-negative int")
_NREGS = (F.SETMAXNREG_COUNTS, "a multiple of 8 in 24..256")
# stub -> (PTX template with {n}, allowed literal values, their description).
LITERAL_VARIANTS: Final[dict[Any, tuple[str, Any, str]]] = {
    bulk_wait_group_read: ("cp.async.bulk.wait_group.read {n};", *_GROUPS),
    bulk_wait_group: ("cp.async.bulk.wait_group {n};", *_GROUPS),
    wgmma_wait_group: ("wgmma.wait_group.sync.aligned {n};", *_GROUPS),
    setmaxnreg_inc: ("setmaxnreg.inc.sync.aligned.u32 {n};", *_NREGS),
    setmaxnreg_dec: ("setmaxnreg.dec.sync.aligned.u32 {n};", *_NREGS),
}
# stub -> (operand type, K of one instruction, whether it takes trans_a/trans_b).
WGMMA_VARIANTS: Final[dict[Any, tuple[str, int, bool]]] = {
    wgmma_f16: ("f16", 16, True),
    wgmma_bf16: ("bf16", 16, True),
    wgmma_e4m3: ("e4m3", 32, False),
    wgmma_e5m2: ("e5m2", 32, False),
}


def _instantiate() -> dict[str, Any]:
    made = {
        shared_base.__name__: F.shared_base_intrinsic(shared_base),
        st_shared_b32.__name__: F.st_shared_intrinsic(st_shared_b32),
        fence_operand.__name__: F.fence_operand_intrinsic(fence_operand),
        wgmma_zeros.__name__: F.wgmma_zeros_intrinsic(wgmma_zeros),
        wgmma_promote.__name__: F.wgmma_promote_intrinsic(wgmma_promote),
        wgmma_promote_split.__name__: F.wgmma_promote_split_intrinsic(wgmma_promote_split),
        wgmma_desc.__name__: F.wgmma_desc_intrinsic(wgmma_desc),
    }
    for stub, (text, ins, out) in ASM_VARIANTS.items():
        made[stub.__name__] = F.asm_intrinsic(stub, text, ins, out)
    for stub, (template, allowed, accepted) in LITERAL_VARIANTS.items():
        made[stub.__name__] = F.literal_asm_intrinsic(stub, template, allowed, accepted)
    for stub, (ab_type, k, transposes) in WGMMA_VARIANTS.items():
        made[stub.__name__] = F.wgmma_intrinsic(stub, ab_type, k, transposes)
    return made


def _emulations() -> Mapping[str, Any]:
    from mmaplug.sim import sm90

    return vars(sm90)


bind(globals(), _instantiate, _emulations)
