"""What a generated Hopper kernel is specialised on (``HopperKernelConfig``, the build-cache key)
and its parameter ABI. The units it is cut in live in ``tiles``, its shared memory in ``smem``,
what the generator can build in ``config_rules``."""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.analysis.epilogue import EpilogueProgram
from mmaplug.codegen.emitter import cast_epilogue, epilogue_params, tile3
from mmaplug.codegen.kernel_config import config_label
from mmaplug.ir.dtypes import DType

from .config_rules import config_problems
from .smem import (
    STAGED_ROWS,
    after_stages_bytes,
    epilogue_chunk,
    epilogue_outputs,
    horizontal_chunk,
    kernel_smem_bytes,
    packed_buffers,
    reduction_stride,
    staging_bytes,
    tma_buffers,
)
from .tiles import (
    REGISTER_SPLITS,
    WARPGROUP,
    cluster_kind,
    consumer_count,
    kernel_threads,
    through_workspace,
)

# int64 parameters of the main kernel, in order
SHAPE_PARAMS: Final = ("M", "N", "K", "batch", "a_batched", "b_batched")
GRID_PARAMS: Final = ("k_split", "tiles_m", "tiles_n", "units")
# a block-scaled kernel's scales (float32 arrays) and their element strides: A's [M, K blocks]
# by row and block, B's [K blocks, N blocks] by K block and N block
SCALE_PARAMS: Final = ("sfa", "sfb")
SCALE_STRIDES: Final = ("sfa_m", "sfa_k", "sfb_k", "sfb_n")


@attrs.frozen(kw_only=True)
class HopperKernelConfig:
    """Everything the generated wgmma kernel is specialised on (hashable: the build-cache key).

    The CTA tile is split over a grid of consumer warpgroups, each computing a ``warp_tile``
    (``wm/64`` wgmma row blocks of ``m64 n{wn} k16``); one producer warpgroup issues the TMA
    loads.

    ``block_scaled``: each ``SCALE_BLOCK`` of K is summed into fresh partial sums, which are
    scaled by A's row scales and B's block scale and added to the float32 accumulators in
    registers (the promotion DeepGEMM does every 128 of K); a K tile is one block, or two whose
    first is promoted while the second's wgmmas run. The kernel takes ``sfa``/``sfb`` and their
    strides.

    ``cluster_m`` / ``cluster_n`` c > 1: clusters of c CTAs along M share one B tile, or along
    N one A tile; each loads a 1/c part of it and multicasts it into every CTA of the cluster,
    and a stage is refilled once all of their consumers released it (``multicast``).

    ``horizontal`` h > 1: h B operands (one tensor map each) share A; a stage holds their tiles
    stacked along N, so ``cta_tile`` n is the wgmma's N = h x the output tile's n (``n_out``),
    and accumulator column ``c`` of product ``j`` is column ``j * n_out + c``.

    ``swap_ab``: the kernel computes the transposed product (its A the problem's B, its M the
    problem's N; ``a_k_inner``, the tiles and the shape arguments are the kernel's). Its
    register epilogue binds the element's ``row`` to the kernel's column and ``col`` to its
    row, so the epilogue program, its strides and the split-K partials stay the problem's.

    ``splitk_cluster``: the ``splitk`` CTAs of one tile are one cluster (rank = split); each
    writes its float32 partial tile to its shared memory, and each sums a ``1/splitk`` slice of
    the tile over the cluster's partials (distributed shared memory) and applies the epilogue
    there: no workspace, no second kernel.

    ``streamk`` (stream-K): the tiles left for a last, partly filled wave of the persistent
    CTAs are cut along K into ``splitk`` pieces, which the CTAs take before the whole tiles. Each
    piece's consumers store their float32 accumulators to the workspace and count the piece
    done on the tile's counter; the consumers that count the last piece add every piece's
    partial sums, in piece order, and run the epilogue (``streamk_codegen``). No second kernel.
    """

    operand_dtype: DType = DType.float16
    a_k_inner: bool = True
    b_k_inner: bool = True
    cta_tile: tuple[int, int, int] = attrs.field(default=(128, 256, 64), converter=tile3)
    warp_tile: tuple[int, int, int] = attrs.field(default=(64, 256, 64), converter=tile3)
    stages: int = 4
    splitk: int = 1
    cta_order: str = "row_major"
    grid_swizzle: int = 1
    smem_epilogue: bool = False
    packed_stores: bool = False
    tma_stores: bool = False
    pingpong: bool = False
    cluster_m: int = 1
    cluster_n: int = 1
    horizontal: int = 1
    block_scaled: bool = False
    swap_ab: bool = False
    splitk_cluster: bool = False
    streamk: bool = False
    epilogue: EpilogueProgram = attrs.field(factory=cast_epilogue)

    def __attrs_post_init__(self) -> None:
        problems = config_problems(self)
        if problems:
            raise ValueError("invalid HopperKernelConfig: " + "; ".join(problems))

    @property
    def multicast(self) -> int:
        """CTAs sharing a multicast tile: a cluster along M (of B) or along N (of A), or 1."""
        return self.cluster_m * self.cluster_n

    def sharing(self, operand: str) -> int:
        """CTAs sharing the tile of *operand* (``"a"`` or ``"b"``): a cluster along N shares
        A's, one along M B's; 1 where the tile is this CTA's alone."""
        return self.cluster_n if operand == "a" else self.cluster_m

    @property
    def cluster(self) -> int:
        """CTAs of a cluster: those sharing a multicast tile, the splits of a tile, or 1."""
        return self.splitk if self.splitk_cluster else self.multicast

    @property
    def workspace_splitk(self) -> bool:
        """Split-K through the float32 workspace and the reduce kernel."""
        return through_workspace(self.splitk, self.splitk_cluster, self.streamk)

    @property
    def tma_storable(self) -> bool:
        """Whether the epilogue's chunks can leave by TMA stores at all (``tma_stores``): packed
        into shared memory, and no split-K workspace (whose partials the reduce kernel reads)."""
        return self.packed_stores and not self.workspace_splitk

    @property
    def n_out(self) -> int:
        """Output columns of a CTA tile: cta_tile n, or its share per product (horizontal)."""
        return self.cta_tile[1] // self.horizontal

    @property
    def consumer_grid(self) -> tuple[int, int]:
        """(consumer warpgroups along M, along N) sharing one tile (1, 1 with ping-pong)."""
        return self.cta_tile[0] // self.warp_tile[0], self.cta_tile[1] // self.warp_tile[1]

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: the tile's grid, or two taking alternate tiles (ping-pong)."""
        return consumer_count(self.cta_tile, self.warp_tile, self.pingpong)

    @property
    def registers(self) -> tuple[int, int]:
        """setmaxnreg of the producer and of the consumers (see ``REGISTER_SPLITS``)."""
        return REGISTER_SPLITS[cluster_kind(self.multicast > 1, self.splitk_cluster)]

    @property
    def threads(self) -> int:
        """Threads per CTA: the producer warpgroup and the consumers."""
        return kernel_threads(self.consumers)

    @property
    def epilogue_chunk(self) -> int:
        """Columns of a consumer's tile staged through shared memory at a time."""
        return epilogue_chunk(self.warp_tile[1])

    @property
    def horizontal_chunk(self) -> int:
        """Output columns of each product staged at a time by a horizontal fusion's smem
        epilogue (0: none fits; see :func:`horizontal_chunk`)."""
        return horizontal_chunk(self.warp_tile[1], self.horizontal)

    @property
    def epilogue_stride(self) -> int:
        """Row stride (floats) of a staged chunk: 16-byte rows, 4 floats of padding."""
        return self.epilogue_chunk + 4

    @property
    def transposed_stride(self) -> int:
        """Row stride (floats) of a swapped kernel's staged chunk, written transposed: one
        output row of ``STAGED_ROWS`` columns, 4 floats of padding (the chunk's rows then fit
        the region of its unswapped twin, ``chunk x (STAGED_ROWS + 4)`` floats at most
        ``STAGED_ROWS x (chunk + 4)``, and a fragment's writes hit 32 banks)."""
        return STAGED_ROWS + 4

    @property
    def packed_buffers(self) -> int:
        """Chunk buffers per consumer for ``packed_stores``, of padded rows or with
        ``tma_stores`` TMA boxes (0: the outputs do not fit)."""
        fits = tma_buffers if self.tma_stores else packed_buffers
        return fits(self.epilogue_outputs, self.warp_tile[1])

    @property
    def tma_outputs(self) -> tuple[int, ...]:
        """The outputs the kernel stores by TMA, each through a map after the operands' in its
        ``maps``: the stored ones with ``tma_stores`` (not an amax scalar), else none."""
        return tuple(j for j, _ in self.epilogue.stored) if self.tma_stores else ()

    @property
    def epilogue_outputs(self) -> tuple[DType, ...]:
        """Dtypes of the arrays the main kernel's epilogue writes (see :func:`epilogue_outputs`)."""
        return epilogue_outputs(self.epilogue, self.workspace_splitk)

    @property
    def staging_bytes(self) -> int:
        """Shared memory of the staged epilogue: one chunk per consumer (0 without it)."""
        if not self.smem_epilogue:
            return 0
        return staging_bytes(self.consumers, self.warp_tile[1])

    @property
    def reduction_stride(self) -> int:
        """Row stride (floats) of the partial tile: odd, so a column walk hits 32 banks."""
        return reduction_stride(self.cta_tile)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: alignment slack, operand stages, barriers, then what follows
        them (:func:`kernel_smem_bytes` and :func:`after_stages_bytes`, the scheduler's one
        model)."""
        after = after_stages_bytes(
            self.consumers, self.cta_tile, self.warp_tile[1], staged=self.smem_epilogue,
            splitk_cluster=self.splitk_cluster, streamk=self.streamk,
        )  # fmt: skip
        return kernel_smem_bytes(self.cta_tile, self.operand_dtype.itemsize, self.stages, after)

    @property
    def accumulators(self) -> int:
        """float32 accumulator registers per consumer thread."""
        wm, wn, _ = self.warp_tile
        return wm * wn // WARPGROUP

    @property
    def kernel_name(self) -> str:
        """The kernel's one name (``hopper_<name>``): logs, dumps, the tuning database, the
        generated module and so the PTX ``.entry``, ``hopper_gemm`` inside it."""
        return f"hopper_{self.name}"

    @property
    def name(self) -> str:
        """A short readable id: ``config_label`` and the kernel's options."""
        return (
            f"{config_label(self)}{'_se' if self.smem_epilogue else ''}"
            f"{'_ps' if self.packed_stores else ''}"
            f"{'_ts' if self.tma_stores else ''}"
            f"{'_pp' if self.pingpong else ''}"
            f"{f'_c{self.cluster_m}' if self.cluster_m > 1 else ''}"
            f"{f'_cn{self.cluster_n}' if self.cluster_n > 1 else ''}"
            f"{f'_h{self.horizontal}' if self.horizontal > 1 else ''}"
            f"{'_bs' if self.block_scaled else ''}"
            f"{'_swap' if self.swap_ab else ''}"
            f"{'_kc' if self.splitk_cluster else ''}"
            f"{'_sk' if self.streamk else ''}"
        )


def kernel_params(cfg: HopperKernelConfig) -> list[str]:
    """Parameter names of ``hopper_gemm``, in launch order."""
    scales = list(SCALE_PARAMS) if cfg.block_scaled else []
    strides = list(SCALE_STRIDES) if cfg.block_scaled else []
    if cfg.workspace_splitk:
        return ["maps", "ws", *scales, *SHAPE_PARAMS, *strides, *GRID_PARAMS]
    ins, outs, scal, in_strides, out_strides = epilogue_params(cfg.epilogue)
    workspace = ["ws"] if cfg.streamk else []  # the tail tiles' counters and partial sums
    return [
        "maps", *scales, *ins, *outs, *scal, *SHAPE_PARAMS, *strides, *in_strides, *out_strides,
        *workspace, *GRID_PARAMS,
    ]  # fmt: skip
