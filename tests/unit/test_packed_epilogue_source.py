"""The packed epilogue indexes shared memory with unsigned 64-bit values: Numba wraps a signed
index that may be negative around the array's length (a 64-bit compare and select per access
in the epilogue's hottest loop), and a uint32 index costs a mask to widen."""

from __future__ import annotations

import re

import pytest

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion

PLANS = {
    "default": None,
    "pingpong": {"tiling_strategy": "persistent_pingpong", "cta_tile": (128, 128, 64),
                 "warp_tile": (128, 128, 64), "instruction_tile": (64, 128, 16), "stages": 6},
    "splitk_partials": {"splitk_factor": 2},
}  # fmt: skip


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_shared_memory_indices_are_unsigned(plan: str) -> None:
    compiled = mp.compile(
        linear_fusion(4096, 4096, 4096, mp.float16, True), "h200", overrides=PLANS[plan]
    )
    assert "_ps" in compiled.kernel_name  # the packed epilogue
    marker = "def packed_step" if "def packed_step" in compiled.source else "while ch <"
    step = compiled.source.split(marker, 1)[1]  # the step code (split-K's partials: a loop)
    accesses = re.findall(r"\b(?:su|sf)\[([^\]]*)\]|smem_addr\(su, ([^)]*\)?)\)", step)
    assert accesses, "no shared-memory access in the steps"
    assert re.search(r"\bvw = uint64\(", step), "the store phase's vector word is not unsigned"
    for index in ("".join(a) for a in accesses):
        assert index.startswith(("uint64(", "vw")), index


@pytest.mark.parametrize("plan", ["default", "pingpong"])
def test_each_step_is_a_call_with_constant_accumulator_registers(plan: str) -> None:
    """The kernel calls the step function once a step, each call naming its accumulator
    registers by constant index: a step loop picked them through a branch chain, 16 register
    moves a step besides the math (static SASS, default fused kernel: ~34 -> ~27 instructions
    an element)."""
    compiled = mp.compile(
        linear_fusion(4096, 4096, 4096, mp.float16, True), "h200", overrides=PLANS[plan]
    )
    kernel, step = compiled.source.split("def packed_step", 1)
    assert "while ch" not in kernel and "if ch ==" not in kernel
    calls = re.findall(r"^\s*packed_step\((.*)\)", kernel, re.MULTILINE)
    assert len(calls) == 8, calls
    registers = [r for call in calls for r in re.findall(r"\bacc\d+\[(\d+)\]", call)]
    blocks = len(set(re.findall(r"\b(acc\d+)\[", " ".join(calls))))
    assert len(registers) == 8 * 16 and len(set(registers)) == 8 * 16 // blocks
    assert not re.search(r"\bacc\d+", step)  # the step reads its parameters only


def test_casts_alone_stay_a_step_loop() -> None:
    """A bare matmul's packed epilogue is a loop over the same step code (LLVM unrolls it): a
    step function would only add build time (BENCHMARKS runs 60-61)."""
    compiled = mp.compile(linear_fusion(4096, 4096, 4096, mp.float16, False), "h200")
    assert "_ps" in compiled.kernel_name
    assert "while ch < 8:" in compiled.source and "packed_step" not in compiled.source
    step = compiled.source.split("while ch < 8:", 1)[1]
    assert re.search(r"\bo0_0 = f32_to_f16\(a0\)", step)  # the cast, read from the step's a0


def test_fp8_outputs_pack_byte_pairs_into_half_words() -> None:
    """An FP8 output's fragment pairs are converted once a pair (the first column in the low
    byte) into the half-word view of the staging, indexed unsigned like the other views."""
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([4096, 4096], dtype=mp.float8_e4m3fn)
        b = fd.define_tensor([4096, 4096], dtype=mp.float8_e4m3fn, stride_order=[0, 1])
        sa = fd.define_tensor([4096, 1], dtype=mp.float32)
        sb = fd.define_tensor([1, 4096], dtype=mp.float32)
        y = fd.ops.scaled_mm(a, b, sa, sb, out_dtype=mp.float32)
        fd.add_output(fd.ops.cast(fd.ops.mul(y, 0.5), mp.float8_e4m3fn))
    compiled = mp.compile(fd.fusion, "h200")
    assert "_ps" in compiled.kernel_name
    assert "sh = cuda.shared.array(0, dtype=uint16)" in compiled.source
    stores = re.findall(r"\bsh\[([^\]]*)\] = f32x2_to_e4m3x2\(o0_1, o0_0\)", compiled.source)
    assert stores and all(index.startswith("uint64(") for index in stores)
    assert "f32_to_e4m3(" not in compiled.source.split("def packed_step", 1)[1]


@pytest.mark.parametrize(
    ("scale", "loads"),
    [("row", {"in0": 2, "in1": 2}), ("tensor", {"in0": 1, "in1": 1})],
)
def test_inputs_without_columns_are_read_once_a_tile(scale: str, loads: dict[str, int]) -> None:
    """A per-row scale of A is loaded once a tile for each of the thread's two fragment rows,
    a per-tensor one once, with the tile's origin before its main loop; the steps read the
    registers (loaded in each step, the first instructions of every step waited for them, run
    138; read per element, the per-row scale had cost the FP8 4096^3 kernel 18%, runs 127-128).
    Only an input that varies along N (the per-column scale of B) takes a column row."""
    from mmaplug.tune.corpus import TuneProblem

    problem = TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale=scale)
    source = mp.compile(problem.fusion(), "h200").source
    kernel, step = source.split("def packed_step", 1)
    for name, count in loads.items():
        assert len(re.findall(rf"\b{name}\[", kernel)) == count, (name, kernel)
        assert not re.search(rf"\b{name}\[", step)
    rows = 2 if scale == "row" else 0
    assert len(re.findall(r"\bpr0_[01] = in0\[", kernel)) == rows
    assert ("= sf[" in step) is (scale == "row")  # the column row: B's per-column scale
    assert not re.search(r"in\d+_sn\]", step)  # no input is read per column: none varies


def test_a_bias_beside_a_column_scale_takes_the_second_column_row() -> None:
    """FP8 per-row scales with a bias read two N-only inputs, B's per-column scale and the
    bias: both are staged in column rows (the second after both consumers' rows of the first)
    and prefetched before the main loop, so no step loads a column of either from global
    memory (the bias's 8 loads a step had cost the fused 4096^3 kernel ~5%, run 137)."""
    from mmaplug.tune.corpus import TuneProblem

    problem = TuneProblem(
        m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="row", epilogue="bias_gelu"
    )
    source = mp.compile(problem.fusion(), "h200").source
    kernel, step = source.split("def packed_step", 1)
    assert not re.search(r"in\d+_sn\]", step)
    assert "cw1 = scol + 512 + " in step  # 2 consumers x 256 columns further
    assert len(re.findall(r"= sf\[uint64\(cw1? \+ \d+\)\]", step)) == 16  # 8 columns of each
    assert len(re.findall(r"\bpc\d_1 = in\d+\[", kernel)) == 2  # the bias, 128 columns a load
