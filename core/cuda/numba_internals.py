"""The door to Numba's internals: every private Numba or numba-cuda name mmaplug's builds use,
and every patch of Numba, is here (the simulator's are in ``mmaplug.sim.simulator``).

The lean pipeline (``lean``; docs/decisions.md, "A lean Numba pipeline") swaps numba-cuda's
compiler class for one that leaves out the passes in ``SKIPPED_PASSES`` and lowers with a
one-scan ``_find_singly_assigned_variable``, memoises ``BaseFunction.get_call_type`` and stands
in for the current device; ``lean_cubin`` links a cubin from a compile result's code library.
They were tested with the releases in ``TESTED`` only. Every name they use is resolved before
the first build (``mode``): outside those releases, or with one name missing, none of it is
used and builds take Numba's stock pipeline through its public API (``mmaplug.cuda.pipeline``;
slower builds, the same kernel). The ``mmaplug.build`` logger says which, once per process.
Importing this module imports nothing of Numba.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import re
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any, Final

from mmaplug.cuda import grid_constant
from mmaplug.errors import KernelBuildError
from mmaplug.log import BUILD

__all__ = ["LEAN", "SKIPPED_PASSES", "STOCK", "TESTED", "lean", "lean_cubin", "mode", "tested"]

LEAN: Final = "lean"
STOCK: Final = "stock"

#: The releases the lean pipeline was tested with: distribution, first release, first release
#: not tested (pyproject's cu12 and cu13 extras bound numba-cuda the same way).
TESTED: Final = (
    ("numba-cuda", (0, 30), (0, 31)),
    ("numba", (0, 68), (0, 69)),
    ("llvmlite", (0, 50), (0, 51)),
)

#: The Numba passes the lean pipeline leaves out (GenericRewrites stays: it turns a tuple indexed
#: by a constant into a static getitem, which hopper's accumulators need).
SKIPPED_PASSES: Final = (
    ("numba.cuda.core.untyped_passes", "WithLifting"),
    ("numba.cuda.core.untyped_passes", "InlineClosureLikes"),
    ("numba.cuda.core.untyped_passes", "RewriteSemanticConstants"),
    ("numba.cuda.core.untyped_passes", "DeadBranchPrune"),
    ("numba.cuda.core.untyped_passes", "RewriteDynamicRaises"),
    ("numba.cuda.core.untyped_passes", "MakeFunctionToJitFunction"),
    ("numba.cuda.core.untyped_passes", "InlineInlinables"),
    ("numba.cuda.core.untyped_passes", "FindLiterallyCalls"),
    ("numba.cuda.core.untyped_passes", "LiteralUnroll"),
    ("numba.cuda.core.untyped_passes", "ReconstructSSA"),
    ("numba.cuda.core.untyped_passes", "LiteralPropagationSubPipelinePass"),
    ("numba.cuda.core.typed_passes", "PreLowerStripPhis"),
    ("numba.cuda.core.typed_passes", "NopythonRewrites"),  # string-literal indexes, constants
)

#: Every other name the lean pipeline and ``lean_cubin`` read or patch: module, name, and the
#: attributes of it they use.
_USED: Final = (
    ("numba.cuda.compiler", "CUDACompiler", ("define_pipelines",)),  # replaced in ``lean``
    ("numba.cuda.compiler", "CUDANativeLowering", ("lowering_class",)),
    ("numba.cuda.compiler", "compile_cuda", ()),
    ("numba.cuda.compiler", "kernel_fixup", ()),
    ("numba.cuda.lowering", "CUDALower", ("_find_singly_assigned_variable",)),
    ("numba.cuda.core.ir", "assign_types", ()),
    ("numba.cuda.core.analysis", "compute_use_defs", ()),
    ("numba.cuda.core.analysis", "must_use_alloca", ()),
    ("numba.cuda.core.compiler_lock", "global_compiler_lock", ()),
    ("numba.cuda.core.compiler_machinery", "PassManager", ("add_pass", "finalize")),
    ("numba.cuda.core.compiler_machinery", "register_pass", ()),
    ("numba.core.types.functions", "BaseFunction", ("get_call_type",)),  # memoised in ``lean``
    ("numba.cuda.dispatcher", "get_current_device", ()),  # replaced in ``lean``
    ("numba.cuda.cudadrv.nvvm", "set_launch_bounds", ()),
    ("numba.cuda.codegen", "CUDACodeLibrary", ("get_cubin", "get_function")),
    ("numba.cuda.types", "void", ()),
)
#: The compile result's code library fields ``lean_cubin`` reads (instance attributes: checked
#: on each result).
_LIBRARY_FIELDS: Final = ("_setup_functions", "_teardown_functions", "_llvm_strs")


class _Door:
    """The decision, made once per process: the resolved names and lean classes, or why not."""

    def __init__(self, names: dict[str, Any] | None, made: Any, reason: str, versions: str):
        self.names, self.made, self.reason, self.versions = names or {}, made, reason, versions


_door_now: _Door | None = None
_door_lock: Final = threading.Lock()
_made: Any = None  # the lean classes, made (and their pass registered with Numba) once
_lean_funcs: set[Any] = set()  # the Python functions compiled lean now (under the lock)
_faults: set[str] = set()  # the faults logged so far (each once)


def mode() -> str:
    """``LEAN`` when the lean pipeline builds kernels in this process, else ``STOCK``; decided
    (and logged to ``mmaplug.build``) on the first call."""
    return LEAN if _door().made is not None else STOCK


def tested() -> str:
    """The tested releases as requirement specifiers: ``numba-cuda>=0.30,<0.31, ...``."""
    return ", ".join(f"{dist}>={_dotted(low)},<{_dotted(high)}" for dist, low, high in TESTED)


def machinery() -> Any:
    """The lean classes (``compiler``, ``lowering``, ``lower``), or None in the stock mode."""
    return _door().made


def _door() -> _Door:
    global _door_now
    door = _door_now
    if door is None:
        with _door_lock:
            door = _door_now
            if door is None:
                door = _door_now = _decide()
                if door.made is not None:
                    BUILD.info("Numba pipeline: lean (%s, as tested)", door.versions)
                else:
                    BUILD.warning(
                        "Numba pipeline: stock (%s): kernels build through Numba's public API, "
                        "slower, to the same kernel; the lean pipeline needs %s",
                        door.reason,
                        tested(),
                    )
    return door


def _decide() -> _Door:
    found: dict[str, str] = {}
    reason = ""
    for dist, low, high in TESTED:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            reason = reason or f"{dist} is not installed as a distribution"
            continue
        if not low <= _release(found[dist]) < high:
            reason = reason or f"{dist} {found[dist]} is outside the tested {_spec(dist)}"
    versions = ", ".join(f"{dist} {version}" for dist, version in found.items())
    if reason:
        return _Door(None, None, reason, versions)
    names, missing = _resolve()
    if missing:
        return _Door(None, None, f"{versions} lack {', '.join(missing)}", versions)
    try:
        made = _make(names)
    except Exception as error:  # register_pass or a base class refused: Numba's pipeline
        return _Door(
            None, None, f"the lean pipeline failed to set up: {_describe(error)}", versions
        )
    return _Door(names, made, "", versions)


def _resolve() -> tuple[dict[str, Any], list[str]]:
    """Every name of ``SKIPPED_PASSES`` and ``_USED`` (and each module, by its dotted name);
    the missing ones, dotted."""
    names: dict[str, Any] = {}
    missing: list[str] = []
    for module_name, name, fields in (*((m, n, ()) for m, n in SKIPPED_PASSES), *_USED):
        module = names.get(module_name)
        if module is None:
            try:
                module = names[module_name] = importlib.import_module(module_name)
            except Exception:  # a module numba-cuda moved (or whose import fails)
                module = None
        value = getattr(module, name, None)
        if value is None:
            missing.append(f"{module_name}.{name}")
            continue
        names[name] = value
        missing.extend(f"{module_name}.{name}.{f}" for f in fields if not hasattr(value, f))
    return names, missing


def _make(n: dict[str, Any]) -> Any:
    """The lean compiler, lowering pass and lowering class over the resolved names *n*."""
    global _made
    if _made is not None:  # Numba's pass registry takes a pass name once per process
        return _made
    base_lower: Any = n["CUDALower"]
    base_lowering: Any = n["CUDANativeLowering"]
    base_compiler: Any = n["CUDACompiler"]

    class LeanLower(base_lower):
        def _find_singly_assigned_variable(self) -> None:
            try:
                singly = _singly_assigned(self, n)
            except Exception as error:  # an internal that changed: Numba's scan, same set
                _fault(f"the lean variable scan failed ({_describe(error)}); Numba's scan ran")
                base_lower._find_singly_assigned_variable(self)
                return
            self._singly_assigned_vars = singly
            self._blk_local_varmap: dict[str, Any] = {}

    class LeanLowering(base_lowering):
        _name = "mmaplug_lean_lowering"

        @property
        def lowering_class(self) -> type:
            return LeanLower

    n["register_pass"](mutates_CFG=True, analysis_only=False)(LeanLowering)
    skipped = tuple(n[name] for _, name in SKIPPED_PASSES)

    class LeanCompiler(base_compiler):
        """Numba-CUDA's compiler; the lean pipeline for a function in ``_lean_funcs``."""

        def define_pipelines(self) -> list[Any]:
            pipelines = super().define_pipelines()
            try:
                if self.state.func_id.func not in _lean_funcs:
                    return pipelines
                (full,) = pipelines
                pm = n["PassManager"]("mmaplug_lean")
                for pass_class, description in full.passes:
                    if pass_class is base_lowering:
                        pm.add_pass(LeanLowering, description)
                    elif pass_class not in skipped:
                        pm.add_pass(pass_class, description)
                pm.finalize()
            except Exception as error:  # a pipeline of another shape: Numba's, unchanged
                _fault(f"the lean pipeline failed to assemble ({_describe(error)}); Numba's ran")
                return pipelines
            return [pm]

    _made = SimpleNamespace(compiler=LeanCompiler, lowering=LeanLowering, lower=LeanLower)
    return _made


def _singly_assigned(lower: Any, n: dict[str, Any]) -> set[str]:
    """Numba's rule (defined in one block, assigned once there, used in no other, not
    stack-allocated), counted in one pass over the defining blocks."""
    if lower.func_ir.func_id.is_generator:
        return set()
    blocks = lower.func_ir.blocks
    use_defs = n["compute_use_defs"](blocks)
    on_stack = n["must_use_alloca"](blocks)
    home: dict[str, int | None] = {}  # the one defining block (None: several)
    for label, names in use_defs.defmap.items():
        for name in names:
            home[name] = None if name in home else label
    used = set().union(*use_defs.usemap.values())
    assigned: Counter[tuple[int, str]] = Counter()
    for label in {label for label in home.values() if label is not None}:
        assigned.update(
            (label, stmt.target.name)
            for stmt in lower.blocks[label].body
            if isinstance(stmt, n["assign_types"])
        )
    return {
        name
        for name, label in home.items()
        if label is not None
        and name not in on_stack
        and name not in used
        and assigned[label, name] == 1
    }


def _memoised(get_call_type: Any, memo: dict[tuple[Any, ...], Any]) -> Any:
    """``BaseFunction.get_call_type`` answering a repeated question from *memo*.

    Numba resolves a function's signature afresh at every call site, every round of type
    propagation and again when lowering an operator (``lower_binop``): ~2,000 resolutions, a
    few hundred distinct, for the ampere kernel. The answer depends only on the function type,
    the typing context and the argument types; failures are not kept (they raise again)."""

    def get(self: Any, context: Any, args: Any, kws: Any) -> Any:
        key = (self, context, tuple(args), tuple(kws.items()))
        try:
            found = memo.get(key)
        except TypeError:  # an unhashable argument type
            return get_call_type(self, context, args, kws)
        if found is None:
            found = memo[key] = get_call_type(self, context, args, kws)
        return found

    return get


@contextlib.contextmanager
def lean(func: Any, cc: tuple[int | str, ...]) -> Iterator[None]:
    """Inside the block, Numba compiles the Python function *func* (a generated kernel's) and
    the device functions of its module through the lean pipeline, every compilation resolves
    a function signature once per question (``_memoised``), and device functions are compiled
    for *cc* (Numba-CUDA asks the current GPU, which a build for another device, or on a
    machine without one, lacks). Holds Numba's compiler lock, so other threads' compilations
    wait and never see the swapped names. In the stock mode (``mode``) it changes nothing."""
    door = _door()
    if door.made is None:
        yield
        return
    n = door.names
    compiler, dispatcher = n["numba.cuda.compiler"], n["numba.cuda.dispatcher"]
    base = n["BaseFunction"]
    with n["global_compiler_lock"]:
        saved = compiler.CUDACompiler  # compile_cuda reads this module global on every call
        resolve = base.get_call_type
        device = dispatcher.get_current_device
        compiler.CUDACompiler = door.made.compiler
        base.get_call_type = _memoised(resolve, {})
        target = SimpleNamespace(compute_capability=(int(cc[0]), int(cc[1])))
        dispatcher.get_current_device = lambda: target
        funcs = {func, *_device_functions(func)}
        _lean_funcs.update(funcs)
        try:
            yield
        finally:
            _lean_funcs.difference_update(funcs)
            dispatcher.get_current_device = device
            base.get_call_type = resolve
            compiler.CUDACompiler = saved


def _device_functions(func: Any) -> list[Any]:
    """The Python functions of the device functions in *func*'s module (generated with it)."""
    names = getattr(func, "__globals__", {}).values()
    return [f.py_func for f in names if getattr(f, "targetoptions", {}).get("device")]


def lean_cubin(
    func: Any,
    args: tuple[Any, ...],
    cc: tuple[int, int],
    options: dict[str, Any],
    by_value: Sequence[tuple[int, int]] = (),
) -> tuple[bytes, str] | None:
    """The cubin and entry name of kernel *func* for argument types *args* on compute
    capability *cc*, compiled lean with ``cuda.jit`` *options* (those ``dispatcher.compile``
    passes) and linked from the compile result, without the PTX ``dispatcher.compile`` also
    makes (there only to search for runtime calls generated kernels never make; LTO links NVVM
    IR). *by_value*: (LLVM index, bytes) of the parameters passed by value, rewritten so in the
    NVVM IR the library links (``grid_constant.by_value``). None in the stock mode, or when the
    result lacks a field it reads (logged; the caller builds through the stock path)."""
    door = _door()
    if door.made is None:
        return None
    n = door.names
    debug = bool(options.get("debug"))
    nvvm_options: dict[str, Any] = {
        "fastmath": bool(options.get("fastmath")),
        "opt": 3 if options.get("opt", True) else 0,
    }
    if debug:
        nvvm_options["g"] = None
    compiler = n["numba.cuda.compiler"]  # its functions read at the call, as Numba's callers do
    with lean(func, cc):
        result = compiler.compile_cuda(
            func,
            n["void"],
            args,
            debug=debug,
            lineinfo=bool(options.get("lineinfo")),
            forceinline=bool(options.get("forceinline")),
            fastmath=nvvm_options["fastmath"],
            nvvm_options=nvvm_options,
            cc=cc,
            max_registers=options.get("max_registers"),
            lto=bool(options.get("lto")),
        )
    library: Any = getattr(result, "library", None)
    entry: Any = getattr(getattr(result, "fndesc", None), "llvm_func_name", None)
    lacking = [f for f in _LIBRARY_FIELDS if not hasattr(library, f)] + (["entry"] * (not entry))
    if lacking:
        _fault(f"numba-cuda's compile result lacks {', '.join(lacking)}; linked the stock way")
        return None
    if library._setup_functions or library._teardown_functions:
        raise KernelBuildError(
            f"kernel {func.__name__} links code with module setup callbacks, which a cubin "
            "loaded by the driver would skip; link no such objects into it"
        )
    library._entry_name = entry  # what _Kernel sets (get_cufunc reads it)
    compiler.kernel_fixup(library.get_function(entry), debug)
    n["numba.cuda.cudadrv.nvvm"].set_launch_bounds(
        library.get_function(entry), options.get("launch_bounds")
    )
    if by_value:  # the IR the library hands NVVM (its llvm_strs, cached in _llvm_strs)
        library._llvm_strs = None  # (made again from the modules as kernel_fixup left them)
        irs = list(library.llvm_strs)
        at = next((i for i, ir in enumerate(irs) if f'@"{entry}"(' in ir), 0)
        for param, nbytes in by_value:
            irs[at] = grid_constant.by_value(irs[at], str(entry), param, nbytes)
        library._llvm_strs = irs
    image = library.get_cubin(cc=(*cc, "a" if tuple(cc) >= (9, 0) else ""))  # _ensure_cc's
    return bytes(getattr(image, "code", image)), str(entry)  # 0.30: a cuda.core ObjectCode


def _fault(message: str) -> None:
    """Log a fault of the lean machinery (once each); the build goes on Numba's way."""
    with _door_lock:
        if message in _faults:
            return
        _faults.add(message)
    BUILD.warning("Numba pipeline: %s", message)


def _release(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (-1, -1)


def _dotted(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))


def _spec(dist: str) -> str:
    return next(f"{d}>={_dotted(low)},<{_dotted(high)}" for d, low, high in TESTED if d == dist)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
