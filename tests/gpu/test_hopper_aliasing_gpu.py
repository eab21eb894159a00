"""GPU tier, sm_90a: operands behind broadcast/permute/squeeze/set are read by TMA straight from
the fusion inputs, and nothing but the outputs and the split-K workspace (torch allocates them)
and the tensor maps (Numba) is allocated; values against a float64 mp.evaluate.

The fusions mirror tests/sim/test_hopper_operand_aliasing.py at ragged sizes: nvFuser's
AllocationDomain BasicMatmul (mul+sum / fused_multiply_sum of broadcast(A) and
broadcast(permute(B))) in every layout and with a batch stride between M and K, ``linear`` of
3-D inputs with a bias, and an MmaOp fed through squeeze and set. Outputs are poisoned (the
caching allocator's free blocks filled with NaN) before each call; torch's allocation counters
must grow by the outputs (and the workspace) alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.measure import poison_free_memory

if TYPE_CHECKING:
    from .conftest import Checks

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm90

H, T = mp.float16, mp.bfloat16
M, N, K = 264, 200, 328  # ragged against every tile; contiguous extents are multiples of 8
SPLITK2 = {"cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64),
           "instruction_tile": (64, 128, 16), "stages": 3, "splitk_factor": 2}  # fmt: skip
NUMBA_ALLOCATORS = ("device_array", "device_array_like", "to_device", "pinned_array",
                    "mapped_array", "managed_array")  # fmt: skip


def basic_matmul(layout: str, reduce: str, dtype: mp.DType) -> mp.Fusion:
    """A [M, K], B [K, N] in *layout*'s memory order, broadcast(A) [M, 1, K] and
    broadcast(permute(B)) [1, N, K], then fused_multiply_sum or mul + sum, cast to *dtype*."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([M, K], dtype, stride_order=[1, 0] if layout[0] == "T" else [0, 1])
        b = fd.define_tensor([K, N], dtype, stride_order=[0, 1] if layout[1] == "N" else [1, 0])
        a3 = fd.ops.broadcast_in_dim(a, [M, 1, K], [0, 2])
        b3 = fd.ops.broadcast_in_dim(fd.ops.permute(b, [1, 0]), [1, N, K], [1, 2])
        if reduce == "fms":
            y = fd.ops.fused_multiply_sum(a3, b3, [-1])
        else:
            y = fd.ops.sum(fd.ops.mul(a3, b3), [-1])
        fd.add_output(fd.ops.cast(y, dtype))
    return fd.fusion


def batched_strided() -> mp.Fusion:
    """Batched mul + sum: A [3, M, K] stored [M, batch, K], B [3, K, N] stored [batch, N, K]."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([3, M, K], H, stride_order=[1, 2, 0])
        b = fd.define_tensor([3, K, N], H, stride_order=[2, 0, 1])
        a4 = fd.ops.broadcast_in_dim(a, [3, M, 1, K], [0, 1, 3])
        b4 = fd.ops.broadcast_in_dim(fd.ops.permute(b, [0, 2, 1]), [3, 1, N, K], [0, 2, 3])
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(a4, b4), [-1]), H))
    return fd.fusion


def linear_3d(m_major: bool) -> mp.Fusion:
    """linear of x [3, 100, K] (or an M-major x [3, 96, K], K outermost) with w [N, K], bias."""
    with mp.FusionDefinition() as fd:
        if m_major:
            x = fd.define_tensor([3, 96, K], T, stride_order=[1, 0, 2])
        else:
            x = fd.define_tensor([3, 100, K], T)
        w = fd.define_tensor([N, K], T)
        bias = fd.define_tensor([N], T)
        fd.add_output(fd.ops.gelu(fd.ops.linear(x, w, bias)))
    return fd.fusion


def squeeze_set() -> mp.Fusion:
    """An MmaOp whose operands come through squeeze and set: A [1, M, K], B [N, K, 1]."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([1, M, K], H)
        b = fd.define_tensor([N, K, 1], H)
        a3 = fd.ops.broadcast_in_dim(fd.ops.set(fd.ops.squeeze(a, [0])), [M, 1, K], [0, 2])
        b3 = fd.ops.broadcast_in_dim(fd.ops.squeeze(fd.ops.set(b), [2]), [1, N, K], [1, 2])
        fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.fused_multiply_sum(a3, b3, [-1])), H))
    return fd.fusion


FUSIONS: dict[str, Callable[[], mp.Fusion]] = {
    "fms_TN_f16": lambda: basic_matmul("TN", "fms", H),
    "mul_sum_TT_bf16": lambda: basic_matmul("TT", "mul_sum", T),
    "fms_NT_bf16": lambda: basic_matmul("NT", "fms", T),
    "mul_sum_NN_f16": lambda: basic_matmul("NN", "mul_sum", H),
    "mul_sum_batched_strided": batched_strided,
    "linear_3d_bias": lambda: linear_3d(False),
    "linear_3d_m_major_bias": lambda: linear_3d(True),
    "squeeze_set": squeeze_set,
}


def _block(tensor: Any) -> int:
    """Bytes the caching allocator reserves for *tensor* (its 512-byte rounding)."""
    return -(-tensor.numel() * tensor.element_size() // 512) * 512


def _torch_counters() -> tuple[int, int]:
    stats = torch.cuda.memory_stats()
    return stats["allocation.all.allocated"], stats["allocated_bytes.all.allocated"]


@pytest.mark.parametrize("plan", ["default", "splitk2"])
@pytest.mark.parametrize("name", list(FUSIONS))
def test_operands_load_from_inputs(
    pm: mp.PluginManager, checks: Checks, monkeypatch: pytest.MonkeyPatch, name: str, plan: str
) -> None:
    """hopper runs; the maps hold the inputs' addresses; torch allocates only the outputs (and
    the workspace) and Numba only the map array; values within tolerance, twice."""
    from numba import cuda

    from mmaplug.plugins.hopper import maps

    fusion = FUSIONS[name]()
    compiled = mp.compile(fusion, pm=pm, overrides=SPLITK2 if plan == "splitk2" else None)
    assert compiled.spec.scheduler == "hopper", mp.explain(compiled.spec)
    inputs = checks.inputs(fusion, np.random.default_rng(23))
    numba_allocs: list[tuple[str, tuple[int, ...], str]] = []
    map_addresses: list[int] = []
    for attr in NUMBA_ALLOCATORS:
        real = getattr(cuda, attr)

        def recording(*args: Any, _real: Any = real, _attr: str = attr, **kwargs: Any) -> Any:
            result = _real(*args, **kwargs)
            numba_allocs.append((_attr, tuple(result.shape), str(result.dtype)))
            return result

        monkeypatch.setattr(cuda, attr, recording)
    real_encode = maps.encode

    def encode(spec: Any, address: int) -> Any:
        map_addresses.append(int(address))
        return real_encode(spec, address)

    monkeypatch.setattr(maps, "encode", encode)
    p, splitk = compiled.spec.problem, compiled.params.splitk_factor
    allowed: list[Any] = []  # nothing: the A and B CUtensorMaps go by value, from the host
    workspace = splitk * p.batch * p.m * p.n * 4 if splitk > 1 else 0  # float32, from torch
    scratch = [-(-workspace // 512) * 512] if workspace else []
    expected = checks.expected(fusion, inputs)
    for call in range(2):  # the second call takes the bound launch
        poison_free_memory()
        torch.cuda.synchronize()
        numba_allocs.clear()
        count0, bytes0 = _torch_counters()
        outputs = compiled.execute(inputs)
        torch.cuda.synchronize()
        count1, bytes1 = _torch_counters()
        assert count1 - count0 == len(outputs) + len(scratch), f"call {call}: torch allocated more"
        assert bytes1 - bytes0 == sum(_block(o) for o in outputs) + sum(scratch), f"call {call}"
        if call == 0:
            assert sorted(numba_allocs) == sorted(allowed), numba_allocs
            a, b = inputs[compiled.analysis.a.index], inputs[compiled.analysis.b.index]
            assert map_addresses == [a.data_ptr(), b.data_ptr()]
        else:  # the maps are reused (MMAPLUG_FAST_LAUNCH=0 makes them again)
            assert all(x in allowed for x in numba_allocs), numba_allocs
        checks.outputs(fusion, outputs, expected, operand_floor=True)
