"""Generated kernel modules: source this process generated, executed from memory.

Nothing of a kernel module is read from the disk cache: no module file, no bytecode, and no
Numba ``cache=True`` index (which Numba unpickles). Compiled kernels are cached as cubins
(``mmaplug.cuda.cubin``), which the driver loads as data.

Both schedulers load their kernels through a :class:`KernelFamily`: one module per kernel
config, its kernels' Numba signatures built from the shared parts below
(:func:`epilogue_types`, :func:`reduce_signature`).
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
from collections.abc import Callable, Hashable, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Protocol, TypeVar, final

import attrs

from mmaplug.codegen.emitter import REDUCE_THREADS
from mmaplug.cuda.launching import (
    KernelJob,
    generated_kernel,
    generated_kernel_jobs,
    kernel_binary,
    simulating,
)
from mmaplug.errors import KernelBuildError

if TYPE_CHECKING:
    from mmaplug.analysis.epilogue import EpilogueProgram
    from mmaplug.ir.dtypes import DType

__all__ = [
    "BY_VALUE",
    "FamilyArtifact",
    "GeneratedKernels",
    "KernelConfig",
    "KernelFamily",
    "array_type",
    "epilogue_types",
    "load_generated",
    "reduce_signature",
    "require_numba",
]

#: The generated module's name for what its kernels take by value (``GeneratedKernels``).
BY_VALUE: Final = "BY_VALUE"
_NO_NUMBA: Final = (
    "building or running a kernel needs Numba-CUDA, which cannot be imported ({why}); install "
    "mmaplug[cu13] (CUDA 13, NVIDIA driver R580 or newer) or mmaplug[cu12] (CUDA 12, driver "
    "R525 or newer)"
)


@attrs.frozen
class GeneratedKernels:
    """The compiled kernels of one scheduler config (dispatchers compile on first launch)."""

    config: Any
    gemm: Any
    reduce: Any | None
    source: str
    signatures: dict[str, Any]
    #: the module name the scheduler loads the kernels' cubins under (``generated_kernel``)
    module: str
    #: kernel name -> {argument: bytes} of the arguments it takes by value (grid-constant):
    #: the generated module's ``BY_VALUE``, the one place a kernel says so
    by_value: dict[str, dict[str, int]] = attrs.field(factory=dict)

    def dispatcher(self, name: str) -> Any:
        """The dispatcher of kernel *name*: the ``*_gemm`` kernel, else the split-K reduce."""
        return self.gemm if name.endswith("_gemm") else self.reduce


def require_numba() -> None:
    """Raise ``KernelBuildError`` (naming the extra to install) unless Numba can be imported.

    It is looked up, not imported: a kernel found in the disk cache never imports it, but a
    plan-only install must fail at ``mp.compile``, not at the first ``execute``.
    """
    if importlib.util.find_spec("numba") is None:
        raise KernelBuildError(_NO_NUMBA.format(why="No module named 'numba'"))


def load_generated(key: str, source: str) -> dict[str, Any]:
    """Exec generated *source* from memory as module *key* (the kernel's name, so its PTX
    ``.entry`` demangles to ``<key>::<kernel>``); return its namespace, the source under
    ``__source__``. It runs under a ``linecache`` name made of *key* (tracebacks show the
    generated lines), never as a file: nothing of it is written to or read from the disk.
    """
    try:  # the first Numba import on the way to a built kernel
        import numba.cuda  # noqa: F401
    except ImportError as missing:
        raise KernelBuildError(_NO_NUMBA.format(why=missing)) from missing
    filename = f"<mmaplug {key} #{abs(hash(source)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": key}
    exec(compile(source, filename, "exec"), namespace)
    namespace["__source__"] = source
    return namespace


class KernelConfig(Hashable, Protocol):
    """What :class:`KernelFamily` reads of a scheduler's kernel config (hashable: a cache key)."""

    @property
    def kernel_name(self) -> str:
        """The generated module's name."""

    @property
    def threads(self) -> int:
        """Threads per CTA of the ``*_gemm`` kernel."""

    @property
    def splitk(self) -> int:
        """K splits: more than one adds the split-K reduce kernel."""


ConfigT = TypeVar("ConfigT", bound=KernelConfig)


@final
class KernelFamily(Generic[ConfigT]):
    """One scheduler's generated kernels: per config, a module named ``config.kernel_name``
    holding ``<scheduler>_gemm`` and, with split-K, ``<scheduler>_splitk_reduce``; loaded,
    built, compiled to PTX and handed to the driver the one way both schedulers do.

    :param scheduler: The scheduler's name, the prefix of its kernels' names.
    :param generate: ``generate(config, sim=...)``: the module's source (``sim``: for Numba's
        CUDA simulator).
    :param signatures: ``signatures(config)``: each kernel's Numba signature, by name.
    """

    __slots__ = (
        "gemm",
        "main_cubin",
        "main_ptx",
        "reduce",
        "scheduler",
        "source",
        "_generate",
        "_signatures",
    )

    def __init__(
        self,
        scheduler: str,
        generate: Callable[..., str],
        signatures: Callable[[ConfigT], dict[str, Any]],
    ) -> None:
        self.scheduler = scheduler
        self.gemm = f"{scheduler}_gemm"
        self.reduce = f"{scheduler}_splitk_reduce"
        self._generate = generate
        self._signatures = signatures
        #: ``source(config)``: the source launches compile (not the simulator's), made once
        self.source: Callable[[ConfigT], str] = functools.cache(self._launch_source)
        #: ``main_ptx(config, cc)``: the ``*_gemm`` kernel's PTX, compiled once (``ptx``)
        self.main_ptx: Callable[[ConfigT, tuple[int | str, ...]], str] = functools.cache(
            lambda config, cc: self.ptx(config, self.gemm, cc)
        )
        #: ``main_cubin(config, build, cc)``: the ``*_gemm`` kernel's cubin as launches load it,
        #: built once from ``build(config)``
        self.main_cubin: Callable[..., bytes] = functools.cache(self._main_cubin)

    def _launch_source(self, config: ConfigT) -> str:
        return self._generate(config, sim=False)

    def _main_cubin(
        self, config: ConfigT, build: Callable[[ConfigT], GeneratedKernels], cc: tuple[int, int]
    ) -> bytes:
        return kernel_binary(build(config), self.gemm, cc).cubin

    def load(self, config: ConfigT, *, sim: bool | None = None) -> dict[str, Any]:
        """Exec *config*'s generated source from memory (:func:`load_generated`); *sim*
        (default: whether Numba's CUDA simulator is on) is passed to ``generate``."""
        sim = simulating() if sim is None else sim
        return load_generated(config.kernel_name, self._generate(config, sim=sim))

    def ptx(self, config: ConfigT, kernel: str, cc: tuple[int | str, ...]) -> str:
        """PTX of *config*'s *kernel* for compute capability *cc* (no GPU needed)."""
        from mmaplug.cuda.pipeline import ptx

        namespace = self.load(config, sim=False)
        threads = config.threads if kernel == self.gemm else REDUCE_THREADS
        by_value = namespace.get(BY_VALUE, {}).get(kernel)
        return ptx(namespace[kernel], self._signatures(config)[kernel], cc, threads, by_value)

    def build(
        self, config: ConfigT, cache: MutableMapping[ConfigT, GeneratedKernels]
    ) -> GeneratedKernels:
        """*config*'s kernels (Numba compiles them on first launch), kept in *cache*."""
        hit = cache.get(config)
        if hit is not None:
            return hit
        namespace = self.load(config)
        kernels = GeneratedKernels(
            config=config,
            gemm=namespace[self.gemm],
            reduce=namespace.get(self.reduce),
            source=namespace["__source__"],
            signatures=self._signatures(config),
            module=config.kernel_name,
            by_value=namespace.get(BY_VALUE, {}),
        )
        cache[config] = kernels
        return kernels

    def loaded(
        self,
        config: ConfigT,
        build: Callable[[ConfigT], GeneratedKernels],
        name: str,
        smem: int,
        slots: int,
    ) -> int:
        """Kernel *name* of *config* as a driver ``CUkernel`` (``generated_kernel``): from the
        cubin cache, else compiled from ``build(config)``."""
        return generated_kernel(
            config.kernel_name, self.source(config), lambda: build(config), name, smem, slots
        )

    def jobs(
        self, config: ConfigT, build: Callable[[ConfigT], Any], cc: tuple[int, int]
    ) -> list[KernelJob]:
        """The kernels :meth:`loaded` loads for *config*, as jobs building them for *cc*
        (``mp.prebuild``); *build* is module-level, so that a job pickles."""
        return generated_kernel_jobs(self.scheduler, config, self.source(config), build, cc)


class FamilyArtifact:
    """A built kernel's generated code, read through its scheduler's :class:`KernelFamily`:
    the ``KernelArtifact`` methods every scheduler's artifact shares.

    A subclass (an attrs class with ``config`` and ``spec`` fields) sets ``family`` and
    ``build`` (its module-level build function, ``staticmethod``-wrapped, so that its jobs
    pickle); ``cc``, the compute capability its kernels are built for (PTX for all of it,
    ``(9, 0, "a")``; cubins and jobs for the major and minor), is the spec's device's unless
    the subclass sets one.
    """

    __slots__ = ()
    family: ClassVar[KernelFamily[Any]]
    config: Any
    spec: Any

    @staticmethod
    def build(config: Any) -> GeneratedKernels:
        """*config*'s kernels: the scheduler's module-level build function."""
        raise NotImplementedError

    @property
    def cc(self) -> tuple[int | str, ...]:
        """The compute capability the kernels are built for: the spec's device's."""
        return tuple(self.spec.device.cc)

    @property
    def kernel_name(self) -> str:
        """The config's ``kernel_name``."""
        return self.config.kernel_name

    def ptx(self) -> str:
        """PTX of the main kernel for ``cc`` (compiled once)."""
        return self.family.main_ptx(self.config, self.cc)

    def cubin(self) -> bytes:
        """The main kernel's cubin as launches load it: NVVM IR linked whole-program by
        nvJitLink (``ptx()`` linked alone may be another kernel: on sm_90a setmaxnreg dropped,
        wgmmas serialised, registers spilled)."""
        return self.family.main_cubin(self.config, self.build, self._major_minor)

    def source(self) -> str:
        """The generated Numba-CUDA source that ``ptx()`` compiles."""
        return self.family.source(self.config)

    def kernel_jobs(self) -> list[KernelJob]:
        """The kernels launches of the planned config load, as jobs for ``mp.prebuild``."""
        return self.family.jobs(self.config, self.build, self._major_minor)

    @property
    def _major_minor(self) -> tuple[int, int]:
        major, minor = self.cc[:2]
        return int(major), int(minor)


def array_type(dtype: DType) -> Any:
    """The Numba type of an epilogue array of *dtype*: its ``DType.storage`` (uint16 bits of
    16-bit floats, uint8 bits of FP8, float32)."""
    from numba import from_dtype, types

    return types.Array(from_dtype(dtype.storage), 1, "C")


def epilogue_types(
    prog: EpilogueProgram,
) -> tuple[list[Any], list[Any], list[Any], list[Any], list[Any]]:
    """Numba types of *prog*'s parameters (``codegen.emitter.epilogue_params``): inputs,
    outputs, scalars, input strides, output strides."""
    from numba import types

    ins = [array_type(i.dtype) for i in prog.inputs]
    outs = [array_type(o.dtype) for o in prog.outputs]
    scalars = [types.float32] * len(prog.scalars)
    in_strides = [types.int64] * (3 * len(prog.inputs))
    out_strides = [types.int64] * (2 * len(prog.outputs))
    return ins, outs, scalars, in_strides, out_strides


def reduce_signature(prog: EpilogueProgram) -> Any:
    """Numba signature of the split-K reduce kernel (``codegen.emitter.reduce_params``)."""
    from numba import types

    ins, outs, scalars, in_strides, out_strides = epilogue_types(prog)
    workspace, i64 = types.Array(types.float32, 1, "C"), types.int64
    return types.void(workspace, *ins, *outs, *scalars, i64, i64, i64, *in_strides, *out_strides)
