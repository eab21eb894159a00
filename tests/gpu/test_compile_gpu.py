"""GPU tier: fusions through mp.compile → execute on torch, CuPy and Numba arrays, vs float64."""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.gpu import cuda_device_count

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.sm80,
    pytest.mark.skipif(cuda_device_count() == 0, reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
]

TOLERANCE = {mp.float16: 1e-2, mp.bfloat16: 2e-2, mp.float32: 1e-3}


@pytest.fixture(scope="module")
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


def _torch_dtype(dtype: mp.DType):  # noqa: ANN202
    return {mp.float16: torch.float16, mp.bfloat16: torch.bfloat16, mp.float32: torch.float32}[dtype]  # noqa: E501


def _device_input(fusion: mp.Fusion, tv: mp.TensorView, rng: np.random.Generator):  # noqa: ANN202
    """A random CUDA tensor with the strides the fusion declared (its stride_order)."""
    host = rng.standard_normal(tv.shape)
    order = tv.alloc_order  # outermost → innermost
    stored = torch.tensor(np.ascontiguousarray(host.transpose(order)), dtype=torch.float64)
    inverse = np.argsort(order).tolist()
    return stored.to("cuda", _torch_dtype(tv.dtype)).permute(inverse)


def _poison_allocator(nbytes: int) -> None:
    """Fill the caching allocator's free blocks with NaN so unwritten outputs show up."""
    block = torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda", dtype=torch.float32)
    del block


def _check(fusion: mp.Fusion, inputs: list, outputs: list) -> None:
    host = [x.double().cpu().numpy() if hasattr(x, "double") else x for x in inputs]
    for tv, got, ref in zip(fusion.outputs, outputs, mp.evaluate(fusion, host), strict=True):
        got64 = got.double().cpu().numpy()
        assert np.all(np.isfinite(got64)), f"{tv.name}: unwritten (NaN) elements"
        ref64 = ref.astype(np.float64)
        err = np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)
        assert err < TOLERANCE[tv.dtype], f"{tv.name}: relative error {err:.2e}"


def _run(fusion: mp.Fusion, pm: mp.PluginManager, inputs: list, **overrides: object) -> mp.CompiledFusion:  # noqa: E501
    compiled = mp.compile(fusion, pm=pm, overrides=overrides or None)
    for _ in range(2):  # the second call reuses the built kernel
        _poison_allocator(64 << 20)
        outputs = compiled.execute(inputs)
        torch.cuda.synchronize()
        _check(fusion, inputs, outputs)
    return compiled


def test_linear_bias_gelu_odd_shape(pm: mp.PluginManager) -> None:
    """cast(gelu(linear + bias)) at 504x136x248 with the default heuristic's plan."""
    rng = np.random.default_rng(1)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([504, 248], dtype=mp.float16)
        w = fd.define_tensor([136, 248], dtype=mp.float16)
        b = fd.define_tensor([136], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))
    _run(fd.fusion, pm, [_device_input(fd.fusion, t, rng) for t in fd.fusion.inputs])


@pytest.mark.parametrize("layout", ["TN", "TT", "NT", "NN"])
def test_bf16_alpha_beta_every_layout(pm: mp.PluginManager, layout: str) -> None:
    """alpha * (A @ B) + beta * C in bfloat16, operands strided as each layout declares."""
    rng = np.random.default_rng(2)
    a_order = [1, 0] if layout[0] == "T" else [0, 1]   # T: A is K-inner
    b_order = [0, 1] if layout[1] == "N" else [1, 0]   # N: B [K, N] is K-inner
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([384, 200], dtype=mp.bfloat16, stride_order=a_order)
        b = fd.define_tensor([200, 264], dtype=mp.bfloat16, stride_order=b_order)
        c = fd.define_tensor([384, 264], dtype=mp.bfloat16)
        alpha, beta = fd.define_scalar(), fd.define_scalar()
        y = fd.ops.add(fd.ops.mul(fd.ops.matmul(a, b), alpha), fd.ops.mul(c, beta))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    assert mp.matmul_problem(fd.fusion, pm=pm).layout == layout
    tensors = [_device_input(fd.fusion, t, rng) for t in fd.fusion.inputs[:3]]
    _run(fd.fusion, pm, [*tensors, 1.5, -0.5])


@pytest.mark.parametrize("splitk", [1, 2])
def test_batched_relu_with_fp32_aux(pm: mp.PluginManager, splitk: int) -> None:
    """Batch 3, two outputs (relu in half, raw result in float32), with and without split-K."""
    rng = np.random.default_rng(3)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([3, 200, 320], dtype=mp.float16)
        b = fd.define_tensor([3, 320, 136], dtype=mp.float16)
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
        fd.add_output(fd.ops.cast(y, mp.float32))
    inputs = [_device_input(fd.fusion, t, rng) for t in fd.fusion.inputs]
    compiled = _run(fd.fusion, pm, inputs, splitk_factor=splitk)
    assert compiled.params.splitk_factor == splitk


def test_bias_on_m_with_silu_and_sigmoid_outputs(pm: mp.PluginManager) -> None:
    """A bias that varies along M, and two activations of one result stored side by side."""
    rng = np.random.default_rng(6)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([300, 256], dtype=mp.float16)
        b = fd.define_tensor([256, 200], dtype=mp.float16, stride_order=[0, 1])
        bias = fd.define_tensor([300], dtype=mp.float16)
        y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [300, 200], [0]))
        fd.add_output(fd.ops.cast(fd.ops.silu(y), mp.float16))
        fd.add_output(fd.ops.cast(fd.ops.sigmoid(fd.ops.neg(y)), mp.float16))
    _run(fd.fusion, pm, [_device_input(fd.fusion, t, rng) for t in fd.fusion.inputs])


def test_misaligned_operand_narrows_vectors(pm: mp.PluginManager) -> None:
    """An operand starting 2 bytes into its buffer, with odd row stride, still computes right."""
    rng = np.random.default_rng(4)
    m, n, k = 130, 72, 97
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=mp.float16)
        w = fd.define_tensor([n, k], dtype=mp.float16)
        fd.add_output(fd.ops.linear(x, w))
    base = torch.randn(m * k + 1, device="cuda", dtype=torch.float16)
    x_t = base[1:].view(m, k)  # data pointer 2 bytes past an aligned address
    w_t = torch.tensor(rng.standard_normal((n, k)), device="cuda", dtype=torch.float16)
    _run(fd.fusion, pm, [x_t, w_t])


def test_cupy_and_numba_inputs_give_outputs_of_their_kind(pm: mp.PluginManager) -> None:
    """CuPy in → CuPy out, Numba device arrays in → Numba device arrays out, same numbers."""
    cupy = pytest.importorskip("cupy")
    from numba import cuda

    rng = np.random.default_rng(5)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([96, 64], dtype=mp.float16)
        w = fd.define_tensor([80, 64], dtype=mp.float16)
        fd.add_output(fd.ops.linear(x, w))
    compiled = mp.compile(fd.fusion, pm=pm)
    xh = rng.standard_normal((96, 64)).astype(np.float16)
    wh = rng.standard_normal((80, 64)).astype(np.float16)
    ref = mp.evaluate(fd.fusion, [xh, wh])[0].astype(np.float64)
    out_cupy = compiled.execute([cupy.asarray(xh), cupy.asarray(wh)])[0]
    assert isinstance(out_cupy, cupy.ndarray)
    out_numba = compiled.execute([cuda.to_device(xh), cuda.to_device(wh)])[0]
    assert hasattr(out_numba, "copy_to_host")
    for got in (out_cupy.get(), out_numba.copy_to_host()):
        assert np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref) < 1e-2


def test_wrong_inputs_raise_launch_errors(pm: mp.PluginManager) -> None:
    """Host arrays, wrong shapes and wrong dtypes are LaunchErrors that name the tensor."""
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        fd.add_output(fd.ops.linear(x, w))
    compiled = mp.compile(fd.fusion, pm=pm)
    good = torch.randn(48, 32, device="cuda", dtype=torch.float16)
    with pytest.raises(mp.LaunchError, match="T0.*shape"):
        compiled.execute([torch.randn(64, 31, device="cuda", dtype=torch.float16), good])
    with pytest.raises(mp.LaunchError, match="T0.*float16"):
        compiled.execute([torch.randn(64, 32, device="cuda", dtype=torch.float32), good])
    with pytest.raises(mp.LaunchError, match="T0.*host"):
        compiled.execute([np.zeros((64, 32), np.float16), good])
    with pytest.raises(mp.LaunchError, match="operand A.*stride"):
        compiled.execute([torch.randn(32, 64, device="cuda", dtype=torch.float16).t(), good])
