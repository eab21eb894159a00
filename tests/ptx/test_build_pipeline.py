"""PTX tier: generated kernels compile through the lean pipeline, to the PTX Numba's own makes."""

from __future__ import annotations

import operator
import re
from types import SimpleNamespace
from typing import Any

import pytest

from mmaplug.errors import KernelBuildError
from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, kernel_signatures, load_module

pytestmark = pytest.mark.ptx

numba_cuda = pytest.importorskip("numba.cuda")
from numba.core.errors import TypingError  # noqa: E402
from numba.core.types.functions import BaseFunction  # noqa: E402
from numba.cuda import compiler, lowering  # noqa: E402

from mmaplug.cuda import launching, numba_internals, pipeline  # noqa: E402

SMALL = AmpereKernelConfig(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), splitk=2)


def _kernel(name: str = "ampere_gemm") -> tuple[Any, Any]:
    """A freshly executed generated kernel of SMALL and its signature."""
    return load_module(SMALL, sim=False)[name], kernel_signatures(SMALL)[name]


def _same_names(ptx: str) -> str:
    """*ptx* with what differs between two compilations of one source in a process made
    equal: the mangled names' per-process version and Numba's shared-array counter."""
    ptx = re.sub(r"B\d+v\d+B", "BvB", ptx)
    seen: dict[str, str] = {}
    return re.sub(r"_cudapy_smem_\d+", lambda m: seen.setdefault(m[0], f"smem{len(seen)}"), ptx)


def _numbered(ptx: str) -> str:
    """*ptx* with its virtual registers renumbered in order of first use, per class: two
    compilations that allocate (and drop) different registers for the same instructions."""
    seen: dict[str, str] = {}

    def number(m: re.Match[str]) -> str:
        kind = m[1]
        return seen.setdefault(m[0], f"%{kind}{sum(k.startswith(f'%{kind}') for k in seen)}")

    return re.sub(r"%(rd|rs|r|fd|f|p)(\d+)\b", number, ptx)


@pytest.mark.parametrize("name", ["ampere_gemm", "ampere_splitk_reduce"])
def test_lean_ptx_is_numbas_ptx(name: str) -> None:
    """The passes the lean pipeline skips change nothing in the ampere kernels' PTX: the gemm's
    is the same text, the reduce's the same instructions with its registers numbered otherwise
    (its element loop reassigns the column, row and batch; the lean pipeline reconstructs no
    SSA)."""
    from numba import cuda

    dispatcher, sig = _kernel(name)
    threads = SMALL.threads if name == "ampere_gemm" else 256
    ref, _ = cuda.compile_ptx(dispatcher.py_func, sig.args, cc=(8, 0), launch_bounds=(threads, 1))
    lean = pipeline.ptx(_kernel(name)[0], sig, (8, 0), threads)
    if name == "ampere_gemm":
        assert "mma.sync" in lean
        assert _same_names(lean) == _same_names(ref)
    else:
        assert "ld.global.cg.v4.f32" in lean
        assert _numbered(_same_names(lean)) == _numbered(_same_names(ref))


def _record_compiles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, set[str]]]:
    """Each ``compile_cuda`` call: the function's name and the passes that ran."""
    seen: list[tuple[str, set[str]]] = []
    inner = compiler.compile_cuda

    def compile_cuda(pyfunc: Any, *args: Any, **kwargs: Any) -> Any:
        result = inner(pyfunc, *args, **kwargs)
        times = result.metadata["pipeline_times"]
        seen.append((pyfunc.__name__, {p for passes in times.values() for p in passes}))
        return result

    monkeypatch.setattr(compiler, "compile_cuda", compile_cuda)
    return seen


def test_build_path_compiles_lean_and_links_a_cubin(monkeypatch: pytest.MonkeyPatch) -> None:
    """``numba_binary`` (a cubin-cache miss) takes the lean pipeline and needs no GPU."""
    seen = _record_compiles(monkeypatch)
    dispatcher, sig = _kernel()
    binary = launching.numba_binary(dispatcher, sig, (8, 0))
    assert binary.cubin[:4] == b"\x7fELF" and "ampere_gemm" in binary.entry
    assert binary.slots == 7 * 3 + len(sig.args) - 3  # a, b (u16) and ws (f32): 7 slots each
    ((name, passes),) = seen
    assert name == "ampere_gemm"
    assert any("mmaplug_lean_lowering" in p for p in passes)
    assert not any(re.search("reconstruct_ssa|strip_phis|inline_closure_likes", p) for p in passes)
    assert compiler.CUDACompiler is not numba_internals.machinery().compiler  # restored after


def test_only_the_named_function_is_compiled_lean() -> None:
    """Other functions compiled inside ``lean`` (an overload's implementation Numba compiles
    on the way) keep Numba's pipeline."""
    from numba.cuda import types

    def first(out: Any) -> None:
        out[0] = 1.0

    def second(out: Any) -> None:
        out[0] = 2.0

    arg = (types.float32[::1],)
    with pipeline.lean(first, (8, 0)):
        lean = compiler.compile_cuda(first, types.void, arg, cc=(8, 0))
        full = compiler.compile_cuda(second, types.void, arg, cc=(8, 0))
    assert list(lean.metadata["pipeline_times"]) == ["mmaplug_lean"]
    assert list(full.metadata["pipeline_times"]) == ["cuda"]
    assert numba_internals._lean_funcs == set()


def test_singly_assigned_variables_match_numbas_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The linear scan finds the variables Numba's quadratic one finds (the set lowering
    keeps out of stack slots), on a kernel with loops, branches and re-assigned scalars."""
    checked: list[int] = []
    lean_lower = numba_internals.machinery().lower
    lean_scan = lean_lower._find_singly_assigned_variable

    def both(self: Any) -> None:
        lowering.Lower._find_singly_assigned_variable(self)
        numbas = self._singly_assigned_vars
        lean_scan(self)
        assert self._singly_assigned_vars == numbas
        checked.append(len(numbas))

    monkeypatch.setattr(lean_lower, "_find_singly_assigned_variable", both)
    dispatcher, sig = _kernel()
    pipeline.ptx(dispatcher, sig, (8, 0), SMALL.threads)
    assert checked and checked[0] > 100


def test_each_signature_is_resolved_once_per_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Typing and lowering ask Numba for a function's signature once per (function, argument
    types): repeated questions come from the memo (Numba alone asks ~10x as often here)."""
    asked: list[tuple[Any, ...]] = []
    resolve = BaseFunction.get_call_type

    def counting(self: Any, context: Any, args: Any, kws: Any) -> Any:
        asked.append((self, tuple(args), tuple(kws.items())))
        return resolve(self, context, args, kws)

    monkeypatch.setattr(BaseFunction, "get_call_type", counting)
    dispatcher, sig = _kernel()
    pipeline.ptx(dispatcher, sig, (8, 0), SMALL.threads)
    assert len(asked) > 100 and len(set(asked)) == len(asked)
    assert BaseFunction.get_call_type is counting  # Numba's own again after the build


def test_a_failed_resolution_is_not_memoised() -> None:
    """A question Numba cannot answer raises each time it is asked (its error is not kept)."""
    from numba.cuda import types
    from numba.cuda.descriptor import cuda_target

    context = cuda_target.typing_context
    context.refresh()
    add = context.resolve_value_type(operator.add)
    with pipeline.lean(None, (8, 0)):
        for _ in range(2):
            with pytest.raises(TypingError, match="add"):
                add.get_call_type(context, (types.none, types.none), {})
        assert str(add.get_call_type(context, (types.int64, types.int32), {})) == (
            "(int64, int64) -> int64"
        )


def test_cubin_refuses_options_it_would_not_link() -> None:
    dispatcher = SimpleNamespace(
        py_func=SimpleNamespace(__name__="ampere_gemm"),
        targetoptions={"link": ("helpers.ptx",), "launch_bounds": (128, 1)},
    )
    with pytest.raises(KernelBuildError, match=r"kernel ampere_gemm asks cuda.jit for \{'link'"):
        pipeline.compile_cubin(dispatcher, None, (8, 0))
