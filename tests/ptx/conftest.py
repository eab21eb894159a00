"""Fixtures of the PTX tier: ptxas (through nvJitLink, the toolkit's own) without a GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def _link_log(data: bytes, kind: str, opts: list[str]) -> str:
    """nvJitLink's info log of linking *data* (input type *kind*) with *opts*; a failed link
    fails the test with the error log."""
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    handle = nvjitlink.create(len(opts), opts)
    nvjitlink.add_data(handle, getattr(nvjitlink.InputType, kind), data, len(data), "kernel")
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


def _assemble(ptx: str, arch: str = "sm_90a") -> str:
    return _link_log(ptx.encode(), "PTX", [f"-arch={arch}", "-verbose"])


def _link_hopper(config: object) -> str:
    from numba import cuda

    from mmaplug.cuda.pipeline import lean
    from mmaplug.plugins.hopper.kernel import kernel_signatures, load_module

    source = load_module(config, sim=False)
    assert "lto=True" in source["__source__"]
    kernel = source["hopper_gemm"].py_func
    with lean(kernel, (9, 0)):  # (the device functions it calls are built for sm_90 too)
        ltoir, _ = cuda.compile(
            kernel, kernel_signatures(config)["hopper_gemm"].args,
            cc=(9, 0, "a"), output="ltoir", device=False, abi="numba",
            launch_bounds=(config.threads, 1),  # type: ignore[attr-defined]
        )  # fmt: skip
    return _link_log(ltoir, "LTOIR", ["-arch=sm_90a", "-verbose", "-lto"])


@pytest.fixture
def assemble_sm90a() -> Callable[[str], str]:
    """ptxas for sm_90a: PTX in, its info log out (registers, spills)."""
    return _assemble


@pytest.fixture
def ptxas_log() -> Callable[[str, str], str]:
    """ptxas for an arch (``"sm_80"``, ``"sm_90a"``): PTX and arch in, its info log out."""
    return _assemble


@pytest.fixture
def hopper_link_log() -> Callable[[object], str]:
    """The info log of linking the hopper kernel of a config as the launch path links it (its
    NVVM IR through nvJitLink with ``-lto``)."""
    return _link_hopper
