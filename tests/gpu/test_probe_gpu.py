"""GPU tier: the probe scripts' shared measurement (``scripts/probes.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mmaplug.cuda.presence import cuda_device_count

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from probes import probe_variants  # noqa: E402 (scripts/ is not a package)

torch = pytest.importorskip("torch") if cuda_device_count() else None
pytestmark = pytest.mark.sm80


@pytest.mark.parametrize("fused", [False, True], ids=["bare", "bias_gelu"])
def test_each_variant_is_checked_and_timed_beside_torch(fused: bool) -> None:
    """Two variants of 256x384x512 fp16 (the default plan and a 2-way split-K): each row has
    its kernel (the split-K one says so), an error against torch within fp16's tolerance, and a
    time and ratio beside torch's (ratios from times rounded to 0.1 us, hence 5%)."""
    variants = (("default", None), ("sk2", {"splitk_factor": 2}))
    row = probe_variants(256, 384, 512, "float16", fused, variants, rounds=1)
    assert (row["shape"], row["dtype"], row["fused"]) == ("256x384x512", "float16", fused)
    assert row["torch_ms"] > 0
    for label, _ in variants:
        assert row[f"{label}_err"] < 2e-3, row
        assert row[f"{label}_ms"] > 0
        assert row[f"{label}_ratio"] == pytest.approx(
            row["torch_ms"] / row[f"{label}_ms"], rel=0.05
        )
    assert "_sk2" in row["sk2_kernel"]  # the variant's overrides were planned
