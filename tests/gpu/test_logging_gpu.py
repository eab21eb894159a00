"""GPU tier: a kernel's first launch for new tensors is logged with its time; later ones not."""

from __future__ import annotations

import logging

import pytest

import mmaplug as mp
from mmaplug.cli.demo import example_fusion
from mmaplug.cuda.presence import cuda_device_count

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80


def test_first_launch_per_signature_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line per new input signature (with the bind time); cached launches log nothing."""
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    compiled = mp.compile(example_fusion(256, 256, 128), pm=pm)
    x = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    w = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    bias = torch.randn(256, device="cuda", dtype=torch.float16)
    with caplog.at_level(logging.DEBUG, logger="mmaplug.launch"):
        for _ in range(3):
            compiled.execute([x, w, bias])
        torch.cuda.synchronize()
    lines = [r.getMessage() for r in caplog.records if r.name == "mmaplug.launch"]
    assert [r.levelno for r in caplog.records if r.name == "mmaplug.launch"] == [10, 20]
    assert lines[1].startswith(
        f"{compiled.kernel_name}: first launch for these tensors prepared in "
    )
    assert "(1 signatures bound;" in lines[1]
