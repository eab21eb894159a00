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


# plan -> (fusion, overrides, kernel-name suffix, the FP8 format widened); the register and
# staged epilogues' FP8 residuals are compiled with an amax beside them (AMAX_PLANS)
PLANS = {
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


def _amax(m: int, n: int, k: int, *, operands: object = mp.float8_e4m3fn, out: object =
          mp.float8_e4m3fn, product: bool = False, batch: int = 0,
          res: object = None) -> mp.Fusion:  # fmt: skip
    """Delayed scaling: ``cast(y * out_scale, out)`` first, then ``amax(y)`` over every output
    dim (y the scaled_mm's float32 result, or a 16-bit matmul's, plus an FP8 residual ``[m, n]``
    of *res* when given); *product*: y as bf16 last."""
    lead = [batch] if batch else []
    keep = [2] if batch else []
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([*lead, m, k], dtype=operands)
        b = fd.define_tensor([*lead, k, n], dtype=operands, stride_order=[*keep, 0, 1])
        if operands.is_float8:  # type: ignore[attr-defined]
            sa = fd.define_tensor([m, 1], dtype=mp.float32)
            sb = fd.define_tensor([1, n], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        if res is not None:
            y = fd.ops.add(y, fd.define_tensor([*lead, m, n], dtype=res))
        out_scale = fd.define_tensor([], dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), out))
        fd.add_output(fd.ops.amax(y, list(range(len(lead) + 2))))
        if product:
            fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd.fusion


def _quantized_ffn(m: int, n: int, k: int) -> mp.Fusion:
    """A horizontal FFN ``y = silu(x @ W1) * (x @ W3)`` as e4m3 first, its amax second."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=mp.bfloat16)
        w1, w3 = (fd.define_tensor([n, k], dtype=mp.bfloat16) for _ in "13")
        y = fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3))
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    return fd.fusion


def _casts_only(m: int, n: int, k: int) -> mp.Fusion:
    """``cast(A @ B, e4m3)`` and ``amax(A @ B)``, bf16 operands: casts of the accumulator only,
    the register epilogue's unrolled form."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.bfloat16)
        b = fd.define_tensor([k, n], dtype=mp.bfloat16, stride_order=[0, 1])
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    return fd.fusion


#: The amax plans that also read an FP8 residual, and its format (widened in the PTX).
AMAX_RESIDUALS = {"registers": "e4m3", "staged": "e5m2"}
# plan -> (fusion, overrides, kernel-name suffix)
AMAX_PLANS = {
    "registers_casts_only": (lambda: _casts_only(1000, 1040, 1536),
                             {"use_smem_epilogue": False}, "_sk1"),
    "registers": (lambda: _amax(1000, 1040, 1536, res=mp.float8_e4m3fn),
                  {"use_smem_epilogue": False}, "_sk1"),
    "staged": (lambda: _amax(1000, 1000, 528, out=mp.float8_e5m2, operands=mp.float8_e5m2,
                             res=mp.float8_e5m2), {"use_smem_epilogue": True}, "_se"),
    "packed": (lambda: _amax(1000, 1040, 1536, product=True), {"use_smem_epilogue": True},
               "_se_ps"),
    "packed_pingpong_batch": (
        lambda: _amax(1000, 1024, 512, operands=mp.bfloat16, batch=2),
        {"tiling_strategy": "persistent_pingpong", "cta_tile": (64, 128, 64),
         "warp_tile": (64, 128, 64), "instruction_tile": (64, 128, 16)},
        "_se_ps_pp",
    ),
    "cluster_pairs": (lambda: _amax(1000, 1040, 1536), {"cluster_dims": (2, 1)}, "_c2"),
    "horizontal_staged": (lambda: _quantized_ffn(1000, 1024, 1024),
                          {"use_smem_epilogue": True}, "_se_h2"),
    "horizontal_registers": (lambda: _quantized_ffn(1000, 1024, 1024),
                             {"use_smem_epilogue": False}, "_h2"),
}  # fmt: skip


@pytest.mark.parametrize("plan", sorted(AMAX_PLANS))
def test_amax_kernel_compiles_and_links_whole(
    plan: str, hopper_link_log: Callable[[object], str]
) -> None:
    """Each epilogue path folds |v| into a running maximum, reduces it over the warp
    (``redux.sync``) and into the output with one ``red.global.max`` a warp, and widens an FP8
    residual's bytes where it reads one; nothing spilled."""
    fusion, overrides, marker = AMAX_PLANS[plan]
    compiled = mp.compile(fusion(), "h200", overrides=overrides)
    assert compiled.spec.scheduler == "hopper"
    assert compiled.kernel_name.endswith(marker), compiled.kernel_name
    if plan == "registers_casts_only":  # unrolled: one fold per accumulator register
        assert "cuda.local.array" not in compiled.source
        assert compiled.source.count("f32_abs_bits(") == compiled.params.warp_tile.n // 2
    ptx = compiled.ptx
    assert len(re.findall(r"redux\.sync\.max\.u32", ptx)) == 1, "one warp reduction"
    assert len(re.findall(r"red\.global\.max\.u32", ptx)) == 1, "one global reduction"
    if fmt := AMAX_RESIDUALS.get(plan):
        assert f"cvt.rn.f16x2.{fmt}x2" in ptx and re.search(r"ld\.global(\.nc)?\.u8", ptx)
    text = hopper_link_log(compiled._artifact.config)
    assert not re.search(r"C750[49]", text), text
    assert re.search(r"\b0 bytes spill stores", text), text


def test_split_k_reduce_reads_fp8_inputs_and_computes_the_amax(
    assemble_sm90a: Callable[[str], str],
) -> None:
    """With split-K the reduce kernel reads the residual's bytes, widens them and computes the
    amax of the final values; the main kernel, which writes float32 partials, has none."""
    from mmaplug.plugins.hopper.kernel import compile_ptx

    compiled = mp.compile(_amax(1000, 1040, 1536, product=True, res=mp.float8_e4m3fn), "h200",
                          overrides={"splitk_factor": 3})  # fmt: skip
    config = compiled._artifact.config
    ptx = compile_ptx(config, "hopper_splitk_reduce")
    assert "redux.sync.max.u32" in ptx and "red.global.max.u32" in ptx
    assert "cvt.rn.f16x2.e4m3x2" in ptx and re.search(r"ld\.global(\.nc)?\.u8", ptx)
    assemble_sm90a(ptx)
    assert "red.global.max" not in compiled.ptx
