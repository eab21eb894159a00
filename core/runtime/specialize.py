"""Fusions with symbolic extents: one plan per shape class, one kernel per kernel configuration."""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.errors import LaunchError, MatmulWarning, UsageError
from mmaplug.ir.arguments import is_int
from mmaplug.ir.fusion import Fusion, TensorView
from mmaplug.ir.symbolic import Binding, concretize, shape_of, symbolic_dims
from mmaplug.planning.params import HARNESS_CHANGES
from mmaplug.planning.plan import plan_problem
from mmaplug.runtime import dump as kernel_dump
from mmaplug.runtime.kernels import KernelPool, compile_planned

if TYPE_CHECKING:
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.planning.choices import KernelSpec
    from mmaplug.planning.device import Device
    from mmaplug.planning.params import MatmulParams
    from mmaplug.runtime.compiled_fusion import CompiledFusion

#: Input shapes (and shape classes) remembered per fusion; the oldest goes first beyond this.
MAX_SHAPES: Final = 1024
#: The extent an unconstrained symbolic dim takes when ``mp.compile`` checks the definition.
PROBE_EXTENT: Final = 64

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def _remember(table: dict[_K, _V], key: _K, value: _V) -> _V:
    """Store *value* under *key*, dropping the oldest entry beyond ``MAX_SHAPES``."""
    table[key] = value
    if len(table) > MAX_SHAPES:
        del table[next(iter(table))]
    return value


class SymbolicFusion:
    """A fusion with symbolic extents compiled for one device; ``execute`` takes any extents.

    ``mp.compile`` returns one for a definition with -1 extents (nvFuser's
    ``FusionExecutorCache`` is the model). Each call's input shapes bind the symbolic extents
    (``mmaplug.ir.symbolic``); the fusion so concretized is analysed once per distinct input shapes
    and planned once per shape class, its ``MatmulProblem`` (the hooks see nothing else of a
    call, so one problem gets one answer). Kernels take m, n, k and batch at launch: a plan
    asking for a kernel configuration already built (``kernel_key``) reuses that kernel.
    Every plan sees the ``override_matmul_params`` blocks in force at ``mp.compile``, as the
    caller's ``overrides`` (a block around a later call changes nothing, as for a fusion of
    static extents); a plan after plugins registered then have gone warns once.

    ``spec``, ``params``, ``provenance`` (its ``shape_class``), ``kernel_name``, ``ptx``,
    ``source``, ``explain()`` and ``dump()`` describe the shape class of the latest call
    (``specialize(shapes)`` picks one without running). ``builds`` counts the kernels built.
    """

    def __init__(
        self,
        fusion: Fusion,
        device: Device,
        *,
        pm: PluginManager,
        overrides: Mapping[str, object] | None,
    ) -> None:
        self.fusion = copy.deepcopy(fusion)  # later changes to the caller's fusion stay out
        self.device = device
        self._pm = pm
        self._overrides = overrides
        self._kernels = KernelPool()
        self._by_shapes: dict[tuple[Any, ...], CompiledFusion] = {}
        self._plans: dict[MatmulProblem, KernelSpec] = {}
        self._lock = threading.RLock()
        self._latest: CompiledFusion | None = None
        inputs = self.fusion.inputs
        self._tensors = tuple(i for i, v in enumerate(inputs) if isinstance(v, TensorView))
        self._symbolic = ", ".join(f"{tv.name} dim {i}" for tv, i in symbolic_dims(self.fusion))
        self._compile_time = CompileTime(pm, self.fusion.origin)
        analyze(concretize(self.fusion, self._probe_shapes(), where="mp.compile"), pm=pm)

    def _probe_shapes(self) -> list[tuple[int, ...] | None]:
        """Shapes that fit the definition, to analyse it once at ``mp.compile``."""
        binding = Binding(self.fusion, where="mp.compile")
        shapes: list[tuple[int, ...] | None] = []
        for tv in self.fusion.inputs:
            if not isinstance(tv, TensorView):
                shapes.append(None)
                continue
            shape = tuple(
                binding.extent(d) or PROBE_EXTENT if d.is_symbolic else d.extent for d in tv.domain
            )
            binding.read(tv, shape)
            shapes.append(shape)
        return shapes

    # -- running -----------------------------------------------------------------------------
    def execute(self, inputs: Sequence[object], stream: object = None) -> list[object]:
        """Run on *inputs* with the kernel of their shape class (see ``CompiledFusion.execute``).

        The first call with given input shapes binds the symbolic extents, checking every
        input against the definition (``LaunchError`` naming input, dim, expected and given
        extent), analyses the fusion and plans its shape class unless planned before.
        """
        if len(inputs) != len(self.fusion.inputs):
            raise LaunchError(
                f"the fusion takes {len(self.fusion.inputs)} inputs; got {len(inputs)}"
            )
        key = tuple([_shape_key(inputs[i]) for i in self._tensors])
        compiled = self._by_shapes.get(key)
        if compiled is None:
            compiled = self._specialize(key)
        self._latest = compiled
        return compiled.execute(inputs, stream)

    def specialize(self, shapes: Sequence[object]) -> CompiledFusion:
        """The compiled fusion of the shape class *shapes* fall in, planned (and its kernel
        built) if it was not yet; no GPU needed.

        :param shapes: One entry per fusion input: a shape (sequence of ints) or an array
            with a ``shape`` for each tensor input; anything (it is ignored) for a scalar.
        """
        if len(shapes) != len(self.fusion.inputs):
            raise UsageError(
                f"specialize takes one shape per fusion input ({len(self.fusion.inputs)}); "
                f"got {len(shapes)}"
            )
        key = tuple(_as_shape(shapes[i]) for i in self._tensors)
        compiled = self._by_shapes.get(key) or self._specialize(key)
        self._latest = compiled
        return compiled

    def _specialize(self, key: tuple[Any, ...]) -> CompiledFusion:
        with self._lock:
            hit = self._by_shapes.get(key)
            if hit is not None:
                return hit
            shapes: list[Sequence[int] | None] = [None] * len(self.fusion.inputs)
            for pos, shape in zip(self._tensors, key, strict=True):
                shapes[pos] = tuple(int(e) for e in shape)
            work = concretize(self.fusion, shapes, error=LaunchError, where="execute")
            analysis = analyze(work, pm=self._pm)
            problem = analysis.problem
            spec = self._plans.get(problem)
            if spec is None:
                with self._compile_time.planning():
                    spec = plan_problem(
                        problem,
                        self.device,
                        pm=self._pm,
                        overrides=self._overrides,
                        shape_class=problem.shape_class,
                    )
                _remember(self._plans, problem, spec)
            built = compile_planned(
                analysis, spec, pm=self._pm, overrides=self._overrides, kernels=self._kernels
            )
            return _remember(self._by_shapes, key, built)

    # -- what the latest call ran ------------------------------------------------------------
    @property
    def builds(self) -> int:
        """How many kernels this fusion built; shape classes planned alike share one."""
        return self._kernels.builds

    @property
    def latest(self) -> CompiledFusion:
        """The compiled fusion of the latest call's shape class."""
        if self._latest is None:
            raise UsageError(
                f"{self.fusion.origin} has symbolic extents ({self._symbolic}): nothing is "
                "planned before a call; run execute(inputs) or specialize(shapes) first"
            )
        return self._latest

    @property
    def spec(self) -> KernelSpec:
        """The latest call's KernelSpec (its provenance names the shape class)."""
        return self.latest.spec

    @property
    def params(self) -> MatmulParams:
        """The latest call's final parameters."""
        return self.latest.params

    @property
    def provenance(self) -> Any:
        """Who chose the latest call's parameters; ``shape_class`` says which class it was."""
        return self.latest.provenance

    @property
    def kernel_name(self) -> str:
        """The latest call's kernel name."""
        return self.latest.kernel_name

    @property
    def ptx(self) -> str:
        """PTX of the latest call's kernel."""
        return self.latest.ptx

    @property
    def source(self) -> str:
        """Generated source of the latest call's kernel."""
        return self.latest.source

    def explain(self) -> str:
        """How the latest call's plan was decided, its shape class first."""
        return self.latest.explain()

    def dump(
        self, directory: str | Path | None = None, kinds: Sequence[str] = kernel_dump.KINDS
    ) -> list[Path]:
        """``CompiledFusion.dump`` of the latest call's kernel."""
        return self.latest.dump(directory, kinds)


class CompileTime:
    """What ``mp.compile`` planned under, for the plans a fusion of symbolic extents makes at
    later calls: the ``override_matmul_params`` blocks then in force (as its caller's
    overrides), and the plugins then registered (a later plan without one warns once)."""

    def __init__(self, pm: PluginManager, what: str) -> None:
        self._pm, self._what = pm, what
        self._harness = HARNESS_CHANGES.get()
        self._plugins = _registered(pm)
        self._warned = False

    @contextlib.contextmanager
    def planning(self) -> Iterator[None]:
        """Plan within: under the blocks of ``mp.compile``."""
        gone = sorted(self._plugins - _registered(self._pm))
        if gone and not self._warned:
            self._warned = True
            warnings.warn(
                MatmulWarning(
                    f"{self._what}: a fusion with symbolic extents plans at each new shape "
                    f"class, and plugins registered at mp.compile are gone now "
                    f"({', '.join(gone)}); this plan does not see them (keep them registered, "
                    "e.g. the registered() block open, until the calls, or specialize(shapes) "
                    "inside it)"
                ),
                stacklevel=5,
            )
        token = HARNESS_CHANGES.set(self._harness)
        try:
            yield
        finally:
            HARNESS_CHANGES.reset(token)


def _registered(pm: PluginManager) -> set[str]:
    """The names of the plugins registered with *pm* (not the blocked ones)."""
    return {name for name, plugin in pm.list_name_plugin() if plugin is not None}


def _shape_key(value: object) -> Any:
    """The shape of an input as cheaply as it reads (``torch.Size`` hashes as a tuple)."""
    shape = getattr(value, "shape", None)
    return shape if shape is not None else shape_of(value)


def _as_shape(value: object) -> tuple[int, ...]:
    if isinstance(value, Sequence) and all(is_int(e) for e in value):
        return tuple(int(e) for e in value)
    return shape_of(value)
