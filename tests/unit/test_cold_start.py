"""Cold start from the disk cache: cubins stored with their layout, loaded without Numba.

The fresh-process tests run ``cold_start_child.py`` twice against a fake CUDA driver: once to
build and store the kernel, once to find it; the second must never import Numba.
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

from mmaplug import get_device
from mmaplug.cuda import cubin, driver
from mmaplug.errors import CacheWarning, KernelBuildError, LaunchError

CHILD = Path(__file__).with_name("cold_start_child.py")


def _child(mode: str, scheduler: str, cache: Path, **extra: str) -> dict[str, Any]:
    env = dict(os.environ, MMAPLUG_CACHE_DIR=str(cache), MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    env.update(extra)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run(
        [sys.executable, str(CHILD), mode, scheduler], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("scheduler", ["hopper", "ampere"])
def test_disk_hit_never_imports_numba(tmp_path: Path, scheduler: str) -> None:
    """A fresh process finds the cubin the first one stored and launches it: no Numba."""
    built = _child("prepare", scheduler, tmp_path)
    assert built["scheduler"] == scheduler and built["numba"]  # the build path compiles
    assert built["loads"] == [[f"cubin of {scheduler}_gemm", f"_Z{scheduler}_gemm"]]
    hit = _child("hit", scheduler, tmp_path)
    assert hit["numba"] is False, "a disk-cache hit imported numba"
    assert hit["ml_dtypes"] is False, "a disk-cache hit imported ml_dtypes (0.5 s)"
    assert hit["loads"] == built["loads"]  # the stored bytes and entry name
    assert [launch["stream"] for launch in hit["launches"]] == [hit["stream"]] * 2
    assert hit["launches"] == built["launches"] and hit["out_shape"] == [256, 128]


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


@pytest.mark.parametrize("scheduler", ["hopper", "ampere"])
def test_disk_hit_through_the_real_driver_calls(
    tmp_path: Path, stub_libcuda: Path, scheduler: str
) -> None:
    """The same against a stub libcuda, building for real: Numba compiles and links the cubin
    (nvJitLink), the hit loads those bytes through the real ctypes and cuda.bindings calls."""
    path = {"LD_LIBRARY_PATH": f"{stub_libcuda}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    built = _child("stub-prepare", scheduler, tmp_path, **path)
    hit = _child("stub-hit", scheduler, tmp_path, **path)
    assert (built["device"], built["scheduler"], built["numba"]) == ("Stub H200", scheduler, True)
    assert (hit["device"], hit["scheduler"], hit["numba"]) == ("Stub H200", scheduler, False)
    assert built["stub_launches"] == hit["stub_launches"] == 2  # two execute calls
    (stored,) = (tmp_path / "cubins").iterdir()
    header, _, image = stored.read_bytes().partition(b"\n")
    assert image[:4] == b"\x7fELF" and f"{scheduler}_gemm".encode() in header


@pytest.mark.parametrize("disk", ["on", "off"])
def test_prebuilt_kernel_loads_without_numba(tmp_path: Path, stub_libcuda: Path, disk: str) -> None:
    """``mp.prebuild`` builds in worker processes (Numba there, not here); the first execute
    loads their cubin, from the disk cache or from memory with the cache off."""
    path = {"LD_LIBRARY_PATH": f"{stub_libcuda}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    run = _child("stub-prebuild", "hopper", tmp_path, MMAPLUG_DISK_CACHE=disk, **path)
    assert run["prebuilt"]["numba"] is False and run["numba"] is False
    (built,) = run["prebuilt"]["built"]  # one kernel, asked for twice
    assert built.startswith("hopper_") and ".hopper_gemm (" in built
    assert run["stub_launches"] == 2
    stored = list((tmp_path / "cubins").iterdir()) if (tmp_path / "cubins").exists() else []
    assert len(stored) == (1 if disk == "on" else 0)


class FakeDriver:
    """The driver calls ``cubin.kernel`` makes, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int] = (9, 0)) -> None:
        self.loads: list[tuple[bytes, str]] = []
        self.allowed: list[tuple[int, int, int]] = []
        monkeypatch.setattr(driver, "ensure_context", lambda: 0)
        monkeypatch.setattr(
            driver, "device_attributes", lambda ordinal=None: {"compute_capability": cc}
        )
        monkeypatch.setattr(driver, "load_kernel", self.load)
        monkeypatch.setattr(driver, "set_max_dynamic_smem", lambda *a: self.allowed.append(a))
        monkeypatch.setattr(cubin, "_loaded", {})
        cubin.target.cache_clear()

    def load(self, data: bytes, entry: str) -> int:
        self.loads.append((data, entry))
        return 500 + len(self.loads)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MMAPLUG_DISK_CACHE", raising=False)
    yield tmp_path
    cubin.target.cache_clear()


def _builder(calls: list[int], slots: int = 21) -> Any:
    def build() -> cubin.Binary:
        calls.append(1)
        return cubin.Binary(b"\x7fELF cubin", "_Z4gemm", slots)

    return build


def test_miss_builds_stores_and_a_new_process_loads_from_disk(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built once; the next process (memory cleared) reads the file; > 48 KiB is allowed."""
    fake, calls = FakeDriver(monkeypatch), []
    handle = cubin.kernel("hopper_x", "src", "hopper_gemm", 100_000, 21, _builder(calls))
    assert cubin.kernel("hopper_x", "src", "hopper_gemm", 100_000, 21, _builder(calls)) == handle
    assert calls == [1] and fake.loads == [(b"\x7fELF cubin", "_Z4gemm")]
    assert fake.allowed == [(handle, 100_000, 0)] * 2
    (stored,) = (cache_dir / "cubins").iterdir()
    assert stored.name == cubin.entry_key("hopper_x", "src", "hopper_gemm", "sm_90a") + ".cubin"
    monkeypatch.setattr(cubin, "_loaded", {})  # a new process
    cubin.kernel("hopper_x", "src", "hopper_gemm", 0, 21, _builder(calls))
    assert calls == [1] and fake.loads[-1] == (b"\x7fELF cubin", "_Z4gemm")


def test_keys_are_per_target_source_kernel_and_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "nvidia-nvjitlink=" in cubin.toolchain_key()
    assert "numba-cuda=" in cubin.toolchain_key()
    assert f"lowering={cubin.lowering_digest()}" in cubin.toolchain_key()
    key = cubin.entry_key("m", "src", "k", "sm_90a")
    assert len({
        key,
        cubin.entry_key("m", "src", "k", "sm_90"),
        cubin.entry_key("m", "src", "k", "sm_80"),
        cubin.entry_key("m", "src2", "k", "sm_90a"),
        cubin.entry_key("m", "src", "k2", "sm_90a"),
    }) == 5  # fmt: skip
    monkeypatch.setattr(cubin, "toolchain_key", lambda: "numba=0.0")
    assert cubin.entry_key("m", "src", "k", "sm_90a") != key


def test_the_lowering_digest_follows_the_intrinsics_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel's generated source names an intrinsic, not its body: a changed intrinsic module
    (GELU's polynomial, an inline-PTX string) changes every cubin's key; a copy does not."""
    import mmaplug.cuda as package

    real = cubin.lowering_digest()
    for path in Path(package.__file__).parent.glob("*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(cubin, "__file__", str(tmp_path / "cubin.py"))
    try:
        cubin.lowering_digest.cache_clear()
        copied = cubin.lowering_digest()
        cubin.lowering_digest.cache_clear()
        mathfuncs = tmp_path / "mathfuncs.py"
        mathfuncs.write_text(mathfuncs.read_text().replace("MAGNITUDE_CAP: Final = ", "CAP = "))
        changed = cubin.lowering_digest()
    finally:
        cubin.lowering_digest.cache_clear()
    assert copied == real != changed


@pytest.mark.parametrize("cc", [(8, 0), (8, 6), (9, 0), (10, 0)])
def test_target_follows_numbas_arch_rule(monkeypatch: pytest.MonkeyPatch, cc: tuple) -> None:
    FakeDriver(monkeypatch, cc)
    assert cubin.target(0) == f"sm_{cc[0]}{cc[1]}" + ("a" if cc >= (9, 0) else "")


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: data[:-3], "is damaged"),
        (lambda data: b"not json\n" + data, "is damaged"),
        (
            lambda data: data.replace(b'"slots": 21', b'"slots": 19'),
            "does not match its record in the cache manifest",
        ),
    ],
    ids=["truncated", "no_header", "header_edited"],
)
def test_damaged_or_stale_entry_warns_and_is_rebuilt(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: Any, why: str
) -> None:
    fake, calls = FakeDriver(monkeypatch), []
    cubin.kernel("m", "src", "k", 0, 21, _builder(calls))
    (stored,) = (cache_dir / "cubins").iterdir()
    good = stored.read_bytes()
    stored.write_bytes(damage(good))
    monkeypatch.setattr(cubin, "_loaded", {})
    with pytest.warns(CacheWarning, match=f"compiled kernel .*{stored.name} {why}; rebuilding"):
        cubin.kernel("m", "src", "k", 0, 21, _builder(calls))
    assert calls == [1, 1] and stored.read_bytes() == good  # replaced by the rebuilt one
    assert fake.loads[-1] == (b"\x7fELF cubin", "_Z4gemm")


def test_layout_disagreement_at_build_is_a_plugin_bug(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeDriver(monkeypatch)
    with pytest.raises(KernelBuildError, match="takes 19 parameter slots but its bound launch"):
        cubin.kernel("m", "src", "k", 0, 21, _builder([], slots=19))
    assert not list((cache_dir / "cubins").iterdir())


def test_disk_cache_off_neither_reads_nor_writes(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MMAPLUG_DISK_CACHE", "off")
    fake, calls = FakeDriver(monkeypatch), []
    cubin.kernel("m", "src", "k", 0, 21, _builder(calls))
    assert calls == [1] and len(fake.loads) == 1 and not (cache_dir / "cubins").exists()


def test_unwritable_cache_warns_and_loads_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(blocker))  # a file: no directory under it
    fake, calls = FakeDriver(monkeypatch), []
    with pytest.warns(CacheWarning, match=f"cache directory {blocker}: it is not a dir") as caught:
        cubin.kernel("m", "src", "k", 0, 21, _builder(calls))
    assert len(caught) == 1  # once: the process keeps its kernels in memory from then on
    assert calls == [1] and len(fake.loads) == 1


def test_simulating_reads_the_environment_before_numba_is_imported() -> None:
    code = (
        "import sys; from mmaplug.cuda.launching import simulating; "
        "print(simulating(), 'numba' in sys.modules)"
    )
    for value, expected in (("1", "True False"), ("0", "False False"), ("", "False False")):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == expected, out.stderr


def test_local_device_is_read_through_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = get_device("h200")
    attributes = {
        "name": "NVIDIA H200",
        "compute_capability": (9, 0),
        "MULTIPROCESSOR_COUNT": 132,
        "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": h200.smem_per_block_optin,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": h200.smem_per_sm,
        "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
        "MAX_THREADS_PER_BLOCK": 1024,
        "L2_CACHE_SIZE": 50 << 20,
        "WARP_SIZE": 32,
    }
    monkeypatch.setattr(driver, "device_attributes", lambda ordinal=None: attributes)
    device = get_device(None)
    assert (device.name, device.cc, device.arch_suffix, device.sm_count) == (
        "NVIDIA H200", (9, 0), "a", 132,
    )  # fmt: skip
    assert device.smem_per_block_optin == h200.smem_per_block_optin


def test_driver_without_libcuda_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    def missing(name: str) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    monkeypatch.setattr(driver, "_state", {})
    with pytest.raises(LaunchError, match=r"libcuda.so.1\) cannot be loaded .*NVIDIA driver"):
        driver.ensure_context()


def test_driver_older_than_cuda_12_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    class OldDriver:
        def __getattr__(self, name: str) -> Any:
            if name == "cuLibraryLoadData":
                raise AttributeError(name)
            return ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)

    monkeypatch.setattr(ctypes, "CDLL", lambda name: OldDriver())
    monkeypatch.setattr(driver, "_state", {})
    with pytest.raises(LaunchError, match="no cuLibraryLoadData: it is older than CUDA 12.0"):
        driver.ensure_context()
