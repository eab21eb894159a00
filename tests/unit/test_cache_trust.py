"""The kernel cache as a trust boundary (issue 22): only a directory of the user's that only they
can write is used, only regular files under a size cap are read, and only cubins the manifest
lists as mmaplug's writer stored them are launched; the cache is bounded, and ``mmaplug cache``
shows, clears and verifies it. Pure tier: fake cubin bytes and a fake driver."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mmaplug as mp
from mmaplug.cli.main import main
from mmaplug.cuda import cache, cubin, driver
from mmaplug.errors import CacheWarning, EnvWarning

BUILT = cubin.Binary(b"\x7fELF built by mmaplug", "_Zk", 21)
PLANTED = b"\x7fELF planted"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory not created yet, no bound or switch from outside, none refused."""
    for name in ("MMAPLUG_DISK_CACHE", "MMAPLUG_CACHE_MAX_BYTES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_refused", set())
    return tmp_path / "cache"


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[bytes, str]]]:
    """A fake driver on an sm_90 device: the cubins ``cubin.kernel`` loads, recorded."""
    loaded: list[tuple[bytes, str]] = []

    def load(data: bytes, entry: str) -> int:
        loaded.append((data, entry))
        return len(loaded)

    monkeypatch.setattr(driver, "ensure_context", lambda: 0)
    attributes = {"compute_capability": (9, 0)}
    monkeypatch.setattr(driver, "device_attributes", lambda ordinal=None: attributes)
    monkeypatch.setattr(driver, "load_kernel", load)
    monkeypatch.setattr(driver, "set_max_dynamic_smem", lambda *args: None)
    monkeypatch.setattr(cubin, "_loaded", {})
    monkeypatch.setattr(cubin, "_kept", {})
    cubin.target.cache_clear()
    yield loaded
    cubin.target.cache_clear()


def _key() -> str:
    return cubin.entry_key("m", "src", "k", "sm_90a")


def _launch(builds: list[int]) -> int:
    """``cubin.kernel`` of the test kernel; *builds* counts the builds it needed."""

    def build() -> cubin.Binary:
        builds.append(1)
        return BUILT

    return cubin.kernel("m", "src", "k", 0, 21, build)


def _entry(image: bytes, entry: str = "_Zk", slots: int = 21) -> bytes:
    """A cache entry whose header is consistent with *image*, as the writer lays it out."""
    sha = hashlib.sha256(image).hexdigest()
    head = {"format": cubin._FORMAT, "entry": entry, "slots": slots, "sha256": sha}
    return json.dumps(head).encode() + b"\n" + image


def _manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / "manifest.json").read_text())["entries"]


def _within(seconds: float, call: Callable[[], object]) -> list[object]:
    """*call*'s result, run in a thread; fails (instead of hanging) when it takes longer."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return result


# ------------------------------------------------------------------------------------------------
# what is written: 0700 directories, 0600 files, listed in the manifest
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277], ids=["umask000", "umask022", "umask277"])
def test_new_directories_are_0700_and_files_0600(root: Path, umask: int) -> None:
    """Whatever the umask, directories are 0700 and files 0600 (or less: the umask's)."""
    old = os.umask(umask)
    try:
        cubin.write("k", BUILT)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}
    file = 0o600 & ~umask
    assert modes == {
        "cache": 0o700, "cubins": 0o700, "k.cubin": file,
        "manifest.json": file, "manifest.lock": file,
    }  # fmt: skip


def test_every_write_is_listed_in_the_manifest(root: Path) -> None:
    """The manifest holds each key's sha256 and size of the cubin, its entry and slots."""
    cubin.write("k", BUILT)
    assert _manifest(root) == {
        "k": {
            "sha256": hashlib.sha256(BUILT.cubin).hexdigest(),
            "size": len(BUILT.cubin),
            "entry": "_Zk",
            "slots": 21,
        }
    }
    assert cubin.read("k", 21) == BUILT and cubin.stored("k")


def test_prebuild_lists_what_it_built_in_the_manifest(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache ``mp.prebuild`` fills carries its manifest, so a copy of it is loadable."""

    class Job:
        key, module, name = "pre", "hopper_x", "hopper_gemm"

    class Compiled:
        def kernel_jobs(self) -> list[Job]:
            return [Job()]

    def run(todo: list[tuple[str, Any]], count: int) -> Iterator[tuple[str, Any, Any]]:
        for key, job in todo:
            yield key, job, BUILT

    monkeypatch.setattr(cubin, "_kept", {})
    monkeypatch.setattr(sys.modules["mmaplug.runtime.prebuild"], "_run", run)
    assert mp.prebuild([Compiled()]).built == ("hopper_x.hopper_gemm (pre)",)
    assert _manifest(root)["pre"]["sha256"] == hashlib.sha256(BUILT.cubin).hexdigest()
    cubin._kept.clear()  # a later process
    assert cubin.stored("pre") and cubin.read("pre", 21) == BUILT
    stored = root / "cubins" / "pre.cubin"
    stored.write_bytes(stored.read_bytes()[:-1])  # truncated: listed, but not what was built
    assert not cubin.stored("pre")  # so prebuild builds it again instead of counting it
    assert mp.prebuild([Compiled()]).built == ("hopper_x.hopper_gemm (pre)",)


# ------------------------------------------------------------------------------------------------
# what is read: only cubins the manifest lists, as regular files, never blocking
# ------------------------------------------------------------------------------------------------


def test_a_planted_cubin_missing_from_the_manifest_is_rebuilt_not_launched(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    """Defect: any file with a consistent header in the cache directory was launched."""
    cubin.write("other", BUILT)  # the cache and its manifest exist
    planted = root / "cubins" / f"{_key()}.cubin"
    planted.write_bytes(_entry(PLANTED))
    builds: list[int] = []
    with pytest.warns(CacheWarning, match=f"{planted} is not listed in the cache manifest"):
        _launch(builds)
    assert builds == [1] and loads == [(BUILT.cubin, "_Zk")]
    assert planted.read_bytes() == _entry(BUILT.cubin)  # replaced by the rebuilt one


def test_a_cubin_that_does_not_match_its_manifest_record_is_rebuilt(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    """Defect: a replaced cubin with a header made consistent with it was launched."""
    _launch([])
    stored = root / "cubins" / f"{_key()}.cubin"
    stored.write_bytes(_entry(PLANTED))
    cubin._loaded.clear()  # a later process
    builds: list[int] = []
    with pytest.warns(CacheWarning, match="does not match its record in the cache manifest"):
        _launch(builds)
    assert builds == [1] and loads[-1] == (BUILT.cubin, "_Zk")
    assert stored.read_bytes() == _entry(BUILT.cubin)


def test_a_damaged_manifest_means_a_rebuild_and_a_new_manifest(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    _launch([])
    (root / "manifest.json").write_text("{not json")
    cubin._loaded.clear()
    builds: list[int] = []
    with pytest.warns(CacheWarning, match=r"cache manifest .*manifest\.json is damaged"):
        _launch(builds)
    assert builds == [1] and list(_manifest(root)) == [_key()]


def test_a_deeply_nested_manifest_is_damaged_not_a_recursion_error(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    _launch([])
    (root / "manifest.json").write_text("[" * 100_000)
    cubin._loaded.clear()
    builds: list[int] = []
    with pytest.warns(CacheWarning, match=r"cache manifest .*manifest\.json is damaged"):
        _launch(builds)
    assert builds == [1]


def test_an_entry_of_infinite_slots_is_damaged_not_an_overflow(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    """A header with a matching sha256 and slots Infinity (no mmaplug writes that): rebuilt."""
    _launch([])
    stored = root / "cubins" / f"{_key()}.cubin"
    sha = hashlib.sha256(BUILT.cubin).hexdigest()
    head = f'{{"format": {cubin._FORMAT}, "entry": "_Zk", "slots": Infinity, "sha256": "{sha}"}}'
    stored.write_bytes(head.encode() + b"\n" + BUILT.cubin)
    cubin._loaded.clear()
    builds: list[int] = []
    with pytest.warns(CacheWarning, match="is damaged"):
        _launch(builds)
    assert builds == [1]


def test_a_fifo_at_a_cubin_path_is_refused_without_blocking(
    root: Path, loads: list[tuple[bytes, str]]
) -> None:
    """Defect: reading a FIFO blocked forever, holding the lock every kernel load takes."""
    cubin.write("other", BUILT)
    fifo = root / "cubins" / f"{_key()}.cubin"
    os.mkfifo(fifo, 0o600)
    builds: list[int] = []
    try:
        with pytest.warns(CacheWarning, match=f"{fifo}: it is a FIFO, not a regular file"):
            assert _within(10, lambda: _launch(builds)) == [1]
    finally:
        if fifo.is_fifo():  # a regression: release the blocked reader
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert builds == [1] and fifo.is_file()  # replaced by the rebuilt cubin


_ZERO_CHILD = """
import resource, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a regression fails, not the host
from mmaplug.cuda import cubin
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(cubin.read(sys.argv[1], 21), *[w.message for w in caught], sep="\\n")
"""


def test_a_symlink_to_dev_zero_is_refused(root: Path) -> None:
    """Defect: an entry linked to /dev/zero was read without end (in a capped child process)."""
    cubin.write("other", BUILT)
    (root / "cubins" / "zero.cubin").symlink_to("/dev/zero")
    done = subprocess.run(
        [sys.executable, "-c", _ZERO_CHILD, "zero"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result, warning = done.stdout.splitlines()
    assert result == "None" and "zero.cubin: it is a symlink, not a regular file" in warning


def test_a_symlink_to_a_cubin_elsewhere_is_refused(root: Path) -> None:
    cubin.write("k", BUILT)
    outside = root.parent / "outside.cubin"
    os.replace(root / "cubins" / "k.cubin", outside)
    (root / "cubins" / "k.cubin").symlink_to(outside)
    with pytest.warns(CacheWarning, match="k.cubin: it is a symlink, not a regular file"):
        assert cubin.read("k", 21) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda path: path.chmod(0o620), "it is writable by group"),
        (lambda path: path.chmod(0o606), "it is writable by others"),
        pytest.param(
            lambda path: os.chown(path, 12345, -1),
            "it is owned by uid 12345, not by you",
            marks=ROOT_ONLY,
        ),
    ],
    ids=["group-writable", "other-writable", "foreign-owner"],
)
def test_a_file_others_could_have_written_is_refused(
    root: Path, change: Callable[[Path], None], why: str
) -> None:
    cubin.write("k", BUILT)
    change(root / "cubins" / "k.cubin")
    with pytest.warns(CacheWarning, match=f"k.cubin: {why}"):
        assert cubin.read("k", 21) is None


def test_a_cubin_over_the_size_cap_is_refused(root: Path, monkeypatch) -> None:
    cubin.write("k", BUILT)
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", 64)
    with pytest.warns(CacheWarning, match=r"k.cubin: it holds \d+ bytes, over the 64-byte limit"):
        assert cubin.read("k", 21) is None


# ------------------------------------------------------------------------------------------------
# which directories are used
# ------------------------------------------------------------------------------------------------


def _foreign(path: Path) -> str:
    os.chown(path, 12345, -1)
    me = os.geteuid()
    return (
        rf"is owned by uid 12345, not by you \(uid {me}\); fix: chown {me} {re.escape(str(path))}"
    )


def _group_writable(path: Path) -> str:
    path.chmod(0o775)
    return rf"is writable by group \(mode 0775\); fix: chmod 700 {re.escape(str(path))}"


def _other_writable(path: Path) -> str:
    path.chmod(0o707)
    return rf"is writable by others \(mode 0707\); fix: chmod 700 {re.escape(str(path))}"


@pytest.mark.parametrize("level", ["cache", "cubins"])
@pytest.mark.parametrize(
    "damage",
    [pytest.param(_foreign, marks=ROOT_ONLY), _group_writable, _other_writable],
    ids=["foreign-owner", "group-writable", "other-writable"],
)
def test_an_untrusted_directory_is_not_used(
    root: Path, level: str, damage: Callable[[Path], str]
) -> None:
    """Defect: a directory another user owns or can write was read and written: a cubin they
    planted would be launched. One warning names it and the fix; nothing is read or written."""
    cubin.write("k", BUILT)
    folder = root if level == "cache" else root / "cubins"
    fault = damage(folder)
    before = sorted(root.rglob("*"))
    with pytest.warns(CacheWarning, match=f"cache directory {folder}: it {fault}") as caught:
        assert cubin.read("k", 21) is None
        cubin.write("k2", BUILT)
        assert not cubin.stored("k")
    assert len(caught) == 1 and "builds its kernels in memory" in str(caught[0].message)
    assert sorted(root.rglob("*")) == before


def test_a_symlinked_cache_directory_is_not_used(root: Path, monkeypatch) -> None:
    cubin.write("k", BUILT)
    link = root.parent / "link"
    link.symlink_to(root)
    monkeypatch.setenv("MMAPLUG_CACHE_DIR", str(link))
    with pytest.warns(CacheWarning, match=f"cache directory {link}: it is a symlink"):
        assert cubin.read("k", 21) is None


# ------------------------------------------------------------------------------------------------
# the bound: least recently used entries go; stale temporary files too
# ------------------------------------------------------------------------------------------------


def test_eviction_keeps_the_most_recently_used_under_the_bound(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MMAPLUG_CACHE_MAX_BYTES the least recently used entries go; a read is a use."""
    image = cubin.Binary(b"\x7fELF" + b"x" * 996, "_Z", 1)
    now = time.time()
    for age, key in enumerate(["k0", "k1", "k2", "k3", "k4"]):
        cubin.write(key, image)
        os.utime(root / "cubins" / f"{key}.cubin", (now - 100 + age, now - 100 + age))
    assert cubin.read("k0", 1) == image  # the oldest, used now
    monkeypatch.setenv("MMAPLUG_CACHE_MAX_BYTES", "3K")  # two entries of ~1.1 KB each
    cubin.write("k5", image)
    kept = sorted(p.stem for p in (root / "cubins").glob("*.cubin"))
    assert kept == ["k0", "k5"] and sorted(_manifest(root)) == kept
    assert sum(p.stat().st_size for p in (root / "cubins").iterdir()) <= 3 << 10


def test_stale_temporary_files_are_removed_fresh_ones_and_other_files_kept(root: Path) -> None:
    """A killed writer's temporary file (over an hour old) goes at the next write; a live
    writer's, the tuning database and the user's own files stay."""
    cubin.write("k", BUILT)
    stale, fresh = root / "cubins" / ".k.abc.tmp", root / ".manifest.def.tmp"
    own = [root / "tuning.sqlite", root / "notes.txt", root / "cubins" / "mine.bin"]
    for path in [stale, fresh, *own]:
        path.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    cubin.write("k2", BUILT)
    assert not stale.exists() and fresh.exists() and all(p.exists() for p in own)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("100", 100), ("3K", 3 << 10), (" 512m ", 512 << 20), ("2GiB", 2 << 30), ("1 t", 1 << 40)],
)
def test_the_bound_reads_sizes(monkeypatch: pytest.MonkeyPatch, value: str, expected: int) -> None:
    monkeypatch.setenv("MMAPLUG_CACHE_MAX_BYTES", value)
    assert cache.max_bytes() == expected


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5G", "2 GB extra", "9" * 5000])
def test_a_bad_bound_warns_and_keeps_the_default(monkeypatch, value: str) -> None:
    monkeypatch.setenv("MMAPLUG_CACHE_MAX_BYTES", value)
    with pytest.warns(EnvWarning, match="MMAPLUG_CACHE_MAX_BYTES=.* is not a size"):
        assert cache.max_bytes() == 2 << 30


# ------------------------------------------------------------------------------------------------
# mmaplug cache info | clear | verify
# ------------------------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["cache", *argv])
    return status, capsys.readouterr().out


def test_info_reports_the_directory_trust_entries_and_bound(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _cli(capsys, "info", "--json")
    assert status == 0 and json.loads(out)["exists"] is False
    cubin.write("k", BUILT)
    status, out = _cli(capsys, "info", "--json")
    size = (root / "cubins" / "k.cubin").stat().st_size
    assert json.loads(out) == {
        "directory": str(root), "exists": True, "trusted": True, "problem": None,
        "enabled": True, "entries": 1, "bytes": size, "max_bytes": 2 << 30,
    }  # fmt: skip
    root.chmod(0o775)
    status, out = _cli(capsys, "info")
    assert status == 0 and "trusted:   no: it is writable by group (mode 0775)" in out


def test_clear_removes_only_the_cache_files(root: Path, capsys) -> None:
    cubin.write("k", BUILT)
    cubin.write("k2", BUILT)
    stale = root / "cubins" / ".k.abc.tmp"
    own = [root / "tuning.sqlite", root / "cubins" / "notes.txt"]
    for path in [stale, *own]:
        path.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    status, out = _cli(capsys, "clear")
    assert status == 0 and out == f"removed 4 files from {root}\n"
    assert sorted(p.name for p in root.rglob("*")) == sorted(
        ["cubins", "manifest.lock", "notes.txt", "tuning.sqlite"]
    )


def test_clear_refuses_an_untrusted_directory(root: Path, capsys) -> None:
    cubin.write("k", BUILT)
    root.chmod(0o777)
    assert main(["cache", "clear"]) == 2
    assert "is writable by group and others (mode 0777)" in capsys.readouterr().err
    assert (root / "cubins" / "k.cubin").exists()


def test_verify_passes_an_intact_cache(root: Path, capsys) -> None:
    cubin.write("k", BUILT)
    cubin.write("k2", BUILT)
    assert _cli(capsys, "verify") == (0, "2 entries checked, 0 problems\n")


def test_verify_names_each_problem_and_exits_1(root: Path, capsys) -> None:
    """A tampered cubin, an unlisted one, a writable one and a FIFO: each named, status 1."""
    for key in ("tampered", "writable", "fine"):
        cubin.write(key, BUILT)
    cubins = root / "cubins"
    data = (cubins / "tampered.cubin").read_bytes()
    (cubins / "tampered.cubin").write_bytes(data[:-1] + b"!")
    (cubins / "planted.cubin").write_bytes(_entry(PLANTED))
    (cubins / "writable.cubin").chmod(0o666)
    os.mkfifo(cubins / "fifo.cubin", 0o600)
    ((status, out),) = _within(10, lambda: _cli(capsys, "verify"))
    assert status == 1
    assert out.splitlines() == [
        f"{cubins / 'fifo.cubin'} cannot be used: it is a FIFO, not a regular file",
        f"{cubins / 'planted.cubin'} is not listed in the cache manifest "
        "(mmaplug's writer did not store it)",
        f"{cubins / 'tampered.cubin'} is damaged",
        f"{cubins / 'writable.cubin'} cannot be used: it is writable by group and others",
        "5 entries checked, 4 problems",
    ]


def test_a_writable_lock_is_named_as_the_lock(root: Path, capsys) -> None:
    """A manifest.lock others can write: verify names the lock (the fix is there), not an
    entry."""
    cubin.write("fine", BUILT)
    (root / "manifest.lock").chmod(0o666)
    status = main(["cache", "verify"])
    err = capsys.readouterr().err
    assert status == 2
    assert f"the cache lock {root / 'manifest.lock'} cannot be used: it is writable by" in err
