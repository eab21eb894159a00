"""The decode scheduler on FP8 operands (issues 24/25): what it takes by operand type and compute
capability and why not, its space and rules in bytes of K, the default heuristic's plan, and the
generated kernel's geometry (no Numba needed: the source is text)."""

from __future__ import annotations

import attrs
import pytest

import mmaplug as mp
from mmaplug.planning.plan import plan_problem
from mmaplug.planning.scheduler import violations
from mmaplug.plugins.decode.config import DecodeKernelConfig
from mmaplug.plugins.decode.kernel_codegen import generate_source
from mmaplug.plugins.decode.scheduler import SCHEDULER
from mmaplug.tune.corpus import TuneProblem

H200 = mp.get_device("h200")
A100 = mp.get_device("a100")
SM89 = attrs.evolve(A100, name="l40s", cc=(8, 9))  # Ada: the first GPU with FP8 mma.sync
SM86 = attrs.evolve(A100, name="a10", cc=(8, 6))
FP8 = ("float8_e4m3fn", "float8_e5m2")


def _problem(**fields: object) -> mp.MatmulProblem:
    fields = {"m": 1, "n": 4096, "k": 4096, "dtype": "float8_e4m3fn", "scale": "row", **fields}
    return TuneProblem(**fields).problem()


def _pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("device", [SM89, H200], ids=["sm89", "h200"])
def test_takes_fp8_operands_from_sm89_on(dtype: str, device: mp.Device) -> None:
    assert SCHEDULER.accepts(_problem(dtype=dtype), device) is None


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("device", [A100, SM86], ids=["sm80", "sm86"])
def test_declines_fp8_operands_before_sm89_with_the_reason(dtype: str, device: mp.Device) -> None:
    """sm_80 and sm_86 have no FP8 mma.sync; 16-bit operands still go to decode there."""
    reason = SCHEDULER.accepts(_problem(dtype=dtype), device) or ""
    assert f"multiplies {dtype} with mma.sync m16n8k32, which needs sm_89 or newer" in reason
    assert device.target in reason
    assert SCHEDULER.accepts(TuneProblem(m=1, n=4096, k=4096).problem(), device) is None


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"k": 4104}, "K must be a multiple of 16 (float8_e4m3fn), not 4104"),
        ({"m": 17}, "at most 16 activation rows"),
    ],
)
def test_declines_what_the_fp8_kernel_cannot_stream(fields: dict, reason: str) -> None:
    """A 16-byte load is 16 FP8 elements: K a multiple of 8 is not enough."""
    assert reason in (SCHEDULER.accepts(_problem(**fields), H200) or "")
    assert SCHEDULER.accepts(TuneProblem(m=1, n=64, k=4104).problem(), H200) is None  # bf16


def test_an_m_major_fp8_operand_is_declined_and_compile_copies_it_k_major() -> None:
    """decode streams K-contiguous rows only; mp.compile copies the operand K-major (hopper's
    FP8 reason) and the copy's problem (TN) runs on decode."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4, 256], dtype=mp.float8_e4m3fn, stride_order=[0, 1])  # M-major
        b = fd.define_tensor([256, 64], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([], dtype=mp.float32)
        sb = fd.define_tensor([1], dtype=mp.float32)
        fd.add_output(fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.bfloat16))
    problem = mp.matmul_problem(fd.fusion)
    assert "K-contiguous operands only" in (SCHEDULER.accepts(problem, H200) or "")
    compiled = mp.compile(fd.fusion, device="h200", pm=_pm())
    assert [s.kind for s in compiled.segments] == ["pointwise", "matmul"]
    (kernel,) = compiled.kernels.values()
    assert kernel.spec.problem.layout == "TN" and kernel.spec.scheduler == "decode"


def test_block_scaled_problems_are_not_offered_to_decode() -> None:
    """decode does not apply block scales (no ``block_scales = True``): hopper plans them, and
    the rejection says why."""
    assert getattr(SCHEDULER, "block_scales", False) is False
    spec = plan_problem(_problem(m=4, scale="block"), H200, pm=_pm())
    assert spec.scheduler == "hopper"
    rejected = {r.name: r.reason for r in spec.provenance.candidates if isinstance(r, mp.Rejection)}
    assert "block-scaled" in rejected["decode"]


@pytest.mark.parametrize("scale", ["tensor", "row"])
@pytest.mark.parametrize(
    ("m", "n", "k", "warps", "bf16_warps"),
    [
        (1, 4096, 4096, 4, 8),
        (1, 2048, 4096, 8, 8),
        (1, 6144, 8192, 4, 4),
        (1, 8192, 4096, 2, 4),
        (1, 8192, 8192, 2, 4),
        (1, 28672, 4096, 4, 1),
    ],  # fmt: skip
)
def test_plans_fp8_decode_in_bytes_of_k(
    scale: str, m: int, n: int, k: int, warps: int, bf16_warps: int
) -> None:
    """A chunk is 128 bytes of a row as for 16-bit operands (128 FP8 elements), one mma 32 of K.
    The warps follow the 16-bit rule by waves, with FP8's registers (12 warps an SM at four
    chunks: one wave is 132 CTAs of 8 warps, 396 of 4, 792 of 2; 16-bit's 264, 528, 1,056), and
    four chunks in flight, not three (runs 96 and 188); 1,792 CTAs are past one wave of FP8 (12
    warps an SM hold 1,584 CTAs of one warp: the fuller last wave of 4 or 2, run 193), not of
    16-bit (17 hold 2,244). (The 16-bit plan blocks hopper, which takes 16 rows of 8 KiB
    rows.)"""
    spec = plan_problem(_problem(m=m, n=n, k=k, scale=scale), H200, pm=_pm())
    assert spec.scheduler == "decode"
    rows = 8 * -(-m // 8)
    assert spec.params.cta_tile == spec.params.warp_tile == mp.TileShape(rows, 16, 128)
    assert spec.params.instruction_tile == mp.TileShape(8, 16, 32)
    assert (spec.params.splitk_factor, spec.params.stages) == (warps, 4)
    no_hopper = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["hopper"])
    bf16 = plan_problem(TuneProblem(m=m, n=n, k=k).problem(), H200, pm=no_hopper)
    assert (bf16.params.splitk_factor, bf16.params.stages) == (bf16_warps, 3)
    assert bf16.params.cta_tile.k * 2 == spec.params.cta_tile.k


def test_the_rules_refuse_16_bit_tiles_and_old_gpus_for_fp8() -> None:
    """A 16-bit K chunk or mma on an FP8 problem names its field; so does an sm_86 device."""
    problem = _problem(m=8)
    params = mp.MatmulParams(
        cta_tile=(8, 16, 64), warp_tile=(8, 16, 64), instruction_tile=(8, 16, 16),
        splitk_factor=4, stages=3, async_gmem_load_operands=False, use_smem_epilogue=True,
    )  # fmt: skip
    found = {v.field: v.message for v in violations(SCHEDULER, params, problem, H200)}
    assert set(found) == {"cta_tile", "warp_tile", "instruction_tile"}
    assert "8x16x32" in found["instruction_tile"]
    good = attrs.evolve(
        params, cta_tile=mp.TileShape(8, 16, 128), warp_tile=mp.TileShape(8, 16, 128),
        instruction_tile=mp.TileShape(8, 16, 32),
    )  # fmt: skip
    assert violations(SCHEDULER, good, problem, H200) == []
    assert violations(SCHEDULER, good, problem, SM89) == []
    (old,) = violations(SCHEDULER, good, problem, SM86)
    assert old.field == "device" and "FP8 mma.sync m16n8k32 (sm_89 or newer)" in old.message


@pytest.mark.parametrize(
    ("dtype", "mma"),
    [(mp.float8_e4m3fn, "mma_m16n8k32_e4m3"), (mp.float8_e5m2, "mma_m16n8k32_e5m2")],
)
def test_the_fp8_kernel_loads_16_elements_a_vector(dtype: mp.DType, mma: str) -> None:
    """The FP8 kernel is the 16-bit one with K in bytes: vectors of 16 elements at 16 * c,
    halves of 64, chunks of 128, the FP8 mma; the 16-bit kernel keeps 8, 32 and 64."""
    fp8 = DecodeKernelConfig(operand_dtype=dtype, m_tiles=2, warps=4, unroll=2)
    assert (fp8.vector, fp8.chunk_k, fp8.mma) == (16, 128, mma)
    assert fp8.name == f"decode_{mma[-4:]}_m16_w4_u2"
    text = generate_source(fp8, sim=False)
    for line in ("b_sn + 16 * c", "kk = k0 + 64 * h", "if kk + 16 * c < K:", "full = K // 128"):
        assert line in text, line
    assert f"d = {mma}(" in text and "mma_m16n8k16" not in text.split("def decode_gemm")[1]
    half = generate_source(attrs.evolve(fp8, operand_dtype=mp.bfloat16), sim=False)
    for line in ("b_sn + 8 * c", "kk = k0 + 32 * h", "if kk + 8 * c < K:", "full = K // 64"):
        assert line in half, line
    assert "mma_m16n8k32" not in half
