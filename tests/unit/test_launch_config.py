"""The ``CUlaunchConfig`` a kernel launcher prepares for a stream: its geometry and, for CTA
pairs, the cluster dimension (real ``cuda.bindings`` structures; nothing is launched, so no
GPU or driver is needed)."""

from __future__ import annotations

import pytest

from mmaplug.cuda import driver

bindings = pytest.importorskip("cuda.bindings.driver")
IDS = bindings.CUlaunchAttributeID


def _config(cluster: int) -> tuple[object, str]:
    launches = driver._Launches(bindings, 0, (4, 2, 1), (128, 1, 1), 1024, cluster)
    config, _ = launches._keep(5, 0, launches.kernel)
    return config, launches.what


def test_a_launch_in_clusters_carries_the_cluster_dimension() -> None:
    config, what = _config(2)
    assert (config.gridDimX, config.gridDimY, config.blockDimX) == (4, 2, 128)  # type: ignore[attr-defined]
    assert (config.sharedMemBytes, int(config.hStream)) == (1024, 5)  # type: ignore[attr-defined]
    assert config.numAttrs == 1  # type: ignore[attr-defined]
    (cluster,) = config.attrs  # type: ignore[attr-defined]
    assert cluster.id == IDS.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (cluster.value.clusterDim.x, cluster.value.clusterDim.y) == (2, 1)
    assert what.endswith("in clusters of 2")


def test_a_plain_launch_carries_no_attribute() -> None:
    config, what = _config(1)
    assert config.numAttrs == 0  # type: ignore[attr-defined]
    assert "cluster" not in what
