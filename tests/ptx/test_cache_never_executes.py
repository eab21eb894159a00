"""Nothing from the disk cache is unpickled or executed (issue 22): generated kernel modules run
from memory without Numba's ``cache=True`` (whose index Numba unpickles), and the checked launch
path (``MMAPLUG_FAST_LAUNCH=0``) keeps its kernels as the cubins the bound launches load."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion
from mmaplug.cli.demo import example_fusion

pytestmark = pytest.mark.ptx

CHILD = Path(__file__).with_name("checked_launch_child.py")
PLANS = {
    "hopper": (example_fusion(256, 256, 128), "h200", None),
    "hopper_splitk": (
        linear_fusion(512, 512, 2048, mp.float16, True),
        "h200",
        {"splitk_factor": 2},
    ),
    "ampere": (example_fusion(256, 512, 128), "a100", None),
    "ampere_splitk": (
        linear_fusion(256, 256, 2048, mp.bfloat16, True),
        "a100",
        {"splitk_factor": 2},
    ),
}


class _Planted:
    """A pickle that, loaded, creates the file *marker* (a stand-in for any command)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _numba_or_python_artifacts(root: Path) -> list[str]:
    """Files under *root* that are code or Numba cache entries, or outside ``cubins/`` in a
    subdirectory (the cache root holds only the cache's own bookkeeping)."""
    bad = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or "kernels" in rel.parts:
            bad.append(str(rel))
        elif path.is_file() and (path.suffix in (".py", ".pyc", ".nbi", ".nbc") or (
            len(rel.parts) > 1 and rel.parts[0] != "cubins"
        )):  # fmt: skip
            bad.append(str(rel))
    return bad


@pytest.mark.parametrize("plan", list(PLANS))
def test_built_kernels_carry_no_numba_cache_and_leave_no_module_on_disk(
    plan: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building a plan's kernel module with the disk cache on (the launch path's build) gives
    source without ``cache=True`` and writes no module, bytecode or Numba index anywhere."""
    cache = _private_dir(tmp_path / "cache")
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(cache))
    monkeypatch.delenv("MMAPLUG_DISK_CACHE", raising=False)
    fusion, device, overrides = PLANS[plan]
    compiled = mp.compile(fusion, device, overrides=overrides)
    config = compiled._artifact.config
    scheduler = compiled.spec.scheduler
    kernel = importlib.import_module(f"mmaplug.plugins.{scheduler}.kernel")
    monkeypatch.setattr(kernel, "_BUILD_CACHE", {})  # build afresh under this cache dir
    kernels = kernel.build(config)
    assert "cache=True" not in kernels.source
    assert "cache=True" not in compiled._artifact.source()
    assert "cache=" not in kernel.generate_source(config, sim=False)
    assert kernels.module == f"{scheduler}_{config.name}"
    assert (kernels.reduce is not None) == (config.splitk > 1)
    assert compiled.ptx.startswith("//")  # compile_ptx: from memory too
    assert _numba_or_python_artifacts(cache) == []


def test_checked_launch_never_reads_a_planted_numba_index(tmp_path: Path) -> None:
    """With a malicious ``.nbi`` (and ``.nbc``) planted in ``kernels/__pycache__`` of the cache
    directory, building both schedulers' kernels and launching them through the checked path
    (a fresh process, driver faked: the cubins are built by Numba on the miss) opens nothing
    under the cache directory but ``cubins/`` and the cache's own bookkeeping at its root,
    unpickles nothing, and leaves only cubins behind."""
    cache = _private_dir(tmp_path / "cache")
    marker = tmp_path / "pwned"
    planted_dir = _private_dir(cache / "kernels" / "__pycache__")
    payload = pickle.dumps(_Planted(marker))
    planted = []
    for stem in (
        "mm_0",
        "mmaplug_kernels_mm_0_ampere_gemm-7",
        "mmaplug_kernels_mm_0_hopper_gemm-8",
    ):
        for suffix in (".nbi", ".nbc"):
            path = planted_dir / f"{stem}.py{sys.version_info[0]}{sys.version_info[1]}{suffix}"
            path.write_bytes(payload)
            planted.append(path)
    with pytest.raises(FileNotFoundError):  # the payload is real: loading it creates the marker
        marker.stat()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "MMAPLUG_"))}
    env.update(MMAPLUG_CACHE_DIR=str(cache), MMAPLUG_FAST_LAUNCH="0",
               MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(CHILD)], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert not marker.exists()
    assert report["unpickled"] == []
    outside = [p for p in report["opened"] if "/" in p and not p.startswith("cubins/")]
    assert outside == [], outside
    assert not any(p.endswith((".py", ".pyc", ".nbi", ".nbc")) for p in report["opened"])
    assert all(path.read_bytes() == payload for path in planted)
    left = [p for p in report["files"] if not p.startswith("kernels/__pycache__/")]
    assert [p for p in left if "/" in p and not p.startswith("cubins/")] == []
    assert sum(p.endswith(".cubin") for p in left) == 3  # ampere_gemm, hopper_gemm + reduce
    assert not any("cache=True" in source for source in report["sources"])
    gemm, hopper, reduce = report["launches"]
    assert (gemm["stream"], hopper["stream"], reduce["stream"]) == (0x77, 0x78, 0x78)
    assert gemm["values"][:7] == [0, 0, 64 * 32, 2, 0x10000, 64 * 32, 2]  # A: (addr, n, size)
    # the tensor maps go by value: their data slot stays 0, the launch points at their words
    assert hopper["values"][:14] == [0, 0, 32, 8, 0, 32, 8,
                                     0, 0, 2 * 128 * 64, 4, 0x50000, 2 * 128 * 64, 4]  # fmt: skip
    assert hopper["values"][14:] == [128, 64, 64, 1, 0, 0, 32, 1, 1, 2]
    assert reduce["values"][14:] == [128, 64, 1, 0, 64]
