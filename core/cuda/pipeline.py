"""Numba's front end for generated kernels: their PTX and their cubins, through the lean pass
pipeline where it runs (``numba_internals``, the one module that touches Numba's internals),
else through Numba's public API.

``lean`` leaves out the Numba-CUDA passes generated code never needs (closures, ``with``,
``literal_unroll``, rewrites it never matches) and SSA reconstruction (its variables keep one
type), and finds singly assigned variables in one scan; only the function it names is compiled
so. Inside it a function's signature is resolved once per argument types. Ampere PTX stays
byte-identical; first builds: docs/decisions.md, "A lean Numba pipeline". With releases of
Numba it was not tested with (``numba_internals.TESTED``) builds take Numba's stock pipeline:
slower, the same kernel. Imported only to build (it imports Numba).
"""

from __future__ import annotations

import contextlib
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any, Final

from mmaplug.cuda import grid_constant, numba_internals
from mmaplug.cuda.cubin import arch
from mmaplug.cuda.numba_internals import lean
from mmaplug.errors import KernelBuildError

__all__ = ["compile_cubin", "lean", "ptx"]


#: Arguments a generated kernel takes by value (``grid_constant``): name -> bytes.
ByValue = Mapping[str, int]


def ptx(
    dispatcher: Any,
    signature: Any,
    cc: tuple[int | str, ...],
    threads: int,
    by_value: ByValue | None = None,
) -> str:
    """PTX of the generated kernel *dispatcher* for *signature* and compute capability *cc*
    (no GPU needed), launch bounds ``(threads, 1)``, its *by_value* arguments passed so."""
    from numba import cuda

    with lean(dispatcher.py_func, cc), _stock_errors(dispatcher.py_func, cc):
        text, _ = cuda.compile_ptx(
            dispatcher.py_func, signature.args, cc=cc, launch_bounds=(threads, 1)
        )
    if not by_value:
        return str(text)
    func = dispatcher.py_func
    return _ptx_by_value(str(text), func.__name__, by_value_params(func, signature, by_value))


def _ptx_by_value(text: str, kernel: str, params: list[tuple[int, int]]) -> str:
    """PTX *text* of *kernel* with *params* (LLVM index, bytes) passed by value."""
    entry = _PTX_ENTRY.search(text)
    if entry is None:
        raise KernelBuildError(f"kernel {kernel}: no .entry in its PTX")
    for param, nbytes in params:
        text = grid_constant.by_value_ptx(text, entry[1], param, nbytes)
    return text


_PTX_ENTRY: Final = re.compile(r"\.entry (\S+)\(")


def by_value_params(func: Any, signature: Any, by_value: ByValue) -> list[tuple[int, int]]:
    """(LLVM parameter index, bytes) of each of kernel *func*'s *by_value* arguments."""
    from numba import types

    names = grid_constant.argument_names(func)
    arrays = [isinstance(t, types.Array) for t in signature.args]
    missing = sorted(set(by_value) - set(names))
    if missing:
        raise KernelBuildError(f"kernel {func.__name__} has no argument {missing[0]!r}")
    return [
        (grid_constant.llvm_param(arrays, names.index(name)), nbytes)
        for name, nbytes in by_value.items()
    ]


_UNLINKED: Final = ("link", "extensions", "shared_memory_carveout", "device")


def compile_cubin(
    dispatcher: Any, signature: Any, cc: tuple[int, int], by_value: ByValue | None = None
) -> tuple[bytes, str]:
    """The cubin and entry name of *dispatcher* for *signature* on compute capability *cc*:
    what ``dispatcher.compile`` links (same options), with no GPU: the lean front end and a
    link from the compile result (``numba_internals.lean_cubin``), else Numba's public
    ``cuda.compile`` and cuda.core's linker. *by_value* arguments are passed so: in the
    kernel's NVVM IR where the lean pipeline links it (``grid_constant.by_value``), in its
    PTX on the stock path, which then links PTX instead of NVVM IR (docs/decisions.md,
    "Tensor maps as grid-constant parameters")."""
    name, options = dispatcher.py_func.__name__, dispatcher.targetoptions
    unlinked = {key: options[key] for key in _UNLINKED if options.get(key)}
    if unlinked:
        raise KernelBuildError(
            f"kernel {name} asks cuda.jit for {unlinked}, which mmaplug's build path does not "
            "link; generate kernels with launch_bounds, cache and lto only"
        )
    params = by_value_params(dispatcher.py_func, signature, by_value) if by_value else []
    built = numba_internals.lean_cubin(dispatcher.py_func, signature.args, cc, options, params)
    if built is not None:
        return built
    with _stock_errors(dispatcher.py_func, cc):
        return _stock_cubin(dispatcher.py_func, signature.args, cc, options, params)


def _stock_cubin(
    func: Any,
    args: tuple[Any, ...],
    cc: tuple[int, int],
    options: dict[str, Any],
    by_value: list[tuple[int, int]],
) -> tuple[bytes, str]:
    """``compile_cubin`` through public API only: Numba's stock pipeline to PTX (or, for an
    LTO kernel, NVVM IR), linked by cuda.core's Linker with the options Numba's linker takes;
    a kernel with *by_value* parameters (LLVM index, bytes) as PTX, rewritten so."""
    from cuda.core import Linker, LinkerOptions, ObjectCode
    from numba import cuda

    lto = bool(options.get("lto")) and not by_value
    target = (*cc, "a") if tuple(cc) >= (9, 0) else tuple(cc)
    code, _ = cuda.compile(
        func,
        args,
        debug=bool(options.get("debug")),
        lineinfo=bool(options.get("lineinfo")),
        device=False,
        fastmath=bool(options.get("fastmath")),
        cc=target,
        opt=bool(options.get("opt", True)),
        abi="numba",
        output="ltoir" if lto else "ptx",
        launch_bounds=options.get("launch_bounds"),
    )
    if by_value:
        code = _ptx_by_value(str(code), func.__name__, by_value)
    obj = ObjectCode.from_ltoir(code) if lto else ObjectCode.from_ptx(str(code).encode())
    linked = Linker(
        obj,
        options=LinkerOptions(
            arch=arch(cc),
            max_register_count=options.get("max_registers") or None,
            link_time_optimization=True if lto else None,
        ),
    ).link("cubin")
    image = bytes(getattr(linked, "code", linked))
    return image, _entry(image, func.__name__)


_STO_CUDA_ENTRY: Final = 0x10  # an ELF symbol's st_other bit: a kernel entry point


def _entry(image: bytes, kernel: str) -> str:
    """The name of the one kernel entry point of cubin *image* (ELF64: the function symbol
    marked STO_CUDA_ENTRY)."""
    try:
        shoff = struct.unpack_from("<Q", image, 0x28)[0]
        size, count = struct.unpack_from("<HH", image, 0x3A)
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * size) for i in range(count)
        ]
        for _, kind, _, _, offset, length, link, _, _, entsize in sections:
            if kind != 2 or not entsize:  # SHT_SYMTAB
                continue
            names = sections[link][4]
            for at in range(offset, offset + length, entsize):
                name, info, other = struct.unpack_from("<IBB", image, at)
                if info & 0xF == 2 and other & _STO_CUDA_ENTRY:  # STT_FUNC
                    return image[names + name : image.index(b"\0", names + name)].decode()
    except (struct.error, ValueError, IndexError) as error:
        raise KernelBuildError(
            f"kernel {kernel}: its cubin is not a readable ELF: {error}"
        ) from error
    raise KernelBuildError(f"kernel {kernel}: its cubin has no entry point")


@contextlib.contextmanager
def _stock_errors(func: Any, cc: tuple[int | str, ...]) -> Iterator[None]:
    """A stock build's want of a GPU as a KernelBuildError: Numba's pipeline compiles device
    functions for the current GPU, which the lean one builds for *cc* without one."""
    try:
        yield
    except ImportError as error:  # numba.cuda's CudaSupportError is an ImportError
        stock = numba_internals.mode() == numba_internals.STOCK
        if not stock or type(error).__name__ != "CudaSupportError":
            raise
        raise KernelBuildError(
            f"kernel {func.__name__}: Numba's stock pipeline compiles its device functions for "
            f"the current GPU, and there is none ({error}); build on the GPU, or install the "
            f"releases the lean pipeline builds for compute capability {cc} with: "
            f"{numba_internals.tested()}"
        ) from error
