"""``mp.compile``: fusion → analysis → plan → scheduler-built kernel, and launching it."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .analysis import MatmulAnalysis, TensorBinding, analyze
from .choices import KernelSpec
from .device import Device, get_device
from .errors import KernelBuildError, LaunchError, PluginResultError
from .fusion import Fusion
from .manager import get_plugin_manager
from .plan import plan_problem

if TYPE_CHECKING:
    import pluggy

    from .cuda.tensors import DeviceTensor
    from .params import MatmulParams


@attrs.frozen(kw_only=True)
class LaunchArgs:
    """A launch, as a scheduler's artifact receives it: flat device views with role strides.

    ``epilogue_inputs``, ``scalars`` and ``outputs`` follow the order of the spec's
    ``EpilogueProgram`` (``inputs``, ``scalars``, ``outputs``).
    """

    a: DeviceTensor
    b: DeviceTensor
    epilogue_inputs: tuple[DeviceTensor, ...]
    scalars: tuple[float, ...]
    outputs: tuple[DeviceTensor, ...]


class KernelArtifact(Protocol):
    """What ``mmaplug_build_kernel`` returns: a launchable kernel for one analysed fusion."""

    kernel_name: str

    def ptx(self) -> str:
        """The PTX of the main kernel (compiled on demand; no GPU needed)."""

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel on *args* (asynchronously, on the default stream)."""


class CompiledFusion:
    """A fusion planned and built for one device; ``execute`` runs it on device tensors."""

    def __init__(self, analysis: MatmulAnalysis, spec: KernelSpec, artifact: KernelArtifact) -> None:
        self.analysis = analysis
        self.spec = spec
        self._artifact = artifact
        program = analysis.epilogue
        by_name = {b.name: b for b in analysis.epilogue_inputs}
        self._epilogue_bindings = tuple(by_name[i.name] for i in program.inputs)
        scalar_index = {analysis.fusion.inputs[i].name: i for i in analysis.scalar_inputs}
        self._scalar_positions = tuple(scalar_index[name] for name in program.scalars)
        self._num_inputs = len(analysis.fusion.inputs)

    @property
    def params(self) -> MatmulParams:
        """The final parameters."""
        return self.spec.params

    @property
    def provenance(self) -> Any:
        """Who chose each parameter, and every change made after them."""
        return self.spec.provenance

    @property
    def kernel_name(self) -> str:
        """The generated kernel's stable name."""
        return self._artifact.kernel_name

    @property
    def ptx(self) -> str:
        """PTX of the main kernel for the spec's device."""
        return self._artifact.ptx()

    def execute(self, inputs: Sequence[object]) -> list[object]:
        """Run on *inputs* (in fusion input order); returns new outputs of the first input's kind."""
        from .cuda.tensors import adapt, allocate

        if len(inputs) != self._num_inputs:
            raise LaunchError(
                f"the fusion takes {self._num_inputs} inputs; got {len(inputs)}"
            )
        analysis = self.analysis
        like = inputs[analysis.a.index]

        def view(binding: TensorBinding) -> DeviceTensor:
            return adapt(inputs[binding.index], binding)

        scalars = []
        for pos in self._scalar_positions:
            value = inputs[pos]
            if isinstance(value, builtins.bool) or not isinstance(value, int | float):
                raise LaunchError(f"input {pos} is a scalar of the fusion; got {value!r}")
            scalars.append(float(value))
        outputs = [allocate(like, b.shape, b.dtype) for b in analysis.outputs]
        self._artifact.launch(
            LaunchArgs(
                a=view(analysis.a),
                b=view(analysis.b),
                epilogue_inputs=tuple(view(b) for b in self._epilogue_bindings),
                scalars=tuple(scalars),
                outputs=tuple(adapt(o, b) for o, b in zip(outputs, analysis.outputs, strict=True)),
            )
        )
        return outputs


def compile(  # noqa: A001 - the contract's name (mp.compile)
    fusion: Fusion,
    device: Device | str | None = None,
    *,
    pm: pluggy.PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
) -> CompiledFusion:
    """Plan, schedule and build *fusion* for *device* (a preset name plans without a GPU)."""
    pm = pm or get_plugin_manager()
    target = get_device(device)
    analysis = analyze(fusion, pm=pm)
    spec = plan_problem(analysis.problem, target, pm=pm, overrides=overrides)
    artifact = pm.hook.mmaplug_build_kernel(spec=spec, analysis=analysis)
    if artifact is None:
        raise KernelBuildError(
            f"no plugin built a kernel for scheduler {spec.scheduler!r}; the plugin that "
            "offered it must implement mmaplug_build_kernel"
        )
    for attr in ("kernel_name", "ptx", "launch"):
        if not hasattr(artifact, attr):
            raise PluginResultError(
                f"mmaplug_build_kernel of scheduler {spec.scheduler!r} returned "
                f"{type(artifact).__name__}, which has no {attr!r}",
                plugin=spec.scheduler,
            )
    pm.hook.mmaplug_kernel_built(spec=spec, artifact=artifact)
    return CompiledFusion(analysis, spec, artifact)
