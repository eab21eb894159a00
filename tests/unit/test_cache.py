"""The on-disk kernel cache: digests, verified entries, atomic writes, faults that only warn."""

from __future__ import annotations

import importlib.util
import marshal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmaplug import cache
from mmaplug.errors import CacheWarning

NJIT_SOURCE = "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"


@pytest.fixture(autouse=True)
def fresh_modules() -> Iterator[None]:
    """Each test starts as a fresh process would: no cached kernel module imported."""
    yield
    for name in [n for n in sys.modules if n.startswith("mmaplug_kernels.")]:
        del sys.modules[name]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    return tmp_path


def forget(module: object) -> None:
    """Drop *module* from ``sys.modules``, as a fresh process would not have it."""
    del sys.modules[module.__name__]  # type: ignore[attr-defined]


def test_module_is_written_under_the_cache_dir_and_imported(cache_dir: Path) -> None:
    """The source becomes an importable module file named by its digest."""
    module = cache.kernel_module("k1", "VALUE = 41 + 1\n")
    assert module is not None and module.VALUE == 42
    files = list((cache_dir / "kernels").glob("mm_*.py"))
    assert [Path(module.__file__)] == files


def test_same_key_and_source_reuse_one_entry(cache_dir: Path) -> None:
    """Building the same kernel twice reuses the file (and Numba's cache beside it)."""
    first = cache.kernel_module("k2", "A = 1\n")
    second = cache.kernel_module("k2", "A = 1\n")
    assert first is second
    assert len(list((cache_dir / "kernels").glob("mm_*.py"))) == 1


def test_changed_source_gets_a_new_entry(cache_dir: Path) -> None:
    """Any change in the generated source is a different digest, never a stale hit."""
    a = cache.kernel_module("k3", "A = 1\n")
    b = cache.kernel_module("k3", "A = 2\n")
    assert a is not None and b is not None
    assert (a.A, b.A) == (1, 2) and a.__file__ != b.__file__


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: "A = 666  # corrupted\n", id="edited"),
        pytest.param(lambda text: text[: len(text) // 2], id="truncated"),
        pytest.param(lambda text: text.replace("7", "8"), id="same-length"),
        pytest.param(lambda text: "", id="empty"),
    ],
)
def test_corrupt_entry_is_rewritten_not_trusted(cache_dir: Path, damage) -> None:
    """A cache file whose bytes differ from the generated text is rewritten, never executed."""
    module = cache.kernel_module("k4", "A = 7\n")
    path = Path(module.__file__)
    path.write_text(damage(path.read_text()))
    forget(module)
    again = cache.kernel_module("k4", "A = 7\n")
    assert again is not None and again.A == 7 and path.read_text().endswith("A = 7\n")


def _plant_pyc(source_path: Path, body: bytes) -> Path:
    """Write a ``__pycache__`` file whose header matches *source_path*, as CPython checks it."""
    pyc = Path(importlib.util.cache_from_source(str(source_path)))
    pyc.parent.mkdir(exist_ok=True)
    info = source_path.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += int(info.st_mtime).to_bytes(4, "little") + info.st_size.to_bytes(4, "little")
    pyc.write_bytes(header + body)
    return pyc


def test_a_bytecode_file_beside_an_entry_is_never_executed(cache_dir: Path) -> None:
    """Defect: a .pyc with a valid header and other code was imported instead of the source."""
    module = cache.kernel_module("k5", "A = 7\n")
    _plant_pyc(Path(module.__file__), marshal.dumps(compile("A = 666\n", "x", "exec")))
    forget(module)
    again = cache.kernel_module("k5", "A = 7\n")
    assert again is not None and again.A == 7


def test_a_damaged_bytecode_file_does_not_break_later_processes(cache_dir: Path) -> None:
    """Defect: a .pyc with a valid header and garbage body raised 'bad marshal data' forever."""
    module = cache.kernel_module("k6", "A = 7\n")
    _plant_pyc(Path(module.__file__), b"\x00garbage\xff" * 8)
    forget(module)
    again = cache.kernel_module("k6", "A = 7\n")
    assert again is not None and again.A == 7


def test_unwritable_location_warns_and_returns_none(tmp_path: Path, monkeypatch) -> None:
    """Defect: a file where the cache directory should be raised a bare OSError."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(blocker))
    with pytest.warns(CacheWarning, match=f"cannot be used at {blocker}.*Not a directory"):
        assert cache.kernel_module("k7", "A = 1\n") is None


def test_unwritable_location_builds_ampere_in_memory(tmp_path: Path, monkeypatch) -> None:
    """Defect: ``build`` of a real kernel aborted; now it warns and builds without cache=True."""
    from mmaplug.plugins.ampere.kernel import AmpereKernelConfig, load_module

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(blocker))
    with pytest.warns(CacheWarning, match=str(blocker)):
        namespace = load_module(AmpereKernelConfig(cta_tile=(64, 64, 32)), sim=False, on_disk=True)
    assert "ampere_gemm" in namespace and "cache=True" not in namespace["__source__"]


@pytest.mark.parametrize("suffix", ["nbi", "nbc"])
def test_a_truncated_numba_cache_file_is_replaced(cache_dir: Path, suffix: str) -> None:
    """Defect: Numba unpickles a truncated index/data file and raised in every later process."""
    module = cache.kernel_module("k8", NJIT_SOURCE)
    assert module.f(41) == 42
    (damaged,) = (cache_dir / "kernels" / "__pycache__").glob(f"*.{suffix}")
    damaged.write_bytes(damaged.read_bytes()[:7])
    forget(module)
    again = cache.kernel_module("k8", NJIT_SOURCE)
    with pytest.warns(CacheWarning, match=r"Numba's cache entry .*\.nbi .*is damaged"):
        assert again.f(41) == 42
    forget(again)
    healed = cache.kernel_module("k8", NJIT_SOURCE)
    assert healed.f(41) == 42 and sum(healed.f.stats.cache_hits.values()) == 1


def test_a_numba_cache_that_cannot_be_written_warns(cache_dir: Path) -> None:
    """A Numba data file that cannot be written (a directory in its place) only warns."""
    module = cache.kernel_module("k9", NJIT_SOURCE)
    assert module.f(1) == 2
    pycache = cache_dir / "kernels" / "__pycache__"
    for entry in pycache.iterdir():
        entry.unlink()
        if entry.suffix == ".nbc":
            entry.mkdir()
    forget(module)
    again = cache.kernel_module("k9", NJIT_SOURCE)
    with pytest.warns(CacheWarning, match=r"\.nbi cannot be written .*keeps the kernel in memory"):
        assert again.f(1) == 2


def test_odd_characters_in_the_cache_path_work(tmp_path: Path, monkeypatch) -> None:
    """Spaces, quotes, braces, percent signs, non-ASCII and newlines are just characters."""
    odd = tmp_path / "a b'c\"{d}%s $HOME ü☃\nnl"
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(odd))
    module = cache.kernel_module("k10", NJIT_SOURCE)
    assert module is not None and module.f(1) == 2 and Path(module.__file__).parent.parent == odd


def test_a_relative_cache_dir_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    """A relative MMAPLUG_CACHE_DIR is fixed at first read, so a later chdir does not move it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", "rel/cache")
    assert cache.cache_dir() == tmp_path / "rel" / "cache"


def test_a_tilde_in_the_cache_dir_is_the_home(tmp_path: Path, monkeypatch) -> None:
    """Defect: a quoted MMAPLUG_CACHE_DIR='~/cache' made a directory named '~' in the cwd."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", "~/cache")
    assert cache.cache_dir() == tmp_path / "cache"


def test_a_fifo_at_the_entry_path_is_replaced_without_blocking(cache_dir: Path) -> None:
    """The entry is only read when it is a regular file of the right size."""
    import os

    name = cache.digest("k11", "A = 3\n", cache.versions_key())
    (cache_dir / "kernels").mkdir()
    os.mkfifo(cache_dir / "kernels" / f"mm_{name}.py")
    module = cache.kernel_module("k11", "A = 3\n")
    assert module is not None and module.A == 3


def test_concurrent_writers_leave_one_complete_entry(cache_dir: Path) -> None:
    """Threads writing the same entry at once all get the module; no temporary file is left."""
    source = "A = 5\n" + "# padding\n" * 2000
    results: list[object] = []

    def build() -> None:
        name = cache.digest("k12", source, cache.versions_key())
        path = cache_dir / "kernels" / f"mm_{name}.py"
        cache.store_file(path, (cache._HEADER.format(digest=name) + source).encode())
        results.append(path.read_text().endswith(source))

    threads = [threading.Thread(target=build) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 16
    assert [p.name for p in (cache_dir / "kernels").iterdir()] == [
        f"mm_{cache.digest('k12', source, cache.versions_key())}.py"
    ]
    assert cache.kernel_module("k12", source).A == 5


def test_versions_and_environment_are_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Library versions and the environment variables that change codegen enter the digest."""
    before = cache.versions_key()
    monkeypatch.setenv("NUMBA_OPT", "0")
    assert cache.versions_key() != before
    assert "numba-cuda=" in before and "mmaplug=" in before


@pytest.mark.parametrize("word", ["0", "false", "FALSE", " no ", "Off"])
def test_disk_cache_can_be_switched_off(monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    """Defect: only MMAPLUG_DISK_CACHE=0 turned the cache off; false/no/off left it on."""
    monkeypatch.setenv("MMAPLUG_DISK_CACHE", word)
    assert not cache.disk_cache_enabled()
    monkeypatch.delenv("MMAPLUG_DISK_CACHE")
    assert cache.disk_cache_enabled()
