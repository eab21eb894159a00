"""Kernel dumps and ``explain --emit`` with PTX, cubin and SASS, for both schedulers (no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug import dump
from mmaplug.cli import main
from mmaplug.demo import example_fusion

pytestmark = pytest.mark.ptx

CASES = [
    ("h200", "hopper", ".target sm_90a", "wgmma.mma_async"),
    ("a100", "ampere", ".target sm_80", "mma.sync.aligned"),
]


@pytest.fixture(scope="module", params=CASES, ids=["hopper", "ampere"])
def case(request: pytest.FixtureRequest) -> tuple[mp.CompiledFusion, str, str, str]:
    device, scheduler, target, instruction = request.param
    pm = mp.make_plugin_manager(load_entrypoints=False)
    return mp.compile(example_fusion(128, 128, 128), device, pm=pm), scheduler, target, instruction


def test_dump_writes_every_kind(
    case: tuple[mp.CompiledFusion, str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All kinds without a SASS tool: source, PTX for the target, the plan, and a SASS note."""
    compiled, scheduler, target, instruction = case
    monkeypatch.setenv("PATH", str(tmp_path))
    files = compiled.dump(tmp_path / "d")
    stem = dump.file_stem(compiled.spec, compiled.kernel_name, compiled.source)
    suffixes = [f.name.removeprefix(stem) for f in files]
    assert suffixes == [".py", ".ptx", ".sass-unavailable.txt", ".plan.txt", ".plan.json"]
    ptx = (tmp_path / "d" / f"{stem}.ptx").read_text()
    assert ptx == compiled.ptx and target in ptx and instruction in ptx
    assert json.loads(files[-1].read_text())["scheduler"] == scheduler


def test_cubin_links_without_a_gpu(case: tuple[mp.CompiledFusion, str, str, str]) -> None:
    """nvJitLink turns the PTX into an ELF cubin for its target."""
    assert dump.cubin(case[0].ptx)[:4] == b"\x7fELF"


@pytest.mark.skipif(dump.sass_tool() is None, reason="no cuobjdump or nvdisasm on PATH")
def test_sass_with_a_real_tool(case: tuple[mp.CompiledFusion, str, str, str]) -> None:
    """With a CUDA toolkit's tool on PATH the SASS holds the tensor-core instructions."""
    compiled, scheduler, _, _ = case
    assert ("HGMMA" if scheduler == "hopper" else "HMMA") in compiled.sass


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--device", "a100", "--layout", "nt", "--batch", "2"], ["sm_80", "mma.sync.aligned"]),
        (["--device", "H200", "--dtype", "bfloat16"], ["sm_90a", "wgmma.mma_async", ".bf16"]),
    ],
)
def test_explain_emit_ptx(
    capsys: pytest.CaptureFixture[str], options: list[str], expected: list[str]
) -> None:
    """explain --emit ptx prints the kernel's PTX for the preset's target, nothing else."""
    argv = ["explain", "--m", "256", "--n", "128", "--k", "64", *options, "--emit", "ptx"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("//") and all(text in out for text in expected) and err == ""
