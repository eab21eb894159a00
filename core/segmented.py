"""SegmentedFusion: a fusion's segments run in order, matmul kernels and framework ops between."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .compile import compile as compile_fusion
from .cuda.frameworks import kind_of
from .device import Device
from .errors import UsageError
from .framework_ops import backend_for, run_ops
from .fusion import Fusion, TensorView, as_fusion
from .manager import PluginManager, get_plugin_manager
from .segment import Segment, explain_segments, segment


class SegmentedFusion:
    """A fusion compiled as segments (``mmaplug.segment``): each ``"matmul"`` segment is a
    compiled kernel, the others run with the inputs' framework (torch, CuPy; host arrays in the
    simulator). Intermediates are the framework's allocations, freed when a call returns."""

    def __init__(
        self,
        fusion: Fusion,
        segments: tuple[Segment, ...],
        device: Device | str | None,
        *,
        pm: PluginManager,
        overrides: Mapping[str, object] | None,
    ) -> None:
        self.fusion, self.segments = fusion, segments
        self.kernels = {
            i: compile_fusion(seg.fusion, device, pm=pm, overrides=overrides)
            for i, seg in enumerate(segments)
            if seg.kind == "matmul"
        }

    def explain(self) -> str:
        """The segments, their ops and why each was cut."""
        return explain_segments(self.segments)

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


def compile_segmented(
    fusion: Fusion,
    device: Device | str | None = None,
    *,
    pm: PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
) -> SegmentedFusion:
    """``mp.compile`` for any fusion ``mp.evaluate`` runs: segmented where no kernel takes it
    whole (a fusion one kernel takes is one segment). *overrides* apply to every kernel."""
    fusion = as_fusion(fusion, "compile_segmented")
    pm = pm or get_plugin_manager()
    return SegmentedFusion(fusion, segment(fusion, pm=pm), device, pm=pm, overrides=overrides)
