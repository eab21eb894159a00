"""PTX tier: each intrinsic in mmaplug.cuda.intrinsics compiles to its exact PTX mnemonic."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest
from numba import cuda
from numba.core.errors import TypingError
from numba.cuda import types

from mmaplug.cuda import intrinsics as I
from mmaplug.cuda import sm90 as H

pytestmark = pytest.mark.ptx

U16 = types.uint16[::1]
U32 = types.uint32[::1]
F32 = types.float32[::1]


def _ldmatrix_kernel(load, count):
    if count == 1:

        def kernel(out):
            sm = cuda.shared.array(512, types.uint16)
            out[cuda.threadIdx.x] = load(I.smem_addr(sm, cuda.threadIdx.x * 8))

    else:

        def kernel(out):
            sm = cuda.shared.array(512, types.uint16)
            regs = load(I.smem_addr(sm, cuda.threadIdx.x * 8))
            out[cuda.threadIdx.x] = regs[0] ^ regs[count - 1]

    return kernel, (U32,)


def _mma_kernel(mma):
    def kernel(a, c):
        i = cuda.threadIdx.x
        d = mma(a[0], a[1], a[2], a[3], a[4], a[5], c[0], c[1], c[2], c[3])
        c[i] = d[0] + d[1] + d[2] + d[3]

    return kernel, (U32, F32)


def _cp_async_kernel(copy):
    def kernel(src, n):
        sm = cuda.shared.array(512, types.uint16)
        i = cuda.threadIdx.x * 8
        copy(I.smem_addr(sm, i), src, i, n)
        I.cp_async_commit()
        I.cp_async_wait_group(1)
        I.cp_async_wait_all()

    return kernel, (U16, types.int32)


def _cvt_kernel(cvt, to_float):
    if to_float:

        def kernel(bits, out):
            out[0] = cvt(bits[0])

        return kernel, (U16, F32)

    def kernel(x, out):
        out[0] = cvt(x[0])

    return kernel, (F32, U16)


U8 = types.uint8[::1]


def _fp8_kernel(fmt: str):
    """Each FP8 conversion of *fmt* once: narrow one value and a pair, widen back, and a
    4-byte store of the bytes."""
    narrow, pair = getattr(I, f"f32_to_{fmt}"), getattr(I, f"f32x2_to_{fmt}x2")
    widen = getattr(I, f"{fmt}_to_f32")

    def kernel(x, q, h, out):
        i = cuda.threadIdx.x
        q[i] = narrow(x[i])
        h[i] = pair(x[i], x[i + 1])
        out[i] = widen(q[i + 1])
        I.st_global_b32(q, 4 * i, types.uint32(h[i]))

    return kernel, (F32, U8, U16, F32)


def _amax_kernel():
    """An amax's three steps: |x| as bits, the warp's maximum, one reduction into out[0]."""

    def kernel(x, out):
        m = I.warp_max_u32(I.f32_abs_bits(x[cuda.threadIdx.x]))
        if cuda.threadIdx.x % 32 == 0:
            I.red_global_max_u32(out, 0, m)

    return kernel, (F32, F32)


def _mufu_kernel(fn):
    def kernel(x, out):
        out[0] = fn(x[0])

    return kernel, (F32, F32)


def _gelu_kernel():
    from mmaplug.cuda.mathfuncs import gelu

    def kernel(x, out):
        out[0] = gelu(x[0])

    return kernel, (F32, F32)


def _vector_kernel():
    def kernel(out, f):
        sm = cuda.shared.array(512, types.float32)
        a, b, c, d = I.ld_shared_v4_f32(I.smem_addr(sm, cuda.threadIdx.x * 4))
        low = types.uint32(I.global_addr(out, 0) & 7)
        I.st_global_v2_b32(out, cuda.threadIdx.x * 4, low, types.uint32(1))
        e, g, h, i = I.ld_global_cg_v4_f32(f, 512 + cuda.threadIdx.x * 4)
        I.st_global_v4_b32(f, cuda.threadIdx.x * 4, a + e, b + g, c + h, d + i)

    return kernel, (U16, F32)


LDMATRIX = {
    "ldmatrix_x1": (I.ldmatrix_x1, 1, "ldmatrix.sync.aligned.m8n8.x1.shared.b16"),
    "ldmatrix_x2": (I.ldmatrix_x2, 2, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"),
    "ldmatrix_x4": (I.ldmatrix_x4, 4, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
    "ldmatrix_x1_trans": (I.ldmatrix_x1_trans, 1, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16"),
    "ldmatrix_x2_trans": (I.ldmatrix_x2_trans, 2, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"),
    "ldmatrix_x4_trans": (I.ldmatrix_x4_trans, 4, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
}
CASES = {
    **{name: (*_ldmatrix_kernel(fn, n), text) for name, (fn, n, text) in LDMATRIX.items()},
    "mma_f16": (
        *_mma_kernel(I.mma_m16n8k16_f16),
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    ),
    "mma_bf16": (
        *_mma_kernel(I.mma_m16n8k16_bf16),
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    ),
    "cp_async_16": (*_cp_async_kernel(I.cp_async_16), "cp.async.cg.shared.global"),
    "cp_async_8": (*_cp_async_kernel(I.cp_async_8), "cp.async.ca.shared.global"),
    "cp_async_4": (*_cp_async_kernel(I.cp_async_4), "cp.async.ca.shared.global"),
    "cp_async_commit": (*_cp_async_kernel(I.cp_async_16), "cp.async.commit_group;"),
    "cp_async_wait_group": (*_cp_async_kernel(I.cp_async_16), "cp.async.wait_group 1;"),
    "cp_async_wait_all": (*_cp_async_kernel(I.cp_async_16), "cp.async.wait_all;"),
    "f16_to_f32": (*_cvt_kernel(I.f16_to_f32, True), "cvt.f32.f16"),
    "f32_to_f16": (*_cvt_kernel(I.f32_to_f16, False), "cvt.rn.f16.f32"),
    "f32_to_bf16": (*_cvt_kernel(I.f32_to_bf16, False), "cvt.rn.bf16.f32"),
    "bf16_to_f32": (*_cvt_kernel(I.bf16_to_f32, True), "shl.b32"),
    "ex2_approx": (*_mufu_kernel(I.ex2_approx), "ex2.approx.ftz.f32"),
    "rcp_approx": (*_mufu_kernel(I.rcp_approx), "rcp.approx.ftz.f32"),
    "ld_shared_v4_f32": (*_vector_kernel(), "ld.shared.v4.f32"),
    "st_global_v2_b32": (*_vector_kernel(), "st.global.v2.b32"),
    "st_global_v4_b32": (*_vector_kernel(), "st.global.v4.b32"),
    "ld_global_cg_v4_f32": (*_vector_kernel(), "ld.global.cg.v4.f32"),
    "global_addr": (*_vector_kernel(), "cvta.to.global.u64"),
    "f32_abs_bits": (*_amax_kernel(), "and.b32"),
    "warp_max_u32": (*_amax_kernel(), "redux.sync.max.u32"),
    "red_global_max_u32": (*_amax_kernel(), "red.global.max.u32"),
}


# the FP8 conversions (sm_89+), compiled for sm_90a: (kernel, signature, mnemonic)
FP8_CASES = {
    **{
        f"f32_to_{fmt}": (*_fp8_kernel(fmt), f"cvt.rn.satfinite.{fmt}x2.f32")
        for fmt in ("e4m3", "e5m2")
    },
    **{
        f"f32x2_to_{fmt}x2": (*_fp8_kernel(fmt), f"cvt.rn.satfinite.{fmt}x2.f32")
        for fmt in ("e4m3", "e5m2")
    },
    **{f"{fmt}_to_f32": (*_fp8_kernel(fmt), f"cvt.rn.f16x2.{fmt}x2") for fmt in ("e4m3", "e5m2")},
    "st_global_b32": (*_fp8_kernel("e4m3"), "st.global.b32"),
}


def _ptx(kernel, sig, cc=(8, 0)) -> str:
    ptx, _ = cuda.compile_ptx(kernel, sig, cc=cc)
    return ptx


@pytest.mark.parametrize("name", sorted(CASES))
def test_mnemonic(name):
    """The intrinsic's kernel compiles for sm_80 and contains its exact PTX mnemonic."""
    kernel, sig, text = CASES[name]
    assert text in _ptx(kernel, sig)


@pytest.mark.parametrize("name", ["ldmatrix_x4", "cp_async_16"])
def test_shared_address_is_32_bit_register(name):
    """smem_addr reaches ldmatrix/cp.async as a 32-bit `r` register, the source as 64-bit `l`."""
    kernel, sig, text = CASES[name]
    assert re.search(re.escape(text) + r".*\[%r\d+\]", _ptx(kernel, sig))
    if name.startswith("cp_async"):
        assert re.search(r"\[%r\d+\], \[%rd\d+\], 16, %r\d+;", _ptx(kernel, sig))


@pytest.mark.parametrize("name", ["mma_f16", "ldmatrix_x4_trans", "cp_async_16", "f32_to_bf16"])
def test_compiles_for_sm90a(name):
    """The same kernels compile for the Hopper `sm_90a` target."""
    kernel, sig, text = CASES[name]
    ptx = _ptx(kernel, sig, cc=(9, 0, "a"))
    assert ".target sm_90a" in ptx and text in ptx


@pytest.mark.parametrize("name", sorted(FP8_CASES))
def test_fp8_conversion_mnemonic_for_sm90a(name, assemble_sm90a):
    """The FP8 conversions compile for sm_90a to their exact mnemonic, and ptxas takes them."""
    kernel, sig, text = FP8_CASES[name]
    ptx = _ptx(kernel, sig, cc=(9, 0, "a"))
    assert ".target sm_90a" in ptx and text in ptx
    assemble_sm90a(ptx)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_conversion_operands(fmt):
    """One value is converted as a pair of itself (its byte stored as a u8), a pair from two
    `f` registers into an `h` register (first argument in the upper byte); the widening reads
    the byte pair, widens the low float16 and stores a float32; the 4-byte store takes an `r`."""
    ptx = _ptx(*FP8_CASES[f"f32_to_{fmt}"][:2], cc=(9, 0, "a"))
    cvt = re.escape(f"cvt.rn.satfinite.{fmt}x2.f32")
    one = re.search(rf"{cvt} (%rs\d+), (%f\d+), \2;", ptx)
    assert one and re.search(rf"st\.global\.u8\s+\[%rd\d+\], {re.escape(one[1])};", ptx)
    assert re.search(rf"{cvt} %rs\d+, %f(\d+), %f(?!\1\b)\d+;", ptx)
    widen = rf"cvt\.rn\.f16x2\.{fmt}x2 pair, %rs\d+; mov\.b32 \{{lo, hi\}}, pair; "
    assert re.search(widen + r"cvt\.f32\.f16 %f\d+, lo;", ptx)
    assert re.search(r"st\.global\.b32 \[%rd\d+\], %r\d+;", ptx)


def test_fp8_conversions_check_their_argument_types():
    """Narrowing takes a float (not FP8 bits), widening an integer (not a float)."""

    def narrow_bits(q, out):
        out[0] = I.f32_to_e4m3(q[0])

    def widen_float(x, out):
        out[0] = I.e5m2_to_f32(x[0])

    with pytest.raises(TypingError, match="f32_to_e4m3: argument must be a float"):
        _ptx(narrow_bits, (U8, U8), cc=(9, 0, "a"))
    with pytest.raises(TypingError, match="e5m2_to_f32: argument must be an integer"):
        _ptx(widen_float, (F32, F32), cc=(9, 0, "a"))


def test_mma_operand_groups():
    """mma gets {4 f32 d}, {4 b32 a}, {2 b32 b}, {4 f32 c} register groups in that order."""
    kernel, sig, text = CASES["mma_f16"]
    f4, r4 = (r"\{" + ", ".join([rf"%{kind}\d+"] * 4) + r"\}" for kind in "fr")
    pattern = rf"{re.escape(text)} {f4}, {r4}, \{{%r\d+, %r\d+\}}, {f4};"
    assert re.search(pattern, _ptx(kernel, sig))


def test_wait_group_requires_literal():
    """cp_async_wait_group with a runtime count is a typing error naming the literal rule."""

    def kernel(n):
        I.cp_async_wait_group(n)

    with pytest.raises(TypingError, match="compile-time literal int"):
        _ptx(kernel, (types.int32,))


def test_wait_group_rejects_negative():
    """cp_async_wait_group(-1) is a typing error."""

    def kernel(out):
        I.cp_async_wait_group(-1)

    with pytest.raises(TypingError, match="must be >= 0"):
        _ptx(kernel, (U32,))


def test_cp_async_rejects_2d_source():
    """cp.async takes a 1-D source array with a flat index."""

    def kernel(src):
        sm = cuda.shared.array(64, types.uint16)
        I.cp_async_16(I.smem_addr(sm, 0), src, 0, 16)

    with pytest.raises(TypingError, match="must be a 1-D array"):
        _ptx(kernel, (types.uint16[:, ::1],))


def test_ldmatrix_rejects_float_address():
    """ldmatrix rejects an address that is not an integer."""

    def kernel(x):
        x[0] = I.ldmatrix_x1(x[1])

    with pytest.raises(TypingError, match="addr must be an integer"):
        _ptx(kernel, (F32,))


def test_vector_operand_registers():
    """ld.shared.v4 takes a 32-bit shared address; the stores take a 64-bit global address and
    their words as `r` (uint32) or `f` (float32) registers."""
    kernel, sig, _ = CASES["ld_shared_v4_f32"]
    ptx = _ptx(kernel, sig)
    assert re.search(r"ld\.shared\.v4\.f32 \{%f\d+, %f\d+, %f\d+, %f\d+\}, \[%r\d+\];", ptx)
    assert re.search(r"st\.global\.v2\.b32 \[%rd\d+\], \{%r\d+, %r\d+\};", ptx)
    assert re.search(r"st\.global\.v4\.b32 \[%rd\d+\], \{%f\d+, %f\d+, %f\d+, %f\d+\};", ptx)


def test_st_global_rejects_mixed_words():
    """The words of a vector store are all uint32 or all float32."""

    def kernel(out, f):
        I.st_global_v2_b32(out, 0, types.uint32(1), f[0])

    with pytest.raises(TypingError, match="all uint32 or all float32"):
        _ptx(kernel, (U16, F32))


def _stub_parameters(module: ModuleType) -> dict[str, list[str]]:
    """The parameter names of each stub *module* declares in ``__all__`` (read from its source:
    bind replaced the stubs)."""
    tree = ast.parse(Path(module.__file__ or "").read_text())
    stubs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    return {name: [a.arg for a in stubs[name].args.args] for name in module.__all__}


@pytest.mark.parametrize("module", [I, H], ids=["intrinsics", "sm90"])
def test_every_declared_name_has_an_emulation(module: ModuleType) -> None:
    """The cuda module's ``__all__`` is the one list: each name there is a stub, bound to a
    callable, and the sim module of the same name has an emulation taking the stub's arguments."""
    emulations = importlib.import_module(f"mmaplug.sim.{module.__name__.rpartition('.')[2]}")
    for name, params in _stub_parameters(module).items():
        assert callable(getattr(module, name)), name
        inspect.signature(getattr(emulations, name)).bind(*params)  # TypeError if not


def test_gelu_runs_on_two_mufu_ops_and_no_division():
    """mathfuncs.gelu (the epilogues' GELU) is one rcp.approx and one ex2.approx: no IEEE
    division, no libdevice erf."""
    ptx = _ptx(*_gelu_kernel())
    assert ptx.count("rcp.approx.ftz.f32") == 1 and ptx.count("ex2.approx.ftz.f32") == 1
    assert "div.rn.f32" not in ptx and "erf" not in ptx
    assert "max.NaN.f32" in ptx  # a NaN input stays NaN (min/max return the other operand)
