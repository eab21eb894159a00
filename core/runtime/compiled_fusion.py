"""CompiledFusion: a fusion planned and built for one device, and launching its kernel.

``execute`` checks the tensors of a new input signature once and binds a launch for it (the
artifact's ``bind``); later calls only read data addresses. A kernel that declines particular
tensors hands them to a kernel planned without its scheduler (``FallbackWarning``).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from mmaplug import env
from mmaplug.cuda.frameworks import allocate, allocator, kind_of, probe_all, stream_reader
from mmaplug.cuda.launching import simulating
from mmaplug.cuda.streams import relaxed_capture, stream_handle
from mmaplug.errors import (
    DeclinedLaunchError,
    FallbackWarning,
    LaunchError,
    MatmulError,
    PluginError,
)
from mmaplug.ir.arguments import is_number
from mmaplug.ir.dtypes import DType
from mmaplug.log import LAUNCH
from mmaplug.planning.artifact import BoundLaunch, KernelArtifact, LaunchArgs
from mmaplug.planning.choices import KernelSpec
from mmaplug.planning.plan import explain
from mmaplug.runtime import dump as kernel_dump

if TYPE_CHECKING:
    from mmaplug.analysis.bindings import MatmulAnalysis
    from mmaplug.planning.choices import Provenance
    from mmaplug.planning.params import MatmulParams


class _Bound(NamedTuple):
    """A bound launch and what each call needs to feed it, prepared for the inputs' framework."""

    launch: BoundLaunch
    outputs: tuple[tuple[tuple[int, ...], DType], ...]  # shapes and dtypes to allocate
    allocators: tuple[Callable[[], object], ...]  # each output, on the current stream
    workspace: int  # float32 elements of scratch, passed after the outputs (0: none)
    scratch: Callable[[], object] | None  # allocates the workspace on the current stream
    stream: Callable[[], int]  # the framework's current stream
    address: Callable[[object], int]  # an allocated tensor's data address


# re-plans without the declining schedulers: (spec, artifact, a note for the warning)
Replan = Callable[[Mapping[str, str]], tuple[KernelSpec, KernelArtifact, str]]


class CompiledFusion:
    """A fusion planned and built for one device; ``execute`` runs it on device tensors.

    When the built kernel declines particular tensors (``DeclinedLaunchError``: e.g. TMA needs
    16-byte aligned addresses), those tensors run on a kernel planned without that scheduler,
    built once, with a ``FallbackWarning`` naming both.
    """

    def __init__(
        self,
        analysis: MatmulAnalysis,
        spec: KernelSpec,
        artifact: KernelArtifact,
        replan: Replan | None = None,
    ) -> None:
        self.analysis = analysis
        self.spec = spec
        self._artifact = artifact
        self._replan = replan
        self._fallbacks: dict[tuple[str, ...], KernelArtifact] = {}
        program = analysis.epilogue
        by_name = {b.name: b for b in analysis.epilogue_inputs}
        self._epilogue_bindings = tuple(by_name[i.name] for i in program.inputs)
        scalar_index = {analysis.fusion.inputs[i].name: i for i in analysis.scalar_inputs}
        self._scalar_positions = tuple(scalar_index[name] for name in program.scalars)
        self._num_inputs = len(analysis.fusion.inputs)
        self._tensor_positions = (
            analysis.a.index,
            analysis.b.index,
            *(b.index for b in analysis.bs[1:]),
            *(b.index for b in analysis.scales),
            *(b.index for b in self._epilogue_bindings),
        )
        self._bound: dict[tuple, _Bound] = {}
        self._lock = threading.RLock()  # binding and fallback planning, once per signature
        self._simulate = simulating()
        # MMAPLUG_FAST_LAUNCH=0 checks every call and kernel argument (debugging aid)
        self._checked_only = self._simulate or not env.flag("MMAPLUG_FAST_LAUNCH", default=True)

    @property
    def params(self) -> MatmulParams:
        """The final parameters."""
        return self.spec.params

    @property
    def provenance(self) -> Provenance:
        """Who chose each parameter, and every change made after them."""
        return self.spec.provenance

    @property
    def kernel_name(self) -> str:
        """The generated kernel's stable name."""
        return self._artifact.kernel_name

    @property
    def ptx(self) -> str:
        """PTX of the main kernel for the spec's device (NVVM compiles it once; no GPU needed)."""
        return self._artifact.ptx()

    @property
    def source(self) -> str:
        """The generated kernel source (Numba-CUDA Python) that ``ptx`` is compiled from.

        :raises KernelBuildError: the scheduler plugin's artifact has no ``source()``.
        """
        return kernel_dump.kernel_source(self.spec, self._artifact)

    @property
    def sass(self) -> str:
        """SASS of the main kernel as launches load it (the artifact's ``cubin()``; else
        ``ptx`` linked by nvJitLink), disassembled by ``cuobjdump`` or ``nvdisasm``.

        :raises UnsupportedTargetError: neither tool is on PATH nor pip-installed.
        """
        return kernel_dump.sass(self._artifact)

    def explain(self) -> str:
        """The plan: how the scheduler and every parameter were decided (``mmaplug explain``)."""
        return explain(self.spec)

    def kernel_jobs(self) -> list[Any]:
        """The builds of the planned kernel as picklable jobs (``mp.prebuild`` runs them):
        the artifact's optional ``kernel_jobs()``, else none (it builds at its first launch).

        :raises PluginError: the scheduler plugin's ``kernel_jobs()`` raised.
        """
        jobs = getattr(self._artifact, "kernel_jobs", None)
        if jobs is None:
            return []
        try:
            return list(jobs())
        except MatmulError:
            raise
        except Exception as error:
            raise PluginError(
                f"the {self.spec.scheduler} scheduler's kernel_jobs() of {self.kernel_name} "
                f"raised {type(error).__name__}: {error}",
                plugin=self.spec.scheduler, hook="mmaplug_build_kernel",
            ) from error  # fmt: skip

    def dump(
        self, directory: str | Path | None = None, kinds: Sequence[str] = kernel_dump.KINDS
    ) -> list[Path]:
        """Write *kinds* (``source``, ``ptx``, ``sass``, ``plan``) as ``MMAPLUG_DUMP`` does.

        :param directory: Default ``MMAPLUG_DUMP_DIR``, else ``./mmaplug_dump``.
        :returns: The files written; without a SASS tool, a note says why instead of the SASS.
        """
        where = Path(directory).absolute() if directory else kernel_dump.directory()
        return kernel_dump.write(self.spec, self._artifact, kinds, where)

    def execute(self, inputs: Sequence[object], stream: object = None) -> list[object]:
        """Run on *inputs* (in fusion input order); returns new outputs of the first input's kind.

        The first call with a given input signature (kinds, shapes, strides, dtypes, alignment)
        checks every tensor and binds a launch; later calls with that signature only read the
        data addresses and launch. Safe to call from several threads at once, and to capture
        into a CUDA graph (``torch.cuda.graph``) once a call has bound the signature.

        :param stream: Where to launch: a torch, CuPy or Numba stream, an object with
            ``__cuda_stream__`` or a raw ``CUstream`` handle. Default: the current stream of
            the inputs' framework (torch's or CuPy's; Numba's default stream otherwise).
            Outputs are allocated by that framework, ordered on that stream.
        """
        if len(inputs) != self._num_inputs:
            raise LaunchError(f"the fusion takes {self._num_inputs} inputs; got {len(inputs)}")
        scalars = self._scalars(inputs) if self._scalar_positions else ()
        explicit = None if stream is None else stream_handle(stream)
        if self._checked_only:
            return self._execute_checked(inputs, scalars, explicit)
        key, addresses = probe_all(inputs, self._tensor_positions)
        bound = self._bound.get(key)
        outputs: list[object] | None = None
        if bound is None:
            outputs, bound = self._bind(inputs, key, explicit)
        current = bound.stream()
        handle = current if explicit is None else explicit
        like = inputs[self._tensor_positions[0]]
        if outputs is None:  # ordered on the framework's current stream, or on the one asked
            outputs = (
                [new() for new in bound.allocators]
                if handle == current
                else [allocate(like, s, dtype, handle) for s, dtype in bound.outputs]
            )
        address = bound.address
        for out in outputs:
            addresses.append(address(out))
        if bound.workspace:  # scratch from the framework: ordered on the stream, graph-safe
            scratch = (
                bound.scratch()  # type: ignore[misc]
                if handle == current
                else allocate(like, (bound.workspace,), DType.float32, handle)
            )
            addresses.append(address(scratch))
        bound.launch(addresses, scalars, handle)
        return outputs

    def _bind(
        self, inputs: Sequence[object], key: tuple, stream: int | None
    ) -> tuple[list[object], _Bound]:
        """Check *inputs*, allocate their outputs and bind a launch for their signature."""
        with self._lock, relaxed_capture():
            outputs, args = self._checked_args(inputs, stream)
            bound = self._bound.get(key)  # another thread may have bound it meanwhile
            if bound is None:
                start = time.perf_counter()
                launch = self._unless_declined(lambda art: art.bind(args))
                like: Any = inputs[self._tensor_positions[0]]
                kind = kind_of(like)
                shapes = tuple((tuple(o.shape), o.dtype) for o in self.analysis.outputs)
                workspace = int(getattr(launch, "workspace", 0))
                address: Any = type(like).data_ptr if kind == "torch" else _cai_address
                bound = _Bound(
                    launch=launch,
                    outputs=shapes,
                    allocators=tuple(allocator(like, s, dtype) for s, dtype in shapes),
                    workspace=workspace,
                    scratch=allocator(like, (workspace,), DType.float32) if workspace else None,
                    stream=stream_reader(kind, like),
                    address=address,
                )
                self._bound[key] = bound
                self._log_bound(key, time.perf_counter() - start)
        return outputs, bound

    def _log_bound(self, key: tuple, seconds: float) -> None:
        """A launch bound for a new input signature (the first one compiles the kernel)."""
        LAUNCH.debug("%s: no launch for this input signature yet: %s", self.kernel_name, key)
        LAUNCH.info(
            "%s: first launch for these tensors prepared in %.3f s (%d signatures bound; "
            "includes loading or compiling the machine code)",
            self.kernel_name, seconds, len(self._bound),
        )  # fmt: skip

    def _scalars(self, inputs: Sequence[object]) -> list[float]:
        scalars = []
        for pos in self._scalar_positions:
            value = inputs[pos]
            if not is_number(value):  # Python and numpy numbers, not bools
                raise LaunchError(f"input {pos} is a scalar of the fusion; got {value!r}")
            scalars.append(float(value))
        return scalars

    def _checked_args(
        self, inputs: Sequence[object], stream: int | None
    ) -> tuple[list[object], LaunchArgs]:
        """Check every tensor against the fusion, allocate outputs, view all for a kernel.

        *stream*: the caller's explicit stream handle (None: the framework's current one).
        """
        from mmaplug.cuda.kernel_views import (  # (its allocate: tests record allocations)
            adapt,
            allocate,
        )

        analysis = self.analysis
        like = inputs[analysis.a.index]
        outputs = [allocate(like, b.shape, b.dtype, stream) for b in analysis.outputs]
        if stream is None:
            kind = kind_of(like)
            stream = 0 if kind == "numpy" else stream_reader(kind, like)()
        args = LaunchArgs(
            a=adapt(inputs[analysis.a.index], analysis.a),
            b=adapt(inputs[analysis.b.index], analysis.b),
            epilogue_inputs=tuple(adapt(inputs[b.index], b) for b in self._epilogue_bindings),
            scalars=(),
            outputs=tuple(adapt(o, b) for o, b in zip(outputs, analysis.outputs, strict=True)),
            problem=analysis.problem,
            stream=stream,
            more_b=tuple(adapt(inputs[b.index], b) for b in analysis.bs[1:]),
            scales=tuple(adapt(inputs[b.index], b) for b in analysis.scales),
        )
        return outputs, args

    def _execute_checked(
        self, inputs: Sequence[object], scalars: Sequence[float], stream: int | None
    ) -> list[object]:
        outputs, args = self._checked_args(inputs, stream)
        launch = attrs.evolve(args, scalars=tuple(scalars))
        with self._lock:  # a fallback is planned once
            self._unless_declined(lambda art: art.launch(launch))
        return outputs

    def _unless_declined(self, use: Callable[[KernelArtifact], Any]) -> Any:
        """*use* the built kernel; if it declines these tensors, the next scheduler's kernel,
        and so on down while each declines (decode, then hopper, then ampere)."""
        artifact, declined_by = self._artifact, dict[str, str]()
        while True:
            try:
                return use(artifact)
            except DeclinedLaunchError as declined:
                if self._replan is None or declined.scheduler in declined_by:
                    raise
                declined_by[declined.scheduler] = declined.reason
                key = tuple(declined_by)  # the schedulers that declined, in turn
                fallback = self._fallbacks.get(key)
                if fallback is None:
                    spec, fallback, note = self._replan(dict(declined_by))
                    self._fallbacks[key] = fallback
                    warnings.warn(
                        FallbackWarning(
                            f"{declined}; tensors like these run on the {spec.scheduler} kernel "
                            f"{fallback.kernel_name} instead{note}"
                        ),
                        stacklevel=4,
                    )
                artifact = fallback


def _cai_address(obj: object) -> int:
    """The data address of a CuPy or Numba array (``__cuda_array_interface__``)."""
    return int(obj.__cuda_array_interface__["data"][0])  # type: ignore[attr-defined]
