"""The on-disk kernel module cache: digests, atomic writes, corrupt entries rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmaplug import cache


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_module_is_written_under_the_cache_dir_and_imported(cache_dir: Path) -> None:
    """The source becomes an importable module file named by its digest."""
    module = cache.kernel_module("k1", "VALUE = 41 + 1\n")
    assert module.VALUE == 42
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
    assert (a.A, b.A) == (1, 2) and a.__file__ != b.__file__


def test_corrupt_entry_is_rewritten_not_trusted(cache_dir: Path) -> None:
    """A truncated or edited cache file no longer matches its digest and is rewritten."""
    module = cache.kernel_module("k4", "A = 7\n")
    path = Path(module.__file__)
    path.write_text("A = 666  # corrupted\n")
    import sys

    del sys.modules[module.__name__]
    again = cache.kernel_module("k4", "A = 7\n")
    assert again.A == 7 and "corrupted" not in path.read_text()


def test_versions_and_environment_are_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Library versions and the environment variables that change codegen enter the digest."""
    before = cache.versions_key()
    monkeypatch.setenv("NUMBA_OPT", "0")
    assert cache.versions_key() != before
    assert "numba-cuda=" in before and "mmaplug=" in before


def test_disk_cache_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """MMAPLUG_DISK_CACHE=0 turns the disk cache off."""
    monkeypatch.setenv("MMAPLUG_DISK_CACHE", "0")
    assert not cache.disk_cache_enabled()
    monkeypatch.delenv("MMAPLUG_DISK_CACHE")
    assert cache.disk_cache_enabled()
