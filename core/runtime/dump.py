"""Kernel dumps: the source, PTX, SASS and plan of a built kernel, as ``MMAPLUG_DUMP`` asks."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mmaplug import env
from mmaplug.cuda.cache import digest, store_file
from mmaplug.errors import (
    EnvWarning,
    KernelBuildError,
    PluginResultError,
    UnsupportedTargetError,
    UsageError,
)
from mmaplug.log import DUMP
from mmaplug.planning.plan import explain
from mmaplug.planning.records import plan_record

if TYPE_CHECKING:
    from mmaplug.planning.choices import KernelSpec

__all__ = [
    "DEFAULT_DIR",
    "KINDS",
    "SASS_TOOLS",
    "cubin",
    "directory",
    "disassemble",
    "file_stem",
    "kernel_source",
    "on_build",
    "requested",
    "sass",
    "sass_tool",
    "write",
]

KINDS: Final = ("source", "ptx", "sass", "plan")
DEFAULT_DIR: Final = "mmaplug_dump"
SASS_TOOLS: Final = ("cuobjdump", "nvdisasm")
_ACCEPTED: Final = "comma-separated source, ptx, sass, plan, or all (any case)"
_NO_TOOL: Final = (
    "SASS needs cuobjdump or nvdisasm on PATH (a CUDA toolkit's bin/) or from "
    "`pip install nvidia-cuda-cuobjdump`; neither was found"
)


def requested(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The kinds ``MMAPLUG_DUMP`` asks for, in :data:`KINDS` order (``all`` or ``on``: every one).

    An unknown word is an ``EnvWarning`` (a ``UsageError`` under ``MMAPLUG_STRICT``) and ignored.
    """
    value = env.text("MMAPLUG_DUMP", environ)
    words = {w.strip().lower() for w in value.split(",")} - {""}
    if words & {"all", *env.TRUE_WORDS}:
        return KINDS
    words -= set(env.FALSE_WORDS)
    if unknown := sorted(words - set(KINDS)):
        env.complain(
            f"MMAPLUG_DUMP={value!r}: {', '.join(map(repr, unknown))} "
            f"{'is no dump kind' if len(unknown) == 1 else 'are no dump kinds'}; it accepts "
            f"{_ACCEPTED}",
            environ,
        )
    return tuple(kind for kind in KINDS if kind in words)


def directory(environ: Mapping[str, str] | None = None) -> Path:
    """``MMAPLUG_DUMP_DIR``, else ``./mmaplug_dump`` (made absolute, not created here)."""
    return env.path("MMAPLUG_DUMP_DIR", environ) or Path(DEFAULT_DIR).absolute()


def kernel_source(spec: KernelSpec, artifact: object) -> str:
    """The generated source of *artifact* (its optional ``source()``).

    :raises KernelBuildError: the scheduler plugin's artifact has no ``source()``.
    :raises PluginResultError: ``source()`` returned something other than a str.
    """
    source = getattr(artifact, "source", None)
    plugin = spec.provenance.scheduler_plugin or "?"
    if not callable(source):
        raise KernelBuildError(
            f"the {spec.scheduler} kernel of plugin {plugin!r} has no source(); its artifact "
            "offers only ptx() (use compiled.ptx, or MMAPLUG_DUMP=ptx)"
        )
    text = source()
    if not isinstance(text, str):
        raise PluginResultError(
            f"plugin {plugin!r}: the {spec.scheduler} artifact's source() returned "
            f"{type(text).__name__}, not the source text (a str)",
            plugin=plugin,
            hook="mmaplug_build_kernel",
        )
    return text


def sass_tool() -> str | None:
    """The path of ``cuobjdump`` (else ``nvdisasm``): on PATH, else from the pip wheels
    ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm``, which install it under
    ``nvidia/cu*/bin/`` without putting it on PATH; None when neither is found."""
    for name in SASS_TOOLS:
        if found := shutil.which(name):
            return found
    for name in SASS_TOOLS:
        for path in _wheel_tools(name):
            if os.access(path, os.X_OK):
                return str(path)
    return None


def _wheel_tools(name: str) -> list[Path]:
    """*name* under every ``nvidia/cu*/bin/`` of the installed ``nvidia`` namespace package."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):  # a broken or odd ``nvidia`` on the path: no wheel tool
        return []
    places = list(spec.submodule_search_locations or []) if spec else []
    return sorted(p for place in places for p in Path(place).glob(f"cu*/bin/{name}"))


def cubin(ptx: str) -> bytes:
    """*ptx* linked into a cubin for its ``.target`` by nvJitLink (no GPU needed).

    :raises UnsupportedTargetError: nvJitLink (``cuda.bindings``, from numba-cuda) is missing.
    :raises KernelBuildError: the PTX names no target, or nvJitLink rejects it.
    """
    found = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, flags=re.M)
    if found is None:
        raise KernelBuildError("the PTX has no '.target sm_XX' line; cannot link a cubin for it")
    arch = found.group(1)
    try:
        from cuda.bindings import nvjitlink
    except ImportError as error:
        raise UnsupportedTargetError(
            "SASS needs nvJitLink (cuda.bindings, installed with numba-cuda[cu13]) to link the "
            f"PTX into a cubin: {error}"
        ) from error
    handle = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(handle)
        out = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, out)
    except nvjitlink.nvJitLinkError as error:
        raise KernelBuildError(f"nvJitLink could not link the PTX for {arch}: {error}") from error
    finally:
        nvjitlink.destroy(handle)
    return bytes(out)


def disassemble(binary: bytes, tool: str | None = None, *, encodings: bool = False) -> str:
    """SASS of a cubin, by *tool* (default :func:`sass_tool`): ``cuobjdump -sass``, ``nvdisasm``.
    *encodings*: each instruction's two 64-bit words follow it, as ``/* 0x... */`` comments
    (``cuobjdump`` prints them anyway; ``nvdisasm -hex``), for what the text leaves out: the
    scheduling control bits (stall, yield, barriers) in the second word.

    :raises UnsupportedTargetError: neither tool is found (see :func:`sass_tool`).
    :raises KernelBuildError: the tool failed.
    """
    tool = tool or sass_tool()
    if tool is None:
        raise UnsupportedTargetError(_NO_TOOL)
    with tempfile.TemporaryDirectory(prefix="mmaplug-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(binary)
        cuobjdump = Path(tool).name.startswith("cuobjdump")
        flags = ["-sass"] if cuobjdump else ["-c", "-hex"] if encodings else ["-c"]
        done = subprocess.run([tool, *flags, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise KernelBuildError(f"{tool} failed on the cubin (exit {done.returncode}): {why}")
    return done.stdout


def artifact_cubin(artifact: object) -> bytes:
    """The cubin of *artifact*'s main kernel as launches load it (its ``cubin()``), or, for an
    artifact without one, its ``ptx()`` linked alone by :func:`cubin`."""
    own = getattr(artifact, "cubin", None)
    return own() if callable(own) else cubin(artifact.ptx())  # type: ignore[attr-defined]


def sass(artifact: object, *, encodings: bool = False) -> str:
    """SASS of *artifact*'s main kernel (:func:`artifact_cubin`; *encodings* as
    :func:`disassemble`'s); the tool is looked for before anything is compiled.

    :raises UnsupportedTargetError: neither ``cuobjdump`` nor ``nvdisasm`` is found.
    """
    if (tool := sass_tool()) is None:
        raise UnsupportedTargetError(_NO_TOOL)
    return disassemble(artifact_cubin(artifact), tool, encodings=encodings)


def file_stem(spec: KernelSpec, kernel_name: str, source: str) -> str:
    """``<scheduler>_<kernel>_<8 hex>``: the digest covers the plan's name, kernel and source."""
    name = kernel_name
    if not name.startswith(spec.scheduler):
        name = f"{spec.scheduler}_{name}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:96]
    return f"{name}_{digest(spec.name, kernel_name, source)[:8]}"


def write(spec: KernelSpec, artifact: object, kinds: Collection[str], where: Path) -> list[Path]:
    """Write *kinds* of the kernel *artifact* built for *spec* into *where*; the files written.

    ``source``: ``<stem>.py``; ``ptx``: ``<stem>.ptx``; ``sass``: ``<stem>.cubin`` and
    ``<stem>.sass``, or ``<stem>.sass-unavailable.txt`` saying why; ``plan``: ``<stem>.plan.txt``
    (the ``explain`` text) and ``<stem>.plan.json`` (``explain --json``'s record).
    """
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if unknown := sorted(set(kinds) - set(KINDS)):
        raise UsageError(f"unknown dump kinds {unknown}; choose from {', '.join(KINDS)}")
    name: str = getattr(artifact, "kernel_name", "kernel")
    try:
        source = kernel_source(spec, artifact)
    except KernelBuildError:
        if "source" in kinds:
            raise
        source = ""
    stem = file_stem(spec, name, source)
    texts: dict[str, str | bytes] = {}
    if "source" in kinds:
        texts[".py"] = source
    if "ptx" in kinds:
        texts[".ptx"] = artifact.ptx()  # type: ignore[attr-defined]
    if "sass" in kinds:
        if (tool := sass_tool()) is None:
            texts[".sass-unavailable.txt"] = f"no SASS for {name}: {_NO_TOOL}\n"
        else:
            binary = texts[".cubin"] = artifact_cubin(artifact)
            texts[".sass"] = disassemble(binary, tool)
    if "plan" in kinds:
        owner = spec.provenance.scheduler_plugin or "?"
        texts[".plan.txt"] = f"built kernel: {name} (plugin {owner})\n{explain(spec)}\n"
        record = {"kernel_name": name, **plan_record(spec)}
        texts[".plan.json"] = json.dumps(record, indent=2) + "\n"
    files = []
    try:
        where.mkdir(parents=True, exist_ok=True)
        for suffix, data in texts.items():
            path = where / f"{stem}{suffix}"
            # a new file renamed over the name: a symlink planted there is replaced,
            # never written through (docs/threat-model.md)
            store_file(path, data if isinstance(data, bytes) else data.encode())
            files.append(path)
    except OSError as error:
        raise UsageError(
            f"cannot write the kernel dump to {where}: {type(error).__name__}: {error}; set "
            "MMAPLUG_DUMP_DIR to a writable directory"
        ) from error
    DUMP.info("%s: wrote %s{%s} in %s", name, stem, ",".join(texts), where)
    return files


def on_build(spec: KernelSpec, artifact: object) -> list[Path]:
    """Dump what ``MMAPLUG_DUMP`` asks for (nothing when unset); a failure only warns."""
    if not (kinds := requested()):
        return []
    where = directory()
    try:
        files = write(spec, artifact, kinds, where)
    except Exception as error:  # a debugging aid never stops the run (NVVM, tools, disk)
        warnings.warn(
            EnvWarning(
                f"MMAPLUG_DUMP={','.join(kinds)}: no dump of kernel "
                f"{getattr(artifact, 'kernel_name', '?')} in {where}: "
                f"{type(error).__name__}: {error}"
            ),
            stacklevel=4,
        )
        return []
    return files
