"""scripts/ncu_stalls.py (BENCHMARKS.md run 226): ncu's source page, read per kernel without a
GPU, on a page cut down to the columns the script reads."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from types import ModuleType

import pytest

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
          "stall_barrier", "stall_long_sb", "stall_barrier (Not Issued)"]  # fmt: skip
PAGE = [
    ["Kernel Name", "hopper_gemm"],
    HEADER,
    ["0x7f00000bcb40", "      @!P0  BRA 0x7fa9477c08d0", "293", "15872", "0", "290", "0"],
    ["0x7f00000be8f0", "      UCGABAR_WAIT", "339", "896", "329", "0", "329"],
    ["0x7f00000bbcb0", "      ERRBAR", "63", "1024", "0", "0", "0"],
    ["0x7f00000bcb50", "      NOP", "7", "15872", "0", "1", "0"],
    ["Kernel Name", "nvjet_sm90"],
    HEADER,
    ["0x7f000002b8c0", "      @!P3  NANOSLEEP.SYNCS 0xc350", "2499", "210856", "0", "2498", "0"],
]


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("ncu_stalls")


def test_each_kernel_keeps_its_own_lines(script: ModuleType) -> None:
    found = list(script.kernels(csv.reader(io.StringIO(_csv(PAGE)))))
    assert [k.name for k in found] == ["hopper_gemm", "nvjet_sm90"]
    first = found[0].lines[0]
    assert (first.address, first.sass, first.samples, first.executed) == (
        0x7F00000BCB40, "@!P0  BRA 0x7fa9477c08d0", 293, 15872,
    )  # fmt: skip
    # the issued-only twins of the stall columns are not counted twice
    assert found[0].lines[1].stalls == {"barrier": 329, "long_sb": 0}


def test_the_summary_ranks_instructions_and_groups_them_by_times_run(script: ModuleType) -> None:
    kernel = next(script.kernels(csv.reader(io.StringIO(_csv(PAGE)))))
    text = script.summary(kernel, top=2).splitlines()
    assert text[0] == "== hopper_gemm: 702 samples, 4 instructions"
    assert "UCGABAR_WAIT" in text[1] and "barrier 329" in text[1]  # the most samples first
    assert "BRA" in text[2] and "long_sb 290" in text[2]
    assert "ERRBAR" not in "\n".join(text[:3])  # only the top 2
    # the idle warps (896 runs) are one group, the main loop (15,872: the branch and the NOP)
    # another, the larger first
    assert text[4].split() == ["896:", "339", "(1)"]
    assert text[5].split() == ["15872:", "300", "(2)"]


def test_main_filters_kernels_by_name(
    script: ModuleType, tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "sass.csv"  # type: ignore[operator]
    page.write_text(_csv(PAGE))
    script.main([str(page), "--kernel", "nvjet"])
    out = capsys.readouterr().out
    assert "nvjet_sm90: 2499 samples" in out and "hopper_gemm" not in out


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()
