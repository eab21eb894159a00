"""SegmentedFusion: a fusion's segments run in order, matmul kernels and framework ops between;
and compiling a concrete fusion: one kernel where one takes it whole, else its segments."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.cuda.frameworks import kind_of
from mmaplug.errors import (
    LaunchError,
    MatmulError,
    NoSchedulerError,
    UnsupportedFusionError,
    UsageError,
)
from mmaplug.ir.arguments import is_int
from mmaplug.ir.fusion import Fusion, TensorView
from mmaplug.ir.symbolic import concretize, shape_of, symbolic_dims
from mmaplug.log import PLAN
from mmaplug.planning.params import check_param_names
from mmaplug.planning.plan import plan_problem
from mmaplug.runtime import dump as kernel_dump
from mmaplug.runtime.framework_segments import backend_for, run_ops
from mmaplug.runtime.kernels import compile_planned
from mmaplug.runtime.segmentation import Segment, explain_segments, k_major_segments, segment
from mmaplug.runtime.specialize import MAX_SHAPES, CompileTime

if TYPE_CHECKING:
    from mmaplug.analysis.bindings import MatmulAnalysis
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.planning.choices import KernelSpec, Provenance
    from mmaplug.planning.device import Device
    from mmaplug.planning.params import MatmulParams
    from mmaplug.runtime.compiled_fusion import CompiledFusion


class SegmentedFusion:
    """A fusion ``mp.compile`` runs as segments (``mmaplug.runtime.segmentation``) because no
    kernel takes it whole: each ``"matmul"`` segment is a ``CompiledFusion`` (``kernels``, by
    segment index), the others run with the inputs' framework (torch, CuPy; host arrays in the
    simulator). Intermediates are the framework's allocations, freed when a call returns.

    ``spec``, ``params``, ``provenance``, ``kernel_name``, ``ptx``, ``source`` and ``sass``
    are those of the one kernel when exactly one segment is a kernel; otherwise they raise
    ``UsageError`` (read them per kernel in ``kernels``). ``reason`` says why the fusion was
    segmented; ``explain()`` and ``dump()`` cover every segment and kernel.
    """

    def __init__(
        self,
        fusion: Fusion,
        segments: tuple[Segment, ...],
        kernels: Mapping[int, Any],
        reason: str,
    ) -> None:
        self.fusion, self.segments, self.reason = fusion, segments, reason
        self.kernels = dict(kernels)

    # -- the CompiledFusion surface -----------------------------------------------------------
    def _only(self, attribute: str) -> Any:
        """The one kernel, for a single-valued *attribute*."""
        if len(self.kernels) == 1:
            return next(iter(self.kernels.values()))
        kinds = ", ".join(seg.kind for seg in self.segments)
        where = (
            f"read it per kernel (compiled.kernels[i].{attribute}, i a segment index of "
            f"compiled.segments: {sorted(self.kernels)})"
            if self.kernels
            else "compiled.kernels is empty: the framework computes every segment"
        )
        raise UsageError(
            f"{self.fusion.origin} runs as {len(self.segments)} segments ({kinds}) with "
            f"{len(self.kernels)} matmul kernels, so .{attribute} has no single value; "
            f"{where}; see compiled.explain()"
        )

    @property
    def spec(self) -> KernelSpec:
        """The KernelSpec of the one kernel segment."""
        return self._only("spec").spec

    @property
    def params(self) -> MatmulParams:
        """The final parameters of the one kernel segment."""
        return self._only("params").params

    @property
    def provenance(self) -> Provenance:
        """Who chose the parameters of the one kernel segment."""
        return self._only("provenance").provenance

    @property
    def kernel_name(self) -> str:
        """The name of the one kernel segment's kernel."""
        return self._only("kernel_name").kernel_name

    @property
    def ptx(self) -> str:
        """PTX of the one kernel segment."""
        return self._only("ptx").ptx

    @property
    def source(self) -> str:
        """Generated source of the one kernel segment."""
        return self._only("source").source

    @property
    def sass(self) -> str:
        """SASS of the one kernel segment."""
        return self._only("sass").sass

    def explain(self) -> str:
        """Why the fusion was segmented, each segment (ops, inputs → outputs, its cut), then
        the plan of each kernel segment."""
        parts = [
            f"segmented (no single kernel takes this fusion): {self.reason}",
            explain_segments(self.segments),
            *(f"plan of segment {i + 1}:\n{k.explain()}" for i, k in self.kernels.items()),
        ]
        return "\n".join(parts)

    def dump(
        self, directory: str | Path | None = None, kinds: Sequence[str] = kernel_dump.KINDS
    ) -> list[Path]:
        """``CompiledFusion.dump`` of every kernel segment (files named by each kernel)."""
        return [path for k in self.kernels.values() for path in k.dump(directory, kinds)]

    def kernel_jobs(self) -> list[Any]:
        """``CompiledFusion.kernel_jobs`` of every kernel segment."""
        return [job for k in self.kernels.values() for job in k.kernel_jobs()]

    def execute(self, inputs: Sequence[object], stream: object = None) -> list[object]:
        """Run every segment in order on *inputs* (one per fusion input); returns the outputs.

        Segments other than matmul kernels run on the framework's current stream, so *stream*
        must be None when there are any.
        """
        if len(inputs) != len(self.fusion.inputs):
            raise UsageError(
                f"the fusion takes {len(self.fusion.inputs)} inputs; got {len(inputs)}"
            )
        if stream is not None and len(self.kernels) != len(self.segments):
            raise UsageError(
                "stream=: this fusion has segments that run with the framework's own ops, on "
                "its current stream; make the stream current instead (e.g. with "
                "torch.cuda.stream(s)) and pass stream=None"
            )
        tensors = [x for v, x in zip(self.fusion.inputs, inputs, strict=True)
                   if isinstance(v, TensorView)]  # fmt: skip
        backend = None
        env = {v.name: x for v, x in zip(self.fusion.inputs, inputs, strict=True)}
        for i, seg in enumerate(self.segments):
            args = [env[name] for name in seg.inputs]
            if i in self.kernels:
                outs = self.kernels[i].execute(args, stream=stream)
            else:
                backend = backend or backend_for(kind_of(tensors[0]))
                outs = run_ops(seg.fusion, args, backend)
            env.update(zip(seg.outputs, outs, strict=True))
        return [env[t.name] for t in self.fusion.outputs]


class SymbolicSegments:
    """A fusion with symbolic extents that no kernel takes whole (``mp.compile``'s answer for
    it): each distinct set of input shapes concretizes it, and that is compiled as
    ``mp.compile`` compiles a concrete fusion (segmented, or one kernel where one takes it).
    Kernels are not shared between shapes. ``reason`` says why it is segmented; the other
    attributes are those of the latest call's compiled fusion (``latest``)."""

    def __init__(
        self,
        fusion: Fusion,
        device: Device,
        *,
        pm: PluginManager,
        overrides: Mapping[str, object] | None,
        reason: str,
    ) -> None:
        check_param_names(overrides or {}, source="caller")
        self.fusion, self.device, self.reason = copy.deepcopy(fusion), device, reason
        self._pm, self._overrides = pm, overrides
        self._compile_time = CompileTime(pm, self.fusion.origin)
        self._by_shapes: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._latest: Any = None
        self._lock = threading.Lock()
        inputs = self.fusion.inputs
        self._tensors = tuple(i for i, v in enumerate(inputs) if isinstance(v, TensorView))

    def specialize(self, shapes: Sequence[object]) -> Any:
        """The compiled fusion for input *shapes* (one per input: a shape or an array; anything
        for a scalar), compiled if it was not yet; no GPU needed."""
        if len(shapes) != len(self.fusion.inputs):
            raise UsageError(
                f"specialize takes one shape per fusion input ({len(self.fusion.inputs)}); "
                f"got {len(shapes)}"
            )
        key = tuple(_shape(shapes[i]) for i in self._tensors)
        self._latest = self._by_shapes.get(key) or self._compile(key)
        return self._latest

    def execute(self, inputs: Sequence[object], stream: object = None) -> list[object]:
        """Run on *inputs* with the compiled fusion of their shapes (compiled on first sight)."""
        if len(inputs) != len(self.fusion.inputs):
            raise LaunchError(
                f"the fusion takes {len(self.fusion.inputs)} inputs; got {len(inputs)}"
            )
        return self.specialize(inputs).execute(inputs, stream)  # type: ignore[no-any-return]

    def _compile(self, key: tuple[tuple[int, ...], ...]) -> Any:
        with self._lock:
            hit = self._by_shapes.get(key)
            if hit is not None:
                return hit
            shapes: list[Sequence[int] | None] = [None] * len(self.fusion.inputs)
            for pos, shape in zip(self._tensors, key, strict=True):
                shapes[pos] = shape
            work = concretize(self.fusion, shapes, error=LaunchError, where="execute")
            with self._compile_time.planning():
                compiled = compile_concrete(
                    work, self.device, pm=self._pm, overrides=self._overrides
                )
            if len(self._by_shapes) >= MAX_SHAPES:
                del self._by_shapes[next(iter(self._by_shapes))]
            self._by_shapes[key] = compiled
            return compiled

    @property
    def latest(self) -> Any:
        """The compiled fusion of the latest call's shapes."""
        if self._latest is None:
            raise UsageError(
                f"{self.fusion.origin} has symbolic extents and no kernel takes it whole, so it "
                "is segmented per call's shapes: nothing is compiled before a call; run "
                "execute(inputs) or specialize(shapes) first"
            )
        return self._latest

    @property
    def spec(self) -> KernelSpec:
        """The latest call's KernelSpec."""
        return self.latest.spec  # type: ignore[no-any-return]

    @property
    def params(self) -> MatmulParams:
        """The latest call's final parameters."""
        return self.latest.params  # type: ignore[no-any-return]

    @property
    def provenance(self) -> Provenance:
        """Who chose the latest call's parameters."""
        return self.latest.provenance  # type: ignore[no-any-return]

    @property
    def kernel_name(self) -> str:
        """The latest call's kernel name."""
        return self.latest.kernel_name  # type: ignore[no-any-return]

    @property
    def ptx(self) -> str:
        """PTX of the latest call's kernel."""
        return self.latest.ptx  # type: ignore[no-any-return]

    @property
    def source(self) -> str:
        """Generated source of the latest call's kernel."""
        return self.latest.source  # type: ignore[no-any-return]

    @property
    def sass(self) -> str:
        """SASS of the latest call's kernel."""
        return self.latest.sass  # type: ignore[no-any-return]

    def explain(self) -> str:
        """The latest call's ``explain()``."""
        return self.latest.explain()  # type: ignore[no-any-return]

    def dump(
        self, directory: str | Path | None = None, kinds: Sequence[str] = kernel_dump.KINDS
    ) -> list[Path]:
        """The latest call's ``dump()``."""
        return self.latest.dump(directory, kinds)  # type: ignore[no-any-return]


def _shape(value: object) -> tuple[int, ...]:
    if isinstance(value, Sequence) and all(is_int(e) for e in value):
        return tuple(int(e) for e in value)
    return shape_of(value)


def segmented(
    fusion: Fusion,
    device: Device,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
    refused: MatmulError | None,
) -> SegmentedFusion | SymbolicSegments:
    """``mp.compile`` of a *fusion* no kernel takes whole: *refused* says why
    (None: a symbolic fusion of several matmuls, segmented per call's shapes). *overrides*
    apply to every kernel; their names are checked even when there is none."""
    if refused is None:
        reason = "several matmuls (segmented per call's shapes: the extents are symbolic)"
    else:
        reason = " ".join(str(refused).split())
    if symbolic_dims(fusion):
        return SymbolicSegments(fusion, device, pm=pm, overrides=overrides, reason=reason)
    check_param_names(overrides or {}, source="caller")
    fusion = copy.deepcopy(fusion)  # later changes to the caller's fusion stay out
    segments = segment(fusion, pm=pm, refused=refused)
    kernels = {
        i: compile_concrete(seg.fusion, device, pm=pm, overrides=overrides)
        for i, seg in enumerate(segments)
        if seg.kind == "matmul"  # analysis takes it, so it compiles to one kernel
    }
    PLAN.info(
        "%s is compiled as %d segments (%s): %s",
        fusion.origin, len(segments), ", ".join(seg.kind for seg in segments), reason,
    )  # fmt: skip
    return SegmentedFusion(fusion, segments, kernels, reason)


def _k_major(
    fusion: Fusion,
    analysis: MatmulAnalysis,
    device: Device,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
    refused: NoSchedulerError,
) -> SegmentedFusion | None:
    """The fusion as a copy of its operands K-major then the kernel reading the copies, when
    no scheduler takes its operands as laid out but one takes them K-major (FP8 wgmma reads
    K-major operands only); None otherwise. ``explain`` shows the copy's segment and why."""
    problem = analysis.problem
    if not problem.operand_dtype.is_float8 or (problem.a_k_inner and problem.b_k_inner):
        return None  # (16-bit operands: every layout has a kernel, or a reason to give)
    work = copy.deepcopy(fusion)
    by_name = {v.name: v for v in work.inputs if isinstance(v, TensorView)}
    operands = [
        by_name[binding.name]
        for binding, k_inner in ((analysis.a, problem.a_k_inner), (analysis.b, problem.b_k_inner))
        if not k_inner and binding.name in by_name
    ]
    if len(operands) != (not problem.a_k_inner) + (not problem.b_k_inner):
        return None  # an operand the translation renamed: no copy to make
    reason = "; ".join(f"{r.name}: {r.reason}" for r in refused.rejections)
    segments = k_major_segments(work, operands, reason, pm)
    copied = analyze(segments[1].fusion, pm=pm).problem
    if not (copied.a_k_inner and copied.b_k_inner):
        return None  # the copies read no more K-major (K = 1): the refusal stands
    try:
        kernel = compile_concrete(segments[1].fusion, device, pm=pm, overrides=overrides)
    except NoSchedulerError:
        return None  # K-major does not help: the refusal stands
    PLAN.info("%s: %s", fusion.origin, segments[0].reason)
    return SegmentedFusion(work, segments, {1: kernel}, segments[0].reason)


def compile_concrete(
    fusion: Fusion,
    device: Device,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
) -> CompiledFusion | SegmentedFusion | SymbolicSegments:
    """``mp.compile`` of a *fusion* without symbolic extents: a ``CompiledFusion`` when one
    kernel takes it whole, else its segments (``segmented``, which compiles each matmul segment
    here in turn)."""
    try:
        analysis = analyze(fusion, pm=pm)
    except UnsupportedFusionError as refused:
        return segmented(fusion, device, pm=pm, overrides=overrides, refused=refused)
    try:
        spec = plan_problem(analysis.problem, device, pm=pm, overrides=overrides)
    except NoSchedulerError as refused:
        problem = analysis.problem
        prologue = problem.a_prologue_ops or problem.b_prologue_ops
        if problem.num_patterns == 1 and not prologue:
            relaid = _k_major(fusion, analysis, device, pm=pm, overrides=overrides, refused=refused)
            if relaid is None:
                raise
            return relaid
        # several matmuls, or a prologue computed in a segment of its own
        return segmented(fusion, device, pm=pm, overrides=overrides, refused=refused)
    return compile_planned(analysis, spec, pm=pm, overrides=overrides)
