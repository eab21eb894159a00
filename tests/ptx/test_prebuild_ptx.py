"""``mp.prebuild`` for real (no GPU): worker processes build the cubins launches would load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion
from mmaplug.cuda import cubin

pytestmark = pytest.mark.ptx


def test_workers_build_and_store_what_the_launch_path_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split-K plan's two kernels, built by two worker processes into the disk cache: the
    stored gemm kernel has the entry and parameter layout this process builds for it."""
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MMAPLUG_DISK_CACHE", raising=False)
    monkeypatch.setattr(cubin, "_kept", {})
    fusion = linear_fusion(128, 128, 512, mp.float16, True)
    overrides = {"cta_tile": (128, 128, 64), "warp_tile": (64, 128, 64), "splitk_factor": 2,
                 "instruction_tile": (64, 128, 16)}  # fmt: skip
    compiled = mp.compile(fusion, "h200", overrides=overrides)
    jobs = compiled.kernel_jobs()
    done = mp.prebuild([compiled], workers=2)
    assert [name.split(" ")[0].split(".")[1] for name in done.built] == [
        "hopper_gemm",
        "hopper_splitk_reduce",
    ]
    stored = {job.name: cubin.read(job.key, cubin._kept[job.key].slots) for job in jobs}
    assert all(b is not None and b.cubin[:4] == b"\x7fELF" for b in stored.values())
    here = jobs[0]()  # the build the launch path runs (generated_kernel's), in this process
    gemm = stored["hopper_gemm"]
    assert gemm is not None and gemm.slots == here.slots
    assert _unversioned(gemm.entry) == _unversioned(here.entry)
    assert mp.prebuild([compiled]).built == ()


def _unversioned(entry: str) -> str:
    """*entry* with the per-process version in Numba's mangled names (``B2v1B``) made equal."""
    return re.sub(r"B\d+v\d+B", "BvB", entry)
