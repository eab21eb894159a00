"""Tuning builds without a GPU: candidates' PTX in parallel processes, and as Ray tasks."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator

import pytest

from mmaplug.cli.main import main
from mmaplug.planning.device import get_device
from mmaplug.tune import corpus, sweep

pytestmark = pytest.mark.ptx


def test_candidates_build_in_parallel_processes() -> None:
    """Two candidates of a skinny problem build in two worker processes; both give PTX."""
    jobs = sweep.plan_jobs(corpus.BUILTIN["skinny"][:1], get_device("h200"), limit=2, decode=0)
    pairs = sweep.run(jobs, "build", slots=[{}, {}], timeout=300.0)
    assert sorted(r["status"] for _, r in pairs) == ["ok", "ok"]
    assert all(r["kernel"].startswith("hopper_bfloat16") and r["ptx_bytes"] > 10_000
               for _, r in pairs)  # fmt: skip
    assert len({r["worker"] for _, r in pairs}) == 2


@pytest.fixture
def local_ray() -> Iterator[None]:
    """A local Ray instance for the test, shut down after it (skipped without ray)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'mmaplug[ray]')")
    import ray

    yield
    ray.shutdown()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ray's own imports
def test_ray_path_builds_on_a_local_instance(
    local_ray: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tune --build-only --ray local``: planning on the driver, the PTX builds as CPU-only Ray
    tasks (one per problem) through the same supervised worker."""
    argv = ["tune", "--shape", "64x4096x4096", "--shape", "4096x64x4096", "--candidates", "1",
            "--build-only", "--ray", "local", "--json"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {"built": 2, "failed": []}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ray's own imports
def test_ray_timing_needs_gpus(local_ray: None) -> None:
    """Timing tasks on a cluster without GPUs are refused at once instead of waiting forever."""
    from mmaplug.cuda.presence import cuda_device_count
    from mmaplug.errors import UsageError

    if cuda_device_count():
        pytest.skip("this machine has a GPU, so the local Ray instance has one")
    jobs = [{"key": "p", "params_name": "c"}]
    with pytest.raises(UsageError, match="has no GPUs, and timing tasks need one each"):
        sweep.run(jobs, "measure", slots=[{}], timeout=10.0, ray_address="local")
