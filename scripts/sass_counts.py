"""Static SASS of hopper kernels, on the CPU: each plan's ``CompiledFusion.sass`` (the kernel
as launches load it, disassembled by cuobjdump or nvdisasm) counted by opcode (BENCHMARKS.md
run 125: the warp-uniform warpgroup index took the chunk kernel's R2UR moves from 107 to 16).

The disassembler is no dependency of mmaplug: a CUDA toolkit's ``bin/`` on PATH, or ``pip
install nvidia-cuda-nvdisasm`` (``mmaplug.runtime.dump.sass_tool`` finds either)::

    python scripts/sass_counts.py \\
        4096x4096x4096/float8_e4m3fn-block 4096x4096x4096/float8_e4m3fn-block@w256
    python scripts/sass_counts.py \\
        4096x4096x4096/bfloat16+bias_gelu 4096x4096x4096/bfloat16+bias_gelu@tma

Specs as ``scripts/ncu_probe.py`` takes them (``MxNxK[/dtype-scale][@how]``; bf16 4096^3's
default without arguments). One line a kernel: its instructions, then the opcodes of
``COUNTED`` (spills are STL/LDL).
"""

from __future__ import annotations

import collections
import re
import sys

from ncu_probe import built, parse_spec, problem_and_overrides

import mmaplug as mp
from mmaplug.errors import UnsupportedTargetError

COUNTED = ("R2UR", "IMAD", "IADD3", "UIADD3", "FFMA", "HGMMA", "QGMMA", "SHFL", "STL", "LDL",
           "LDS", "STG", "FENCE", "UTMASTG")  # fmt: skip
# an instruction line: /*0a30*/ then an optional predicate, then the opcode (modifiers after dots)
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def main(specs: list[str]) -> None:
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    for spec in specs:
        parsed = parse_spec(spec)
        problem, overrides = problem_and_overrides(parsed)
        compiled = built(problem, overrides, parsed[-1], hopper, "h200")
        try:
            counts = collections.Counter(OPCODE.findall(compiled.sass))
        except UnsupportedTargetError as error:
            sys.exit(str(error))
        named = " ".join(f"{op} {counts[op]}" for op in COUNTED)
        print(f"{spec:44s} {compiled.kernel_name}: {sum(counts.values())} instructions, {named}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["4096x4096x4096"])
