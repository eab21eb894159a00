"""``mp.compile``: fusion → analysis → plan → scheduler-built kernel, and launching it."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import attrs

from mmaplug import env
from mmaplug.analysis.matmul_analysis import MatmulAnalysis, analyze
from mmaplug.analysis.translate import find_matmul_patterns
from mmaplug.cuda.frameworks import allocate, allocator, kind_of, probe_all, stream_reader
from mmaplug.cuda.launching import simulating
from mmaplug.cuda.streams import relaxed_capture, stream_handle
from mmaplug.errors import (
    DeclinedLaunchError,
    FallbackWarning,
    InvalidParamsError,
    KernelBuildError,
    LaunchError,
    MatmulError,
    NoSchedulerError,
    PluginError,
    PluginResultError,
    UnsupportedFusionError,
)
from mmaplug.ir.arguments import is_number
from mmaplug.ir.dtypes import DType
from mmaplug.ir.fusion import Fusion, as_fusion
from mmaplug.ir.symbolic import symbolic_dims
from mmaplug.log import BUILD, LAUNCH
from mmaplug.planning.choices import KernelSpec, Provenance
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.guard import SKIPPED, Guard, scheduler_label, wrong
from mmaplug.planning.manager import describe, get_plugin_manager
from mmaplug.planning.plan import explain, plan_problem
from mmaplug.planning.scheduler_registry import schedulers, warn_deprecated
from mmaplug.runtime import dump as kernel_dump
from mmaplug.runtime.specialize import KernelPool, SymbolicFusion

if TYPE_CHECKING:
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.cuda.kernel_views import DeviceTensor
    from mmaplug.planning.manager import PluginManager
    from mmaplug.planning.params import MatmulParams
    from mmaplug.runtime.segmented_fusion import SegmentedFusion, SymbolicSegments


@attrs.frozen(kw_only=True)
class LaunchArgs:
    """A launch, as a scheduler's artifact receives it: flat device views with role strides.

    ``epilogue_inputs``, ``scalars`` and ``outputs`` follow the order of the spec's
    ``EpilogueProgram`` (``inputs``, ``scalars``, ``outputs``). ``stream`` is the raw
    ``CUstream`` handle to launch on (the caller's; 0 is the legacy default stream).
    ``problem`` is this launch's: take m, n, k and batch from it, not from the spec the
    artifact was built for (one kernel serves every shape class planned alike).
    ``more_b``: B operands 1, 2, ... of a horizontal fusion (``MatmulAnalysis.bs[1:]``).
    """

    a: DeviceTensor
    b: DeviceTensor
    epilogue_inputs: tuple[DeviceTensor, ...]
    scalars: tuple[float, ...]
    outputs: tuple[DeviceTensor, ...]
    problem: MatmulProblem
    stream: int = 0
    more_b: tuple[DeviceTensor, ...] = ()


BoundLaunch = Callable[[Sequence[int], Sequence[float], int], None]


class _Bound(NamedTuple):
    """A bound launch and what each call needs to feed it, prepared for the inputs' framework."""

    launch: BoundLaunch
    outputs: tuple[tuple[tuple[int, ...], DType], ...]  # shapes and dtypes to allocate
    allocators: tuple[Callable[[], object], ...]  # each output, on the current stream
    workspace: int  # float32 elements of scratch, passed after the outputs (0: none)
    scratch: Callable[[], object] | None  # allocates the workspace on the current stream
    stream: Callable[[], int]  # the framework's current stream
    address: Callable[[object], int]  # an allocated tensor's data address


class KernelArtifact(Protocol):
    """What ``mmaplug_build_kernel`` returns: a launchable kernel for one analysed fusion.

    It is built once per kernel configuration (``mmaplug.runtime.specialize.kernel_key``) and then
    launched for every problem that differs from its spec's only in m, n, k and batch (a
    fusion with symbolic extents): read those from ``LaunchArgs.problem``.

    Optional: ``cubin() -> bytes``, the main kernel's cubin as launches load it, which kernel
    dumps disassemble (without it they link ``ptx()`` alone, which may not be what runs);
    ``kernel_jobs() -> list[KernelJob]``, the builds of the kernels its launches load, which
    ``mp.prebuild`` runs in worker processes (without it they build at the first launch).
    """

    kernel_name: str

    def ptx(self) -> str:
        """The PTX of the main kernel (compiled on demand; no GPU needed)."""

    def launch(self, args: LaunchArgs) -> None:
        """Run the kernel on *args* (asynchronously, on ``args.stream``)."""

    def bind(self, args: LaunchArgs) -> BoundLaunch:
        """A launcher for tensors shaped, strided and aligned like *args*' tensors.

        It is called with the data addresses of A, B, the further B operands of a horizontal
        fusion, the epilogue inputs and the outputs (in that order), the scalars and the raw
        stream handle, and must do as little host work as possible, allocate nothing and never
        synchronise (it may run under CUDA graph capture). A launcher that needs scratch memory
        says how much in a ``workspace`` attribute (float32 elements); ``execute`` then
        allocates it with the tensors' framework on the launch stream and passes its address
        after the outputs'.
        """


# re-plans without the declining schedulers: (spec, artifact, a note for the warning)
Replan = Callable[[Mapping[str, str]], tuple[KernelSpec, "KernelArtifact", str]]


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
        self._fallbacks: dict[str, KernelArtifact] = {}
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
        """*use* the built kernel; if it declines these tensors, the fallback kernel."""
        try:
            return use(self._artifact)
        except DeclinedLaunchError as declined:
            if self._replan is None:
                raise
            fallback = self._fallbacks.get(declined.scheduler)
            if fallback is None:
                spec, fallback, note = self._replan({declined.scheduler: declined.reason})
                self._fallbacks[declined.scheduler] = fallback
                warnings.warn(
                    FallbackWarning(
                        f"{declined}; tensors like these run on the {spec.scheduler} kernel "
                        f"{fallback.kernel_name} instead{note}"
                    ),
                    stacklevel=4,
                )
            return use(fallback)


def compile(  # noqa: A001 - the contract's name (mp.compile)
    fusion: Fusion,
    device: Device | str | None = None,
    *,
    pm: PluginManager | None = None,
    overrides: Mapping[str, object] | None = None,
) -> CompiledFusion | SymbolicFusion | SegmentedFusion | SymbolicSegments:
    """Plan, schedule and build *fusion* or a FusionDefinition for *device* (presets: no GPU).

    A fusion with symbolic (-1) extents gives a ``SymbolicFusion``, planned per call's shapes.
    A fusion no kernel takes whole (analysis refuses it, or no scheduler takes its several
    matmuls) gives a ``SegmentedFusion``: kernels for its matmuls, framework ops for the rest
    (``SymbolicSegments``, segmented per call's shapes, when its extents are symbolic).
    """
    from mmaplug.runtime.segmented_fusion import segmented

    fusion = as_fusion(fusion, "mp.compile")
    pm = pm or get_plugin_manager()
    target = get_device(device)

    def cut(refused: MatmulError | None) -> SegmentedFusion | SymbolicSegments:
        """No kernel takes *fusion* whole (*refused* says why): its segments."""
        return segmented(
            fusion, target, pm=pm, overrides=overrides, refused=refused, compile_fusion=compile
        )

    if symbolic_dims(fusion):

        def specialize(analysis: MatmulAnalysis, spec: KernelSpec, kernels: KernelPool) -> Any:
            return compiled(analysis, spec, pm=pm, overrides=overrides, kernels=kernels)

        if len(find_matmul_patterns(fusion, pm=pm)) > 1:  # no scheduler plans several yet
            return cut(None)
        try:
            return SymbolicFusion(fusion, target, pm=pm, overrides=overrides, specialize=specialize)
        except UnsupportedFusionError as refused:
            return cut(refused)
    try:
        analysis = analyze(fusion, pm=pm)
    except UnsupportedFusionError as refused:
        return cut(refused)
    try:
        spec = plan_problem(analysis.problem, target, pm=pm, overrides=overrides)
    except NoSchedulerError as refused:
        problem = analysis.problem
        prologue = problem.a_prologue_ops or problem.b_prologue_ops
        if problem.num_patterns == 1 and not prologue:
            raise
        return cut(refused)  # several matmuls, or a prologue computed in a segment of its own
    return compiled(analysis, spec, pm=pm, overrides=overrides)


def compiled(
    analysis: MatmulAnalysis,
    spec: KernelSpec,
    *,
    pm: PluginManager,
    overrides: Mapping[str, object] | None,
    kernels: KernelPool | None = None,
) -> CompiledFusion:
    """*analysis* planned as *spec*, with its kernel: one of *kernels* (those a fusion with
    symbolic extents built so far) when its configuration matches, else newly built."""
    target, shape_class = spec.device, spec.provenance.shape_class
    pool = KernelPool() if kernels is None else kernels

    def build(spec: KernelSpec) -> KernelArtifact:
        return pool.get(spec, analysis, new_kernel)

    def new_kernel(spec: KernelSpec) -> KernelArtifact:
        guard = Guard(pm)
        start = time.perf_counter()
        artifact = _build(guard, spec, analysis)
        if BUILD.isEnabledFor(logging.INFO):
            BUILD.info(
                "%s: kernel %s built by plugin %s in %.3f s",
                spec.name, artifact.kernel_name, spec.provenance.scheduler_plugin,
                time.perf_counter() - start,
            )  # fmt: skip
        guard.notify("mmaplug_kernel_built", spec=spec, artifact=artifact)
        kernel_dump.on_build(spec, artifact)
        return artifact

    def replan(declined: Mapping[str, str]) -> tuple[KernelSpec, KernelArtifact, str]:
        note = ""
        problem = analysis.problem
        try:
            again = plan_problem(
                problem, target, pm=pm, overrides=overrides, declined=declined,
                shape_class=shape_class,
            )  # fmt: skip
        except InvalidParamsError:  # the caller's overrides were meant for the declined kernel
            again = plan_problem(problem, target, pm=pm, declined=declined, shape_class=shape_class)
            note = " (planned without the caller's overrides, which it cannot take)"
        return again, build(again), note

    return CompiledFusion(analysis, spec, build(spec), replan)


def _build(guard: Guard, spec: KernelSpec, analysis: MatmulAnalysis) -> KernelArtifact:
    """The chosen scheduler object's artifact; else (deprecated) the first valid artifact of
    ``mmaplug_build_kernel``, where the plugin that offered the scheduler must give one."""
    hook = "mmaplug_build_kernel"
    owner = spec.provenance.scheduler_plugin
    own = schedulers(guard.pm, guard=guard).get(spec.scheduler)
    if own is not None and owner in ("", own[0]):
        plugin, scheduler = own
        label = scheduler_label(spec.scheduler, "build")
        artifact = guard.ask(plugin, label, scheduler.build, spec, analysis)
        if artifact is not SKIPPED:  # a fault raised: building has no fallback
            fault = _artifact_fault(artifact)
            if not fault:
                return artifact  # type: ignore[return-value]
            guard.fault(plugin, label, fault, cls=PluginResultError, fallback=None)
    for plugin, artifact in guard.call(hook, needed=owner, spec=spec, analysis=analysis):
        fault = _artifact_fault(artifact)
        if not fault:
            warn_deprecated(guard.pm, plugin, hook)
            return artifact  # type: ignore[return-value]
        fallback = None if plugin == owner else ""
        guard.fault(plugin, hook, fault, cls=PluginResultError, fallback=fallback)
    who = f"plugin {describe(guard.pm, owner)}" if owner else "the plugin that offered it"
    raise KernelBuildError(
        f"no plugin built a kernel for scheduler {spec.scheduler!r}; {who} must implement "
        f"{hook} and answer for it (deprecated: a scheduler object returned from "
        "mmaplug_schedulers builds its own kernels)"
    )


def _artifact_fault(artifact: object) -> str:
    """What an artifact lacks of ``KernelArtifact`` ("" if nothing)."""
    try:
        name = getattr(artifact, "kernel_name", None)
        missing = [a for a in ("ptx", "launch", "bind") if not callable(getattr(artifact, a, None))]
    except Exception as error:  # a hostile __getattr__
        return f"returned an artifact that raised {type(error).__name__} on reading: {error}"
    if not isinstance(name, str) or missing:
        lacks = ", ".join(missing + ([] if isinstance(name, str) else ["kernel_name (a str)"]))
        return f"{wrong(artifact, 'a KernelArtifact')}, which lacks {lacks}"
    return ""


def _cai_address(obj: object) -> int:
    """The data address of a CuPy or Numba array (``__cuda_array_interface__``)."""
    return int(obj.__cuda_array_interface__["data"][0])  # type: ignore[attr-defined]
