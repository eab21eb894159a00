"""Fixtures of the PTX tier: assembling PTX for sm_90a without a GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def _assemble(ptx: str) -> str:
    """ptxas (through nvJitLink) on `ptx` for sm_90a; return its info log."""
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    opts = ["-arch=sm_90a", "-verbose"]
    handle = nvjitlink.create(len(opts), opts)
    data = ptx.encode()
    nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "sm90")
    try:
        nvjitlink.complete(handle)
    except nvjitlink.nvJitLinkError:
        log = bytearray(nvjitlink.get_error_log_size(handle))
        nvjitlink.get_error_log(handle, log)
        pytest.fail(log.decode(errors="replace"))
    log = bytearray(nvjitlink.get_info_log_size(handle))
    nvjitlink.get_info_log(handle, log)
    nvjitlink.destroy(handle)
    return log.decode(errors="replace")


@pytest.fixture
def assemble_sm90a() -> Callable[[str], str]:
    """ptxas for sm_90a (through nvJitLink): PTX in, its info log out (registers, spills)."""
    return _assemble
