"""Numba's front end for generated kernels: a lean pass pipeline, their PTX and their cubins.

``lean`` leaves out the Numba-CUDA passes generated code never needs (closures, ``with``,
``literal_unroll``, rewrites it never matches) and SSA reconstruction (its variables keep one
type), and finds singly assigned variables in one scan; only the function it names is compiled
so. Inside it a function's signature is resolved once per argument types. Ampere PTX stays
byte-identical; first builds: docs/decisions.md, "A lean Numba pipeline".
Imported only to build (it imports Numba).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, Final

from numba.core.types.functions import BaseFunction
from numba.cuda import compiler, lowering
from numba.cuda.core import ir, typed_passes, untyped_passes
from numba.cuda.core.analysis import compute_use_defs, must_use_alloca
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.core.compiler_machinery import PassManager, register_pass

from ..errors import KernelBuildError

__all__ = ["SKIPPED_PASSES", "compile_cubin", "lean", "ptx"]

#: Numba passes the lean pipeline leaves out (GenericRewrites stays: it turns a tuple indexed
#: by a constant into a static getitem, which hopper's accumulators need)
SKIPPED_PASSES: Final = (
    untyped_passes.WithLifting,
    untyped_passes.InlineClosureLikes,
    untyped_passes.RewriteSemanticConstants,
    untyped_passes.DeadBranchPrune,
    untyped_passes.RewriteDynamicRaises,
    untyped_passes.MakeFunctionToJitFunction,
    untyped_passes.InlineInlinables,
    untyped_passes.FindLiterallyCalls,
    untyped_passes.LiteralUnroll,
    untyped_passes.ReconstructSSA,
    untyped_passes.LiteralPropagationSubPipelinePass,
    typed_passes.PreLowerStripPhis,
    typed_passes.NopythonRewrites,  # string-literal indexes, arrays of constants
)
_lean_funcs: set[Any] = set()  # the Python functions compiled lean now (under the lock)


class _LeanLower(lowering.CUDALower):
    def _find_singly_assigned_variable(self) -> None:
        """Numba's rule (defined in one block, assigned once there, used in no other, not
        stack-allocated), counted in one pass over the defining blocks."""
        singly: set[str] = set()
        if not self.func_ir.func_id.is_generator:
            blocks = self.func_ir.blocks
            use_defs = compute_use_defs(blocks)
            on_stack = must_use_alloca(blocks)
            home: dict[str, int | None] = {}  # the one defining block (None: several)
            for label, names in use_defs.defmap.items():
                for name in names:
                    home[name] = None if name in home else label
            used = set().union(*use_defs.usemap.values())
            assigned: Counter[tuple[int, str]] = Counter()
            for label in {label for label in home.values() if label is not None}:
                assigned.update(
                    (label, stmt.target.name)
                    for stmt in self.blocks[label].body
                    if isinstance(stmt, ir.assign_types)
                )
            singly = {
                name
                for name, label in home.items()
                if label is not None
                and name not in on_stack
                and name not in used
                and assigned[label, name] == 1
            }
        self._singly_assigned_vars = singly
        self._blk_local_varmap: dict[str, Any] = {}


@register_pass(mutates_CFG=True, analysis_only=False)
class _LeanLowering(compiler.CUDANativeLowering):
    _name = "mmaplug_lean_lowering"

    @property
    def lowering_class(self) -> type:
        return _LeanLower


class _Compiler(compiler.CUDACompiler):
    """Numba-CUDA's compiler; the lean pipeline for a function in ``_lean_funcs``."""

    def define_pipelines(self) -> list[PassManager]:
        pipelines = super().define_pipelines()
        if self.state.func_id.func not in _lean_funcs:
            return pipelines
        (full,) = pipelines
        pm = PassManager("mmaplug_lean")
        for pass_class, description in full.passes:
            if pass_class is compiler.CUDANativeLowering:
                pm.add_pass(_LeanLowering, description)
            elif pass_class not in SKIPPED_PASSES:
                pm.add_pass(pass_class, description)
        pm.finalize()
        return [pm]


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
    wait and never see the swapped names."""
    from numba.cuda import dispatcher

    with global_compiler_lock:
        saved = compiler.CUDACompiler  # compile_cuda reads this module global on every call
        resolve = BaseFunction.get_call_type
        device = dispatcher.get_current_device
        compiler.CUDACompiler = _Compiler
        BaseFunction.get_call_type = _memoised(resolve, {})  # type: ignore[method-assign]
        target = SimpleNamespace(compute_capability=(int(cc[0]), int(cc[1])))
        dispatcher.get_current_device = lambda: target
        funcs = {func, *_device_functions(func)}
        _lean_funcs.update(funcs)
        try:
            yield
        finally:
            _lean_funcs.difference_update(funcs)
            dispatcher.get_current_device = device
            BaseFunction.get_call_type = resolve  # type: ignore[method-assign]
            compiler.CUDACompiler = saved


def _device_functions(func: Any) -> list[Any]:
    """The Python functions of the device functions in *func*'s module (generated with it)."""
    names = getattr(func, "__globals__", {}).values()
    return [f.py_func for f in names if getattr(f, "targetoptions", {}).get("device")]


def ptx(dispatcher: Any, signature: Any, cc: tuple[int | str, ...], threads: int) -> str:
    """PTX of the generated kernel *dispatcher* for *signature* and compute capability *cc*
    (no GPU needed), launch bounds ``(threads, 1)``."""
    from numba import cuda

    with lean(dispatcher.py_func, cc):
        text, _ = cuda.compile_ptx(
            dispatcher.py_func, signature.args, cc=cc, launch_bounds=(threads, 1)
        )
    return str(text)


_UNLINKED: Final = ("link", "extensions", "shared_memory_carveout", "device")


def compile_cubin(dispatcher: Any, signature: Any, cc: tuple[int, int]) -> tuple[bytes, str]:
    """The cubin and entry name of *dispatcher* for *signature* on compute capability *cc*:
    what ``dispatcher.compile`` links (same options, lean front end), without the PTX it also
    makes (there only to search for runtime calls generated kernels never make; LTO links
    NVVM IR)."""
    from numba.cuda import types
    from numba.cuda.cudadrv import nvvm

    name, options = dispatcher.py_func.__name__, dispatcher.targetoptions
    unlinked = {key: options[key] for key in _UNLINKED if options.get(key)}
    if unlinked:
        raise KernelBuildError(
            f"kernel {name} asks cuda.jit for {unlinked}, which mmaplug's build path does not "
            "link; generate kernels with launch_bounds, cache and lto only"
        )
    debug = bool(options.get("debug"))
    nvvm_options: dict[str, Any] = {
        "fastmath": bool(options.get("fastmath")),
        "opt": 3 if options.get("opt", True) else 0,
    }
    if debug:
        nvvm_options["g"] = None
    with lean(dispatcher.py_func, cc):
        result = compiler.compile_cuda(
            dispatcher.py_func,
            types.void,
            signature.args,
            debug=debug,
            lineinfo=bool(options.get("lineinfo")),
            forceinline=bool(options.get("forceinline")),
            fastmath=nvvm_options["fastmath"],
            nvvm_options=nvvm_options,
            cc=cc,
            max_registers=options.get("max_registers"),
            lto=bool(options.get("lto")),
        )
    library = result.library
    if library._setup_functions or library._teardown_functions:
        raise KernelBuildError(
            f"kernel {name} links code with module setup callbacks, which a cubin loaded by "
            "the driver would skip; link no such objects into it"
        )
    entry = library._entry_name = result.fndesc.llvm_func_name
    compiler.kernel_fixup(library.get_function(entry), debug)
    nvvm.set_launch_bounds(library.get_function(entry), options.get("launch_bounds"))
    image = library.get_cubin(cc=(*cc, "a" if cc >= (9, 0) else ""))  # numba-cuda's arch rule
    return bytes(getattr(image, "code", image)), entry  # 0.30: a cuda.core ObjectCode
