"""The hopper scheduler's build step: MatmulParams + analysis → kernel config → launches."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from mmaplug.analysis.bindings import SCALE_DIMS
from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.patterns import DimRole
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.codegen.emitter import REDUCE_THREADS, casts_only, reduce_grid
from mmaplug.codegen.kernel_config import spec_fields
from mmaplug.cuda.kernel_views import DeviceTensor, require_unit_stride
from mmaplug.cuda.launching import (
    ARRAY_SLOTS,
    BoundKernels,
    ByValue,
    DriverLaunch,
    KernelParams,
    Value,
    launch_checked,
    resident_grid,
    simulating,
    zero_words,
)
from mmaplug.cuda.modules import FamilyArtifact, require_numba
from mmaplug.cuda.tensormap import TensorMapSpec
from mmaplug.errors import DeclinedLaunchError, LaunchError
from mmaplug.planning.artifact import LaunchArgs
from mmaplug.planning.choices import KernelSpec
from mmaplug.planning.device import Device
from mmaplug.planning.params import MatmulParams, TilingStrategy
from mmaplug.planning.scheduler import Resources, resident_ctas

from .config import SCALE_PARAMS, HopperKernelConfig
from .kernel import KERNELS, SM90A, build, loaded
from .maps import HostMaps, check_operand, is_batched, maps_bytes, operand_spec, output_spec
from .smem import VECTOR_ALIGN, epilogue_outputs, packed_buffers
from .space import asks_streamk
from .tiles import WARPGROUP, through_workspace

# the packed epilogue's chunks may leave through TMA tensor stores (``stores_by_tma``); probes
# turn it off to compare
TMA_STORES = True


def _b_name(j: int, swapped: bool = False) -> str:
    if swapped:
        return "operand A"
    return "operand B" if j == 0 else f"B operand {j} (horizontal)"


def swap_roles(tensor: DeviceTensor) -> DeviceTensor:
    """*tensor* as the swapped kernel sees it: its M and N strides exchanged."""
    roles = dict(tensor.role_strides)
    roles[DimRole.M], roles[DimRole.N] = roles.get(DimRole.N, 0), roles.get(DimRole.M, 0)
    return attrs.evolve(tensor, role_strides=roles)


def kernel_config(spec: KernelSpec, analysis: MatmulAnalysis) -> HopperKernelConfig:
    """The generated kernel's configuration for *spec*."""
    require_numba()  # a plan-only install stops here, with the extra to install
    params, problem = spec.params, spec.problem
    fields = spec_fields(spec, analysis)
    if params.swap_ab:  # the kernel's operands: the problem's B, then its A
        fields.update(a_k_inner=problem.b_k_inner, b_k_inner=problem.a_k_inner)
    cfg = HopperKernelConfig(
        **fields,
        swap_ab=params.swap_ab,
        splitk_cluster=params.splitk_in_cluster,
        streamk=asks_streamk(params),
        smem_epilogue=params.use_smem_epilogue,
        packed_stores=params.use_smem_epilogue and packed_storable(problem, analysis, params),
        pingpong=params.tiling_strategy is TilingStrategy.persistent_pingpong,
        cluster_m=params.cluster_dims[0],
        cluster_n=params.cluster_dims[1],
        horizontal=problem.horizontal,
        block_scaled=problem.block_scaled,
    )
    if TMA_STORES and stores_by_tma(cfg, spec):
        cfg = attrs.evolve(cfg, tma_stores=True)
    return cfg


def stores_by_tma(cfg: HopperKernelConfig, spec: KernelSpec) -> bool:
    """Whether the packed epilogue of *cfg* hands its chunks to TMA stores: its program is
    casts only, without a split-K workspace, each CTA walks more than one work unit (the
    stores of one tile then drain under the next tile's main loop), and the problem fills at
    least one CTA tile in M and in N (the threads' stores skip rows and columns past them, a
    chunk's fence and wait do not).

    Measured (BENCHMARKS.md runs 151-153, TMA against the consumers' own 16-byte stores): 16
    x 2048x2048x128 11-14% faster, 2048x14336x5120 2-3%, block-scaled FP8 3%, 8192^3 under 1%;
    but bias + GELU 1-3% slower (each chunk waits for the TMA unit to have read the one before
    it), 1000^3, one 64x128 tile a CTA, 7% slower (nothing to overlap) and 32 x 1x4096x128,
    one row of each 64-row tile, 12 -> 17 us (run 158)."""
    if not cfg.tma_storable or not casts_only(cfg.epilogue):
        return False
    if spec.params.tiling_strategy is TilingStrategy.one_tile_per_cta:
        return False
    problem = spec.problem.transposed() if cfg.swap_ab else spec.problem
    if problem.m < cfg.cta_tile[0] or problem.n < cfg.n_out:
        return False
    units = work_units(cfg, problem.m, problem.n, problem.batch)
    return units > resident_units(cfg, spec.device)


def unit_tiles(cfg: HopperKernelConfig, m: int, n: int) -> tuple[int, int]:
    """Work units along M and along N (a cluster's CTAs share one: adjacent M or N tiles)."""
    return -(-m // (cfg.cta_tile[0] * cfg.cluster_m)), -(-n // (cfg.n_out * cfg.cluster_n))


def work_units(cfg: HopperKernelConfig, m: int, n: int, batch: int) -> int:
    """Work units of a launch: batch x splits through the workspace x :func:`unit_tiles`."""
    tiles_m, tiles_n = unit_tiles(cfg, m, n)
    splits = cfg.splitk if cfg.workspace_splitk else 1
    return batch * splits * tiles_m * tiles_n


def streamk_split(tiles: int, grid: int) -> tuple[int, int]:
    """Stream-K's (whole tiles, tail tiles) of *tiles* on *grid* persistent CTAs: the tiles of
    whole waves, and those of the last, partly filled one (the kernel's own rule,
    ``streamk_codegen.emit_streamk_units``)."""
    full = tiles // grid * grid
    return full, tiles - full


def streamk_workspace(cfg: HopperKernelConfig, rest: int) -> tuple[int, int]:
    """float32 words of stream-K's workspace for *rest* tail tiles (:func:`streamk_split`),
    and how many of them are its counters (zeroed before each launch): a counter per tail
    tile and consumer warpgroup, 16-byte rounded, then every piece's partial accumulators."""
    counters = -(-rest * cfg.consumers // 4) * 4
    partials = rest * cfg.splitk * cfg.consumers * cfg.accumulators * WARPGROUP
    return max(4, counters + partials), counters  # (an array the kernel takes, if unread)


def resident_units(cfg: HopperKernelConfig, device: Device) -> int:
    """Work units a persistent grid runs at once: the clusters that fit the device's SMs by
    shared memory and threads (``resident_ctas``; the launch may cut it further,
    ``resident_grid``)."""
    per_sm = max(1, resident_ctas(Resources(cfg.smem_bytes, cfg.threads), device))
    return max(1, device.sm_count * per_sm // cfg.cluster)


def packed_storable(problem: MatmulProblem, analysis: MatmulAnalysis, params: MatmulParams) -> bool:
    """Whether the staged epilogue can pack its outputs and store 16-byte vectors: every
    output's chunk rows fit the staging region and its rows are whole 16-byte units
    (N * itemsize % 16 == 0, true of the contiguous outputs ``execute`` allocates; each launch
    checks the actual tensors)."""
    if problem.horizontal > 1 or params.swap_ab:  # the staged path combines the products, or
        return False  # writes the swapped tile transposed; packing does neither
    workspace = through_workspace(
        params.splitk_factor, params.splitk_in_cluster, asks_streamk(params)
    )
    dtypes = epilogue_outputs(analysis.epilogue, workspace)
    fits = packed_buffers(dtypes, params.warp_tile.n) > 0 if params.warp_tile.n % 8 == 0 else False
    return fits and all(problem.n * d.itemsize % VECTOR_ALIGN == 0 for d in dtypes)


def packed_misfits(cfg: HopperKernelConfig, args: LaunchArgs, n: int, batch: int) -> list[str]:
    """Why these outputs cannot take the packed epilogue's 16-byte vector stores: a base, row
    or batch stride that is not 16-byte aligned (empty when they can)."""
    bad = []
    if cfg.workspace_splitk:
        if n * 4 % VECTOR_ALIGN:
            bad.append(f"the float32 split-K workspace's rows of N={n}")
        return bad  # the outputs are the reduce kernel's
    for j, stored in cfg.epilogue.stored:  # (an amax scalar is no vector store's)
        out, size = args.outputs[j], stored.dtype.itemsize
        strides = [out.role_strides[DimRole.M]]
        if batch > 1:
            strides.append(out.role_strides[DimRole.BATCH])
        if out.address % VECTOR_ALIGN or any(s * size % VECTOR_ALIGN for s in strides):
            bad.append(f"output {j} at {out.address:#x} with element strides {strides}")
    return bad


def _output_specs(
    cfg: HopperKernelConfig, args: LaunchArgs, m: int, n: int, batch: int
) -> list[tuple[DeviceTensor, TensorMapSpec]]:
    """The outputs a ``tma_stores`` kernel stores by TMA and the maps it stores them through, in
    the order of its ``maps`` after the operands' (``tma_outputs``; empty without)."""
    outputs = cfg.epilogue.outputs
    return [
        (args.outputs[j], output_spec(cfg, outputs[j].dtype, args.outputs[j], m, n, batch))
        for j in cfg.tma_outputs
    ]


@attrs.frozen
class _Launch:
    """Everything a launch needs besides data addresses and scalars."""

    config: HopperKernelConfig
    maps: HostMaps
    grid: tuple[int, int, int]
    shape: tuple[int, ...]
    grid_args: tuple[int, ...]
    epi_strides: tuple[int, ...]
    out_strides: tuple[int, ...]
    scale_strides: tuple[int, ...]
    m: int
    n: int
    batch: int
    persistent: bool  # CTAs (clusters) stride over the units: the grid may be cut
    streamk: tuple[int, int] = (0, 0)  # stream-K's workspace words, and its counters'


@attrs.frozen
class HopperArtifact(FamilyArtifact):
    """A built hopper kernel: its config, the spec it was planned for, its launch geometry;
    its kernels built for sm_90a."""

    family = KERNELS
    build = staticmethod(build)
    cc = SM90A
    config: HopperKernelConfig
    spec: KernelSpec = attrs.field(eq=False)

    def _plan_launch(self, args: LaunchArgs) -> _Launch:
        """Check the operands against TMA's rules and work out grid and kernel arguments."""
        cfg, problem = self.config, args.problem  # the launch's extents, not the spec's
        a_inner = DimRole.K if cfg.a_k_inner else DimRole.M
        b_inner = DimRole.K if cfg.b_k_inner else DimRole.N
        kernel_a, bs, a_name = args.a, (args.b, *args.more_b), "operand A"
        if cfg.swap_ab:  # the kernel's A is the problem's B (its rows along N), and so on
            kernel_a, bs, a_name = swap_roles(args.b), (swap_roles(args.a),), "operand B"
            problem = problem.transposed()
        require_unit_stride(a_name, kernel_a, a_inner)
        for j, b in enumerate(bs):
            require_unit_stride(_b_name(j, cfg.swap_ab), b, b_inner)
        for out in args.outputs:
            require_unit_stride("an output", out, DimRole.N)
        extents = {
            DimRole.M: problem.m,
            DimRole.N: problem.n,
            DimRole.K: problem.k,
            DimRole.BATCH: problem.batch,
        }
        a_spec = operand_spec(cfg, "a", kernel_a, extents)
        b_specs = [operand_spec(cfg, "b", b, extents) for b in bs]
        problems = check_operand(a_name, a_spec, kernel_a.address)
        for j, (b, b_spec) in enumerate(zip(bs, b_specs, strict=True)):
            problems += check_operand(_b_name(j, cfg.swap_ab), b_spec, b.address)
        if problems:
            raise DeclinedLaunchError(
                "hopper", "TMA cannot load the operands: " + "; ".join(problems)
            )
        out_specs = _output_specs(cfg, args, problem.m, problem.n, problem.batch)
        if cfg.packed_stores and (
            packed_misfits(cfg, args, problem.n, problem.batch)
            or any(spec.violations(out.address) for out, spec in out_specs)
        ):
            # another shape class of a symbolic fusion, or a strided output: the same kernel
            # with the staged epilogue (same shared memory and stages), built once
            cfg = attrs.evolve(cfg, packed_stores=False, tma_stores=False)
            out_specs = []
        bk = cfg.cta_tile[2]
        # a cluster's CTAs take one work unit: adjacent M or N tiles, or its splits
        cl = cfg.cluster
        tiles_m, tiles_n = unit_tiles(cfg, problem.m, problem.n)
        k_tiles = -(-problem.k // bk)
        k_split = -(-k_tiles // cfg.splitk) * bk
        units = work_units(cfg, problem.m, problem.n, problem.batch)
        persistent = self.spec.params.tiling_strategy is not TilingStrategy.one_tile_per_cta
        streamk = (0, 0)
        if cfg.streamk:  # whole waves' tiles, then the tail tiles' pieces
            grid_x = min(units * cfg.splitk, resident_units(cfg, self.spec.device))
            full, rest = streamk_split(units, grid_x)
            streamk = streamk_workspace(cfg, rest)
            units = full + rest * cfg.splitk
        elif persistent:
            grid_x = min(units, resident_units(cfg, self.spec.device)) * cl
        else:
            grid_x = units * cl
        epi = [
            s
            for t in args.epilogue_inputs
            for s in (t.role_strides[r] for r in (DimRole.BATCH, DimRole.M, DimRole.N))
        ]
        outs = [
            s
            for t in args.outputs
            for s in (t.role_strides[DimRole.BATCH], t.role_strides[DimRole.M])
        ]
        if cfg.block_scaled and len(args.scales) != len(SCALE_PARAMS):
            raise LaunchError(
                f"{cfg.kernel_name} is block-scaled and takes {len(SCALE_PARAMS)} scale "
                f"tensors; the launch has {len(args.scales)}"
            )
        scale_strides = tuple(
            t.role_strides[r]
            for t, roles in zip(args.scales, SCALE_DIMS, strict=False)  # SCALE_STRIDES' order
            for r in roles
        )
        shape = (
            problem.m,
            problem.n,
            problem.k,
            problem.batch,
            is_batched(kernel_a, problem.batch),
            is_batched(bs[0], problem.batch),
        )
        return _Launch(
            config=cfg,
            maps=HostMaps(a_spec, *b_specs, *(spec for _, spec in out_specs)),
            grid=(grid_x, 1, 1),
            shape=shape,
            grid_args=(k_split, tiles_m, tiles_n, units),
            epi_strides=tuple(epi),
            out_strides=tuple(outs),
            scale_strides=scale_strides,
            m=args.problem.m,  # the output's extents: the split-K reduce's
            n=args.problem.n,
            batch=problem.batch,
            persistent=persistent,
            streamk=streamk,
        )

    def _workspace(self, plan: _Launch) -> Any:
        from numba import cuda

        if plan.config.streamk:  # its counters start at zero
            words, counters = plan.streamk
            ws = cuda.device_array(words, "float32")
            if counters:
                ws[:counters].copy_to_device(np.zeros(counters, np.float32))
            return ws
        return cuda.device_array(self.config.splitk * plan.batch * plan.m * plan.n, "float32")

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel once on *args* (the checked path; the simulator uses it)."""
        plan = self._plan_launch(args)
        cfg = plan.config
        clustered: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if cfg.cluster > 1 and simulating():
            from mmaplug.sim.cluster import clusters_of

            clustered = clusters_of(cfg.cluster)  # the simulator's cluster blocks run at once
        kernels = build(cfg)
        zero_words([args.outputs[j] for j, _ in cfg.epilogue.amaxes], args.stream)
        more_b = tuple(b.address for b in args.more_b)
        operands = (args.b, args.a) if cfg.swap_ab else (args.a, args.b)
        outputs = tuple(args.outputs[j].address for j in cfg.tma_outputs)
        maps, _ = plan.maps.get(operands[0].address, operands[1].address, more_b, outputs)
        block = (cfg.threads, 1, 1)
        ins = [t.array for t in args.epilogue_inputs]
        outs = [t.array for t in args.outputs]
        scales, sc_strides = [t.array for t in args.scales], list(plan.scale_strides)
        scal32 = [np.float32(s) for s in args.scalars]
        grid, smem, stream, cluster = plan.grid, cfg.smem_bytes, args.stream, cfg.cluster
        if not cfg.workspace_splitk:
            main = [maps, *scales, *ins, *outs, *scal32, *plan.shape, *sc_strides]
            main += [*plan.epi_strides, *plan.out_strides]
            main += [self._workspace(plan)] if cfg.streamk else []
        else:
            ws = self._workspace(plan)
            main = [maps, ws, *scales, *plan.shape, *sc_strides]
        with clustered:
            main += plan.grid_args
            launch_checked(
                kernels, "hopper_gemm", main, grid, block, stream, smem, cluster, plan.persistent
            )
        if not cfg.workspace_splitk:
            return
        rgrid = reduce_grid(plan.batch, plan.m, plan.n)
        rargs = [ws, *ins, *outs, *scal32, plan.m, plan.n, plan.batch]
        rargs += [*plan.epi_strides, *plan.out_strides]
        reduce_block = (REDUCE_THREADS, 1, 1)
        launch_checked(kernels, "hopper_splitk_reduce", rargs, rgrid, reduce_block, stream, 0)

    def bind(self, args: LaunchArgs) -> BoundHopper:
        """A launcher for tensors like *args*' ones: parameters prepared, pointers per call."""
        return BoundHopper(self, self._plan_launch(args), args)


class BoundHopper(BoundKernels):
    """``HopperArtifact.launch`` for one input signature; called with data addresses.

    The kernels take the tensor maps by value (each call's words from ``HostMaps``) where
    the bound launch has A and B; with split-K the caller passes the float32 workspace
    (``self.workspace`` elements) last.
    """

    def __init__(self, artifact: HopperArtifact, plan: _Launch, args: LaunchArgs) -> None:
        cfg = plan.config
        prog = cfg.epilogue
        self._maps = plan.maps
        sizes_in = [i.dtype.itemsize for i in prog.inputs]
        sizes_out = [o.dtype.itemsize for o in prog.outputs]
        ins = [(0, t.array.size, s) for t, s in zip(args.epilogue_inputs, sizes_in, strict=True)]
        outs = [(0, t.array.size, s) for t, s in zip(args.outputs, sizes_out, strict=True)]
        # A's map, then each B's and each output's TMA stores
        self._stored = cfg.tma_outputs
        maps_arg = ByValue(maps_bytes(cfg))
        scales = [(0, t.array.size, 4) for t in args.scales]  # float32 block scales
        # where output j's address is among __call__'s: after A, B, scales, epilogue inputs
        self._outputs_at = 2 + len(scales) + len(ins)
        sc_strides = list(plan.scale_strides)
        self._more_b = cfg.horizontal - 1
        self._swap = cfg.swap_ab
        placeholders = [0.0] * len(prog.scalars)
        block = (cfg.threads, 1, 1)
        shape, grid_args = list(plan.shape), list(plan.grid_args)
        epi, out_s = list(plan.epi_strides), list(plan.out_strides)
        # pointers: [scales..., epilogue inputs..., outputs..., workspace] (after the maps)
        arrays = len(scales) + len(ins) + len(outs)
        tensors = list(range(arrays))
        first_out = len(scales) + len(ins)
        zeroed = [first_out + j for j, _ in prog.amaxes]  # amax outputs start at 0.0
        first_scalar = ARRAY_SLOTS * (1 + arrays)
        if not cfg.workspace_splitk:
            words, counters = plan.streamk  # (0, 0) without stream-K
            scratch = [(0, words, 4)] if cfg.streamk else []
            values: list[Value] = [
                maps_arg, *scales, *ins, *outs, *placeholders, *shape, *sc_strides, *epi, *out_s,
                *scratch, *grid_args,
            ]  # fmt: skip
            params = KernelParams(values)
            main_kern = loaded(cfg, "hopper_gemm", cfg.smem_bytes, len(params.slots))
            grid = _resident(main_kern, plan, block)
            super().__init__(
                [DriverLaunch(main_kern, grid, block, cfg.smem_bytes, params, cfg.cluster)],
                [(params, tensors + list(range(arrays, arrays + len(scratch))))],
                [(params, first_scalar + i) for i in range(len(prog.scalars))],
                workspace=words,
                zeroed=zeroed,
                workspace_zeroed=counters,
            )
            return
        size = cfg.splitk * plan.batch * plan.m * plan.n
        ws_arg, ws = (0, size, 4), len(tensors)
        main = KernelParams([maps_arg, ws_arg, *scales, *shape, *sc_strides, *grid_args])
        red = KernelParams(
            [ws_arg, *ins, *outs, *placeholders, plan.m, plan.n, plan.batch, *epi, *out_s]
        )
        main_kern = loaded(cfg, "hopper_gemm", cfg.smem_bytes, len(main.slots))
        red_kern = loaded(cfg, "hopper_splitk_reduce", 0, len(red.slots))
        rgrid = reduce_grid(plan.batch, plan.m, plan.n)
        grid = _resident(main_kern, plan, block)
        super().__init__(
            [
                DriverLaunch(main_kern, grid, block, cfg.smem_bytes, main, cfg.cluster),
                DriverLaunch(red_kern, rgrid, (REDUCE_THREADS, 1, 1), 0, red),
            ],
            [
                (main, [ws, *tensors[: len(scales)]]),
                (red, [ws, *tensors[len(scales) :]]),
            ],
            [(red, first_scalar - ARRAY_SLOTS * len(scales) + i) for i in range(len(prog.scalars))],
            workspace=size,
            zeroed=zeroed,
        )

    def __call__(self, addresses: Sequence[int], scalars: Sequence[float], stream: int) -> None:
        """Launch on data at *addresses* (A, B, further Bs, block scales, epilogue inputs,
        outputs[, workspace])."""
        if self._more_b:  # a horizontal fusion's further Bs follow B
            rest = 2 + self._more_b
            maps = self._maps.get(addresses[0], addresses[1], tuple(addresses[2:rest]))
            self._launch(addresses[rest:], scalars, stream, (maps[1],))
            return
        a, b = (addresses[1], addresses[0]) if self._swap else (addresses[0], addresses[1])
        outputs = tuple(addresses[self._outputs_at + j] for j in self._stored)
        maps = self._maps.get(a, b, outputs=outputs)  # held until queued
        self._launch(addresses[2:], scalars, stream, (maps[1],))


def _resident(kernel: int, plan: _Launch, block: tuple) -> tuple:
    """*plan*'s grid, a persistent one of clusters cut to the clusters the device runs at once
    (``resident_grid``)."""
    cfg = plan.config
    if not plan.persistent:
        return plan.grid
    return resident_grid(kernel, plan.grid, block, cfg.smem_bytes, cfg.cluster)
