"""PTX tier: hopper kernels writing FP8 outputs (a quantized layer's e4m3 / e5m2 output) through
each epilogue compile for sm_90a with their conversions and stores, and link whole as launches
link them: nothing spilled, setmaxnreg kept, wgmmas pipelined. (The simulator runs Python, so
Numba's typing of the generated code is checked here only.)"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp

pytestmark = pytest.mark.ptx


def _quantized(m: int, n: int, k: int, fp8: object, *, product: bool = False) -> mp.Fusion:
    """``cast(scaled_mm(a, b, sa, sb, out_dtype=float32) * out_scale, fp8)`` (*product*: the
    bf16 product as a second output)."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=fp8)
        b = fd.define_tensor([k, n], dtype=fp8, stride_order=[0, 1])
        sa = fd.define_tensor([m, 1], dtype=mp.float32)
        sb = fd.define_tensor([1, n], dtype=mp.float32)
        out_scale = fd.define_tensor([], dtype=mp.float32)
        y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), fp8))
        if product:
            fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd.fusion


# plan -> (fusion, overrides, kernel-name marker, the epilogue's store in the PTX)
PLANS = {
    "packed": (
        lambda: _quantized(1000, 1040, 1536, mp.float8_e4m3fn, product=True),
        {"use_smem_epilogue": True},
        "_se_ps",
        r"st\.shared\.(u|b)16",
    ),
    "registers": (
        lambda: _quantized(1000, 1040, 1536, mp.float8_e4m3fn, product=True),
        {"use_smem_epilogue": False},
        "_sk1",
        r"st\.global\.u8",
    ),
    "staged": (
        lambda: _quantized(1000, 1000, 528, mp.float8_e5m2),
        {"use_smem_epilogue": True},
        "_se",
        r"st\.global\.b32",
    ),
}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_fp8_output_kernel_compiles_and_links_whole(
    plan: str, hopper_link_log: Callable[[object], str]
) -> None:
    fusion, overrides, marker, store = PLANS[plan]
    compiled = mp.compile(fusion(), "h200", overrides=overrides)
    assert compiled.kernel_name.endswith(marker), compiled.kernel_name
    fmt = "e5m2" if "e5m2" in compiled.kernel_name else "e4m3"
    ptx = compiled.ptx
    assert f"cvt.rn.satfinite.{fmt}x2.f32" in ptx and re.search(store, ptx)
    text = hopper_link_log(compiled._artifact.config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


def test_fp8_output_split_k_reduce_compiles(assemble_sm90a: Callable[[str], str]) -> None:
    """With split-K the reduce kernel applies the epilogue and writes the FP8 bytes."""
    from mmaplug.plugins.hopper.kernel import compile_ptx

    fusion = _quantized(1000, 1040, 1536, mp.float8_e4m3fn, product=True)
    compiled = mp.compile(fusion, "h200", overrides={"splitk_factor": 3})
    ptx = compile_ptx(compiled._artifact.config, "hopper_splitk_reduce")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and re.search(r"st\.global\.u8", ptx)
    assemble_sm90a(ptx)
