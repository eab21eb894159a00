"""The on-disk kernel cache: its location, digests, atomic writes, the on/off switch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mmaplug.cuda import cache, cubin


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_odd_characters_in_the_cache_path_work(tmp_path: Path, monkeypatch) -> None:
    """Spaces, quotes, braces, percent signs, non-ASCII and newlines are just characters."""
    odd = tmp_path / "a b'c\"{d}%s $HOME ü☃\nnl"
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(odd))
    cubin.write("k10", cubin.Binary(b"\x7fELF odd", "_Z", 2))
    assert cubin.read("k10", 2) == cubin.Binary(b"\x7fELF odd", "_Z", 2)
    assert [p.parent.parent for p in odd.glob("cubins/*.cubin")] == [odd]


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


def test_concurrent_writers_leave_one_complete_entry(cache_dir: Path) -> None:
    """Threads storing the same entry at once leave it whole, listed, and no temporary file."""
    binary = cubin.Binary(b"\x7fELF" + b"padding" * 20_000, "_Z", 4)
    threads = [threading.Thread(target=cubin.write, args=("k12", binary)) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(p.name for p in (cache_dir / "cubins").iterdir()) == ["k12.cubin"]
    assert sorted(p.name for p in cache_dir.iterdir()) == ["cubins", cache.MANIFEST, cache.LOCK]
    assert cubin.read("k12", 4) == binary


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
