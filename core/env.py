"""Every environment variable mmaplug reads: the table, and the one place that reads them."""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NamedTuple

from mmaplug.errors import EnvWarning, UsageError

TRUE_WORDS: Final = ("1", "true", "yes", "on")
FALSE_WORDS: Final = ("0", "false", "no", "off")
SWITCH: Final = "switch: " + "/".join(f"`{w}`" for w in FALSE_WORDS + TRUE_WORDS)
STRICT: Final = "MMAPLUG_STRICT"
#: Switches that decide which code runs (the policy, which plugins load): a value that is no
#: switch word is always a ``UsageError``, since mmaplug cannot tell what was asked for.
EXACT_SWITCHES: Final = (STRICT, "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD")


class Variable(NamedTuple):
    """One environment variable: its name, meaning, accepted values and default."""

    name: str
    meaning: str
    accepted: str
    default: str


VARIABLES: Final = (
    Variable(
        "MMAPLUG_CACHE_DIR",
        "Directory of the on-disk kernel cache (compiled cubins and their manifest); used only "
        "while you own it and only you can write it (docs/threat-model.md)",
        "a directory path; created 0700 if missing, `~` expanded, relative to the working "
        "directory",
        "`$XDG_CACHE_HOME/mmaplug`, else `~/.cache/mmaplug`",
    ),
    Variable(
        "MMAPLUG_CACHE_MAX_BYTES",
        "Bound on the cached kernels' total size; past it the least recently used are removed",
        "a positive number of bytes, with an optional `K`, `M`, `G` or `T` suffix (powers of "
        "1024, any case)",
        "`2G`",
    ),
    Variable(
        "MMAPLUG_DISK_CACHE",
        "Keep generated kernels on disk, so a fresh process skips compiling them",
        SWITCH,
        "`on`",
    ),
    Variable(
        "MMAPLUG_DISABLE",
        "Plugins not to register (built-ins or installed)",
        "comma-separated plugin names",
        "none",
    ),
    Variable(
        "MMAPLUG_DISABLE_PLUGIN_AUTOLOAD",
        "Do not load plugins from installed packages' entry points",
        SWITCH + "; any other value is an error",
        "`off`",
    ),
    Variable(
        "MMAPLUG_HEURISTIC",
        "The one heuristic plugin asked for parameters (then the default; a plugin's own "
        "scheduler is still planned by that plugin)",
        "a plugin name",
        "every heuristic, in hook order",
    ),
    Variable(
        STRICT,
        "Misbehaving plugins and unrecognised environment values raise instead of warning",
        SWITCH + "; any other value is an error",
        "`off`",
    ),
    Variable(
        "MMAPLUG_FAST_LAUNCH",
        "`off` checks every `execute()` and each kernel argument against its signature, then "
        "launches the same cached kernel (a debugging aid)",
        SWITCH,
        "`on`",
    ),
    Variable(
        "MMAPLUG_DUMP",
        "What `mp.compile` writes out for every kernel it builds (see docs/debugging.md)",
        "comma-separated `source`, `ptx`, `sass`, `plan`, or `all` (any case)",
        "nothing",
    ),
    Variable(
        "MMAPLUG_DUMP_DIR",
        "Directory the `MMAPLUG_DUMP` files are written to",
        "a directory path; created if missing, `~` expanded, relative to the working directory",
        "`./mmaplug_dump`",
    ),
    Variable(
        "MMAPLUG_TUNING_DB",
        "The tuning database `mmaplug tune` writes and the tuned-table plugin reads",
        "a file path; `~` expanded, relative to the working directory",
        "`tuning.sqlite` in the kernel cache directory",
    ),
    Variable(
        "XDG_CACHE_HOME",
        "Base of the default cache directory",
        "an absolute path (a relative one is ignored, as the XDG spec asks)",
        "`~/.cache`",
    ),
)
_KNOWN: Final = {v.name: v for v in VARIABLES}


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def text(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of *name* with surrounding spaces removed; ``""`` when unset."""
    if name not in _KNOWN:
        raise KeyError(f"{name} is not in mmaplug.env.VARIABLES")
    environ = _environ(environ)
    _check_names(environ)
    return environ.get(name, "").strip()


def strict(environ: Mapping[str, str] | None = None) -> bool:
    """``MMAPLUG_STRICT``: any value but a switch word is a ``UsageError``."""
    return _exact(STRICT, False, _environ(environ))


def switch(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """The switch *name* read as ``MMAPLUG_STRICT`` is: unset or blank gives *default*, and any
    other value than a switch word is a ``UsageError`` (in every mode)."""
    text(name, environ)  # the name is known; complain about unknown MMAPLUG_* names
    return _exact(name, default, _environ(environ))


def _exact(name: str, default: bool, environ: Mapping[str, str]) -> bool:
    value = environ.get(name, "")
    if (word := value.strip().lower()) and word not in TRUE_WORDS + FALSE_WORDS:
        raise UsageError(f"{name}={value!r} is not a switch; {_accepted(name)}")
    return word in TRUE_WORDS if word else default


def flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """The switch *name*: unset or blank gives *default*; other words warn (raise when strict),
    except for ``EXACT_SWITCHES``, where they always raise (:func:`switch`)."""
    if name in EXACT_SWITCHES:
        return switch(name, default, environ)
    word = text(name, environ).lower()
    if not word:
        return default
    if word in TRUE_WORDS + FALSE_WORDS:
        return word in TRUE_WORDS
    value = _environ(environ)[name]
    complain(
        f"{name}={value!r} is not a switch; {_accepted(name)}; "
        f"using the default ({'on' if default else 'off'})",
        environ,
    )
    return default


def path(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The path *name* holds (``~`` expanded, made absolute); None when unset, blank or unusable."""
    if not (value := text(name, environ)):
        return None
    if (expanded := os.path.expanduser(value)).startswith("~"):
        complain(f"{name}={value!r} names the home of an unknown user; using the default", environ)
        return None
    return Path(expanded).absolute()


def complain(message: str, environ: Mapping[str, str] | None = None) -> None:
    """An ``EnvWarning`` with *message*; a ``UsageError`` under ``MMAPLUG_STRICT``.

    The warning is the environment's, not a line of code's: it is issued at ``<environment>``,
    so the default filter shows each message once a process, however many reads meet it.
    """
    if strict(environ):
        raise UsageError(f"{message} ({STRICT} is on)")
    warnings.warn_explicit(
        EnvWarning(message), EnvWarning, "<environment>", 0, module=__name__, registry=_SHOWN
    )


#: The warnings registry of ``complain`` (what ``__warningregistry__`` is for a module).
_SHOWN: Final[dict[str | tuple[str, type[Warning], int], int]] = {}


def _accepted(name: str) -> str:
    words = "/".join(FALSE_WORDS + TRUE_WORDS)
    return f"{name} accepts {words} (any case, spaces ignored)"


def _check_names(environ: Mapping[str, str]) -> None:
    """Complain about ``MMAPLUG_*`` names mmaplug does not read (a typo is silent otherwise)."""
    for name in environ:
        if name.upper().startswith("MMAPLUG_") and name not in _KNOWN:
            # compare what follows the prefix: every name shares "MMAPLUG_", which made any
            # unknown name "close" to a short one such as MMAPLUG_DUMP
            tails = {n.removeprefix("MMAPLUG_"): n for n in _KNOWN if n.startswith("MMAPLUG_")}
            close = difflib.get_close_matches(name.upper().removeprefix("MMAPLUG_"), tails, n=1)
            hint = "see the README's environment table"
            if close:
                hint = f"did you mean {tails[close[0]]}?"
            complain(f"{name} is not an mmaplug variable; {hint}", environ)
