"""GPU tier: fusions through mp.compile → execute on torch, CuPy and Numba arrays, vs float64."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.measure import rel_error

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80


def test_linear_bias_gelu_odd_shape(pm: mp.PluginManager, checks: Checks) -> None:
    """cast(gelu(linear + bias)) at 504x136x248 with the default heuristic's plan."""
    rng = np.random.default_rng(1)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([504, 248], dtype=mp.float16)
        w = fd.define_tensor([136, 248], dtype=mp.float16)
        b = fd.define_tensor([136], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))
    checks.run(fd.fusion, pm, checks.inputs(fd.fusion, rng))


@pytest.mark.parametrize("layout", ["TN", "TT", "NT", "NN"])
def test_bf16_alpha_beta_every_layout(pm: mp.PluginManager, checks: Checks, layout: str) -> None:
    """alpha * (A @ B) + beta * C in bfloat16, operands strided as each layout declares."""
    rng = np.random.default_rng(2)
    a_order = [1, 0] if layout[0] == "T" else [0, 1]  # T: A is K-inner
    b_order = [0, 1] if layout[1] == "N" else [1, 0]  # N: B [K, N] is K-inner
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([384, 200], dtype=mp.bfloat16, stride_order=a_order)
        b = fd.define_tensor([200, 264], dtype=mp.bfloat16, stride_order=b_order)
        c = fd.define_tensor([384, 264], dtype=mp.bfloat16)
        alpha, beta = fd.define_scalar(), fd.define_scalar()
        y = fd.ops.add(fd.ops.mul(fd.ops.matmul(a, b), alpha), fd.ops.mul(c, beta))
        fd.add_output(fd.ops.cast(y, mp.bfloat16))
    assert mp.matmul_problem(fd.fusion, pm=pm).layout == layout
    checks.run(fd.fusion, pm, [*checks.inputs(fd.fusion, rng)[:3], 1.5, -0.5])


@pytest.mark.parametrize("splitk", [1, 2])
def test_batched_relu_with_fp32_aux(pm: mp.PluginManager, checks: Checks, splitk: int) -> None:
    """Batch 3, two outputs (relu in half, raw result in float32), with and without split-K."""
    rng = np.random.default_rng(3)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([3, 200, 320], dtype=mp.float16)
        b = fd.define_tensor([3, 320, 136], dtype=mp.float16)
        y = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.cast(fd.ops.relu(y), mp.float16))
        fd.add_output(fd.ops.cast(y, mp.float32))
    compiled = checks.run(fd.fusion, pm, checks.inputs(fd.fusion, rng), {"splitk_factor": splitk})
    assert compiled.params.splitk_factor == splitk


def test_bias_on_m_with_silu_and_sigmoid_outputs(pm: mp.PluginManager, checks: Checks) -> None:
    """A bias that varies along M, and two activations of one result stored side by side."""
    rng = np.random.default_rng(6)
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([300, 256], dtype=mp.float16)
        b = fd.define_tensor([256, 200], dtype=mp.float16, stride_order=[0, 1])
        bias = fd.define_tensor([300], dtype=mp.float16)
        y = fd.ops.add(fd.ops.matmul(a, b), fd.ops.broadcast_in_dim(bias, [300, 200], [0]))
        fd.add_output(fd.ops.cast(fd.ops.silu(y), mp.float16))
        fd.add_output(fd.ops.cast(fd.ops.sigmoid(fd.ops.neg(y)), mp.float16))
    checks.run(fd.fusion, pm, checks.inputs(fd.fusion, rng))


def test_misaligned_operand_narrows_vectors(pm: mp.PluginManager, checks: Checks) -> None:
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
    checks.run(fd.fusion, pm, [x_t, w_t])


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
        assert rel_error(got, ref) < 1e-2


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
