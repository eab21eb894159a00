"""A kernel parameter passed by value in the parameter space (``__grid_constant__``), in the
NVVM IR Numba lowers a kernel to: Numba passes an array as seven parameters (meminfo, parent,
nitems, itemsize, data pointer, shape, stride), and it declares none by value. ``by_value``
rewrites one array's data pointer into a 64-byte aligned byval parameter of the array's bytes
and annotates it ``grid_constant``: NVVM then takes its address with ``cvta.param`` instead of
copying it, and the kernel reads the array through that generic address. The launch passes the
bytes themselves where the pointer was (``mmaplug.cuda.launching.KernelParams``).

This is how hopper's tensor maps reach the kernel (docs/decisions.md, "Tensor maps as
grid-constant parameters"): TMA reads a map in the parameter space without the proxy fence a
map in global memory needs in every CTA, the fence that invalidated the TMA unit's copy of the
map before the first load.
"""

from __future__ import annotations

import re
from typing import Final

from mmaplug.errors import KernelBuildError

__all__ = [
    "ALIGN", "ARRAY_SLOTS", "DATA_SLOT", "argument_names", "by_value", "by_value_ptx",
    "llvm_param",
]  # fmt: skip

ALIGN: Final = 64  # what TMA asks of a tensor map's address
# Numba's kernel ABI for a 1-D array argument (the launch's parameter slots follow it)
ARRAY_SLOTS: Final = 7  # meminfo, parent, nitems, itemsize, data, shape[0], strides[0]
DATA_SLOT: Final = 4  # the data pointer's place among them
# a kernel's definition: Numba's function returns its status (i32) until ``kernel_fixup``
_DEFINE = re.compile(r'^define (void|i32) @("[^"]+"|[\w.$]+) ?\((.*)\)', re.M)
_METADATA = re.compile(r"^!(\d+) =", re.M)
_ANNOTATIONS = re.compile(r"^!nvvm\.annotations = !\{(.*)\}$", re.M)


def argument_names(func: object) -> tuple[str, ...]:
    """The names of kernel function *func*'s arguments, in the order its parameters take them
    (empty where *func* is no Python function)."""
    code = getattr(func, "__code__", None)
    return tuple(code.co_varnames[: code.co_argcount]) if code is not None else ()


def llvm_param(arg_is_array: list[bool], arg: int) -> int:
    """The index among a kernel's LLVM parameters of argument *arg*'s data pointer, where
    *arg_is_array* says which of its arguments are arrays (seven parameters) or scalars
    (one)."""
    if not arg_is_array[arg]:
        raise KernelBuildError(f"argument {arg} is a scalar: only an array passes by value")
    return sum(ARRAY_SLOTS if a else 1 for a in arg_is_array[:arg]) + DATA_SLOT


def by_value(ir: str, entry: str, param: int, nbytes: int) -> str:
    """The LLVM IR module *ir* with parameter *param* (its index among the LLVM parameters,
    an ``i64*`` array data pointer) of kernel *entry* turned into ``[nbytes/8 x i64]`` passed by
    value, 64-byte aligned and ``grid_constant``. The function's body is untouched: its first
    instruction casts the parameter's address back to the pointer the body reads. A
    KernelBuildError where the IR is not shaped so (another Numba's lowering)."""
    found = [m for m in _DEFINE.finditer(ir) if m.group(2).strip('"') == entry]
    if len(found) != 1 or nbytes % 8 or nbytes <= 0:
        raise KernelBuildError(
            f"cannot pass parameter {param} of kernel {entry} by value: "
            f"{len(found)} definitions of it in the IR, {nbytes} bytes"
        )
    define = found[0]
    returns, name, params = define.group(1), define.group(2), define.group(3).split(", ")
    ty, _, pname = params[param].partition(" ") if param < len(params) else ("", "", "")
    if ty != "i64*" or not pname.startswith('%"') or not pname.endswith('"'):
        raise KernelBuildError(
            f"cannot pass parameter {param} of kernel {entry} by value: it is "
            f"{params[param] if param < len(params) else 'missing'!r}, not an i64* array pointer"
        )
    array = f"[{nbytes // 8} x i64]"
    held = f'{pname[:-1]}.value"'
    types = [p.partition(" ")[0] for p in params]
    old_type = _pointer(returns, types)
    types[param] = f"{array}*"
    new_type = _pointer(returns, types)
    params[param] = f"{array}* byval align {ALIGN} {held}"
    head = define.group(0).replace(define.group(3), ", ".join(params), 1)
    body = ir.index("{", define.end())
    entry_block = ir.index("\n", ir.index(":", body)) + 1  # after the first block's label
    cast = f"  {pname} = bitcast {array}* {held} to i64*\n"
    out = ir[: define.start()] + head + ir[define.end() : entry_block] + cast + ir[entry_block:]
    out = out.replace(f"{old_type} @{name}", f"{new_type} @{name}")
    return _annotated(out, f"{new_type} @{name}", param)


def _pointer(returns: str, types: list[str]) -> str:
    """The type of a pointer to a function of parameters of *types* returning *returns*."""
    return f"{returns} ({', '.join(types)})*"


def _annotated(ir: str, function: str, param: int) -> str:
    """*ir* with ``grid_constant`` annotating parameter *param* (0-based) of *function*."""
    annotations = _ANNOTATIONS.search(ir)
    if annotations is None:
        raise KernelBuildError("the kernel's IR has no !nvvm.annotations to extend")
    numbers = [int(n) for n in _METADATA.findall(ir)]
    node, params = max(numbers) + 1, max(numbers) + 2
    listed = f"!nvvm.annotations = !{{{annotations.group(1)}, !{node} }}"
    ir = ir[: annotations.start()] + listed + ir[annotations.end() :]
    tail = "" if ir.endswith("\n") else "\n"
    return (
        f'{ir}{tail}!{node} = !{{ {function}, !"grid_constant", !{params} }}\n'
        f"!{params} = !{{ i32 {param + 1} }}\n"
    )


def by_value_ptx(ptx: str, entry: str, param: int, nbytes: int) -> str:
    """*ptx* as ``by_value`` makes NVVM write it, for PTX Numba wrote: parameter *param* of
    kernel *entry* declared as *nbytes* 64-byte aligned bytes, and each load of it turned into its
    generic address (``cvta.param``). A KernelBuildError where the PTX is not shaped so."""
    name = f"{entry}_param_{param}"
    declared = re.compile(rf"^(\s*)\.param \.u64 {re.escape(name)}(,?)$", re.M)
    loads = re.compile(rf"ld\.param\.u64\s+(%rd\d+), \[{re.escape(name)}\];")
    found_declared, found_loads = declared.findall(ptx), loads.findall(ptx)
    if len(found_declared) != 1 or not found_loads or nbytes % 8 or nbytes <= 0:
        raise KernelBuildError(
            f"cannot pass parameter {param} of kernel {entry} by value in its PTX: declared "
            f"{len(found_declared)} times as .u64, loaded {len(found_loads)} times, {nbytes} bytes"
        )
    ptx = declared.sub(lambda m: f"{m[1]}.param .align {ALIGN} .b8 {name}[{nbytes}]{m[2]}", ptx)
    return loads.sub(
        lambda m: f"mov.b64 \t{m[1]}, {name};\n\tcvta.param.u64 \t{m[1]}, {m[1]};", ptx
    )
