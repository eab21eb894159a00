"""Static SASS of hopper kernels, on the CPU: each plan's kernel linked as launches link it
(its LTOIR through nvJitLink with ``-lto``, as ``tests/ptx/conftest.py`` links it),
disassembled by nvdisasm and counted by opcode (BENCHMARKS.md run 125: the warp-uniform
warpgroup index took the chunk kernel's R2UR moves from 107 to 16).

nvdisasm is no dependency of mmaplug: ``pip download --no-deps nvidia-cuda-nvdisasm``, unzip
the wheel and name its ``bin/nvdisasm`` in ``NVDISASM`` (default: ``nvdisasm`` on the PATH)::

    NVDISASM=.../nvidia/cu13/bin/nvdisasm python scripts/sass_counts.py \\
        4096x4096x4096/float8_e4m3fn-block 4096x4096x4096/float8_e4m3fn-block@w256

Specs as ``scripts/ncu_probe.py`` takes them (``MxNxK[/dtype-scale][@how]``; bf16 4096^3's
default without arguments). One line a kernel: its instructions, then the opcodes of
``COUNTED`` (spills are STL/LDL).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

from ncu_probe import parse_spec, problem_and_overrides
from numba import cuda

import mmaplug as mp
from mmaplug.cuda.pipeline import lean
from mmaplug.plugins.hopper.kernel import kernel_signatures, load_module

COUNTED = ("R2UR", "IMAD", "IADD3", "UIADD3", "FFMA", "HGMMA", "QGMMA", "SHFL", "STL", "LDL")
# an instruction line: /*0a30*/ then an optional predicate, then the opcode (modifiers after dots)
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def linked_cubin(config: object) -> bytes:
    """The hopper kernel of *config* as nvJitLink links it for sm_90a."""
    from cuda.bindings import nvjitlink

    kernel = load_module(config, sim=False)["hopper_gemm"].py_func
    with lean(kernel, (9, 0)):
        ltoir, _ = cuda.compile(
            kernel, kernel_signatures(config)["hopper_gemm"].args, cc=(9, 0, "a"),
            output="ltoir", device=False, abi="numba",
            launch_bounds=(config.threads, 1),  # type: ignore[attr-defined]
        )  # fmt: skip
    options = ["-arch=sm_90a", "-lto"]
    handle = nvjitlink.create(len(options), options)
    nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, ltoir, len(ltoir), "kernel")
    nvjitlink.complete(handle)
    cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
    nvjitlink.get_linked_cubin(handle, cubin)
    nvjitlink.destroy(handle)
    return bytes(cubin)


def opcodes(cubin: bytes) -> collections.Counter[str]:
    """The cubin's instructions counted by opcode."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        tool = os.environ.get("NVDISASM", "nvdisasm")
        try:
            sass = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, check=True)
        except FileNotFoundError:
            sys.exit(f"no nvdisasm at {tool!r}: name one in NVDISASM (this script's docstring)")
    return collections.Counter(OPCODE.findall(sass.stdout))


def main(specs: list[str]) -> None:
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    for spec in specs:
        problem, overrides = problem_and_overrides(parse_spec(spec))
        compiled = mp.compile(problem.fusion(), "h200", pm=hopper, overrides=overrides or None)
        counts = opcodes(linked_cubin(compiled._artifact.config))
        named = " ".join(f"{op} {counts[op]}" for op in COUNTED)
        print(f"{spec:44s} {compiled.kernel_name}: {sum(counts.values())} instructions, {named}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["4096x4096x4096"])
