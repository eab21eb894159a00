"""Bound launches go through the stream's context's ``CUfunction``, not the ``CUkernel``.

Each case runs ``launch_child.py`` in a fresh process against the stub libcuda, whose
launches refuse a function of another context (as the driver does) and count what launched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("launch_child.py")
KERNEL, FUNCTION = {"all": 1, "function": 0}, {"all": 1, "function": 1}


@pytest.fixture(scope="module")
def stub_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``stub_libcuda.c`` built as libcuda.so.1 (skips without a compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stub libcuda")
    where = tmp_path_factory.mktemp("stub_libcuda")
    source = Path(__file__).with_name("stub_libcuda.c")
    cmd = [compiler, "-O1", "-shared", "-fPIC", "-o", str(where / "libcuda.so.1"), str(source)]
    subprocess.run([*cmd, "-ldl"], check=True, capture_output=True)
    return where


def _child(stub: Path, scenario: str) -> dict[str, Any]:
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stub}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run(
        [sys.executable, str(CHILD), scenario], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cluster", [False, True], ids=["single", "clusters"])
def test_every_stream_of_the_current_context_launches_its_function(
    stub_libcuda: Path, cluster: bool
) -> None:
    """The legacy stream, a created stream and a stream mmaplug never saw made (the primary
    context's) launch the function, allowed the kernel's dynamic shared memory itself."""
    got = _child(stub_libcuda, "cluster-streams" if cluster else "streams")
    expected = {"all": 2, "function": 2, "cluster": 2 if cluster else 0}
    assert got["default"] == got["created"] == got["foreign"] == expected
    assert got["function_smem"] == 100_000  # cuFuncSetAttribute on the function
    assert got["last_cluster"] == (2 if cluster else 0)


def test_a_function_per_context_and_the_kernel_across_contexts(stub_libcuda: Path) -> None:
    """A thread without a context gets the primary one and its function; another current
    context gets its own function; a stream of a context that is not current takes the
    CUkernel (which launches in the stream's context)."""
    got = _child(stub_libcuda, "contexts")
    launched = {key: {"all": c["all"], "function": c["function"]} for key, c in got.items()
                if isinstance(c, dict)}  # fmt: skip
    assert launched["no_context_default"] == launched["other_context_default"] == FUNCTION
    assert launched["other_context_primary_stream"] == KERNEL
    assert launched["primary_thread_other_stream"] == KERNEL
    assert got["functions_per_context"] == got["contexts"]


def test_a_function_the_driver_refuses_falls_back_to_the_kernel(stub_libcuda: Path) -> None:
    """A function the driver rejects (another context's: a stale cache entry) is not retried:
    that launch and the next go through the CUkernel, and both run once."""
    assert _child(stub_libcuda, "refused")["refused"] == {"all": 2, "function": 0, "cluster": 0}


def test_cluster_launches_from_threads_need_no_lock(stub_libcuda: Path) -> None:
    """Four threads launching one cluster launcher on four streams: every launch arrives."""
    assert _child(stub_libcuda, "threads")["threads"] == {
        "all": 2000, "function": 2000, "cluster": 2000,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("scenario", "what"),
    [("error", "0 B smem failed"), ("cluster-error", "0 B smem in clusters of 2 failed")],
    ids=["single", "clusters"],
)
def test_a_launch_failing_both_ways_raises_launch_error(
    stub_libcuda: Path, scenario: str, what: str
) -> None:
    """An empty grid fails through the function and the kernel: LaunchError with the driver's
    error and the launch's geometry."""
    error = _child(stub_libcuda, scenario)["error"]
    assert error == f"cuLaunchKernelEx of (0, 1, 1) x (384, 1, 1), {what}: CUDA_ERROR_STUB (1)"
