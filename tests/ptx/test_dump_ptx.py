"""Kernel dumps and ``explain --emit`` with PTX, cubin and SASS, for both schedulers (no GPU)."""

from __future__ import annotations

import importlib
import json
import struct
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.cli.demo import example_fusion
from mmaplug.cli.main import main
from mmaplug.runtime import dump

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
    monkeypatch.setattr(dump, "_wheel_tools", lambda name: [])  # nor a pip wheel's tool
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


def test_dump_disassembles_the_cubin_launches_load(
    case: tuple[mp.CompiledFusion, str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dumped cubin (and so its SASS) is the kernel launches load, built as
    ``generated_kernel`` builds it. For hopper that differs from its PTX linked alone (which
    drops setmaxnreg and serialises the wgmmas), so a dump of the PTX would show another
    kernel."""
    from mmaplug.cuda.launching import kernel_binary

    compiled, scheduler, _, _ = case
    seen: list[bytes] = []
    monkeypatch.setattr(dump, "sass_tool", lambda: "nvdisasm")
    monkeypatch.setattr(dump, "disassemble", lambda binary, tool: seen.append(binary) or "SASS")
    files = compiled.dump(tmp_path, kinds=("sass",))
    assert [f.suffix for f in files] == [".cubin", ".sass"] and files[1].read_text() == "SASS"
    artifact = compiled._artifact
    build = importlib.import_module(f"mmaplug.plugins.{scheduler}.kernel").build
    cc = tuple(compiled.spec.device.cc)[:2]
    runs = _code(kernel_binary(build(artifact.config), f"{scheduler}_gemm", cc).cubin)
    assert len(seen) == 1 and _code(seen[0]) == runs and _code(files[0].read_bytes()) == runs
    if scheduler == "hopper":
        assert runs != _code(dump.cubin(compiled.ptx))


def _code(cubin: bytes) -> bytes:
    """The machine code of an ELF64 cubin: its ``.text.*`` sections' bytes in order (the
    section names carry Numba's per-compilation version tag, the code does not)."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    table = headers[names][4]

    def name(header: tuple) -> bytes:
        start = table + header[0]
        return cubin[start : cubin.index(b"\0", start)]

    code = b"".join(cubin[h[4] : h[4] + h[5]] for h in headers if name(h).startswith(b".text."))
    assert code, "no .text section in the cubin"
    return code


def test_an_artifact_without_a_cubin_dumps_its_ptx_linked() -> None:
    class PtxOnly:
        kernel_name = "k"

        def ptx(self) -> str:
            return dump_ptx

    dump_ptx = mp.compile(example_fusion(128, 128, 128), "a100").ptx
    assert dump.artifact_cubin(PtxOnly()) == dump.cubin(dump_ptx)


@pytest.mark.skipif(dump.sass_tool() is None, reason="no cuobjdump or nvdisasm on PATH")
def test_sass_with_a_real_tool(case: tuple[mp.CompiledFusion, str, str, str]) -> None:
    """With a CUDA toolkit's tool on PATH the SASS holds the tensor-core instructions."""
    compiled, scheduler, _, _ = case
    sass = compiled.sass
    assert ("HGMMA" if scheduler == "hopper" else "HMMA") in sass
    assert "STL" not in sass and "LDL" not in sass  # no local memory in the kernel that runs
    if scheduler == "hopper":  # grid-constant maps: prefetched, never invalidated by a fence
        assert "UTMACCTL.PF" in sass and "UTMACCTL.IV" not in sass
    if getattr(compiled._artifact.config, "consumers", 0) == 2:  # hopper: setmaxnreg kept
        assert "USETMAXREG" in sass


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


@pytest.mark.skipif(dump.sass_tool() is None, reason="no cuobjdump or nvdisasm on PATH")
def test_hopper_default_sass_is_the_whole_program_kernel() -> None:
    """The default 4096^3 hopper kernel's SASS: two consumers' register hand-over kept, the
    wgmmas pipelined, nothing in local memory (the PTX linked alone spills and serialises)."""
    from mmaplug.cli.bench import linear_fusion

    compiled = mp.compile(linear_fusion(4096, 4096, 4096, mp.float16, True), "h200")
    sass = compiled.sass
    assert "USETMAXREG" in sass and "HGMMA.64x256x16" in sass
    assert "STL" not in sass and "LDL" not in sass


@pytest.mark.skipif(dump.sass_tool() is None, reason="no cuobjdump or nvdisasm on PATH")
@pytest.mark.parametrize("strategy", ["persistent_pingpong", "persistent"])
def test_pingpong_descriptors_stay_in_uniform_registers(strategy: str) -> None:
    """A ping-pong consumer's wgmma descriptors are built in uniform registers, as the
    cooperative kernel's are: without ``warp_uniform`` on their shared-memory addresses ptxas
    rebuilt them in vector registers at every wgmma of the e4m3 128x128 kernel and moved them
    across with 41 R2UR (run 228's SASS; the cooperative 128x256 kernel has 4)."""
    from mmaplug.tune.corpus import TuneProblem

    problem = TuneProblem(m=4096, n=4096, k=4096, dtype="float8_e4m3fn", scale="tensor")
    tile = (128, 128, 128) if strategy == "persistent_pingpong" else (128, 256, 128)
    warp = tile if strategy == "persistent_pingpong" else (64, 256, 128)
    overrides = {"cta_tile": tile, "warp_tile": warp, "instruction_tile": (64, tile[1], 32),
                 "stages": 6 if tile[1] == 128 else 4, "tiling_strategy": strategy}  # fmt: skip
    pm = mp.make_plugin_manager(block=["decode", "ampere"], load_entrypoints=False)
    compiled = mp.compile(problem.fusion(), "h200", pm=pm, overrides=overrides)
    assert compiled.sass.count("QGMMA") == (8 if tile[1] == 128 else 4)
    assert compiled.sass.count("R2UR ") <= 8
