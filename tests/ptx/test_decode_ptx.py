"""PTX tier: the decode kernel compiles for sm_80 and sm_90a with its 16-byte loads, its mmas and
no local memory (every fragment in registers); the FP8 kernel assembles for sm_90a and sm_89."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import mmaplug as mp
from mmaplug.tune.corpus import TuneProblem

pytestmark = pytest.mark.ptx


@pytest.mark.parametrize("device", ["a100", "h200"])
@pytest.mark.parametrize(("m", "dtype"), [(1, "bfloat16"), (16, "float16")])
def test_decode_ptx(device: str, m: int, dtype: str) -> None:
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    fusion = TuneProblem(m=m, n=256, k=512, dtype=dtype, epilogue="bias_gelu").fusion()
    compiled = mp.compile(fusion, device, pm=pm)
    assert compiled.spec.scheduler == "decode"
    ptx = compiled.ptx
    kind = "bf16" if dtype == "bfloat16" else "f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx
    assert "ld.global.nc.v4.u32" in ptx
    assert ".local" not in ptx
    assert "decode_gemm" in ptx


@pytest.mark.parametrize(("dtype", "kind"), [("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")])
@pytest.mark.parametrize(
    ("m", "scale", "epilogue"), [(1, "tensor", "none"), (16, "row", "bias_gelu")]
)
def test_fp8_decode_ptx_assembles_for_sm90a_and_sm89_without_spills(
    dtype: str, kind: str, m: int, scale: str, epilogue: str, ptxas_log: Callable[[str, str], str]
) -> None:
    """The FP8 decode kernel (sm_90a PTX, cc=(9, 0, "a")) issues mma.sync m16n8k32 on its FP8
    type from 16-byte loads, keeps every fragment in registers, and ptxas takes it for sm_90a
    and for sm_89 (the oldest GPU with the instruction: PTX ISA 8.4) with nothing spilled.
    Hopper is blocked: it takes FP8 rows of 9-16 activations by default (run 193)."""
    from mmaplug.plugins.decode.kernel import KERNELS

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    problem = TuneProblem(m=m, n=256, k=512, dtype=dtype, scale=scale, epilogue=epilogue)
    compiled = mp.compile(problem.fusion(), "h200", pm=pm)
    assert compiled.spec.scheduler == "decode"
    ptx = KERNELS.main_ptx(compiled._artifact.config, (9, 0, "a"))
    assert ".target sm_90a" in ptx
    assert f"mma.sync.aligned.m16n8k32.row.col.f32.{kind}.{kind}.f32" in ptx
    assert "mma.sync.aligned.m16n8k16" not in ptx
    assert "ld.global.nc.v4.u32" in ptx and ".local" not in ptx
    for arch in ("sm_90a", "sm_89"):
        text = ptxas_log(ptx.replace(".target sm_90a", f".target {arch}"), arch)
        assert re.search(r"\b0 bytes spill stores", text), text


@pytest.mark.parametrize(
    ("dtype", "stages", "oldest"),
    [("bfloat16", 3, "sm_80"), ("float8_e4m3fn", 4, "sm_89")],  # the most registers of each
)
def test_two_row_tiles_assemble_without_spills(
    dtype: str, stages: int, oldest: str, ptxas_log: Callable[[str, str], str]
) -> None:
    """Two row tiles of two m tiles, 8 warps (one CTA an SM): every fragment stays in
    registers, for sm_90a and the oldest GPU of the operand type, at the registers
    ``limits.REGISTERS`` counts (within the 255 a thread can have)."""
    from mmaplug.plugins.decode.kernel import KERNELS
    from mmaplug.plugins.decode.limits import REGISTERS

    scale = "row" if "float8" in dtype else ""
    problem = TuneProblem(m=16, n=1024, k=1024, dtype=dtype, scale=scale, epilogue="bias_gelu")
    tile = (16, 32, 128 if scale else 64)
    overrides = {"cta_tile": tile, "warp_tile": tile, "splitk_factor": 8, "stages": stages}
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    compiled = mp.compile(problem.fusion(), "h200", pm=pm, overrides=overrides)
    assert compiled.kernel_name.endswith(f"_w8_u{stages}_r2")
    ptx = KERNELS.main_ptx(compiled._artifact.config, (9, 0, "a"))
    assert ".local" not in ptx
    itemsize = 1 if "float8" in dtype else 2
    for arch in ("sm_90a", oldest):
        text = ptxas_log(ptx.replace(".target sm_90a", f".target {arch}"), arch)
        assert re.search(r"\b0 bytes spill stores", text), text
        if arch == "sm_90a":
            used = int(re.search(r"Used (\d+) registers", text).group(1))
            assert used <= REGISTERS[(itemsize, 2, 2)][stages - 1], text


@pytest.mark.parametrize(
    ("h", "m", "dtype", "warps"),
    [
        (2, 1, "bfloat16", None),  # the llama FFN's decode step, default params
        (2, 1, "float16", 8),  # 16 warps: the most the rules allow (120 registers a thread)
        (2, 16, "float16", 4),  # 8 warps of two m tiles: the most there (158 registers)
        (3, 16, "float8_e4m3fn", 2),  # q/k/v of FP8, 6 warps
    ],
)
def test_horizontal_decode_assembles_without_spills(
    h: int, m: int, dtype: str, warps: int | None, ptxas_log: Callable[[str, str], str]
) -> None:
    """A horizontal fusion's decode kernel (every product's warps in one CTA, compiled for one
    CTA an SM) keeps every fragment in registers: ptxas spills nothing for sm_90a, nor for
    sm_80 (16-bit) or sm_89 (FP8), the oldest GPUs that run it."""
    from mmaplug.plugins.decode.kernel import KERNELS

    dt = getattr(mp, dtype)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, 1024], dtype=dt)
        ys = [fd.ops.linear(x, fd.define_tensor([256, 1024], dtype=dt)) for _ in range(h)]
        y = fd.ops.mul(fd.ops.silu(ys[0]), ys[1])
        fd.add_output(fd.ops.cast(fd.ops.add(y, ys[2]) if h == 3 else y, mp.bfloat16))
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    overrides = {"splitk_factor": warps} if warps else None
    compiled = mp.compile(fd.fusion, "h200", pm=pm, overrides=overrides)
    assert compiled.spec.scheduler == "decode"
    assert compiled.kernel_name.endswith(f"_h{h}")
    ptx = KERNELS.main_ptx(compiled._artifact.config, (9, 0, "a"))
    assert "ld.global.nc.v4.u32" in ptx and ".local" not in ptx
    for arch in ("sm_90a", "sm_89" if dt.is_float8 else "sm_80"):
        text = ptxas_log(ptx.replace(".target sm_90a", f".target {arch}"), arch)
        assert re.search(r"\b0 bytes spill stores", text), text


@pytest.mark.parametrize(
    ("operands", "residual", "arch"),
    [("bfloat16", None, "sm_80"), ("float8_e4m3fn", "float8_e5m2", "sm_89")],
)
def test_decode_amax_and_fp8_inputs_assemble_without_spills(
    operands: str, residual: str | None, arch: str, ptxas_log: Callable[[str, str], str]
) -> None:
    """The decode epilogue's amax (a running maximum, ``redux.sync`` over the warp, one
    ``red.global.max`` from lane 0) and an FP8 residual widened from bytes (``cvt`` of e5m2:
    sm_89) assemble for the oldest GPU they need, nothing spilled."""
    from mmaplug.plugins.decode.kernel import KERNELS

    dt = getattr(mp, operands)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([5, 512], dtype=dt)
        y = fd.ops.cast(fd.ops.linear(x, fd.define_tensor([256, 512], dtype=dt)), mp.float32)
        if residual:
            y = fd.ops.add(y, fd.define_tensor([5, 256], dtype=getattr(mp, residual)))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
        fd.add_output(fd.ops.amax(y, [0, 1]))
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(fd.fusion, "h200", pm=pm)
    assert compiled.spec.scheduler == "decode"
    ptx = KERNELS.main_ptx(compiled._artifact.config, (9, 0, "a"))
    assert "redux.sync.max.u32" in ptx and "red.global.max.u32" in ptx
    assert ("cvt.rn.f16x2.e5m2x2" in ptx) == bool(residual)
    text = ptxas_log(ptx.replace(".target sm_90a", f".target {arch}"), arch)
    assert re.search(r"\b0 bytes spill stores", text), text
