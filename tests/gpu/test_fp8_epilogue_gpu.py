"""GPU tier: FP8 in the hopper and decode epilogues (issue 24). FP8 epilogue inputs (an FP8
residual, an FP8 per-channel bias) read as bytes and widened, and the amax output of delayed
scaling (``max(|y|)``, float32 ``[]``), through the packed, staged and register epilogues,
split-K, ping-pong, CTA pairs and the decode kernel (up to 16 rows); random data, float64
reference (``mp.evaluate``), outputs poisoned before each call (the amax's 4 bytes too: small
blocks are poisoned apart, see :func:`_poison_small_blocks`), in eager calls, the checked
launch path and CUDA graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

# (m, n, k): N = 1004 stages without packing (bf16 rows are not 16-byte vectors); M = 8 is the
# decode kernel's
DECODE_ROWS = 16
SHAPES = [(256, 256, 256), (1000, 1040, 528), (1000, 1004, 528), (8, 4096, 4096)]
INPUTS = [
    (mp.float8_e4m3fn, mp.float8_e4m3fn),
    (mp.float8_e4m3fn, mp.float8_e5m2),
    (mp.bfloat16, mp.float8_e4m3fn),  # a 16-bit matmul reading an FP8 residual
]
CASES = [(shape, ab, res) for shape in SHAPES for ab, res in INPUTS]


def _residual(m: int, n: int, k: int, operands: object, res: object, *,
              bias: object = None) -> mp.Fusion:  # fmt: skip
    """``cast(A @ B (scaled per row and column for FP8 operands) + r (+ bias), bfloat16)``
    with ``r`` ``[m, n]`` of FP8 *res* and, with *bias*, an FP8 ``[n]`` bias of that type."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=operands)
        b = fd.define_tensor([k, n], dtype=operands, stride_order=[0, 1])  # a weight [N, K]
        if operands.is_float8:  # type: ignore[attr-defined]
            sa = fd.define_tensor([m, 1], dtype=mp.float32)
            sb = fd.define_tensor([1, n], dtype=mp.float32)
            y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        else:
            y = fd.ops.matmul(a, b)
        y = fd.ops.add(y, fd.define_tensor([m, n], dtype=res))
        if bias is not None:
            column = fd.define_tensor([n], dtype=bias)
            y = fd.ops.add(y, fd.ops.broadcast_in_dim(column, [m, n], [1]))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return fd.fusion


@pytest.mark.parametrize(
    ("shape", "operands", "res"),
    CASES,
    ids=[f"{m}x{n}x{k}_{a.label}_plus_{r.label}" for (m, n, k), a, r in CASES],
)
def test_fp8_residual_matches_float64(
    pm: mp.PluginManager, checks: Checks, shape: tuple, operands: object, res: object
) -> None:
    fusion = _residual(*shape, operands, res)
    compiled = checks.run(fusion, pm, checks.inputs(fusion, np.random.default_rng(31)))
    assert compiled.spec.scheduler == ("decode" if shape[0] <= DECODE_ROWS else "hopper")


def test_fp8_residual_and_bias_kernel_variants(
    pm: mp.PluginManager, checks: Checks, epilogue_variant: dict
) -> None:
    """Split-K (the reduce kernel reads the bytes), CTA pairs, ping-pong and both epilogues
    (the packed one stages the e5m2 bias in its column row), ragged M and N."""
    fusion = _residual(1000, 1040, 1536, mp.float8_e4m3fn, mp.float8_e4m3fn,
                       bias=mp.float8_e5m2)  # fmt: skip
    compiled = checks.run(
        fusion, pm, checks.inputs(fusion, np.random.default_rng(32)), epilogue_variant
    )
    assert compiled.params == compiled.params.with_overrides(**epilogue_variant)  # taken as asked


# -- the amax output -------------------------------------------------------------------------------

AMAX_VARIANTS = {
    "packed": {"use_smem_epilogue": True},  # (with a bf16 y: FP8 and bf16 rows pack)
    "staged": {"use_smem_epilogue": True},  # (N = 1000: FP8 rows are not 16-byte vectors)
    "registers": {"use_smem_epilogue": False},
    "splitk3": {"splitk_factor": 3},
    "cluster_pairs": {"cluster_dims": (2, 1)},
    "pingpong": {"tiling_strategy": "persistent_pingpong", "cta_tile": (64, 128, 128),
                 "warp_tile": (64, 128, 128), "instruction_tile": (64, 128, 32)},
}  # fmt: skip


def _amax(m: int, n: int, k: int, operands: object = mp.float8_e4m3fn, *, batch: int = 0,
          product: object = mp.float32) -> mp.Fusion:  # fmt: skip
    """Delayed scaling: ``y8 = cast(y * out_scale, e4m3)`` first, ``amax(y)`` (float32 ``[]``
    over every output dim) second, and y itself as *product* third (the kernel's own values,
    for an exact check of the amax; bf16 lets the outputs pack)."""
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
            y = fd.ops.cast(fd.ops.matmul(a, b), mp.float32)
        out_scale = fd.define_tensor([], dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, out_scale), mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, list(range(len(lead) + 2))))
        fd.add_output(y if product is mp.float32 else fd.ops.cast(y, product))
    return fd.fusion


def _poison_small_blocks() -> None:
    """Fill free blocks of torch's small-allocation pool (the amax's 4 bytes come from there,
    not from the large pool ``poison_free_memory`` fills) with NaN and free them."""
    blocks = [torch.full((1 << 17,), float("nan"), device="cuda") for _ in range(8)]
    del blocks


def _check_amax(fusion: mp.Fusion, outputs: list, expected: list) -> None:
    """The amax is exactly max(|y|) of the kernel's own y (rounded as y is: rounding is
    monotonic, so max(|round(v)|) = round(max(|v|))), and within the FP8 accumulation's error
    of the float64 reference's amax."""
    y8, amax, y = outputs
    got = float(amax.item())
    assert tuple(amax.shape) == () and amax.dtype == torch.float32
    top = float(y.abs().max().item())
    assert float(amax.to(y.dtype).item()) == top, (got, top)
    ref = float(expected[1])
    assert abs(got - ref) <= 2e-2 * ref, (got, ref)  # FP8 wgmma sums with ~14 bits


def _calls(compiled: object, fusion: mp.Fusion, inputs: list, checks: Checks) -> None:
    """Two calls on poisoned memory, each checked; the second with A halved, so that a stale
    maximum of the first call (the scalar not zeroed) would show."""
    from mmaplug.tune.measure import poison_free_memory, rel_error

    for scale in (1.0, 0.5):
        call_inputs = list(inputs)
        call_inputs[0] = (inputs[0].float() * scale).to(inputs[0].dtype)
        poison_free_memory()
        _poison_small_blocks()
        outputs = compiled.execute(call_inputs)  # type: ignore[attr-defined]
        torch.cuda.synchronize()
        expected = checks.expected(fusion, call_inputs)
        # y8 within FP8's steps; y within the product's error (FP8 sums, or a half product
        # that the reference rounds to bf16 and the kernel keeps in float32)
        for i, tol in ((0, checks.TOLERANCE[mp.float8_e4m3fn]), (2, 2e-2)):
            err = rel_error(outputs[i], expected[i])
            assert err < tol, (fusion.outputs[i].name, err)
        _check_amax(fusion, outputs, expected)
        del outputs


@pytest.mark.parametrize("variant", sorted(AMAX_VARIANTS))
def test_amax_matches_float64_on_every_path(
    pm: mp.PluginManager, checks: Checks, variant: str
) -> None:
    n = 1000 if variant == "staged" else 1040
    fusion = _amax(1000, n, 1536, product=mp.bfloat16 if variant == "packed" else mp.float32)
    overrides = AMAX_VARIANTS[variant]
    compiled = mp.compile(fusion, pm=pm, overrides=overrides)
    assert compiled.spec.scheduler == "hopper"
    assert ("_se_ps" in compiled.kernel_name) == (variant in ("packed", "splitk3")), variant
    _calls(compiled, fusion, checks.inputs(fusion, np.random.default_rng(41)), checks)


@pytest.mark.parametrize("shape", [(256, 256, 256), (8, 4096, 4096), (2048, 2048, 4096)],
                         ids=lambda s: "x".join(map(str, s)))  # fmt: skip
@pytest.mark.parametrize("operands", [mp.float8_e4m3fn, mp.bfloat16], ids=str)
def test_amax_matches_float64_default_plans(
    pm: mp.PluginManager, checks: Checks, shape: tuple, operands: object
) -> None:
    fusion = _amax(*shape, operands)
    compiled = mp.compile(fusion, pm=pm)
    assert compiled.spec.scheduler == ("decode" if shape[0] <= DECODE_ROWS else "hopper")
    _calls(compiled, fusion, checks.inputs(fusion, np.random.default_rng(42)), checks)


def test_amax_over_a_batch(pm: mp.PluginManager, checks: Checks) -> None:
    fusion = _amax(300, 264, 512, mp.bfloat16, batch=3)
    compiled = mp.compile(fusion, pm=pm)
    _calls(compiled, fusion, checks.inputs(fusion, np.random.default_rng(43)), checks)


@pytest.mark.parametrize("scheduler", ["hopper", "decode"])
def test_amax_on_the_checked_launch_path(
    pm: mp.PluginManager, checks: Checks, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> None:
    """MMAPLUG_FAST_LAUNCH=0: the artifact's launch zeroes the scalar itself (cuMemsetD32Async
    on the call's stream), then both kernels of split-K run (hopper) or the decode kernel's
    warps of 5 rows."""
    monkeypatch.setenv("MMAPLUG_FAST_LAUNCH", "0")
    m, overrides = (1000, {"splitk_factor": 2}) if scheduler == "hopper" else (5, None)
    fusion = _amax(m, 1040, 1536)
    compiled = mp.compile(fusion, pm=pm, overrides=overrides)
    assert compiled.spec.scheduler == scheduler
    _calls(compiled, fusion, checks.inputs(fusion, np.random.default_rng(44)), checks)


def test_amax_nan_propagates(pm: mp.PluginManager, checks: Checks) -> None:
    """A NaN in A makes its row NaN and the amax NaN, as np.max."""
    fusion = _amax(256, 256, 256, mp.bfloat16)
    inputs = checks.inputs(fusion, np.random.default_rng(45))
    inputs[0][7, 3] = float("nan")
    outputs = mp.compile(fusion, pm=pm).execute(inputs)
    torch.cuda.synchronize()
    assert np.isnan(float(outputs[1].item()))


@pytest.mark.parametrize("m", [512, 4], ids=["hopper", "decode"])
def test_amax_in_a_cuda_graph_is_zeroed_at_every_replay(
    pm: mp.PluginManager, checks: Checks, m: int
) -> None:
    """The zeroing is a memset node of the graph: replays after new, smaller inputs give their
    own amax, not the larger one of the capture."""
    fusion = _amax(m, 768, 1024)
    compiled = mp.compile(fusion, pm=pm)
    static = checks.inputs(fusion, np.random.default_rng(46))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        compiled.execute(static)  # binds the launch outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = compiled.execute(static)
    for seed, scale in ((47, 1.0), (48, 0.25)):
        new = checks.inputs(fusion, np.random.default_rng(seed))
        new[0] = (new[0].float() * scale).to(new[0].dtype)
        for dst, src in zip(static, new, strict=True):
            dst.copy_(src)
        for out in outputs:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_amax(fusion, outputs, checks.expected(fusion, static))


@pytest.mark.parametrize("smem", [True, False], ids=["staged", "registers"])
def test_amax_of_a_horizontal_ffn(pm: mp.PluginManager, checks: Checks, smem: bool) -> None:
    """A quantised llama FFN, ``y = silu(x @ W1) * (x @ W3)`` in one horizontal kernel: y8,
    amax(y) and y (float32); ragged M and N."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([1000, 1024], dtype=mp.bfloat16)
        w1, w3 = (fd.define_tensor([1000, 1024], dtype=mp.bfloat16) for _ in "13")
        y = fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3))
        fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
        fd.add_output(fd.ops.amax(y, [0, 1]))
        fd.add_output(y)
    compiled = mp.compile(fd.fusion, pm=pm, overrides={"use_smem_epilogue": smem})
    assert compiled.spec.problem.horizontal == 2 and compiled.spec.scheduler == "hopper"
    _calls(compiled, fd.fusion, checks.inputs(fd.fusion, np.random.default_rng(49)), checks)
