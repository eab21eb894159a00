"""Limits ≡ generator for the hopper scheduler, in Numba's CUDA simulator (run as a script).

``python hopper_limits_property.py SEED EXAMPLES`` with NUMBA_ENABLE_CUDASIM=1, started by
test_hopper_limits_property.py. Hypothesis draws a small
ragged matmul fusion (m, n up to 130, k up to 200, the contiguous dims of A and B 16-byte
multiples so TMA can load them, every layout, fp16/bf16 (batch 1-2) or FP8 e4m3/e5m2 scaled_mm
with per-row/column scales (a bf16 or FP8 output), with or without a bias + relu epilogue) and
hopper parameters from a grid that holds illegal values too (warp m 96, warp n
not a multiple of 64 for an N-major B, cta k 32, three warp tiles per CTA, stages 1, ...),
now and then for the transposed product (``swap_ab``: the tiles are the kernel's, whose A is
the problem's B), with split-K summed in the cluster of a tile's splits
(``splitk_in_cluster``) or in a cluster along M or N (``cluster_dims``: a multicast tile), or
stream-K (``persistent_streamk``: the tail tiles cut into ``splitk_factor`` pieces; with a
third argument ``streamk``, every set that can be).
Every set that ``limits.violations`` accepts is compiled through ``mp.compile`` for an h200
with 2 SMs (ampere and decode blocked, so the plan is hopper's or none) and must launch
``hopper_gemm``, keep the params unchanged and match ``mp.evaluate`` with every output written
(the simulator poisons outputs with NaN); every rejected set must make ``mp.compile`` raise
InvalidParamsError with the same Violations, each naming a MatmulParams field. Now and then a
contiguous extent is not a 16-byte multiple: that must be a NoSchedulerError giving hopper's
TMA reason, as an FP8 operand that is not K-major must give FP8's layout reason. One JSON line
with the counts is printed at the end.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import attrs
import numpy as np
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from limits_fusions import fusion_for  # tests/sim is the script's folder

import mmaplug as mp
from mmaplug.codegen.emitter import reduce_grid
from mmaplug.errors import InvalidParamsError, MatmulWarning, NoSchedulerError
from mmaplug.planning.params import PARAM_NAMES, MatmulParams
from mmaplug.plugins.hopper import artifact, limits

# sm_90a with 2 SMs of 48 KiB shared memory: persistent grids of 2-4 CTAs
DEVICE = attrs.evolve(mp.get_device("h200"), sm_count=2, smem_per_sm=48 * 1024)
# ampere and decode (which takes M <= 16 first) blocked: the plan is hopper's or none
PM = mp.make_plugin_manager(load_entrypoints=False, strict=True, block=["ampere", "decode"])
WARP_M = (64, 128, 96)
WARP_N = (8, 16, 24, 48, 64, 72, 128, 160, 192, 256)
CTA_K = (32, 64, 128, 192, 256)
# what one run may cost in the simulator (sim_cost): ~1-3 s on an idle core
MAX_COST = (64, 4, 24)
MAX_RUNS = 16  # kernels one shard runs; later accepted sets are planned and built only
MAX_SWAP_RUNS = 4  # ... but for the transposed product's, until this many of them ran
MAX_KCLUSTER_RUNS = 4  # ... and for the cluster reduction's
MAX_MULTICAST_RUNS = 3  # ... and for clusters multicasting a tile
MAX_CLUSTER2X2_RUNS = 2  # ... and for 2x2 clusters, multicasting both
MAX_STREAMK_RUNS = 3  # ... and for stream-K's tail pieces
STREAMK = False  # the stream-K shard (a third argument "streamk"): stream-K wherever it can be
CLUSTERED = False  # the cluster shard (a third argument "cluster"): every legal set clustered
# clusters along M (B multicast), N (A multicast) or both (2x2), and one shape the kernel
# refuses
CLUSTER_DRAWS = ((1, 1), (2, 1), (4, 1), (1, 2), (1, 4), (2, 2), (4, 2))
COUNTS: dict = {
    "accepted": 0,
    "rejected": 0,
    "unaligned": 0,
    "fp8_layout": 0,
    "fp8_ran": 0,
    "block_ran": 0,
    "swap_ran": 0,
    "kcluster_ran": 0,
    "multicast_ran": 0,
    "cluster2x2_ran": 0,
    "streamk_ran": 0,
    "launches": 0,
    "ran": 0,
    "seconds": 0.0,
    "fields": {},
}


def _extent(draw: st.DrawFn, top: int, aligned: int) -> int:
    """An extent up to *top*: a multiple of *aligned* (the elements of 16 bytes) when it is a
    row pitch TMA loads, else ragged (from 2: an extent of 1 is a broadcast, not a matmul
    dim)."""
    if aligned:
        return aligned * draw(st.integers(1, top // aligned))
    return draw(st.integers(2, top))


@st.composite
def cases(draw: st.DrawFn) -> dict:
    fp8 = draw(st.integers(0, 2)) == 0
    dtype = draw(
        st.sampled_from(("float8_e4m3fn", "float8_e5m2") if fp8 else ("float16", "bfloat16"))
    )
    # FP8 operands K-major but now and then (declined for its layout)
    k_major = fp8 and draw(st.integers(0, 7)) > 0
    block = k_major and draw(st.booleans())  # block scales: 1x128 of A, 128x128 of B
    a_k_inner, b_k_inner = (True, True) if k_major else (draw(st.booleans()), draw(st.booleans()))
    pingpong = draw(st.integers(0, 3)) == 0
    # the transposed product now and then: its tiles are the kernel's, whose B is this A
    swap = not block and draw(st.booleans())
    kernel_b_k_inner = a_k_inner if swap else b_k_inner
    legal = draw(st.booleans())
    # split-K summed in the cluster now and then (legal: 2-3 splits, registers' epilogue)
    kcluster = draw(st.integers(0, 3)) == 0 and (not legal or not pingpong)
    if not legal:  # anywhere in the grid: mostly sets the kernel cannot take
        wm, wn, bk = (draw(st.sampled_from(grid)) for grid in (WARP_M, WARP_N, CTA_K))
        gm, gn = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    else:  # tiles the generator takes (a ping-pong CTA tile is one warp tile)
        wm = draw(st.sampled_from((64, 128)))
        wn = draw(st.sampled_from([w for w in WARP_N if kernel_b_k_inner or w % 64 == 0]))
        assume(wm * wn <= 128 * (96 if block else 128))  # block: partial sums beside them
        bk = draw(st.sampled_from((128, 256) if fp8 else (64, 64, 128, 192, 256)))
        gm, gn = (1, 1) if pingpong else draw(st.sampled_from(((1, 1), (2, 1), (1, 2))))
        assume(wm * gm <= 256 and wn * gn <= 256)
        if block:  # one scale block of K a tile, the tile's columns in one block of B's
            bk = 128
            if (wm, wn, gn) == (64, 128, 2):  # or one 64x256 warp tile, promoted by chunks
                wn, gn = 256, 1
            if (wn, gn) == (48, 2):  # or one tile straddling two blocks: 96 or 192 columns
                wn, gn = 96, 1
            straddling = gn == 1 and wn in (96, 192)
            assume(128 % (wn * gn) == 0 or wn == 256 or straddling)
    unit = 16 if fp8 else 8  # elements of 16 bytes: TMA's row pitch
    m = _extent(draw, 130, 0 if a_k_inner else unit)
    n = _extent(draw, 130, 0 if b_k_inner else unit)
    k = _extent(draw, 200 if not fp8 else 320, unit if a_k_inner or b_k_inner else 0)
    aligned = draw(st.integers(0, 11)) > 0
    if not aligned:  # a contiguous extent TMA cannot take: hopper declines the problem
        bad = draw(st.integers(1, unit - 1))
        if a_k_inner or b_k_inner:
            k = k // unit * unit + bad
        elif draw(st.booleans()):
            m = m // unit * unit + bad
        else:
            n = n // unit * unit + bad
    inst = (64, wn, 32 if fp8 else 16)
    if draw(st.integers(0, 7)) == 0:  # an instruction tile the kernel does not issue
        inst = draw(
            st.sampled_from(((16, 8, 16), (64, 8, 16), (64, wn, 48 - inst[2]), (128, wn, 16)))
        )
    rare = draw(st.integers(0, 5)) == 0  # now and then a field the kernel has no variant for
    # a legal set in a cluster along M, N or both now and then, read off the drawn extents (a draw
    # here would shift every later example of the seeded shards)
    multicast = legal and not kcluster and (CLUSTERED or (7 * m + k) % 2 == 0)
    cluster = CLUSTER_DRAWS[1 + (m + n + k) % 5] if multicast else (1, 1)
    # the stream-K shard's sets are stream-K where they can be (CTAs alone, 2 pieces or more
    # if legal); the other shards' are unchanged (no draw spent on it)
    streamk = STREAMK and not (pingpong or kcluster or multicast)
    return dict(
        shape=(m, n, k),
        aligned=aligned,
        batch=1 if fp8 else draw(st.sampled_from((1, 1, 1, 2))),
        a_k_inner=a_k_inner,
        b_k_inner=b_k_inner,
        dtype=dtype,
        bias_relu=draw(st.booleans()),
        fp8_out=fp8 and draw(st.integers(0, 3)) == 0,
        block=block,
        params=dict(
            cta_tile=(wm * gm, wn * gn, bk),
            warp_tile=(wm, wn, bk),
            instruction_tile=inst,
            stages=draw(st.integers(2, 4) if legal else st.integers(1, 6)),
            splitk_factor=max(
                1 + (streamk and legal),
                draw(
                    st.integers(1 + (kcluster and legal), max(1 + kcluster, min(3, -(-k // bk))))
                    if legal
                    else st.integers(1, 3)
                ),
            ),
            splitk_in_cluster=kcluster,
            grid_swizzle_factor=draw(st.integers(1, 3)),
            cta_order=draw(st.sampled_from(("row_major", "column_major"))),
            tiling_strategy="persistent_pingpong"
            if pingpong
            else _or_streamk(draw(st.sampled_from(("one_tile_per_cta", "persistent"))), streamk),
            use_smem_epilogue=draw(st.booleans()) and (not kcluster or not legal),
            swap_ab=swap,
            warp_specialized=not rare or draw(st.booleans()),
            async_gmem_load_operands=not rare or draw(st.booleans()),
            prefetch_gap=draw(st.sampled_from((1, 2))) if rare else 1,
            cluster_dims=draw(st.sampled_from(CLUSTER_DRAWS)) if rare else cluster,
        ),
    )


def _or_streamk(strategy: str, streamk: bool) -> str:
    """*strategy*, or stream-K (drawn anyway: the seeded shards keep their examples)."""
    return "persistent_streamk" if streamk else strategy


def sim_cost(case: dict) -> tuple[int, int, int]:
    """(wgmmas, CTAs, split-K reduce blocks) of one run: the simulator's cost (its CTAs run
    one after another, each starting 256-384 Python threads)."""
    (m, n, k), p, batch = case["shape"], case["params"], case["batch"]
    (bm, bn, bk), wn, split = p["cta_tile"], p["warp_tile"][1], p["splitk_factor"]
    if p["swap_ab"]:  # the kernel's M is the problem's N
        m, n = n, m
    units = batch * split * -(-m // bm) * -(-n // bn)
    k_steps = -(-k // bk) // split + 1  # K tiles of the longest split, plus one at most
    if p["tiling_strategy"] == "persistent_streamk":  # at most every tile in pieces
        units, k_steps = units // split, -(-k // bk) + split
    k_inst = 32 if "float8" in case["dtype"] else 16
    wgmmas = units * k_steps * (bk // k_inst) * (bm // 64) * (bn // wn)
    ctas = units if p["tiling_strategy"] == "one_tile_per_cta" else min(units, 2 * DEVICE.sm_count)
    if p["splitk_in_cluster"]:  # a cluster of the splits per tile, reduced in it
        return wgmmas, max(ctas, split), 0
    if p["tiling_strategy"] == "persistent_streamk":  # the pieces meet in the kernel
        return wgmmas, ctas, 0
    reduce_blocks = reduce_grid(batch, m, n)[0] if split > 1 else 0
    return wgmmas, ctas, reduce_blocks


def compile_case(case: dict, fusion: mp.Fusion) -> mp.CompiledFusion:
    return mp.compile(fusion, DEVICE, pm=PM, overrides=case["params"])


def check(case: dict) -> None:
    fusion = fusion_for(case)
    problem = mp.matmul_problem(fusion)
    assert (problem.a_k_inner, problem.b_k_inner) == (case["a_k_inner"], case["b_k_inner"])
    fp8 = "float8" in case["dtype"]
    if fp8 and not (case["a_k_inner"] and case["b_k_inner"]):
        # hopper declines the layout; mp.compile copies the operand K-major for the kernel
        # when that problem plans (then these params must be legal for it)
        try:
            compiled = compile_case(case, fusion)
        except NoSchedulerError as error:
            (reason,) = (r.reason for r in error.rejections if r.name == "hopper")
            assert "FP8 wgmma reads K-major operands only" in reason, reason
        except InvalidParamsError as error:  # the K-major kernel's rules refuse the params
            assert error.violations, error
        else:
            assert "copied K-major" in compiled.explain(), compiled.explain()
            assert "FP8 wgmma reads K-major operands only" in compiled.explain()
        COUNTS["fp8_layout"] += 1
        return
    if not case["aligned"]:
        try:
            compile_case(case, fusion)
        except NoSchedulerError as error:
            (reason,) = (r.reason for r in error.rejections if r.name == "hopper")
            assert "TMA needs 16-byte aligned row pitches" in reason, reason
            assert "hopper: TMA needs" in str(error), error
        else:
            raise AssertionError(f"hopper accepted TMA-unaligned operands {case}")
        COUNTS["unaligned"] += 1
        return
    try:
        params = MatmulParams(**case["params"])
    except InvalidParamsError as error:
        found = list(error.violations)
    else:
        found = limits.violations(params, problem, DEVICE)
    if found:
        COUNTS["rejected"] += 1
        for v in found:
            COUNTS["fields"][v.field] = COUNTS["fields"].get(v.field, 0) + 1
            assert v.field.partition(".")[0] in PARAM_NAMES, v
            assert v.message and v.limit, v
        try:
            compile_case(case, fusion)
        except InvalidParamsError as error:
            assert {v.field for v in error.violations} == {v.field for v in found}, error
        else:
            raise AssertionError(f"mp.compile took params limits reject: {case}")
        return
    COUNTS["accepted"] += 1
    compiled = compile_case(case, fusion)
    assert compiled.spec.scheduler == "hopper", compiled.spec
    assert compiled.params == params, (compiled.params, params)  # no silent rewrite
    too_slow = any(c > top for c, top in zip(sim_cost(case), MAX_COST, strict=True))
    swap_due = case["params"]["swap_ab"] and COUNTS["swap_ran"] < MAX_SWAP_RUNS
    kcluster_due = (
        case["params"]["splitk_in_cluster"] and COUNTS["kcluster_ran"] < MAX_KCLUSTER_RUNS
    )
    multicast = tuple(case["params"]["cluster_dims"]) != (1, 1)
    multicast_due = multicast and COUNTS["multicast_ran"] < MAX_MULTICAST_RUNS
    both = tuple(case["params"]["cluster_dims"]) == (2, 2)
    both_due = both and COUNTS["cluster2x2_ran"] < MAX_CLUSTER2X2_RUNS
    streamk = case["params"]["tiling_strategy"] == "persistent_streamk"
    streamk_due = streamk and COUNTS["streamk_ran"] < MAX_STREAMK_RUNS
    due = swap_due or kcluster_due or multicast_due or both_due or streamk_due
    if too_slow or ((CLUSTERED or COUNTS["ran"] >= MAX_RUNS) and not due):
        return  # planned and built (its config passed config_problems); not run here
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype(t.dtype.numpy) for t in fusion.inputs]
    start = time.perf_counter()
    (got,) = compiled.execute(inputs)
    COUNTS["ran"] += 1
    COUNTS["fp8_ran"] += fp8
    COUNTS["block_ran"] += case["block"]
    COUNTS["swap_ran"] += case["params"]["swap_ab"]
    COUNTS["kcluster_ran"] += case["params"]["splitk_in_cluster"]
    COUNTS["multicast_ran"] += multicast
    COUNTS["cluster2x2_ran"] += both
    COUNTS["streamk_ran"] += streamk
    COUNTS["seconds"] = round(COUNTS["seconds"] + time.perf_counter() - start, 1)
    (want,) = mp.evaluate(fusion, inputs)
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.all(np.isfinite(got64)), f"unwritten (NaN) outputs for {case}"
    bad = np.abs(got64 - want64) > tolerance(case, inputs, want64)
    assert not bad.any(), f"{int(bad.sum())} wrong elements, first {np.argwhere(bad)[:3].tolist()}"


def tolerance(case: dict, inputs: list, want: np.ndarray) -> np.ndarray:
    """Per element: two ulps of the product and of the result (mp.evaluate rounds the product
    to the operand type before the epilogue, the kernel does not) plus float32 summation; a
    missing or doubled k16 step is far above it."""
    a, b = (np.asarray(x, np.float64) for x in inputs[:2])
    product, size = a @ b, np.abs(a) @ np.abs(b)
    ulp = {"bfloat16": 2.0**-7, "float16": 2.0**-10}.get(case["dtype"], 2.0**-7)  # FP8: bf16 out
    if case.get("fp8_out"):  # one step of the FP8 output (3 or 2 mantissa bits)
        ulp = 2.0**-3 if case["dtype"] == "float8_e4m3fn" else 2.0**-2
        return 2 * ulp * (np.abs(product) + np.abs(want)) + 2.0**-9  # + a subnormal step
    return 2 * ulp * (np.abs(product) + np.abs(want)) + 4 * case["shape"][2] * 2.0**-24 * size


def _record_launches() -> None:
    """Count ``hopper_gemm`` launches (proof that the kernel, not a fallback, ran)."""
    real = artifact.launch_checked

    def recording(kernels, name, *args):  # noqa: ANN001, ANN002, ANN202
        if name == "hopper_gemm":
            COUNTS["launches"] += 1
        return real(kernels, name, *args)

    artifact.launch_checked = recording


def main(seed_value: int, examples: int) -> int:
    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(cases())
    def property_(case: dict) -> None:
        check(case)

    property_()
    print(json.dumps(COUNTS), flush=True)
    return 0


if __name__ == "__main__":
    # the emulation's waiting threads hold the GIL for a whole switch interval: at the default
    # 5 ms a CTA of 256-384 threads takes 5-35 s, at 0.1 ms about 1 s
    sys.setswitchinterval(1e-4)
    warnings.simplefilter("error", MatmulWarning)  # a fallback or an adjustment is a failure
    _record_launches()
    STREAMK = sys.argv[3:] == ["streamk"]
    CLUSTERED = sys.argv[3:] == ["cluster"]
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
