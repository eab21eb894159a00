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

``--hints`` adds, per opcode of ``HINTED``, how many carry ptxas's yield hint and how many an
operand-reuse flag: the control bits DeepGEMM's SASS pass rewrote on its promotion FFMAs
(docs/decisions.md, "Block-scaled FP8 against its target")::

    python scripts/sass_counts.py --hints 8192x8192x8192/float8_e4m3fn-block
"""

from __future__ import annotations

import collections
import re
import sys

from ncu_probe import built, parse_spec, problem_and_overrides

import mmaplug as mp
from mmaplug.errors import UnsupportedTargetError
from mmaplug.runtime import dump

COUNTED = ("R2UR", "IMAD", "IADD3", "UIADD3", "FMUL", "FFMA", "HGMMA", "QGMMA", "SHFL", "STL",
           "LDL", "LDS", "STG", "FENCE", "UTMASTG")  # fmt: skip
HINTED = ("FFMA", "QGMMA", "HGMMA")
# an instruction line: /*0a30*/ then an optional predicate, then the opcode (modifiers after dots)
OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
# the same line with its encoding (disassembled with ``encodings``): the first 64-bit word at
# its end, the second, which holds the control bits, alone on the next line
ENCODED = re.compile(
    OPCODE.pattern + r"[^\n]*/\* 0x[0-9a-f]{16} \*/"  # the line and its first word
    r"\s*\n\s*/\* (0x[0-9a-f]{16}) \*/"  # the second word, on the next line
)
# sm_70 and later: the second word's bits 41-45 are the stall count and the yield flag, which
# is clear where ptxas hints the scheduler to switch warps; bits 58-61 the operand-reuse flags
YIELD_BIT, REUSE_BITS = 1 << 45, 0xF << 58


def hints(encoded: str) -> dict[str, tuple[int, int, int]]:
    """Per opcode of ``HINTED`` in *encoded* SASS: (instructions, with the yield hint, with an
    operand-reuse flag)."""
    counts = {op: [0, 0, 0] for op in HINTED}
    for op, high in ENCODED.findall(encoded):
        if op in counts:
            word = int(high, 16)
            counts[op][0] += 1
            counts[op][1] += not word & YIELD_BIT
            counts[op][2] += bool(word & REUSE_BITS)
    return {op: (n, y, r) for op, (n, y, r) in counts.items()}


def main(argv: list[str]) -> None:
    with_hints = "--hints" in argv
    specs = [a for a in argv if a != "--hints"] or ["4096x4096x4096"]
    hopper = mp.make_plugin_manager(block=["decode", "ampere"])
    for spec in specs:
        parsed = parse_spec(spec)
        problem, overrides = problem_and_overrides(parsed)
        compiled = built(problem, overrides, parsed[-1], hopper, "h200")
        try:  # (compiled.sass, with each instruction's encoding for the hints)
            sass = dump.sass(compiled._artifact, encodings=with_hints)
        except UnsupportedTargetError as error:
            sys.exit(str(error))
        counts = collections.Counter(OPCODE.findall(sass))
        named = " ".join(f"{op} {counts[op]}" for op in COUNTED)
        print(f"{spec:44s} {compiled.kernel_name}: {sum(counts.values())} instructions, {named}")
        if with_hints:
            for op, (n, yielding, reusing) in hints(sass).items():
                if n:
                    print(f"    {op}: {n}, {yielding} with the yield hint, {reusing} reusing")


if __name__ == "__main__":
    main(sys.argv[1:])
