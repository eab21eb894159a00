"""The ``CUlaunchConfig`` a kernel launcher prepares for a stream: its geometry, the cluster
dimension and the programmatic dependent launch of a split-K reduce (real ``cuda.bindings``
structures; nothing is launched, so no GPU or driver is needed)."""

from __future__ import annotations

import pytest

from mmaplug.cuda import driver

bindings = pytest.importorskip("cuda.bindings.driver")
IDS = bindings.CUlaunchAttributeID


def _config(cluster: int, after_previous: bool) -> tuple[object, str]:
    launches = driver._Launches(bindings, 0, (4, 2, 1), (128, 1, 1), 1024, cluster, after_previous)
    config, _ = launches._keep(5, 0, launches.kernel)
    return config, launches.what


def test_a_dependent_launch_in_clusters_carries_both_attributes() -> None:
    config, what = _config(2, True)
    assert (config.gridDimX, config.gridDimY, config.blockDimX) == (4, 2, 128)  # type: ignore[attr-defined]
    assert (config.sharedMemBytes, int(config.hStream)) == (1024, 5)  # type: ignore[attr-defined]
    cluster, dependent = config.attrs  # type: ignore[attr-defined]
    assert config.numAttrs == 2  # type: ignore[attr-defined]
    assert cluster.id == IDS.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (cluster.value.clusterDim.x, cluster.value.clusterDim.y) == (2, 1)
    assert dependent.id == IDS.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert dependent.value.programmaticStreamSerializationAllowed == 1
    assert what.endswith("in clusters of 2, dependent launch")


@pytest.mark.parametrize(("cluster", "after_previous"), [(1, False), (1, True), (2, False)])
def test_each_attribute_only_when_asked(cluster: int, after_previous: bool) -> None:
    config, _ = _config(cluster, after_previous)
    ids = [attr.id for attr in config.attrs] if config.numAttrs else []  # type: ignore[attr-defined]
    assert (IDS.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION in ids) == (cluster > 1)
    dependent = IDS.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION in ids
    assert dependent == after_previous
