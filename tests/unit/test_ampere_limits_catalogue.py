"""Hostile parameter sets for the ampere scheduler: each is refused with the field and value named.

A case either fails when the ``MatmulParams`` are built (``InvalidParamsError``, rules every
scheduler shares) or is accepted by them and refused by ``plugins/ampere/limits.violations``;
either way the violation names the field and its message the value. The last cases go through
planning (``plan_problem``), which must raise ``InvalidParamsError`` blaming the caller.
"""

from __future__ import annotations

import re

import pytest

from mmaplug.analysis.problem import MatmulProblem, VectorWidths
from mmaplug.errors import InvalidParamsError
from mmaplug.ir.dtypes import DType
from mmaplug.planning.device import Device, get_device
from mmaplug.planning.params import MatmulParams, Violation
from mmaplug.planning.plan import plan_problem
from mmaplug.plugins.ampere import limits

T4 = Device(name="t4", cc=(7, 5), sm_count=40, smem_per_block_optin=65_536, smem_per_sm=65_536)
SMALL_BLOCKS = Device(
    name="small", cc=(8, 6), sm_count=8, smem_per_block_optin=101_376, smem_per_sm=102_400,
    max_threads_per_block=512,
)  # fmt: skip
BASE = dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=3)


def problem(m=4096, n=4096, k=4096, *, batch=1, vec=8, dtype=DType.float16) -> MatmulProblem:  # noqa: ANN001
    return MatmulProblem(
        m=m, n=n, k=k, batch=batch, a_k_inner=True, b_k_inner=True, operand_dtype=dtype,
        output_dtype=dtype, vector_widths=VectorWidths(a=vec, b=vec, epilogue=vec),
    )  # fmt: skip


# id: (changes to BASE, problem, device, field, regex the message must match)
CASES = {
    # rules of MatmulParams itself (every scheduler)
    "stages_zero": ({"stages": 0}, problem(), "a100", "stages", r"stages=0 .* int >= 1"),
    "splitk_zero": ({"splitk_factor": 0}, problem(), "a100", "splitk_factor", r"splitk_factor=0"),
    "swizzle_zero": (
        {"grid_swizzle_factor": 0},
        problem(),
        "a100",
        "grid_swizzle_factor",
        r"grid_swizzle_factor=0",
    ),
    "stages_bool": ({"stages": True}, problem(), "a100", "stages", r"stages=True"),
    "cta_order_unknown": (
        {"cta_order": "diagonal"},
        problem(),
        "a100",
        "cta_order",
        r"cta_order='diagonal' must be one of row_major, column_major",
    ),
    "tiling_unknown": (
        {"tiling_strategy": "stream_k"},
        problem(),
        "a100",
        "tiling_strategy",
        r"tiling_strategy='stream_k'",
    ),
    "cluster_triple": (
        {"cluster_dims": (1, 1, 1)},
        problem(),
        "a100",
        "cluster_dims",
        r"cluster_dims=\(1, 1, 1\) must be a pair",
    ),
    "async_string": (
        {"async_gmem_load_operands": "yes"},
        problem(),
        "a100",
        "async_gmem_load_operands",
        r"async_gmem_load_operands='yes' must be True or False",
    ),
    "cta_not_warp_multiple": (
        {"cta_tile": (96, 128, 32)},
        problem(),
        "a100",
        "cta_tile",
        r"cta_tile=96x128x32 is not divisible by warp_tile=64x64x32 along m",
    ),
    "warp_k_differs": (
        {"warp_tile": (64, 64, 16)},
        problem(),
        "a100",
        "warp_tile",
        r"warp_tile.k=16 differs from cta_tile.k=32",
    ),
    "warp_not_instruction_multiple": (
        {"cta_tile": (96, 128, 32), "warp_tile": (24, 64, 32)},
        problem(),
        "a100",
        "warp_tile",
        r"warp_tile=24x64x32 is not divisible by instruction_tile",
    ),
    "prefetch_over_stages": (
        {"prefetch_gap": 4},
        problem(),
        "a100",
        "prefetch_gap",
        r"prefetch_gap=4 exceeds stages=3",
    ),
    # ampere limits
    "sm75_device": ({}, problem(), T4, "device", r"t4 is sm_75"),
    "instruction_16x16x16": (
        {"instruction_tile": (16, 16, 16)},
        problem(),
        "a100",
        "instruction_tile",
        r"instruction_tile=16x16x16; .* m16n8k16 only",
    ),
    "instruction_wgmma": (
        {"instruction_tile": (64, 64, 16)},
        problem(),
        "a100",
        "instruction_tile",
        r"instruction_tile=64x64x16",
    ),
    "instruction_k8": (
        {"instruction_tile": (16, 8, 8)},
        problem(),
        "a100",
        "instruction_tile",
        r"instruction_tile=16x8x8",
    ),
    "warp_n8": (
        {"cta_tile": (64, 64, 32), "warp_tile": (32, 8, 32)},
        problem(),
        "a100",
        "warp_tile",
        r"warp_tile=32x8x32 must be a multiple of 16x16x16",
    ),
    "warp_n24": (
        {"cta_tile": (64, 48, 32), "warp_tile": (64, 24, 32)},
        problem(),
        "a100",
        "warp_tile",
        r"warp_tile=64x24x32 must be a multiple",
    ),
    "warp_n40": (
        {"cta_tile": (32, 80, 32), "warp_tile": (32, 40, 32)},
        problem(),
        "h200",
        "warp_tile",
        r"warp_tile=32x40x32",
    ),
    "threads_2048": (
        {"cta_tile": (256, 256, 32), "warp_tile": (32, 32, 32), "stages": 2},
        problem(),
        "h200",
        "cta_tile",
        r"needs 2,048 threads per block; sm_90a allows 1,024",
    ),
    "threads_device_512": (
        {"cta_tile": (128, 256, 32), "warp_tile": (32, 32, 32), "stages": 2},
        problem(),
        SMALL_BLOCKS,
        "cta_tile",
        r"needs 1,024 threads per block; sm_86 allows 512",
    ),
    "stages_9": (
        {"stages": 9},
        problem(),
        "a100",
        "stages",
        r"stages=9; the ampere pipeline supports 1 to 8",
    ),
    "stages_operand_smem": (
        {"cta_tile": (128, 128, 64), "warp_tile": (64, 64, 64), "stages": 7},
        problem(),
        "a100",
        "stages",
        r"stages=7 needs 229,376 B .* sm_80 allows 166,912 B",
    ),
    "one_stage_counts_two": (
        {"cta_tile": (128, 128, 256), "warp_tile": (64, 64, 256), "stages": 1},
        problem(),
        "h200",
        "stages",
        r"stages=1 \(built as 2\) needs 262,144 B",
    ),
    "epilogue_256x256_h200": (
        {"cta_tile": (256, 256, 32), "stages": 2},
        problem(),
        "h200",
        "cta_tile",
        r"cta_tile=256x256x32 .* = 270,336 B; sm_90a allows 232,448 B",
    ),
    "epilogue_256x192_a100": (
        {"cta_tile": (256, 192, 32), "stages": 2},
        problem(),
        "a100",
        "cta_tile",
        r"cta_tile=256x192x32 .* = 204,800 B; sm_80 allows 166,912 B",
    ),
    "stages_without_async": (
        {"async_gmem_load_operands": False},
        problem(),
        "a100",
        "stages",
        r"stages=3 needs cp.async loads, but async_gmem_load_operands=False",
    ),
    "async_with_2_byte_copies": (
        {"stages": 2},
        problem(vec=1),
        "a100",
        "async_gmem_load_operands",
        r"async_gmem_load_operands=True needs cp.async copies .* 1 x 2 B = 2 B",
    ),
    "async_false_with_16_byte_rows": (
        {"async_gmem_load_operands": False, "stages": 2},
        problem(),
        "a100",
        "async_gmem_load_operands",
        r"async_gmem_load_operands=False, but both operands allow cp.async copies of 16\+ B",
    ),
    "prefetch_gap_2": (
        {"prefetch_gap": 2},
        problem(),
        "a100",
        "prefetch_gap",
        r"prefetch_gap=2; the ampere pipeline always loads stages - 1",
    ),
    "prefetch_gap_3": (
        {"prefetch_gap": 3, "stages": 4},
        problem(),
        "h200",
        "prefetch_gap",
        r"prefetch_gap=3",
    ),
    "splitk_over_k_tiles": (
        {"splitk_factor": 5},
        problem(k=128),
        "a100",
        "splitk_factor",
        r"splitk_factor=5 exceeds the 4 K tiles of k=128",
    ),
    "splitk_single_k_tile": (
        {"splitk_factor": 2},
        problem(k=20),
        "a100",
        "splitk_factor",
        r"splitk_factor=2 exceeds the 1 K tiles of k=20",
    ),
    "batch_over_grid_z": (
        {},
        problem(batch=65_536),
        "a100",
        "splitk_factor",
        r"batch=65,536 x splitk_factor=1 = 65,536 CTAs along grid z",
    ),
    "batch_times_splitk_over_grid_z": (
        {"splitk_factor": 4},
        problem(batch=20_000),
        "h200",
        "splitk_factor",
        r"splitk_factor=4 = 80,000 CTAs along grid z; CUDA allows 65,535",
    ),
    "tiles_over_grid_x": (
        {"cta_tile": (16, 16, 16), "warp_tile": (16, 16, 16), "stages": 2},
        problem(m=2**31 - 1, n=2**20),
        "a100",
        "cta_tile",
        r"cta_tile=16x16x16 cuts m=2147483647 x n=1048576 into 8,796,093,022,208 tiles",
    ),
    "reduce_over_grid_x": (
        {"splitk_factor": 2},
        problem(m=2**21, n=2**20),  # 4 elements a thread: 2**31 blocks of 256
        "a100",
        "splitk_factor",
        r"splitk_factor=2 sums the partials in a kernel of 2,147,483,648 blocks",
    ),
    "cluster_2x1": (
        {"cluster_dims": (2, 1)},
        problem(),
        "a100",
        "cluster_dims",
        r"cluster_dims=\(2, 1\)",
    ),
    "persistent": (
        {"tiling_strategy": "persistent"},
        problem(),
        "h200",
        "tiling_strategy",
        r"does not support persistent tiling",
    ),
    "warp_specialized": (
        {"warp_specialized": True},
        problem(),
        "h200",
        "warp_specialized",
        r"does not support warp specialization",
    ),
}


def _violations(changes: dict, prob: MatmulProblem, device: object) -> list[Violation]:
    try:
        params = MatmulParams(**{**BASE, **changes})
    except InvalidParamsError as error:
        return list(error.violations)
    return limits.violations(params, prob, get_device(device))  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "prob", "device", "field", "match"), CASES.values(), ids=CASES)
def test_hostile_params_are_refused_naming_field_and_value(
    changes: dict, prob: MatmulProblem, device: object, field: str, match: str
) -> None:
    """The parameter set is refused; a violation names the field and its message the value."""
    found = _violations(changes, prob, device)
    hits = [v for v in found if v.field == field and re.search(match, v.message)]
    assert hits, found
    assert all(v.limit for v in hits)


PLANNED = {
    "caller_prefetch_gap": ({"prefetch_gap": 2}, "prefetch_gap", r"prefetch_gap=2"),
    "caller_warp_n24": (
        {"cta_tile": (128, 96, 32), "warp_tile": (64, 24, 32)},
        "warp_tile",
        r"warp_tile=64x24x32",
    ),
    "caller_epilogue_tile": ({"cta_tile": (256, 256, 32), "stages": 2}, "cta_tile", r"270,336 B"),
    "caller_stages_9": ({"stages": 9}, "stages", r"stages=9"),
}


@pytest.mark.parametrize(("overrides", "field", "match"), PLANNED.values(), ids=PLANNED)
def test_caller_overrides_are_refused_by_planning(
    pm, overrides: dict, field: str, match: str
) -> None:  # noqa: ANN001
    """Planning raises InvalidParamsError naming the value, the caller and the ampere rule."""
    with pytest.raises(InvalidParamsError, match=match) as info:
        plan_problem(problem(), get_device("a100"), pm=pm, overrides=overrides)
    assert "value from: caller; rule of: ampere" in str(info.value)
    assert field in {v.field for v in info.value.violations}
