"""Tests for Device presets, name lookup and local-GPU discovery."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from mmaplug.errors import UnsupportedTargetError, UsageError
from mmaplug.planning.device import PRESET_NAMES, Device, get_device


@pytest.mark.parametrize(
    ("name", "cc", "target", "sms", "optin", "l2_mib"),
    [
        ("a100", (8, 0), "sm_80", 108, 166_912, 40),
        ("h100", (9, 0), "sm_90a", 132, 232_448, 50),
        ("h200", (9, 0), "sm_90a", 132, 232_448, 60),
    ],
    ids=["a100", "h100", "h200"],
)
def test_presets(
    name: str, cc: tuple[int, int], target: str, sms: int, optin: int, l2_mib: int
) -> None:
    """Each preset carries the documented compute capability, target and sizes."""
    device = get_device(name)
    assert (device.cc, device.target, device.sm_count) == (cc, target, sms)
    assert device.smem_per_block_optin == optin
    assert device.l2_bytes == l2_mib * 1024 * 1024
    assert (device.regs_per_sm, device.max_threads_per_block, device.warp_size) == (
        65536,
        1024,
        32,
    )
    assert (device.threads_per_sm, device.ctas_per_sm) == (2048, 32)


def test_hopper_presets_share_everything_but_l2() -> None:
    """h100 and h200 differ only in name and L2 size."""
    h100, h200 = get_device("h100"), get_device("h200")
    assert h100.smem_per_sm == h200.smem_per_sm == 228 * 1024
    assert h100.l2_bytes < h200.l2_bytes


@pytest.mark.parametrize("spelling", ["H200", " h200 ", "H200"], ids=["upper", "spaces", "again"])
def test_preset_names_are_case_insensitive(spelling: str) -> None:
    """Preset lookup ignores case and surrounding blanks."""
    assert get_device(spelling) is get_device("h200")


def test_device_instance_passes_through() -> None:
    """A Device argument is returned unchanged."""
    custom = Device(
        name="x", cc=(8, 6), sm_count=84, smem_per_block_optin=101_376, smem_per_sm=102_400
    )
    assert get_device(custom) is custom
    assert custom.target == "sm_86"


def test_unknown_name_suggests_a_preset() -> None:
    """An unknown name raises UsageError with the nearest preset and the full list."""
    with pytest.raises(
        UsageError, match=r"unknown device 'h10'; did you mean 'h100'\? presets: a100, h100, h200"
    ):
        get_device("h10")


def test_unknown_name_without_near_miss_lists_presets() -> None:
    """A name far from every preset still lists the presets."""
    with pytest.raises(UsageError, match="presets: a100, h100, h200"):
        get_device("quantum")


def test_non_string_name_is_a_usage_error() -> None:
    """Passing something that is neither a name, a Device nor None is a UsageError."""
    with pytest.raises(UsageError, match="preset name, a Device or None"):
        get_device(80)  # type: ignore[arg-type]


def _fake_numba(monkeypatch: pytest.MonkeyPatch, cuda: object) -> None:
    numba = types.ModuleType("numba")
    numba.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numba", numba)
    monkeypatch.setitem(sys.modules, "numba.cuda", cuda)  # type: ignore[arg-type]


def _local_gpu(monkeypatch: pytest.MonkeyPatch, **attributes: object) -> Device:
    """get_device() of a local GPU with *attributes*, read through a fake numba.cuda."""
    gpu = types.SimpleNamespace(**attributes)
    cuda = types.SimpleNamespace(is_available=lambda: True, get_current_device=lambda: gpu)
    _fake_numba(monkeypatch, cuda)
    return get_device()


def test_no_gpu_raises_unsupported_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no CUDA GPU, get_device() says so and points to the presets."""
    cuda = types.SimpleNamespace(is_available=lambda: False)
    _fake_numba(monkeypatch, cuda)
    with pytest.raises(
        UnsupportedTargetError, match="no CUDA GPU found; pass a preset name such as device='h200'"
    ):
        get_device()


def test_driver_error_becomes_unsupported_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver failure while probing is reported as UnsupportedTargetError."""

    def broken() -> object:
        raise RuntimeError("CUDA_ERROR_NO_DEVICE")

    _fake_numba(
        monkeypatch, types.SimpleNamespace(is_available=lambda: True, get_current_device=broken)
    )
    with pytest.raises(UnsupportedTargetError, match="CUDA_ERROR_NO_DEVICE"):
        get_device(None)


def test_local_gpu_is_read_through_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local GPU's attributes become a Device, with the "a" suffix on cc 9.0."""
    device = _local_gpu(
        monkeypatch,
        name=b"NVIDIA H200",
        compute_capability=(9, 0),
        MULTIPROCESSOR_COUNT=132,
        MAX_SHARED_MEMORY_PER_BLOCK=49_152,
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=232_448,
        MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=233_472,
        MAX_REGISTERS_PER_MULTIPROCESSOR=65_536,
        MAX_THREADS_PER_BLOCK=1024,
        L2_CACHE_SIZE=62_914_560,
        WARP_SIZE=32,
    )
    assert device.name == "NVIDIA H200"
    assert device.target == "sm_90a"
    assert device == get_device("h200").__class__(
        name="NVIDIA H200",
        cc=(9, 0),
        arch_suffix="a",
        sm_count=132,
        smem_per_block_optin=232_448,
        smem_per_sm=233_472,
        l2_bytes=62_914_560,
    )


def test_local_gpu_limits_per_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads and CTAs one SM holds are read from the GPU (an sm_86 holds 1,536 and 16)."""
    device = _local_gpu(
        monkeypatch,
        name="NVIDIA RTX A6000",
        compute_capability=(8, 6),
        MULTIPROCESSOR_COUNT=84,
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=101_376,
        MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=102_400,
        MAX_THREADS_PER_MULTIPROCESSOR=1536,
        MAX_BLOCKS_PER_MULTIPROCESSOR=16,
    )
    assert (device.threads_per_sm, device.ctas_per_sm, device.target) == (1536, 16, "sm_86")


def test_presets_are_listed() -> None:
    """PRESET_NAMES lists exactly the three presets."""
    assert PRESET_NAMES == ("a100", "h100", "h200")


def test_planning_modules_import_without_numba() -> None:
    """device, params and the default heuristic import without pulling in numba."""
    code = (
        "import sys, mmaplug.planning.device, mmaplug.planning.params, mmaplug.heuristics.default; "
        "sys.exit(1 if 'numba' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_import_and_a_16_bit_plan_leave_ml_dtypes_unimported() -> None:
    """ml_dtypes' import (0.54 s of 0.74 before it was deferred) waits for a dtype's numpy
    twin: ``import mmaplug`` and planning a bf16 matmul never load it; ``DType.numpy`` does."""
    code = (
        "import sys, mmaplug as mp\n"
        "with mp.FusionDefinition() as fd:\n"
        "    a = fd.define_tensor([256, 128], dtype=mp.bfloat16)\n"
        "    b = fd.define_tensor([128, 64], dtype=mp.bfloat16)\n"
        "    fd.add_output(fd.ops.matmul(a, b))\n"
        "mp.compile(fd.fusion, 'h200', pm=mp.make_plugin_manager(load_entrypoints=False))\n"
        "planned = 'ml_dtypes' in sys.modules\n"
        "assert str(mp.bfloat16.numpy) == 'bfloat16' and mp.float8_e4m3fn.finite_max == 448\n"
        "sys.exit(3 if planned else 0 if 'ml_dtypes' in sys.modules else 4)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
