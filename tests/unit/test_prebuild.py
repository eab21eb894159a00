"""``mp.prebuild``: which kernels a compiled fusion's jobs build, under which cache key, and
what is refused; building for real is in the ptx tier and ``test_cold_start``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import mmaplug as mp
from mmaplug.cli.bench import linear_fusion
from mmaplug.cuda import cubin
from mmaplug.errors import KernelBuildError, PluginError, UsageError
from mmaplug.plugins.hopper.artifact import HopperArtifact


def _compiled(device: str = "h200", m: int = 512, **overrides: Any) -> Any:
    return mp.compile(
        linear_fusion(m, 256, 1024, mp.float16, False), device=device, overrides=overrides or None
    )


@pytest.fixture(autouse=True)
def _no_gpu_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(cubin, "_kept", {})


def test_jobs_name_the_kernels_launches_load_under_their_cache_key() -> None:
    compiled = _compiled()
    (job,) = compiled.kernel_jobs()
    assert (job.module, job.name, job.cc) == (compiled.kernel_name, "hopper_gemm", (9, 0))
    assert job.source == compiled.source  # what generated_kernel keys and loads
    assert job.key == cubin.entry_key(job.module, job.source, job.name, "sm_90a")


def test_split_k_builds_its_reduce_kernel_too() -> None:
    names = [job.name for job in _compiled(splitk_factor=2).kernel_jobs()]
    assert names == ["hopper_gemm", "hopper_splitk_reduce"]


def test_ampere_jobs_build_for_the_plans_compute_capability() -> None:
    (job,) = _compiled("a100", splitk_factor=1).kernel_jobs()
    assert (job.name, job.cc) == ("ampere_gemm", (8, 0))
    assert job.key == cubin.entry_key(job.module, job.source, job.name, "sm_80")


def test_symbolic_fusion_needs_the_shapes_it_will_run() -> None:
    compiled = mp.compile(linear_fusion(-1, 256, 1024, mp.float16, False), device="h200")
    with pytest.raises(UsageError, match=r"symbolic extents will run: pass \(compiled, shapes\)"):
        mp.prebuild([compiled])
    decode, large = ((1, 1024), (256, 1024)), ((4096, 1024), (256, 1024))
    jobs = [job.key for shapes in (decode, large) for job in _jobs_of(compiled, shapes)]
    assert len(set(jobs)) == 2  # the decode shape class plans another kernel
    with pytest.raises(UsageError, match="no symbolic extents: pass it alone"):
        mp.prebuild([(_compiled(), decode)])


def _jobs_of(compiled: Any, shapes: Any) -> list[Any]:
    return compiled.specialize(shapes).kernel_jobs()  # type: ignore[no-any-return]


def test_anything_else_is_refused_with_what_is_accepted() -> None:
    with pytest.raises(UsageError, match="takes what mp.compile returns"):
        mp.prebuild([linear_fusion(64, 64, 64, mp.float16, False)])
    with pytest.raises(UsageError, match="workers >= 1"):
        mp.prebuild([_compiled()], workers=0)


def test_nothing_to_build_starts_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _compiled()
    (job,) = compiled.kernel_jobs()
    monkeypatch.setitem(cubin._kept, job.key, cubin.Binary(b"cubin", "_Z", 1))
    done = mp.prebuild([compiled, compiled])
    assert done.built == () and done.cached == (f"{job.module}.{job.name} ({job.key})",)


def test_a_failing_build_is_a_kernel_build_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = sys.modules["mmaplug.runtime.prebuild"]  # the attribute is the function

    def broken(todo: list, count: int) -> Any:
        for key, job in todo:
            yield key, job, KernelBuildError("ptxas: out of registers")

    monkeypatch.setattr(module, "_run", broken)
    with pytest.raises(KernelBuildError, match=r"could not build hopper_.*hopper_gemm .*registers"):
        mp.prebuild([_compiled()])
    assert cubin._kept == {}


def test_a_raising_scheduler_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def kernel_jobs(self: Any) -> list[Any]:
        raise RuntimeError("no jobs today")

    monkeypatch.setattr(HopperArtifact, "kernel_jobs", kernel_jobs)
    with pytest.raises(PluginError, match="hopper scheduler's kernel_jobs.*no jobs today") as err:
        mp.prebuild([_compiled()])
    assert err.value.plugin == "hopper"


def test_attempt_turns_any_error_into_a_kernel_build_error() -> None:
    _attempt = sys.modules["mmaplug.runtime.prebuild"]._attempt

    def job() -> Any:
        raise ValueError("bad config")

    outcome = _attempt(job)
    assert isinstance(outcome, KernelBuildError) and "ValueError: bad config" in str(outcome)


def test_the_simulator_has_no_kernels_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmaplug.cuda import launching

    monkeypatch.setattr(launching, "simulating", lambda: True)
    assert _compiled().kernel_jobs() == [] and _compiled("a100").kernel_jobs() == []
    assert mp.prebuild([_compiled()]).built == ()
