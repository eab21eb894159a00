"""The decode kernel's build: generated source loaded, compiled and handed to the driver the one
way every scheduler's kernels are (``mmaplug.cuda.modules.KernelFamily``)."""

from __future__ import annotations

from typing import Any, Final

from mmaplug.cuda.modules import GeneratedKernels, KernelFamily, epilogue_types

from .config import SHAPE_PARAMS, DecodeKernelConfig, more_b_params
from .kernel_codegen import generate_source

__all__ = ["KERNELS", "build", "kernel_signatures", "loaded"]


def kernel_signatures(config: DecodeKernelConfig) -> dict[str, Any]:
    """The Numba signature of ``decode_gemm``, in ``DecodeKernelConfig.parameters``' order."""
    from numba import types

    bits = types.uint8 if config.operand_dtype.is_float8 else types.uint16
    ops = types.Array(bits, 1, "C")  # the operands' bits: 16-bit or FP8 values
    ins, outs, scal, in_strides, out_strides = epilogue_types(config.epilogue)
    shape = [types.int64] * len(SHAPE_PARAMS)
    bs, b_strides = more_b_params(config.horizontal)
    more_b, more_strides = [ops] * len(bs), [types.int64] * len(b_strides)
    return {
        "decode_gemm": types.void(
            ops, ops, *more_b, *ins, *outs, *scal, *shape, *more_strides, *in_strides,
            *out_strides,
        )
    }  # fmt: skip


def _generate(config: DecodeKernelConfig, *, sim: bool) -> str:
    return generate_source(config, sim=sim)


#: How the decode kernels are loaded, built and compiled.
KERNELS: Final = KernelFamily("decode", _generate, kernel_signatures)

_BUILD_CACHE: dict[DecodeKernelConfig, GeneratedKernels] = {}


def build(config: DecodeKernelConfig) -> GeneratedKernels:
    """Compiled (lazily, on first launch) kernels for *config*, cached by config."""
    return KERNELS.build(config, _BUILD_CACHE)


def loaded(config: DecodeKernelConfig, slots: int) -> int:
    """``decode_gemm`` of *config* as a driver ``CUkernel`` (static shared memory only)."""
    return KERNELS.loaded(config, build, "decode_gemm", 0, slots)
