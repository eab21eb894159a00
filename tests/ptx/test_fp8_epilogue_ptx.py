"""PTX tier: hopper kernels reading FP8 epilogue inputs (an FP8 residual, an FP8 per-channel
bias) through each epilogue compile for sm_90a with the widening conversion and link whole as
launches link them: nothing spilled, setmaxnreg kept. (The simulator runs Python, so Numba's
typing of the generated code is checked here only.)"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp

pytestmark = pytest.mark.ptx


def _residual(m: int, n: int, k: int, res: object, *, operands: object = mp.float8_e4m3fn,
              column: bool = False) -> mp.Fusion:  # fmt: skip
    """``cast(scaled_mm(a, b, sa, sb, out_dtype=float32) + r, bfloat16)`` (a 16-bit matmul
    for 16-bit *operands*), the residual ``r`` ``[m, n]`` of FP8 *res* (*column*: ``[n]``
    broadcast along M, the packed epilogue's staged column input)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])
        if operands.is_float8:  # type: ignore[attr-defined]
            sa = fd.define_tensor([m, 1], dtype=mp.float32)
            sb = fd.define_tensor([1, n], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        r = fd.define_tensor([n] if column else [m, n], dtype=res)
        if column:
            r = fd.ops.broadcast_in_dim(r, [m, n], [1])
        fd.add_output(fd.ops.cast(fd.ops.add(y, r), mp.bfloat16))
    return fd.fusion


# plan -> (fusion, overrides, kernel-name suffix, the FP8 format widened)
PLANS = {
    "registers": (lambda: _residual(1000, 1040, 1536, mp.float8_e4m3fn),
                  {"use_smem_epilogue": False}, "_sk1", "e4m3"),
    "staged": (lambda: _residual(1000, 1004, 528, mp.float8_e5m2),
               {"use_smem_epilogue": True}, "_se", "e5m2"),
    "packed": (lambda: _residual(1000, 1040, 1536, mp.float8_e4m3fn),
               {"use_smem_epilogue": True}, "_se_ps", "e4m3"),
    "packed_column": (lambda: _residual(1000, 1040, 1536, mp.float8_e5m2, column=True),
                      {"use_smem_epilogue": True}, "_se_ps", "e5m2"),
    "bf16_packed": (lambda: _residual(1000, 1040, 1536, mp.float8_e4m3fn, operands=mp.bfloat16),
                    {"use_smem_epilogue": True}, "_se_ps", "e4m3"),
}  # fmt: skip


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_fp8_input_kernel_compiles_and_links_whole(
    plan: str, hopper_link_log: Callable[[object], str]
) -> None:
    fusion, overrides, marker, fmt = PLANS[plan]
    compiled = mp.compile(fusion(), "h200", overrides=overrides)
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith(marker), compiled.kernel_name
    ptx = compiled.ptx
    assert f"cvt.rn.f16x2.{fmt}x2" in ptx and re.search(r"ld\.global(\.nc)?\.u8", ptx)
    text = hopper_link_log(compiled._artifact.config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


def test_fp8_input_split_k_reduce_compiles(assemble_sm90a: Callable[[str], str]) -> None:
    """With split-K the reduce kernel reads the residual's bytes and widens them."""
    from mmaplug.plugins.hopper.kernel import compile_ptx

    fusion = _residual(1000, 1040, 1536, mp.float8_e4m3fn)
    compiled = mp.compile(fusion, "h200", overrides={"splitk_factor": 3})
    ptx = compile_ptx(compiled._artifact.config, "hopper_splitk_reduce")
    assert "cvt.rn.f16x2.e4m3x2" in ptx and re.search(r"ld\.global(\.nc)?\.u8", ptx)
    assemble_sm90a(ptx)
