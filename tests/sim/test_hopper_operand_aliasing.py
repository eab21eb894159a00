"""Simulator tier: operands behind broadcast/permute/squeeze/set reach the hopper kernel by TMA
straight from the fusion inputs, with no global buffer besides the outputs (the maps go by
value, from the host).

Fusions as nvFuser writes them (AllocationDomain BasicMatmul's mul+sum / fused_multiply_sum of
``broadcast(A)`` and ``broadcast(permute(B))`` in the four layouts, ``linear`` with a 3-D input
and a bias, an MmaOp fed through ``squeeze``/``set``) run in Numba's CUDA simulator as parallel
subprocesses of this file (see test_hopper_kernel_sim.py). Each subprocess records every
allocation made during ``compiled.execute`` (Numba's ``device_array``/``to_device`` family and
mmaplug's output ``allocate``) and the address each TMA map is encoded for; the inputs are
numpy arrays already laid out as their stride_order declares, so a map must point at them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.sim

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3}
NUMBA_ALLOCATORS = ("device_array", "device_array_like", "to_device", "pinned_array",
                    "mapped_array", "managed_array")  # fmt: skip


def _tiles(n: int, stages: int = 2, **extra: Any) -> dict[str, Any]:
    """One 64-row consumer warpgroup, n columns, k 64."""
    return {"cta_tile": (64, n, 64), "warp_tile": (64, n, 64), "instruction_tile": (64, n, 16),
            "stages": stages, **extra}  # fmt: skip


def _basic_matmul_operands(fd: Any, mp: Any, m: int, n: int, k: int, layout: str, dtype: Any):
    """nvFuser's AllocationDomain BasicMatmul: A [M, K], B [K, N] whose memory order makes
    *layout* (T: A K-inner; N: B K-inner), as ``broadcast(A)`` [M, 1, K] and
    ``broadcast(permute(B))`` [1, N, K]."""
    a = fd.define_tensor([m, k], dtype, stride_order=[1, 0] if layout[0] == "T" else [0, 1])
    b = fd.define_tensor([k, n], dtype, stride_order=[0, 1] if layout[1] == "N" else [1, 0])
    a3 = fd.ops.broadcast_in_dim(a, [m, 1, k], [0, 2])
    b3 = fd.ops.broadcast_in_dim(fd.ops.permute(b, [1, 0]), [1, n, k], [1, 2])
    return a3, b3


def case_fms_tn_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """fused_multiply_sum, TN, cast to half; ragged M."""
    a3, b3 = _basic_matmul_operands(fd, mp, 56, 16, 64, "TN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.fused_multiply_sum(a3, b3, [-1]), mp.float16))
    return _tiles(16)


def case_mul_sum_tt_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """mul + sum (float32 out), TT: B is N-major."""
    a3, b3 = _basic_matmul_operands(fd, mp, 64, 64, 64, "TT", mp.bfloat16)
    fd.add_output(fd.ops.sum(fd.ops.mul(a3, b3), [-1]))
    return _tiles(64)


def case_fms_nt_f16_relu(fd: Any, mp: Any) -> dict[str, Any]:
    """fused_multiply_sum, NT (both operands MN-major), relu, cast to half."""
    a3, b3 = _basic_matmul_operands(fd, mp, 64, 64, 64, "NT", mp.float16)
    y = fd.ops.relu(fd.ops.fused_multiply_sum(a3, b3, [-1]))
    fd.add_output(fd.ops.cast(y, mp.float16))
    return _tiles(64)


def case_mul_sum_nn_f16_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """mul + sum, NN, split-K 2: the float32 workspace is the one extra buffer."""
    a3, b3 = _basic_matmul_operands(fd, mp, 64, 24, 128, "NN", mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(a3, b3), [-1]), mp.float16))
    return _tiles(24, splitk_factor=2)


def case_mul_sum_batched_strided(fd: Any, mp: Any) -> dict[str, Any]:
    """Batched mul + sum, TN: A [2, 64, 64] stored M-outer (its batch stride is K, between M
    and K), B [2, 64, 16] stored [batch, N, K]; broadcast(A), broadcast(permute(B))."""
    a = fd.define_tensor([2, 64, 64], mp.float16, stride_order=[1, 2, 0])
    b = fd.define_tensor([2, 64, 16], mp.float16, stride_order=[2, 0, 1])
    a4 = fd.ops.broadcast_in_dim(a, [2, 64, 1, 64], [0, 1, 3])
    b4 = fd.ops.broadcast_in_dim(fd.ops.permute(b, [0, 2, 1]), [2, 1, 16, 64], [0, 2, 3])
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(a4, b4), [-1]), mp.float16))
    return _tiles(16)


def case_linear_3d_bias(fd: Any, mp: Any) -> dict[str, Any]:
    """linear of x [2, 32, 64] (B and M fold into M = 64) with w [16, 64] and a bias [16]."""
    x = fd.define_tensor([2, 32, 64], mp.float16)
    w = fd.define_tensor([16, 64], mp.float16)
    bias = fd.define_tensor([16], mp.float16)
    fd.add_output(fd.ops.linear(x, w, bias))
    return _tiles(16)


def case_linear_3d_m_major_splitk2(fd: Any, mp: Any) -> dict[str, Any]:
    """linear of an M-major x [2, 24, 128] (K outermost) with a bias, split-K 2."""
    x = fd.define_tensor([2, 24, 128], mp.bfloat16, stride_order=[1, 0, 2])
    w = fd.define_tensor([8, 128], mp.bfloat16)
    bias = fd.define_tensor([8], mp.bfloat16)
    fd.add_output(fd.ops.gelu(fd.ops.linear(x, w, bias)))
    return _tiles(8, splitk_factor=2)


def case_mma_squeeze_set(fd: Any, mp: Any) -> dict[str, Any]:
    """An MmaOp whose operands come through squeeze and set: A [1, M, K] and B [N, K, 1]."""
    a = fd.define_tensor([1, 64, 64], mp.float16)
    b = fd.define_tensor([16, 64, 1], mp.float16)
    a2 = fd.ops.set(fd.ops.squeeze(a, [0]))
    b2 = fd.ops.squeeze(fd.ops.set(b), [2])
    a3 = fd.ops.broadcast_in_dim(a2, [64, 1, 64], [0, 2])
    b3 = fd.ops.broadcast_in_dim(b2, [1, 16, 64], [1, 2])
    fd.add_output(fd.ops.cast(fd.ops.fused_multiply_sum(a3, b3, [-1]), mp.float16))
    return _tiles(16)


CASES = sorted(name[5:] for name in dir() if name.startswith("case_"))


def _laid_out(rng: Any, tv: Any) -> Any:
    """A random numpy input whose memory is in *tv*'s declared order (adapting it copies
    nothing, so its data address is the one a TMA map must hold)."""
    import numpy as np

    order = tv.alloc_order
    stored = rng.standard_normal([tv.shape[d] for d in order]).astype(tv.dtype.numpy)
    return stored.transpose(np.argsort(order))


def run_case(name: str) -> dict[str, Any]:
    """Compile and execute case *name* in this (simulating) process, recording allocations."""
    import attrs
    import numpy as np
    from numba import cuda

    import mmaplug as mp
    from mmaplug.cuda import kernel_views as tensors
    from mmaplug.plugins.hopper import artifact, maps

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
    with mp.FusionDefinition() as fd:
        overrides = globals()["case_" + name](fd, mp)
    compiled = mp.compile(fd.fusion, device, pm=pm, overrides=overrides)

    allocations: list[list[Any]] = []  # [what, shape, dtype] made during execute
    map_addresses: list[int] = []
    state = {"recording": False, "depth": 0}

    def recorded(what: str, real: Any, dtype_of: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            state["depth"] += 1
            try:
                result = real(*args, **kwargs)
            finally:
                state["depth"] -= 1
            if state["recording"] and state["depth"] == 0:  # not the innards of another
                allocations.append([what, list(np.shape(result)), dtype_of(args, result)])
            return result

        return wrapper

    for attr in NUMBA_ALLOCATORS:
        if hasattr(cuda, attr):
            setattr(cuda, attr, recorded(attr, getattr(cuda, attr), lambda a, r: str(r.dtype)))
    tensors.allocate = recorded("output", tensors.allocate, lambda a, r: a[2].label)
    real_encode = maps.encode

    def encode(spec: Any, address: int) -> Any:
        map_addresses.append(int(address))
        return real_encode(spec, address)

    maps.encode = encode
    launches: list[str] = []
    real_launch = artifact.launch_checked

    def launch(kernels: Any, name: str, *rest: Any) -> None:
        launches.append(name)
        real_launch(kernels, name, *rest)

    artifact.launch_checked = launch
    rng = np.random.default_rng(11)
    inputs = [_laid_out(rng, v) for v in fd.fusion.inputs]
    state["recording"] = True
    results = compiled.execute(inputs)
    state["recording"] = False
    outputs, expected = [], mp.evaluate(fd.fusion, inputs)
    for tv, got, ref in zip(fd.fusion.outputs, results, expected, strict=True):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        outputs.append({
            "dtype": tv.dtype.label, "shape": list(got64.shape),
            "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
            "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
        })  # fmt: skip
    problem, analysis = compiled.spec.problem, compiled.analysis
    operands = [inputs[analysis.a.index], inputs[analysis.b.index]]
    return {
        "scheduler": compiled.spec.scheduler,
        "splitk": compiled.params.splitk_factor,
        "problem": [problem.batch, problem.m, problem.n],
        "operand_dtype": problem.operand_dtype.label,
        "allocations": allocations,
        "map_addresses": map_addresses,
        "operand_addresses": [int(x.__array_interface__["data"][0]) for x in operands],
        "tma_stores": compiled._artifact.config.tma_stores,
        "output_addresses": [int(np.asarray(x).__array_interface__["data"][0]) for x in results],
        "launches": launches,
        "outputs": outputs,
    }  # fmt: skip


@pytest.fixture(scope="module")
def sim_results(simulate: Any) -> dict[str, dict[str, Any]]:
    runs = simulate({name: [__file__, name] for name in CASES})
    return {name: run.outcome for name, run in runs.items()}


@pytest.mark.parametrize("name", CASES)
def test_hopper_kernel_matches_evaluate(sim_results: dict, name: str) -> None:
    """The hopper kernel (not ampere) ran and wrote every output element within tolerance."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["scheduler"] == "hopper", res
    split = res["splitk"] > 1
    assert res["launches"] == ["hopper_gemm", *(["hopper_splitk_reduce"] * split)], res
    assert res["outputs"], "no outputs compared"
    for out in res["outputs"]:
        assert out["unwritten"] == 0, out
        tol = max(TOLERANCE[out["dtype"]], TOLERANCE[res["operand_dtype"]])
        assert out["error"] < tol, out


@pytest.mark.parametrize("name", CASES)
def test_operands_are_loaded_from_the_inputs(sim_results: dict, name: str) -> None:
    """The TMA maps hold the fusion inputs' own addresses: no operand was copied or relaid; a
    kernel storing by TMA has a map of each output's own buffer after them."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    outputs = res["output_addresses"] if res["tma_stores"] else []
    assert res["map_addresses"] == res["operand_addresses"] + outputs, res


@pytest.mark.parametrize("name", CASES)
def test_only_outputs_and_workspace_are_allocated(sim_results: dict, name: str) -> None:
    """During execute: one buffer per output, the split-K workspace; no more (the tensor maps
    are host words the kernel takes by value)."""
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    expected = [["output", out["shape"], out["dtype"]] for out in res["outputs"]]
    batch, m, n = res["problem"]
    if res["splitk"] > 1:
        expected.append(["device_array", [res["splitk"] * batch * m * n], "float32"])
    assert sorted(res["allocations"]) == sorted(expected), res["allocations"]


if __name__ == "__main__":
    print(json.dumps(run_case(sys.argv[1])), flush=True)
