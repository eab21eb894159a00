"""PTX tier: the generated Ampere GEMM kernels compile for sm_80 with the expected instructions."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmaplug.ir.dtypes import DType
from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, compile_ptx, generate_source

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: ampere_harness
from ampere_harness import epilogue_program  # noqa: E402

pytestmark = pytest.mark.ptx

MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


@pytest.fixture(scope="module")
def default_ptx() -> str:
    return compile_ptx(AmpereKernelConfig())


def test_default_kernel_instructions(default_ptx: str) -> None:
    cfg = AmpereKernelConfig()
    wm, wn, _ = cfg.warp_tile
    k_steps = cfg.cta_tile[2] // 16
    # the k-tile body is unrolled: (wm/16) * (wn/8) mma per k16 step
    assert default_ptx.count(MMA_F16) == (wm // 16) * (wn // 8) * k_steps
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in default_ptx
    assert "cp.async.cg.shared.global" in default_ptx
    assert "cp.async.wait_group 1;" in default_ptx  # stages - 2
    assert "cp.async.commit_group" in default_ptx


def test_default_kernel_has_no_local_memory(default_ptx: str) -> None:
    # accumulators and fragments are local arrays NVVM unrolls into registers: no local memory
    assert "ld.local" not in default_ptx
    assert "st.local" not in default_ptx
    assert not re.search(r"\.local\s", default_ptx)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
def test_default_kernel_ptxas_no_spills(default_ptx: str, tmp_path) -> None:
    # ptxas may be older than NVVM's PTX ISA; the kernel uses nothing newer than 7.x
    ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.0", default_ptx, flags=re.M)
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    out = subprocess.run(
        ["ptxas", "-arch=sm_80", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    regs = int(re.search(r"Used (\d+) registers", out.stderr + out.stdout).group(1))
    spill = re.search(r"(\d+) bytes spill stores", out.stderr + out.stdout)
    assert regs <= 255
    # measured: 254 registers and 8 bytes of spill for 128x128x32 / 64x64 warps (see docs/ampere-notes.md)  # noqa: E501
    assert spill is not None and int(spill.group(1)) <= 16


def test_transposed_operands_use_ldmatrix_trans() -> None:
    cfg = AmpereKernelConfig(
        a_k_inner=False,
        b_k_inner=False,
        operand_dtype=DType.bfloat16,
        cta_tile=(64, 64, 32),
        warp_tile=(32, 32, 32),
        epilogue=epilogue_program("bias_gelu", DType.bfloat16),
    )
    ptx = compile_ptx(cfg)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert MMA_BF16 in ptx and MMA_F16 not in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


def test_splitk_and_narrow_vectors_compile() -> None:
    cfg = AmpereKernelConfig(
        splitk=2,
        vec_a=4,
        vec_b=1,
        cta_tile=(64, 64, 32),
        warp_tile=(32, 32, 32),  # noqa: E501
        epilogue=epilogue_program("alpha_beta", DType.float16),
    )
    main = compile_ptx(cfg)
    assert "cp.async.ca.shared.global" in main  # 8-byte copies for vec 4
    assert "cp.async.cg" not in main  # no 16-byte copies anywhere
    assert "st.shared.u16" in main or "st.shared.b16" in main  # vec 1: plain load + st.shared
    reduce = compile_ptx(cfg, kernel="ampere_splitk_reduce")
    assert "mma.sync" not in reduce


def test_generated_source_is_unrolled_and_asm_free() -> None:
    src = generate_source(AmpereKernelConfig(), sim=False)
    assert "asm" not in src.lower()
    assert "acc = cuda.local.array(128, float32)" in src  # a 64x64 warp tile's accumulators
    assert "launch_bounds=(128, 1)" in src
