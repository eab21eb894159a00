"""The ampere scheduler's build step: MatmulParams + analysis → kernel config → launches."""

from __future__ import annotations

from typing import Final

import attrs

from mmaplug.analysis.matmul_analysis import MatmulAnalysis
from mmaplug.analysis.patterns import DimRole
from mmaplug.codegen.kernel_config import spec_fields
from mmaplug.cuda.kernel_views import DeviceTensor, require_unit_stride
from mmaplug.cuda.modules import FamilyArtifact, require_numba
from mmaplug.planning.artifact import LaunchArgs
from mmaplug.planning.choices import KernelSpec

from .bound import BoundGemm, BoundGemmPrologueScalars
from .kernel import KERNELS, AmpereKernelConfig, build
from .launch import run_gemm
from .resources import operand_vectors

_VECTORS: Final = (8, 4, 2)


def kernel_config(spec: KernelSpec, analysis: MatmulAnalysis) -> AmpereKernelConfig:
    """The generated kernel's configuration for *spec* (vectors narrowed again at launch).

    ``spec.params`` are planned ones: the scheduler's adjustments applied (stages >= 2).
    """
    require_numba()  # a plan-only install stops here, with the extra to install
    vec_a, vec_b = operand_vectors(spec.params, spec.problem)
    return AmpereKernelConfig(
        **spec_fields(spec, analysis),
        vec_a=vec_a,
        vec_b=vec_b,
        prologue_a=analysis.prologue_a,
        prologue_b=analysis.prologue_b,
    )


def vector_width(
    tensor: DeviceTensor, inner: DimRole, outer: tuple[DimRole, ...], limit: int
) -> int:
    """Widest vector (elements) that keeps every row start of *tensor* aligned to its size."""
    for vec in (v for v in _VECTORS if v <= limit):
        aligned = tensor.address % (2 * vec) == 0
        if aligned and all(tensor.role_strides[r] % vec == 0 for r in outer):
            return vec
    return 1


@attrs.frozen
class AmpereArtifact(FamilyArtifact):
    """A built ampere kernel: its config and the spec it was first planned for (each launch
    brings its own extents in ``LaunchArgs.problem``); its kernels built for the spec's
    compute capability (the aligned operands' config: a launch narrows its vectors)."""

    family = KERNELS
    build = staticmethod(build)
    config: AmpereKernelConfig
    spec: KernelSpec = attrs.field(eq=False)

    def _resolve(self, args: LaunchArgs) -> tuple[AmpereKernelConfig, dict]:
        """The config with vectors narrowed to the tensors' alignment, and run_gemm's strides."""
        config = self.config
        a_inner, a_outer = (DimRole.K, DimRole.M) if config.a_k_inner else (DimRole.M, DimRole.K)
        b_inner, b_outer = (DimRole.K, DimRole.N) if config.b_k_inner else (DimRole.N, DimRole.K)
        require_unit_stride("operand A", args.a, a_inner)
        require_unit_stride("operand B", args.b, b_inner)
        for out in args.outputs:
            require_unit_stride("an output", out, DimRole.N)
        vec_a = vector_width(args.a, a_inner, (a_outer, DimRole.BATCH), config.vec_a)
        vec_b = vector_width(args.b, b_inner, (b_outer, DimRole.BATCH), config.vec_b)
        if (vec_a, vec_b) != (config.vec_a, config.vec_b):
            config = attrs.evolve(config, vec_a=vec_a, vec_b=vec_b)
        a, b = args.a.role_strides, args.b.role_strides
        problem = args.problem  # the launch's extents: one kernel serves every shape class
        strides = dict(
            a=(a[DimRole.BATCH], a[a_outer]),
            b=(b[DimRole.BATCH], b[b_outer]),
            epi=[
                tuple(t.role_strides[r] for r in (DimRole.BATCH, DimRole.M, DimRole.N))
                for t in args.epilogue_inputs
            ],
            out=[(t.role_strides[DimRole.BATCH], t.role_strides[DimRole.M]) for t in args.outputs],
            shape=dict(m=problem.m, n=problem.n, k=problem.k, batch=problem.batch),
        )
        return config, strides

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel once on *args* (the checked path; the simulator uses it)."""
        config, st = self._resolve(args)
        run_gemm(
            config,
            (args.a.array, *st["a"]),
            (args.b.array, *st["b"]),
            [(t.array, *s) for t, s in zip(args.epilogue_inputs, st["epi"], strict=True)],
            list(args.scalars),
            [(t.array, *s) for t, s in zip(args.outputs, st["out"], strict=True)],
            **st["shape"],
            stream=args.stream,
        )

    def bind(self, args: LaunchArgs) -> BoundGemm:
        """A launcher for tensors like *args*' ones: parameters prepared, pointers per call."""
        config, st = self._resolve(args)
        tensors = (args.a, args.b, *args.epilogue_inputs, *args.outputs)
        twice = config.splitk > 1 and config.prologue_scalars
        return (BoundGemmPrologueScalars if twice else BoundGemm)(
            config,
            [t.array.size for t in tensors],
            st["a"],
            st["b"],
            st["epi"],
            st["out"],
            len(config.epilogue.scalars),
            **st["shape"],
        )
