"""SegmentedFusion: a fusion's segments run in order, matmul kernels and framework ops between."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import dump as kernel_dump
from .analysis import analyze
from .cuda.frameworks import kind_of
from .errors import UsageError
from .framework_ops import backend_for, run_ops
from .fusion import Fusion, TensorView
from .log import PLAN
from .params import check_param_names
from .plan import plan_problem
from .segment import Segment, explain_segments

if TYPE_CHECKING:
    from .choices import KernelSpec, Provenance
    from .compile import CompiledFusion
    from .device import Device
    from .manager import PluginManager
    from .params import MatmulParams


class SegmentedFusion:
    """A fusion ``mp.compile`` runs as segments (``mmaplug.segment``) because no kernel takes
    it whole: each ``"matmul"`` segment is a ``CompiledFusion`` (``kernels``, by segment
    index), the others run with the inputs' framework (torch, CuPy; host arrays in the
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
        kernels: Mapping[int, CompiledFusion],
        reason: str,
    ) -> None:
        self.fusion, self.segments, self.reason = fusion, segments, reason
        self.kernels = dict(kernels)

    # -- the CompiledFusion surface -----------------------------------------------------------
    def _only(self, attribute: str) -> CompiledFusion:
        """The one kernel, for a single-valued *attribute*."""
        if len(self.kernels) == 1:
            return next(iter(self.kernels.values()))
        kinds = ", ".join(seg.kind for seg in self.segments)
        raise UsageError(
            f"{self.fusion.origin} runs as {len(self.segments)} segments ({kinds}) with "
            f"{len(self.kernels)} matmul kernels, so .{attribute} has no single value; read "
            f"it per kernel (compiled.kernels[i].{attribute}, i a segment index of "
            f"compiled.segments: {sorted(self.kernels)}) or see compiled.explain()"
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

    def execute(self, inputs: Sequence[Any], stream: object = None) -> list[Any]:
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


def compile_segments(
    fusion: Fusion,
    segments: tuple[Segment, ...],
    device: Device,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
    reason: str,
) -> SegmentedFusion:
    """*segments* of *fusion*, each matmul segment compiled for *device* (*overrides* apply to
    every kernel; their names are checked even when there is none); *reason*: why it was cut."""
    from .compile import compiled

    check_param_names(overrides or {}, source="caller")
    kernels = {}
    for i, seg in enumerate(segments):
        if seg.kind == "matmul":
            analysis = analyze(seg.fusion, pm=pm)
            spec = plan_problem(analysis.problem, device, pm=pm, overrides=overrides)
            kernels[i] = compiled(analysis, spec, pm=pm, overrides=overrides)
    PLAN.info(
        "%s is compiled as %d segments (%s): %s",
        fusion.origin, len(segments), ", ".join(seg.kind for seg in segments), reason,
    )  # fmt: skip
    return SegmentedFusion(fusion, segments, kernels, reason)
