"""Simulator tier: the hopper horizontal kernel (h B operands, one wgmma of N = h x the output
tile's n, the products combined in the register epilogue) against a float64 reference.

As in test_hopper_kernel_sim.py: each case compiles for an h200-like device with 2 SMs (so
persistent CTAs walk several work units), runs ``compiled.execute`` on numpy arrays in a
simulating subprocess (outputs arrive NaN-poisoned from ``allocate``, so unwritten elements
show) and compares with ``mp.evaluate`` (float64 inside) and, for the FFN, with numpy in float64.
Two seeded property shards check that every parameter set hopper's limits accept for a
horizontal FFN builds a correct kernel (``run_property``). Without ``--full-sim`` the cases and
the shard named ``QUICK`` run.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.sim

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float8_e4m3fn": 0.07}


def _tile(cta: tuple[int, int, int], stages: int = 2) -> dict[str, Any]:
    """One wgmma of N = cta n per consumer: consumers split the tile along M only."""
    warp = (64, cta[1], cta[2])
    return {"cta_tile": cta, "warp_tile": warp, "instruction_tile": (64, cta[1], 16),
            "stages": stages, "tiling_strategy": "persistent"}  # fmt: skip


def _ffn(fd: Any, mp: Any, m: int, n: int, k: int, dtype: Any, b_k_inner: bool) -> None:
    """silu(x @ W1) * (x @ W3): W [N, K] through linear (K-major) or [K, N] through matmul."""
    x = fd.define_tensor([m, k], dtype=dtype)
    shape = [n, k] if b_k_inner else [k, n]
    w1, w3 = fd.define_tensor(shape, dtype=dtype), fd.define_tensor(shape, dtype=dtype)
    op = fd.ops.linear if b_k_inner else fd.ops.matmul
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.silu(op(x, w1)), op(x, w3)), dtype))


def case_ffn_kmajor_f16_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """K-major Bs, ragged M, N and K: 2 x 2 output tiles of 64 x 64 on 2 persistent CTAs; the
    epilogue from registers."""
    _ffn(fd, mp, 70, 72, 80, mp.float16, True)
    return {**_tile((64, 128, 64)), "use_smem_epilogue": False}


def case_ffn_nmajor_bf16_ragged(fd: Any, mp: Any) -> dict[str, Any]:
    """N-major Bs: 64-column chunks 0 from map 0, 1 from map 1; N = 104 ragged in the second
    N tile; bf16."""
    _ffn(fd, mp, 70, 104, 80, mp.bfloat16, False)
    return _tile((64, 128, 64))


def case_ffn_two_consumers_bk128_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """Two consumer warpgroups along M (128-row CTA tile, 32-column output tile), BK 128 over
    a ragged K (two K tiles), 3 stages."""
    _ffn(fd, mp, 136, 40, 136, mp.float16, True)
    return _tile((128, 64, 128), stages=3)


def case_ffn_default_params_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """The default heuristic's plan: 3 x 2 output tiles of 64 x 128 are 3 a CTA, so ping-pong
    consumers on 64 x 256 MMA tiles, the staged epilogue."""
    _ffn(fd, mp, 130, 136, 64, mp.float16, True)
    return {}


def case_ffn_pingpong_nmajor_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """Ping-pong: each consumer owns whole 64 x 256 MMA tiles (64 x 128 output) and takes
    every other unit of its CTA (8 units on 2 CTAs), ragged M, N and K."""
    _ffn(fd, mp, 200, 136, 72, mp.bfloat16, False)
    return {**_tile((64, 256, 64), stages=3), "tiling_strategy": "persistent_pingpong",
            "use_smem_epilogue": False}  # fmt: skip


def case_ffn_pingpong_staged_kmajor_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """Ping-pong with the staged epilogue: each consumer stages 16-column chunks of both
    products side by side in its own region (3 units on 2 CTAs), ragged M and N."""
    _ffn(fd, mp, 130, 72, 64, mp.float16, True)
    return {**_tile((64, 128, 64), stages=3), "tiling_strategy": "persistent_pingpong",
            "use_smem_epilogue": True}  # fmt: skip


def case_three_products_bias_scalar_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """h = 3: (silu(g) * u * s) + (v + bias): a 192-wide wgmma, three maps, a runtime scalar
    and a bias along N."""
    x = fd.define_tensor([70, 72], dtype=mp.bfloat16)
    g, u, v = (fd.ops.linear(x, fd.define_tensor([80, 72], dtype=mp.bfloat16)) for _ in "guv")
    bias = fd.define_tensor([80], dtype=mp.bfloat16)
    s = fd.define_scalar()
    y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.silu(g), u), s),
                   fd.ops.add(v, fd.ops.broadcast_in_dim(bias, [70, 80], [1])))  # fmt: skip
    fd.add_output(fd.ops.cast(y, mp.bfloat16))
    return {**_tile((64, 192, 64)), "use_smem_epilogue": True}  # chunks of 8 columns each


def case_batch2_two_outputs_nmajor_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """Batch 2 (A and both Bs batched), N-major Bs, two outputs: gelu(g) * u and g as float32."""
    a = fd.define_tensor([2, 66, 64], dtype=mp.float16)
    b1, b2 = (fd.define_tensor([2, 64, 40], dtype=mp.float16) for _ in "12")
    g, u = fd.ops.matmul(a, b1), fd.ops.matmul(a, b2)
    fd.add_output(fd.ops.cast(fd.ops.mul(fd.ops.gelu(g), u), mp.float16))
    fd.add_output(fd.ops.cast(g, mp.float32))
    return _tile((64, 128, 64))


def case_qkv_outputs_default_f16(fd: Any, mp: Any) -> dict[str, Any]:
    """q, k and v as three outputs of one kernel (h = 3, each output from its accumulator),
    the default heuristic's parameters."""
    x = fd.define_tensor([40, 64], dtype=mp.float16)
    for _ in "qkv":
        fd.add_output(fd.ops.linear(x, fd.define_tensor([96, 64], dtype=mp.float16)))
    return {}


def _quantized_ffn(fd: Any, mp: Any) -> None:
    """A quantised FFN with delayed scaling: ``y = silu(x @ W1) * (x @ W3)`` (bf16, 70 x 72 x
    80) written as e4m3 first, its amax (float32 ``[]``, max(|y|) over M and N) second."""
    x = fd.define_tensor([70, 80], dtype=mp.bfloat16)
    w1, w3 = (fd.define_tensor([72, 80], dtype=mp.bfloat16) for _ in "13")
    y = fd.ops.mul(fd.ops.silu(fd.ops.linear(x, w1)), fd.ops.linear(x, w3))
    fd.add_output(fd.ops.cast(y, mp.float8_e4m3fn))
    fd.add_output(fd.ops.amax(y, [0, 1]))


def case_quantized_ffn_amax_registers_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """The horizontal register epilogue folds each combined value into the amax."""
    _quantized_ffn(fd, mp)
    return {**_tile((64, 128, 64)), "use_smem_epilogue": False}


def case_quantized_ffn_amax_staged_bf16(fd: Any, mp: Any) -> dict[str, Any]:
    """The staged epilogue with both products side by side; the amax leaves out the last
    group's columns past N = 72."""
    _quantized_ffn(fd, mp)
    return {**_tile((64, 128, 64)), "use_smem_epilogue": True}


CASES = sorted(name[5:] for name in dir() if name.startswith("case_"))
# the cases whose epilogue combines the products from registers; the rest stage chunks of every
# product side by side in shared memory (the default where they fit)
REGISTERS = {
    "ffn_kmajor_f16_ragged",
    "ffn_pingpong_nmajor_bf16",
    "quantized_ffn_amax_registers_bf16",
}
# work units (output tiles) of each case; 2 CTAs walk them
UNITS = {"ffn_kmajor_f16_ragged": 4, "ffn_nmajor_bf16_ragged": 4,
         "ffn_two_consumers_bk128_f16": 4, "ffn_default_params_f16": 6,
         "ffn_pingpong_nmajor_bf16": 8, "ffn_pingpong_staged_kmajor_f16": 6,
         "three_products_bias_scalar_bf16": 4, "batch2_two_outputs_nmajor_f16": 4,
         "qkv_outputs_default_f16": 2, "quantized_ffn_amax_registers_bf16": 4,
         "quantized_ffn_amax_staged_bf16": 4}  # fmt: skip


def run_case(name: str) -> dict[str, Any]:
    """Compile and execute case *name* in this (simulating) process; errors per output."""
    import attrs
    import numpy as np

    import mmaplug as mp
    from mmaplug.plugins.hopper import artifact

    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
    with mp.FusionDefinition() as fd:
        overrides = globals()["case_" + name](fd, mp)
    compiled = mp.compile(fd.fusion, device, pm=pm, overrides=overrides or None)
    launches: list[tuple[str, int, int]] = []
    real_launch = artifact.launch_checked

    def recording_launch(kernels: Any, name: str, args: list, grid: tuple, *rest: Any) -> None:
        launches.append((name, int(grid[0]), int(args[-1])))
        real_launch(kernels, name, args, grid, *rest)

    artifact.launch_checked = recording_launch
    rng = np.random.default_rng(7)
    inputs = [
        rng.standard_normal(v.shape).astype(v.dtype.numpy)
        if isinstance(v, mp.TensorView) else 1.25
        for v in fd.fusion.inputs
    ]  # fmt: skip
    t0 = time.time()
    results = compiled.execute(inputs)
    seconds = time.time() - t0
    expected = mp.evaluate(fd.fusion, inputs)
    if name.startswith("ffn_"):  # and numpy's float64 FFN, independent of mp.evaluate
        x, w1, w3 = (np.asarray(t, np.float64) for t in inputs)
        if "nmajor" not in name:
            w1, w3 = w1.T, w3.T
        gate = x @ w1
        expected = [gate / (1 + np.exp(-gate)) * (x @ w3)]
    outputs = []
    for tv, got, ref in zip(fd.fusion.outputs, results, expected, strict=True):
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        outputs.append({
            "dtype": tv.dtype.label, "shape": list(got64.shape),
            "unwritten": int(np.count_nonzero(~np.isfinite(got64))),
            "error": float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64)),
        })  # fmt: skip
    return {"scheduler": compiled.spec.scheduler, "kernel": compiled.kernel_name,
            "horizontal": compiled.spec.problem.horizontal, "seconds": round(seconds, 1),
            "launches": launches, "outputs": outputs}  # fmt: skip


def run_property(seed: int, draws: int) -> dict[str, Any]:
    """Limits = generator for horizontal fusions: *draws* random parameter sets (legal tiles,
    stages, order, swizzle, tiling strategy with ping-pong; some with a field hopper refuses
    for horizontal) on random FFNs (h 2 or 3, both B layouts, fp16/bf16, ragged TMA-aligned
    shapes); every set hopper's limits accept runs and matches mp.evaluate, every other names
    its fields."""
    import attrs
    import numpy as np

    import mmaplug as mp

    rng = np.random.default_rng(seed)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    device = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
    counts: dict[str, Any] = {"ran": 0, "rejected": 0, "fields": [], "errors": [],
                              "strategies": []}  # fmt: skip
    for _ in range(draws):
        h, b_k_inner = int(rng.choice([2, 3])), bool(rng.integers(2))
        dtype = mp.float16 if rng.integers(2) else mp.bfloat16
        outs = [n for n in ((16, 32, 40, 64, 80, 128) if b_k_inner else (64, 128)) if h * n <= 256]
        n_out, bm, bk = (
            int(rng.choice(outs)),
            int(rng.choice([64, 128])),
            int(rng.choice([64, 128])),
        )
        strategy = str(rng.choice(["persistent", "one_tile_per_cta", "persistent_pingpong"]))
        bm = 64 if strategy == "persistent_pingpong" else bm  # a consumer owns the whole tile
        params = {**_tile((bm, h * n_out, bk), int(rng.integers(2, 4))),
                  "tiling_strategy": strategy,
                  "cta_order": str(rng.choice(["row_major", "column_major"])),
                  "grid_swizzle_factor": int(rng.choice([1, 2]))}  # fmt: skip
        wrong = str(rng.choice(["", "", "", "splitk_factor", "use_smem_epilogue", "warp_tile"]))
        if wrong:
            params[wrong] = {"splitk_factor": 2, "use_smem_epilogue": True,
                             "warp_tile": (64, n_out, bk)}[wrong]  # fmt: skip
        m, n, k = (int(rng.integers(1, 4)) * 8 + d for d in (bm, 2 * n_out - 8, bk))
        with mp.FusionDefinition() as fd:
            x = fd.define_tensor([m, k], dtype=dtype)
            op = fd.ops.linear if b_k_inner else fd.ops.matmul
            ws = [fd.define_tensor([n, k] if b_k_inner else [k, n], dtype=dtype) for _ in range(h)]
            y = fd.ops.silu(op(x, ws[0]))
            for w in ws[1:]:
                y = fd.ops.mul(y, op(x, w))
            fd.add_output(fd.ops.cast(y, dtype))
        try:
            compiled = mp.compile(fd.fusion, device, pm=pm, overrides=params)
        except mp.InvalidParamsError as refused:
            counts["rejected"] += 1
            counts["fields"] += [v.field for v in refused.violations]
            continue
        inputs = [rng.standard_normal(v.shape).astype(v.dtype.numpy) for v in fd.fusion.inputs]
        (got,) = compiled.execute(inputs)
        (ref,) = mp.evaluate(fd.fusion, inputs)
        got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        err = float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64))
        if not err < TOLERANCE[dtype.label] or compiled.spec.scheduler != "hopper":
            where = {"params": params, "shape": [m, n, k, h, b_k_inner], "error": err}
            counts["errors"].append({**where, "scheduler": compiled.spec.scheduler})
        counts["ran"] += 1
        counts["strategies"].append(strategy)
    return counts


SHARDS = {"property_seed1": ["property", "1", "8"], "property_seed2": ["property", "2", "8"]}
# The quick tier (README, Tests): one case of each epilogue (registers, staged chunks, ping-pong,
# three outputs, FP8 with its amax) and one property shard, 25 of the module's 53 s alone
QUICK = (
    "ffn_kmajor_f16_ragged",
    "ffn_nmajor_bf16_ragged",
    "ffn_pingpong_nmajor_bf16",
    "qkv_outputs_default_f16",
    "quantized_ffn_amax_staged_bf16",
    "property_seed1",
)


@pytest.fixture(scope="module")
def sim_results(simulate: Any, sim_tier: Any) -> dict[str, dict[str, Any]]:
    jobs = {name: [__file__, name] for name in CASES}
    jobs.update({name: [__file__, *args] for name, args in SHARDS.items()})
    runs = simulate({name: jobs[name] for name in sim_tier.pick(list(jobs), QUICK)})
    return {name: run.outcome for name, run in runs.items()}


def test_quick_cases_are_cases() -> None:
    """Every quick case names a case or shard (a renamed one would leave the quick tier short)."""
    assert set(QUICK) <= {*CASES, *SHARDS}, sorted(set(QUICK) - {*CASES, *SHARDS})


@pytest.mark.parametrize("name", CASES)
def test_horizontal_kernel_matches_float64(sim_results: dict, sim_tier: Any, name: str) -> None:
    """One hopper kernel (not two, not ampere) wrote every output element, within tolerance."""
    sim_tier.require(name, sim_results)
    res = sim_results[name]
    assert "failed" not in res, res.get("failed")
    assert res["scheduler"] == "hopper" and res["horizontal"] >= 2, res
    assert res["kernel"].endswith(f"_h{res['horizontal']}"), res
    assert ("_se_" in res["kernel"]) == (name not in REGISTERS), res["kernel"]
    assert res["launches"] == [["hopper_gemm", 2, UNITS[name]]], res["launches"]
    operand = "bfloat16" if "bf16" in name else "float16"
    for out in res["outputs"]:
        assert out["unwritten"] == 0, out
        assert out["error"] < max(TOLERANCE[out["dtype"]], TOLERANCE[operand]), out


@pytest.mark.parametrize("shard", sorted(SHARDS))
def test_accepted_horizontal_params_match_evaluate(
    sim_results: dict, sim_tier: Any, shard: str
) -> None:
    """What hopper's limits accept for a horizontal fusion builds a correct kernel; what they
    refuse names the fields."""
    sim_tier.require(shard, sim_results)
    res = sim_results[shard]
    assert "failed" not in res, res.get("failed")
    assert res["errors"] == [], res["errors"]
    assert res["ran"] >= 2 and res["ran"] + res["rejected"] == 8, res
    # the drawn wrong field, or stages that overflow shared memory with 128-row, BK 128 tiles
    assert set(res["fields"]) <= {"splitk_factor", "use_smem_epilogue", "warp_tile", "stages"}


def test_property_shards_ran_every_tiling_strategy(sim_results: dict, sim_tier: Any) -> None:
    sim_tier.require_full()
    ran = {s for shard in SHARDS for s in sim_results[shard].get("strategies", [])}
    assert ran == {"persistent", "one_tile_per_cta", "persistent_pingpong"}, ran


if __name__ == "__main__":
    if sys.argv[1] == "property":
        print(json.dumps(run_property(int(sys.argv[2]), int(sys.argv[3]))), flush=True)
    else:
        print(json.dumps(run_case(sys.argv[1])), flush=True)
