"""Hostile environments: odd variable values, typos and broken cache locations never abort a run.

Each catalogue case sets up one environment, runs the code that reads it, and asserts the warning
(or, in strict mode, the error) and that its message names the variable or the path at fault.
"""

from __future__ import annotations

import errno
import os
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mmaplug import env
from mmaplug.cuda import cache, cubin
from mmaplug.errors import CacheWarning, EnvWarning, UsageError
from mmaplug.hooks.manager import options_from_environ

Case = Callable[[Path, pytest.MonkeyPatch], tuple[Callable[[], object], str]]


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ambient MMAPLUG_*/XDG variables, a private HOME, no directory refused before."""
    for name in list(os.environ):
        if name.upper().startswith("MMAPLUG_") or name == "XDG_CACHE_HOME":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cache, "_refused", set())
    yield


def _switch(name: str, value: str) -> Case:
    """*name*=*value* read by its real consumer; the warning names both and the accepted words."""

    def case(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Callable[[], object], str]:
        mp.setenv(name, value)
        if name == "MMAPLUG_DISK_CACHE":
            action: Callable[[], object] = cache.disk_cache_enabled
        elif name == "MMAPLUG_FAST_LAUNCH":
            action = lambda: env.flag(name, default=True)  # noqa: E731 - read in CompiledFusion
        else:
            action = lambda: options_from_environ(os.environ)  # noqa: E731
        return action, f"{name}={re.escape(repr(value))} is not a switch; {name} accepts 0/false"

    return case


def _env(values: dict[str, str], action: Callable[[], object], match: str) -> Case:
    def case(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Callable[[], object], str]:
        for name, value in values.items():
            mp.setenv(name, value)
        return action, match

    return case


def _module(tmp: Path) -> Callable[[], object]:
    def build() -> object:
        cubin.write("hostile", cubin.Binary(b"\x7fELF", "_Z", 1))
        assert cubin.read("hostile", 1) is None  # the caller builds it in memory
        return None

    return build


def _entry(tmp: Path) -> Path:
    return tmp / "c" / "cubins" / "hostile.cubin"


def _location(make: Callable[[Path], Path], fault: str = "") -> Case:
    """MMAPLUG_CACHE_DIR at what *make* builds; the CacheWarning names that path (and *fault*)."""

    def case(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Callable[[], object], str]:
        where = make(tmp)
        mp.setenv("MMAPLUG_CACHE_DIR", str(where))
        return _module(tmp), f"{re.escape(str(where))}.*{fault}"

    return case


def _file(tmp: Path) -> Path:
    (tmp / "file").write_text("x")
    return tmp / "file"


def _entries_file(tmp: Path) -> Path:
    (tmp / "c").mkdir()
    (tmp / "c" / "cubins").write_text("x")
    return tmp / "c"


def _entry_dir(tmp: Path) -> Path:
    _entry(tmp).mkdir(parents=True)
    return tmp / "c"


def _loop(tmp: Path) -> Path:
    (tmp / "loop").symlink_to(tmp / "loop")
    return tmp / "loop"


def _dangling(tmp: Path) -> Path:
    (tmp / "link").symlink_to(tmp / "missing" / "target")
    return tmp / "link"


def _read_only(tmp: Path) -> Path:
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o500)
    return tmp / "ro"


def _home_relative(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Callable[[], object], str]:
    mp.setenv("HOME", "relative/home")
    return _module(tmp), r"no absolute home directory \(HOME unset or relative\).*MMAPLUG_CACHE_DIR"


def _disk_full(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Callable[[], object], str]:
    mp.setenv("MMAPLUG_CACHE_DIR", str(tmp / "c"))

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))

    mp.setattr(cache.os, "replace", full)
    where = re.escape(str(_entry(tmp)))
    return _module(tmp), f"cannot store the compiled kernel at {where}.*No space left"


def _strict(*pairs: tuple[str, str]) -> dict[str, str]:
    return {"MMAPLUG_STRICT": "1", **dict(pairs)}


CATALOGUE = [
    # switches with words that are not switch words: EnvWarning, the default is used
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "maybe"), EnvWarning, id="disk-cache-maybe"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "2"), EnvWarning, id="disk-cache-2"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "enable"), EnvWarning, id="disk-cache-enable"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "y"), EnvWarning, id="disk-cache-y"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "０"), EnvWarning, id="disk-cache-fullwidth-0"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "off;"), EnvWarning, id="disk-cache-off-semicolon"),
    pytest.param(_switch("MMAPLUG_DISK_CACHE", "o n"), EnvWarning, id="disk-cache-inner-space"),
    pytest.param(_switch("MMAPLUG_FAST_LAUNCH", "nope"), EnvWarning, id="fast-launch-nope"),
    # the plugin manager's switches decide which code runs: refused as MMAPLUG_STRICT is
    pytest.param(
        _switch("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "maybe"), UsageError, id="autoload-maybe"
    ),
    pytest.param(_switch("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "1.0"), UsageError, id="autoload-1.0"),
    # strict mode: MMAPLUG_STRICT itself must be a switch; under it, bad values are errors
    pytest.param(
        _env(
            {"MMAPLUG_STRICT": "maybe"},
            lambda: options_from_environ(os.environ),
            "MMAPLUG_STRICT='maybe' is not a switch; MMAPLUG_STRICT accepts",
        ),
        UsageError,
        id="strict-maybe",
    ),
    pytest.param(
        _env(
            {"MMAPLUG_STRICT": "2", "MMAPLUG_DISK_CACHE": "maybe"},
            cache.disk_cache_enabled,
            "MMAPLUG_STRICT='2' is not a switch",
        ),
        UsageError,
        id="strict-2-read-by-cache",
    ),
    pytest.param(
        _env(
            _strict(("MMAPLUG_DISK_CACHE", "maybe")),
            cache.disk_cache_enabled,
            r"MMAPLUG_DISK_CACHE='maybe' is not a switch.*\(MMAPLUG_STRICT is on\)",
        ),
        UsageError,
        id="strict-disk-cache-maybe",
    ),
    pytest.param(
        _env(
            _strict(("MMAPLUG_DISABLE_PLUGIN_AUTOLOAD", "nah")),
            lambda: options_from_environ(os.environ),
            r"MMAPLUG_DISABLE_PLUGIN_AUTOLOAD='nah' is not a switch; .* accepts 0/false",
        ),
        UsageError,
        id="strict-autoload-nah",
    ),
    # MMAPLUG_* names that mmaplug does not read: a typo is named with the closest variable
    pytest.param(
        _env(
            {"MMAPLUG_DISK_CAHCE": "0"},
            cache.disk_cache_enabled,
            "MMAPLUG_DISK_CAHCE is not an mmaplug variable; did you mean MMAPLUG_DISK_CACHE",
        ),
        EnvWarning,
        id="typo-disk-cache",
    ),
    pytest.param(
        _env(
            {"MMAPLUG_CACHEDIR": "/x"},
            cache.disk_cache_enabled,
            "MMAPLUG_CACHEDIR is not an mmaplug variable; did you mean MMAPLUG_CACHE_DIR",
        ),
        EnvWarning,
        id="typo-cachedir",
    ),
    pytest.param(
        _env(
            {"mmaplug_strict": "1"},
            lambda: options_from_environ(os.environ),
            "mmaplug_strict is not an mmaplug variable; did you mean MMAPLUG_STRICT",
        ),
        EnvWarning,
        id="lowercase-strict",
    ),
    pytest.param(
        _env(
            {"MMAPLUG_XYZZY_QUUX": "1"},
            cache.disk_cache_enabled,
            "MMAPLUG_XYZZY_QUUX is not an mmaplug variable; see the README's environment table",
        ),
        EnvWarning,
        id="unknown-name",
    ),
    pytest.param(
        _env(
            _strict(("MMAPLUG_DISABLED", "hopper")),
            lambda: options_from_environ(os.environ),
            "MMAPLUG_DISABLED is not an mmaplug variable; did you mean MMAPLUG_DISABLE",
        ),
        UsageError,
        id="strict-typo-disabled",
    ),
    # paths in variables that cannot be used: the default location is used instead
    pytest.param(
        _env(
            {"MMAPLUG_CACHE_DIR": "~no_such_user_mmaplug/cache"},
            cache.cache_dir,
            "MMAPLUG_CACHE_DIR='~no_such_user_mmaplug/cache' names the home of an unknown user",
        ),
        EnvWarning,
        id="cache-dir-unknown-user",
    ),
    pytest.param(
        _env(
            {"XDG_CACHE_HOME": "relative/cache"},
            cache.cache_dir,
            "XDG_CACHE_HOME='relative/cache' is not an absolute path; ignored",
        ),
        EnvWarning,
        id="xdg-relative",
    ),
    # cache locations that cannot hold the kernel module: CacheWarning, built in memory
    pytest.param(_location(_file, "is not a directory"), CacheWarning, id="cache-dir-is-a-file"),
    pytest.param(_location(_entries_file, "is not a dir"), CacheWarning, id="cubins-is-a-file"),
    pytest.param(_location(_entry_dir, "Is a directory"), CacheWarning, id="entry-is-a-directory"),
    pytest.param(
        _location(lambda tmp: Path("/dev/null/cache"), "Not a directory"),
        CacheWarning,
        id="under-dev-null",
    ),
    pytest.param(
        _location(lambda tmp: Path("/proc/mmaplug-cache"), "No such file"),
        CacheWarning,
        id="under-proc",
    ),
    pytest.param(
        _location(lambda tmp: tmp / ("x" * 300), "File name too long"),
        CacheWarning,
        id="name-too-long",
    ),
    pytest.param(_location(_loop, "is a symlink"), CacheWarning, id="symlink-loop"),
    pytest.param(_location(_dangling, "is a symlink"), CacheWarning, id="dangling-symlink"),
    pytest.param(
        _location(_read_only, "Permission denied"),
        CacheWarning,
        id="read-only-dir",
        marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only dirs"),
    ),
    pytest.param(_home_relative, CacheWarning, id="home-relative"),
    pytest.param(_disk_full, CacheWarning, id="disk-full"),
]


@pytest.mark.parametrize(("case", "kind"), CATALOGUE)
def test_hostile_environment(
    case: Case, kind: type[Exception] | type[Warning], tmp_path: Path, monkeypatch
) -> None:
    """The fault is a warning (an error in strict mode) whose message names the culprit."""
    action, match = case(tmp_path, monkeypatch)
    if issubclass(kind, Warning):
        with pytest.warns(kind, match=match):
            action()
    else:
        with pytest.raises(kind, match=match):
            action()


SWITCHES = [v.name for v in env.VARIABLES if v.accepted.startswith(env.SWITCH)]
SPELLINGS = [
    *((word, True) for word in ("1", "true", "TRUE", " yes ", "On", "\tyes\n")),
    *((word, False) for word in ("0", "false", "False", " no", "OFF ", "\toff")),
]


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize(("word", "expected"), SPELLINGS, ids=repr)
def test_every_switch_parses_the_same_words(name: str, word: str, expected: bool) -> None:
    """0/1/false/true/no/yes/off/on, any case, surrounding spaces ignored, for every switch."""
    assert env.flag(name, default=not expected, environ={name: word}) is expected


@pytest.mark.parametrize("name", SWITCHES)
def test_unset_or_blank_switch_gives_the_default(name: str) -> None:
    """An unset or blank switch is its default, without a warning."""
    assert env.flag(name, default=True, environ={}) is True
    assert env.flag(name, default=False, environ={name: "  "}) is False


def test_every_variable_is_in_the_readme_table() -> None:
    """README.md has one environment table, row for row the same as ``env.VARIABLES``."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| `\w+` \|.*$", readme, flags=re.M)
    assert rows == [
        f"| `{v.name}` | {v.meaning} | {v.accepted} | {v.default} |" for v in env.VARIABLES
    ]


def test_every_mmaplug_variable_in_the_code_is_declared() -> None:
    """No module reads an MMAPLUG_* variable that the table does not declare."""
    root = Path(__file__).parents[2]
    used = {
        name
        for folder in ("core", "plugins", "heuristics")
        for path in (root / folder).rglob("*.py")
        for name in re.findall(r"\bMMAPLUG_[A-Z_]+\b", path.read_text())
    }
    assert used <= {v.name for v in env.VARIABLES}


def test_an_unknown_name_is_warned_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many reads meet it, the default filter shows the environment's warning once."""
    monkeypatch.setenv("MMAPLUG_ONCE_ONLY_TYPO", "1")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):
            env.text("MMAPLUG_DUMP")
    assert [str(w.message) for w in seen] == [
        "MMAPLUG_ONCE_ONLY_TYPO is not an mmaplug variable; see the README's environment table"
    ]
