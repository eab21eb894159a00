"""PTX tier: the decode kernel compiles for sm_80 and sm_90a with its 16-byte loads, its mmas and
no local memory (every fragment in registers)."""

from __future__ import annotations

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
