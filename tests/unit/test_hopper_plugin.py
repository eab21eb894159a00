"""The hopper scheduler object: which problems it takes on which GPU, and its build step."""

from __future__ import annotations

import attrs
import pytest

import mmaplug as mp
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.cli.demo import example_fusion
from mmaplug.errors import KernelBuildError
from mmaplug.ir.dtypes import DType
from mmaplug.planning.choices import Rejection, SchedulerChoice
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.plan import plan_problem
from mmaplug.plugins import decode, hopper

H100_NO_A = Device(
    name="h100-plain", cc=(9, 0), sm_count=132, smem_per_block_optin=232_448, smem_per_sm=233_472
)


def linear(pm, m: int, n: int, k: int, dtype: DType = DType.float16) -> MatmulProblem:
    """TN: x [m, k] and w [n, k], both K-inner (rows of k elements)."""
    return mp.matmul_problem(example_fusion(m, n, k, dtype), pm=pm)


def matmul(pm, m: int, n: int, k: int, dtype: DType = DType.float16) -> MatmulProblem:
    """a [m, k] @ b [k, n]: A K-inner, B N-inner (rows of n elements)."""
    with mp.FusionDefinition() as fd:
        a, b = fd.define_tensor([m, k], dtype), fd.define_tensor([k, n], dtype)
        fd.add_output(fd.ops.cast(fd.ops.matmul(a, b), dtype))
    return mp.matmul_problem(fd.fusion, pm=pm)


def candidate(problem: MatmulProblem, device: str | Device) -> SchedulerChoice | Rejection:
    """The scheduler's answer for *problem*, as a plan's provenance records it."""
    gpu = get_device(device) if isinstance(device, str) else device
    reason = hopper.SCHEDULER.accepts(problem, gpu)
    if reason is None:
        return SchedulerChoice(hopper.SCHEDULER.name, hopper.SCHEDULER.priority)
    return Rejection(hopper.SCHEDULER.name, reason)


@pytest.mark.parametrize("device", ["h100", "h200"])
@pytest.mark.parametrize("dtype", [DType.float16, DType.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("build", [linear, matmul], ids=["TN", "TT"])
def test_accepts_16bit_single_matmul_tma_aligned_on_sm90a(pm, device, dtype, build):
    """fp16/bf16, one matmul, 16-byte aligned operand rows, sm_90a: accepted at priority 20."""
    problem = build(pm, 256, 512, 128, dtype)
    assert min(problem.vector_widths.a, problem.vector_widths.b) >= 8
    assert candidate(problem, device) == SchedulerChoice("hopper", 20)
    assert hopper.SCHEDULER.accepts(problem, get_device(device)) is None


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("a100", "needs wgmma and TMA (sm_90a); a100 is sm_80"),
        (H100_NO_A, "needs wgmma and TMA (sm_90a); h100-plain is sm_90"),
    ],
    ids=["a100", "sm90_without_a"],
)
def test_rejects_gpus_without_sm90a(pm, device, reason):
    """An A100, or an sm_90 not targeted as sm_90a, is declined with the target in the reason."""
    assert candidate(linear(pm, 256, 512, 128), device) == Rejection("hopper", reason)


def test_rejects_float32_operands(pm):
    """float32 operands (a problem built by hand: fusions refuse them) are declined with a fix."""
    f16 = linear(pm, 256, 512, 128)
    answer = candidate(attrs.evolve(f16, operand_dtype=DType.float32), "h200")
    assert answer == Rejection(
        "hopper",
        "wgmma takes float16, bfloat16, float8_e4m3fn or float8_e5m2 operands, not float32; "
        "cast the operands in the fusion",
    )


def test_takes_horizontal_and_rejects_other_multi_matmul_fusions(pm):
    """silu(A@B1) * (A@B2) shares A: one horizontal kernel; two matmuls reading different A
    operands are declined (the kernel runs one MmaOp or a horizontal group)."""
    H = DType.float16
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([256, 128], H)
        b1, b2 = fd.define_tensor([128, 512], H), fd.define_tensor([128, 512], H)
        fd.add_output(
            fd.ops.cast(fd.ops.mul(fd.ops.silu(fd.ops.matmul(a, b1)), fd.ops.matmul(a, b2)), H)
        )
    problem = mp.matmul_problem(fd.fusion, pm=pm)
    assert (problem.num_patterns, problem.horizontal) == (2, 2)
    assert candidate(problem, "h100") == SchedulerChoice("hopper", 20)
    with mp.FusionDefinition() as fd:
        a, a2 = fd.define_tensor([256, 128], H), fd.define_tensor([256, 128], H)
        b1, b2 = fd.define_tensor([128, 512], H), fd.define_tensor([128, 512], H)
        fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.matmul(a, b1), fd.ops.matmul(a2, b2)), H))
    with pytest.raises(mp.UnsupportedFusionError, match="2 matmuls are not one horizontal"):
        mp.matmul_problem(fd.fusion, pm=pm)  # (no one problem: m would be 256 * 256)
    problem = attrs.evolve(problem, horizontal=1)  # built by hand, it is still declined
    rejected = candidate(problem, "h100")
    assert isinstance(rejected, Rejection)
    assert rejected.reason.startswith("the fusion holds 2 matmuls that are not a horizontal fusion")


@pytest.mark.parametrize(
    ("build", "shape", "widths"),
    [(linear, (256, 512, 100), "4- and 4-element"), (matmul, (256, 100, 128), "8- and 4-element")],
    ids=["TN_k100", "TT_n100"],
)
def test_rejects_rows_not_16_byte_aligned(pm, build, shape, widths):
    """fp16 rows of 100 elements (200 B) allow 4-element vectors: TMA cannot load them."""
    m, n, k = shape
    problem = build(pm, m, n, k)
    answer = candidate(problem, "h200")
    assert isinstance(answer, Rejection) and answer.name == "hopper"
    assert answer.reason == (
        "TMA needs 16-byte aligned row pitches (a multiple of 8 elements) for A and B; this "
        f"problem's operand rows allow {widths} vectors (m={m}, n={n}, k={k}); the ampere "
        "scheduler takes it"
    )


def test_unaligned_problem_is_planned_on_ampere(pm):
    """On h200 the problem hopper declines falls to ampere, and the plan records every answer
    (decode's too: it takes at most 16 rows)."""
    problem, h200 = linear(pm, 256, 512, 100), get_device("h200")
    spec = plan_problem(problem, h200, pm=pm)
    assert spec.scheduler == "ampere"
    assert spec.provenance.candidates == (
        SchedulerChoice("ampere", 10),
        Rejection("decode", decode.SCHEDULER.accepts(problem, h200)),
        Rejection("hopper", hopper.SCHEDULER.accepts(problem, h200)),
    )


def test_build_builds_the_planned_config(pm):
    """For a hopper spec it returns an artifact configured with the planned tiles and stages."""
    analysis = mp.analyze(example_fusion(256, 512, 128), pm=pm)
    spec = plan_problem(analysis.problem, get_device("h200"), pm=pm)
    artifact = hopper.SCHEDULER.build(spec, analysis)
    config = artifact.config
    assert (config.cta_tile, config.warp_tile) == (
        spec.params.cta_tile.as_tuple(),
        spec.params.warp_tile.as_tuple(),
    )
    assert (config.stages, config.splitk, config.a_k_inner) == (spec.params.stages, 1, True)
    assert artifact.kernel_name == f"hopper_{config.name}"


def test_build_wraps_generator_refusals(pm):
    """Params the generator cannot emit (planning bypassed) raise KernelBuildError naming them."""
    analysis = mp.analyze(example_fusion(256, 512, 128), pm=pm)
    spec = plan_problem(analysis.problem, get_device("h200"), pm=pm)
    bad = attrs.evolve(spec, params=spec.params.with_overrides(stages=1))
    with pytest.raises(KernelBuildError, match=r"hopper kernel for .*stages must be >= 2"):
        hopper.SCHEDULER.build(bad, analysis)


def test_smem_epilogue_counts_its_staging(pm) -> None:
    """use_smem_epilogue adds a 64-row staging region per consumer to the smem count: rows of
    4 * 32 + 32 bytes, room for the staged path's float32 chunk (32 + 4 floats) or two packed
    buffers of 16-bit rows (2 * 32 + 16 bytes); and two column rows of 256 floats (a bias, an FP8
    column scale)."""
    from mmaplug.plugins.hopper import limits
    from mmaplug.plugins.hopper.config import HopperKernelConfig

    params = mp.MatmulParams(
        cta_tile=(128, 256, 64), warp_tile=(64, 256, 64), instruction_tile=(64, 256, 16),
        stages=4, tiling_strategy="persistent", warp_specialized=True, use_smem_epilogue=True,
    )  # fmt: skip
    problem = linear(pm, 4096, 4096, 4096)
    plain = limits.smem_bytes(params.with_overrides(use_smem_epilogue=False), problem)
    assert limits.smem_bytes(params, problem) - plain == 2 * (64 * (4 * 32 + 32) + 2 * 256 * 4)
    for packed in (False, True):
        config = HopperKernelConfig(smem_epilogue=True, packed_stores=packed, stages=4)
        assert config.smem_bytes == limits.smem_bytes(params, problem)
    assert 64 * (32 + 4) * 4 <= 64 * (4 * 32 + 32) and config.packed_buffers == 2
    assert limits.violations(params, problem, mp.get_device("h200")) == []


def test_smem_epilogue_with_split_k_is_legal(pm) -> None:
    """With split-K the staged epilogue writes the float32 partials: nothing to refuse."""
    from mmaplug.plugins.hopper import limits

    params = mp.MatmulParams(
        cta_tile=(128, 256, 64), warp_tile=(64, 256, 64), instruction_tile=(64, 256, 16),
        stages=4, tiling_strategy="persistent", warp_specialized=True, use_smem_epilogue=True,
        splitk_factor=2,
    )  # fmt: skip
    assert limits.violations(params, linear(pm, 4096, 4096, 4096), mp.get_device("h200")) == []


def test_packed_misfits_names_unaligned_output_rows(pm) -> None:
    """A launch whose outputs cannot take 16-byte vector stores (a strided or offset output,
    another shape class reusing the kernel) gets the reasons, and the artifact then launches
    the staged twin of its config; aligned rows give none."""
    from mmaplug.analysis.patterns import DimRole
    from mmaplug.cuda.kernel_views import DeviceTensor
    from mmaplug.planning.artifact import LaunchArgs
    from mmaplug.plugins.hopper.artifact import packed_misfits
    from mmaplug.plugins.hopper.config import HopperKernelConfig

    def tensor(address: int, sm: int, sb: int) -> DeviceTensor:
        strides = {DimRole.BATCH: sb, DimRole.M: sm, DimRole.N: 1, DimRole.K: 0}
        return DeviceTensor(array=None, address=address, role_strides=strides)

    cfg = HopperKernelConfig(smem_epilogue=True, packed_stores=True)
    problem = linear(pm, 4096, 4096, 4096)

    def args(out: DeviceTensor) -> LaunchArgs:
        a = tensor(0, 0, 0)
        return LaunchArgs(a=a, b=a, epilogue_inputs=(), scalars=(), outputs=(out,), problem=problem)

    assert packed_misfits(cfg, args(tensor(1 << 20, 4096, 0)), 4096, 1) == []
    assert packed_misfits(cfg, args(tensor((1 << 20) + 2, 4096, 0)), 4096, 1)
    assert packed_misfits(cfg, args(tensor(1 << 20, 4100, 0)), 4096, 1)  # 8200-byte rows
    assert packed_misfits(cfg, args(tensor(1 << 20, 4096, 12)), 4096, 2)  # batch stride
    assert packed_misfits(cfg, args(tensor(1 << 20, 4096, 12)), 4096, 1) == []  # no batch
    splitk = HopperKernelConfig(smem_epilogue=True, packed_stores=True, splitk=2)
    assert packed_misfits(splitk, args(tensor(1 << 20, 4100, 0)), 4096, 1) == []
    assert packed_misfits(splitk, args(tensor(1 << 20, 4096, 0)), 4098, 1)  # workspace rows
