"""``MMAPLUG_DUMP``: which kinds, where, file names, and faults that never stop a compile."""

from __future__ import annotations

import importlib
import json
import os
import stat
import sys
from pathlib import Path

import attrs
import pytest

import mmaplug as mp
from mmaplug.cli.demo import example_fusion
from mmaplug.errors import EnvWarning, KernelBuildError, UnsupportedTargetError, UsageError
from mmaplug.planning.records import plan_record
from mmaplug.runtime import dump

FAKE_PTX = "//\n.version 8.0\n.target sm_80\n.address_size 64\n"


@pytest.fixture
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False)


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without cuobjdump or nvdisasm, and no pip-installed one."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(dump, "_wheel_tools", lambda name: [])


def relu_linear(m: int, n: int, k: int) -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([m, k], dtype=mp.float16)
        w = fd.define_tensor([n, k], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.linear(x, w)), mp.float16))
    return fd.fusion


@attrs.frozen
class FakeArtifact:
    """A third-party scheduler's artifact: a kernel name and PTX, no ``source()``."""

    kernel_name: str = "my kernel/v1"

    def ptx(self) -> str:
        return FAKE_PTX


@pytest.mark.parametrize(
    ("value", "kinds"),
    [
        ("", ()),
        ("source", ("source",)),
        (" PTX , Source ", ("source", "ptx")),
        ("plan,sass", ("sass", "plan")),
        ("all", dump.KINDS),
        ("ALL", dump.KINDS),
        ("1", dump.KINDS),
        ("on", dump.KINDS),
        ("off", ()),
    ],
)
def test_requested_kinds(value: str, kinds: tuple[str, ...]) -> None:
    """Comma-separated kinds in any case and order; ``all`` (or a true switch word) is every one."""
    assert dump.requested({"MMAPLUG_DUMP": value}) == kinds


def test_unknown_kind_warns_and_is_ignored() -> None:
    """A misspelt kind is an EnvWarning naming it and the accepted words; the others still count."""
    with pytest.warns(EnvWarning, match=r"'sorce' is no dump kind; it accepts comma-separated"):
        assert dump.requested({"MMAPLUG_DUMP": "sorce,ptx"}) == ("ptx",)


def test_unknown_kind_raises_when_strict() -> None:
    """Under MMAPLUG_STRICT an unknown kind is a UsageError."""
    with pytest.raises(UsageError, match=r"'asm', 'cuda' are no dump kinds.*MMAPLUG_STRICT"):
        dump.requested({"MMAPLUG_DUMP": "asm,cuda", "MMAPLUG_STRICT": "1"})


def test_directory_default_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """./mmaplug_dump by default; MMAPLUG_DUMP_DIR otherwise (~ expanded, made absolute)."""
    monkeypatch.chdir(tmp_path)
    assert dump.directory({}) == tmp_path / "mmaplug_dump"
    assert dump.directory({"MMAPLUG_DUMP_DIR": "rel/dir"}) == tmp_path / "rel" / "dir"
    home = os.path.expanduser("~")
    assert dump.directory({"MMAPLUG_DUMP_DIR": "~/d"}) == Path(home, "d")


@pytest.mark.parametrize(("device", "scheduler"), [("h200", "hopper"), ("a100", "ampere")])
def test_compile_dumps_source_and_plan(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pm: mp.PluginManager,
    device: str,
    scheduler: str,
) -> None:
    """MMAPLUG_DUMP=source,plan: the generated source, the explain text and its JSON record."""
    monkeypatch.setenv("MMAPLUG_DUMP", "source,plan")
    monkeypatch.setenv("MMAPLUG_DUMP_DIR", str(tmp_path / "d"))
    compiled = mp.compile(example_fusion(64, 64, 64), device, pm=pm)
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    stem = dump.file_stem(compiled.spec, compiled.kernel_name, compiled.source)
    assert stem.startswith(f"{compiled.kernel_name}_") and stem.startswith(f"{scheduler}_")
    assert files == [f"{stem}.plan.json", f"{stem}.plan.txt", f"{stem}.py"]
    assert (tmp_path / "d" / f"{stem}.py").read_text() == compiled.source
    assert f"def {scheduler}_gemm(" in compiled.source
    plan_text = (tmp_path / "d" / f"{stem}.plan.txt").read_text()
    assert plan_text == f"built kernel: {compiled.kernel_name} (plugin {scheduler})\n" + (
        compiled.explain() + "\n"
    )
    record = json.loads((tmp_path / "d" / f"{stem}.plan.json").read_text())
    assert record == {"kernel_name": compiled.kernel_name, **json.loads(
        json.dumps(plan_record(compiled.spec))
    )}  # fmt: skip
    assert record["scheduler"] == scheduler and record["params"]["stages"] >= 2


def test_a_planted_symlink_is_replaced_not_written_through(
    tmp_path: Path, pm: mp.PluginManager
) -> None:
    """Dump names are predictable: a symlink planted under one (in a shared directory) is
    replaced by the dump, and the file it points at stays as it was; no temporary is left."""
    fusion = example_fusion(64, 64, 64)
    compiled = mp.compile(fusion, "h200", pm=pm)
    stem = dump.file_stem(compiled.spec, compiled.kernel_name, compiled.source)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    where = tmp_path / "d"
    where.mkdir()
    (where / f"{stem}.py").symlink_to(victim)
    (path,) = dump.write(compiled.spec, compiled._artifact, ("source",), where)
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.read_text() == compiled.source
    assert [p.name for p in where.iterdir()] == [path.name]


def test_kernels_sharing_a_name_get_their_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pm: mp.PluginManager
) -> None:
    """Two epilogues, one kernel name: the digest of plan and source keeps both dumps."""
    monkeypatch.setenv("MMAPLUG_DUMP", "source")
    monkeypatch.setenv("MMAPLUG_DUMP_DIR", str(tmp_path))
    gelu = mp.compile(example_fusion(64, 64, 64), "h200", pm=pm)
    relu = mp.compile(relu_linear(64, 64, 64), "h200", pm=pm)
    assert gelu.kernel_name == relu.kernel_name
    texts = sorted(p.read_text() for p in tmp_path.glob("*.py"))
    assert texts == sorted([gelu.source, relu.source]) and gelu.source != relu.source


def test_nothing_is_written_without_mmaplug_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pm: mp.PluginManager
) -> None:
    """Unset, a compile writes no dump directory."""
    monkeypatch.delenv("MMAPLUG_DUMP", raising=False)
    monkeypatch.chdir(tmp_path)
    mp.compile(example_fusion(64, 64, 64), "h200", pm=pm)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_dump_dir_warns_and_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pm: mp.PluginManager
) -> None:
    """The environment's dump only warns (strict or not); an explicit dump() raises."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MMAPLUG_DUMP", "source")
    monkeypatch.setenv("MMAPLUG_DUMP_DIR", str(blocker / "sub"))
    monkeypatch.setenv("MMAPLUG_STRICT", "1")
    with pytest.warns(EnvWarning, match=r"MMAPLUG_DUMP=source: no dump of kernel hopper_.*a-file"):
        compiled = mp.compile(example_fusion(64, 64, 64), "h200", pm=pm)
    with pytest.raises(UsageError, match=r"cannot write the kernel dump to .*a-file.*writable"):
        compiled.dump(blocker / "sub", ["plan"])


def test_sass_without_tools_is_a_note_in_the_dump_dir(
    tmp_path: Path, no_tools: None, pm: mp.PluginManager
) -> None:
    """No cuobjdump/nvdisasm: the dump says so in a file instead of the SASS; nothing raises."""
    spec = mp.plan_problem(
        mp.matmul_problem(example_fusion(64, 64, 64), pm=pm), mp.get_device("a100"), pm=pm
    )
    files = dump.write(spec, FakeArtifact(), ["sass", "ptx"], tmp_path)
    stem = dump.file_stem(spec, "my kernel/v1", "")
    assert stem.startswith("ampere_my_kernel_v1_")
    assert [f.name for f in files] == [f"{stem}.ptx", f"{stem}.sass-unavailable.txt"]
    assert "cuobjdump or nvdisasm on PATH" in files[1].read_text()
    assert files[0].read_text() == FAKE_PTX


def test_an_artifact_without_source(tmp_path: Path, pm: mp.PluginManager) -> None:
    """A plugin's artifact need not offer source(); asking for it names the plugin."""
    spec = mp.plan_problem(
        mp.matmul_problem(example_fusion(64, 64, 64), pm=pm), mp.get_device("a100"), pm=pm
    )
    with pytest.raises(KernelBuildError, match=r"ampere kernel of plugin 'ampere' has no source"):
        dump.write(spec, FakeArtifact(), ["source"], tmp_path)
    assert [f.name[-8:] for f in dump.write(spec, FakeArtifact(), "plan", tmp_path)] == [
        "plan.txt",
        "lan.json",
    ]


def test_unknown_kind_for_write(tmp_path: Path, pm: mp.PluginManager) -> None:
    """dump.write takes only the documented kinds."""
    spec = mp.plan_problem(
        mp.matmul_problem(example_fusion(64, 64, 64), pm=pm), mp.get_device("a100"), pm=pm
    )
    with pytest.raises(UsageError, match=r"unknown dump kinds \['cu'\]; choose from source, ptx"):
        dump.write(spec, FakeArtifact(), ["cu", "ptx"], tmp_path)


def fake_tool(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_disassemble_runs_cuobjdump_or_nvdisasm(tmp_path: Path) -> None:
    """cuobjdump gets -sass, nvdisasm -c, each with the cubin's path; stdout is the SASS."""
    cuobjdump = fake_tool(tmp_path, "cuobjdump", 'echo "$1 $(head -c 4 "$2")"')
    nvdisasm = fake_tool(tmp_path, "nvdisasm", 'echo "$1 $(head -c 4 "$2")"')
    assert dump.disassemble(b"\x7fELF...", cuobjdump) == "-sass \x7fELF\n"
    assert dump.disassemble(b"\x7fELF...", nvdisasm) == "-c \x7fELF\n"


def test_a_failing_tool_is_a_kernel_build_error(tmp_path: Path) -> None:
    """The tool's exit status and last stderr line are in the message."""
    tool = fake_tool(tmp_path, "cuobjdump", 'echo "cuobjdump fatal: not a cubin" >&2; exit 3')
    with pytest.raises(KernelBuildError, match=r"failed on the cubin \(exit 3\): .*not a cubin"):
        dump.disassemble(b"junk", tool)


def test_sass_tool_prefers_cuobjdump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both on PATH: cuobjdump; only nvdisasm: nvdisasm; none: an error saying what to install."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(dump, "_wheel_tools", lambda name: [])
    assert dump.sass_tool() is None
    with pytest.raises(UnsupportedTargetError, match=r"pip install nvidia-cuda-cuobjdump"):
        dump.disassemble(b"")
    nvdisasm = fake_tool(tmp_path, "nvdisasm", "true")
    assert dump.sass_tool() == nvdisasm
    cuobjdump = fake_tool(tmp_path, "cuobjdump", "true")
    assert dump.sass_tool() == cuobjdump


def test_sass_tool_finds_the_pip_wheels_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip install nvidia-cuda-cuobjdump`` puts the tool under the ``nvidia`` namespace
    package's ``cu13/bin/``, not on PATH: it is found there (after PATH), executable only."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(site)])  # this site's ``nvidia`` alone, not the venv's
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    importlib.invalidate_caches()
    tool = site / "nvidia" / "cu13" / "bin" / "cuobjdump"
    tool.write_text("#!/bin/sh\n")
    assert dump.sass_tool() is None  # not executable
    tool.chmod(0o755)
    assert dump.sass_tool() == str(tool)
    fake_tool(empty, "nvdisasm", "true")
    assert dump.sass_tool() == str(empty / "nvdisasm")  # PATH first


def test_cubin_needs_a_target_line() -> None:
    """PTX without '.target' cannot be linked; the message says what is missing."""
    with pytest.raises(KernelBuildError, match=r"no '\.target sm_XX' line"):
        dump.cubin(".version 8.0\n")


class UncompiledArtifact:
    kernel_name = "k"

    def ptx(self) -> str:
        raise AssertionError("the PTX was compiled although no SASS tool is there")


def test_sass_without_tools_raises_before_compiling(no_tools: None, pm: mp.PluginManager) -> None:
    """compiled.sass / dump.sass: no tool is an UnsupportedTargetError before any NVVM work."""
    with pytest.raises(UnsupportedTargetError, match=r"cuobjdump or nvdisasm on PATH"):
        dump.sass(UncompiledArtifact())
    compiled = mp.compile(example_fusion(64, 64, 64), "a100", pm=pm)
    with pytest.raises(UnsupportedTargetError, match=r"pip install nvidia-cuda-cuobjdump"):
        compiled.sass  # noqa: B018 - the property raises
