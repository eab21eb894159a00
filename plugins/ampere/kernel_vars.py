"""The variables of the generated ``ampere_gemm`` that one emitter binds and another reads: the
contract between ``mainloop_codegen``, ``copy_codegen`` and ``prologue_codegen``, by name."""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["KERNEL_VARS", "KernelVars"]


@attrs.frozen
class KernelVars:
    """The names of ``ampere_gemm``'s variables that cross emitters; each field's value is the
    variable's name in the generated source, its docstring what the variable holds."""

    smem: str = "smem"
    """The dynamic shared memory as a uint16 array: the operands' rings of stages."""
    tid: str = "tid"
    """The thread's index in the CTA."""
    lane: str = "lane"
    """The thread's lane in its warp."""
    wm: str = "wm"
    """The thread's warp tile index along M in the CTA tile."""
    wn: str = "wn"
    """The thread's warp tile index along N in the CTA tile."""
    m0: str = "m0"
    """First output row of the CTA tile (A's tile origin, ``Operand.origin``)."""
    n0: str = "n0"
    """First output column of the CTA tile (B's tile origin, ``Operand.origin``)."""
    k_begin: str = "k_begin"
    """First K index of the CTA's K range (its split's, split-K)."""
    k_end: str = "k_end"
    """End of the CTA's K range (exclusive), at most K."""
    num_kt: str = "num_kt"
    """k-tiles of the CTA's K range (0 for an empty split)."""
    kt: str = "kt"
    """The main loop's k-tile counter: the k-tile computed in the iteration."""
    kload: str = "kload"
    """First K index of the next k-tile the main loop copies (the unpredicated copies)."""
    wst: str = "wst"
    """The ring stage (int32) the main loop's next copies write."""
    sa: str = "sa"
    """smem offset (uint16 elements) of A's stage read next: the prologue and ldmatrix's."""
    sb: str = "sb"
    """smem offset (uint16 elements) of B's stage read next, in B's ring after all of A's."""
    foa: str = "foa"
    """Local int64 array: smem offsets of A's fragment reads, ``[mi * KS + ks]``."""
    fob: str = "fob"
    """Local int64 array: smem offsets of B's fragment reads, ``[p * KS + ks]`` (n16 pair p)."""
    fa: str = "fa"
    """Local uint32 array: A's fragments, two buffers of 4 registers per m16 tile."""
    fb: str = "fb"
    """Local uint32 array: B's fragments, two buffers of 2 registers per n8 tile."""
    acc: str = "acc"
    """Local float32 array: the warp tile's accumulators, ``[(mi * NI + ni) * 4 + q]``."""


KERNEL_VARS: Final = KernelVars()
