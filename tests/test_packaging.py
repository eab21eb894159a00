"""Packaging: licence, version, extras, the README's install commands, the sdist, the gpu marker."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import mmaplug as mp
from mmaplug.cli.main import main
from mmaplug.cuda import presence as gpu

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
README = (ROOT / "README.md").read_text()
#: md5 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"


def console_block(after: str) -> list[str]:
    """The lines of the first ```console block after the text *after* in the README."""
    start = README.index(after)
    match = re.search(r"```console\n(.*?)```", README[start:], flags=re.S)
    assert match, f"no console block after {after!r} in README.md"
    return match.group(1).splitlines()


def test_license_is_the_verbatim_apache_2_text() -> None:
    """LICENSE is the standard Apache-2.0 text, and the metadata says so in the PEP 639 form."""
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.md5(text, usedforsecurity=False).hexdigest() == APACHE_2_MD5
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert not [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("License ::")]
    for example in sorted((ROOT / "examples").glob("*/pyproject.toml")):
        assert tomllib.loads(example.read_text())["project"]["license"] == "Apache-2.0", example


def test_version_has_one_source() -> None:
    """``mp.__version__`` is what the installed metadata says, read by setuptools from it."""
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mmaplug.__version__"}
    assert mp.__version__ == importlib.metadata.version("mmaplug")


def test_classifiers_name_pytest_typing_and_cuda() -> None:
    classifiers = PYPROJECT["project"]["classifiers"]
    for wanted in (
        "Framework :: Pytest",
        "Typing :: Typed",
        "Environment :: GPU :: NVIDIA CUDA :: 12",
        "Environment :: GPU :: NVIDIA CUDA :: 13",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ):
        assert wanted in classifiers


def test_plan_only_install_has_no_numba_and_extras_bring_the_gpu_path() -> None:
    """Base dependencies plan and explain; cu12/cu13 add Numba-CUDA, bench torch/matplotlib."""
    base = " ".join(PYPROJECT["project"]["dependencies"])
    assert "numba" not in base and "torch" not in base
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(r.startswith("numba-cuda[cu13]") for r in extras["cu13"])
    assert any(r.startswith("numba-cuda[cu12]") for r in extras["cu12"])
    assert {r.split(">")[0] for r in extras["bench"]} == {"torch", "matplotlib"}
    test = {re.split(r"[<>=]", r)[0] for r in extras["test"]}
    assert {"pytest", "pytest-xdist", "hypothesis", "mypy", "setuptools"} <= test


def test_readme_states_the_driver_each_cuda_extra_needs() -> None:
    install = README[README.index("## Install") : README.index("## The main job")]
    assert re.search(r"mmaplug\[cu13\].*R580", install)
    assert re.search(r"mmaplug\[cu12\].*R525", install)


def test_ci_runs_exactly_the_readme_install_and_test_commands() -> None:
    """.ci/run: the README's commands between its markers, and no pip upgrade anywhere."""
    if not (ROOT / ".ci/run").exists():
        pytest.skip(".ci/run is the repository's CI; an sdist does not ship it")
    ci = (ROOT / ".ci/run").read_text()
    install = ci.split("# --- README: install ---\n")[1].split("# --- README: test ---\n")[0]
    test = ci.split("# --- README: test ---\n")[1]
    assert install.splitlines() == console_block("From a checkout, for development")
    assert test.splitlines() == console_block("## Tests")
    assert "--upgrade" not in ci and "-U " not in ci


def test_py_typed_ships_with_the_package() -> None:
    assert importlib.resources.files("mmaplug").joinpath("py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["mmaplug"]


def test_the_sdist_carries_what_the_readme_links_to() -> None:
    """Every relative README link exists and MANIFEST.in puts it in the sdist."""
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    links = re.findall(r"\]\(((?!https?:|#)[^)#]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link
        top = link.split("/")[0]
        assert top in manifest, f"{link}: MANIFEST.in neither includes nor grafts {top}"
    assert {"tests", "examples", "docs", "LICENSE"} <= set(manifest)


def test_no_file_points_outside_the_repository() -> None:
    """No shipped text cites the design notes that live outside the repository."""
    outside = re.compile("|".join(["DESIGN" + r"\.md", "STYLE" + r"\.md", r"\.\./" + "shared"]))
    folders = ("core", "plugins", "heuristics", "tests", "docs", "examples")
    paths = [p for f in folders for p in (ROOT / f).rglob("*") if p.suffix in {".py", ".md"}]
    paths += [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "pyproject.toml"]
    found = [f"{p.relative_to(ROOT)}" for p in paths if outside.search(p.read_text())]
    assert found == []


def test_compile_without_numba_names_the_extra_to_install() -> None:
    """Without Numba, planning works and building a kernel is one KernelBuildError line."""
    script = """
import sys
for name in ("numba", "numba.cuda"):
    sys.modules[name] = None
import mmaplug as mp
with mp.FusionDefinition() as fd:
    x = fd.define_tensor([256, 128], dtype=mp.float16)
    w = fd.define_tensor([64, 128], dtype=mp.float16)
    fd.add_output(fd.ops.linear(x, w))
spec = mp.plan_problem(mp.matmul_problem(fd.fusion), mp.get_device("h200"))
print("planned", spec.scheduler)
try:
    mp.compile(fd.fusion, device="h200")
except mp.KernelBuildError as error:
    print(error)
"""
    env = {"MMAPLUG_DISABLE_PLUGIN_AUTOLOAD": "1", "MMAPLUG_DISK_CACHE": "0", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    planned, message = done.stdout.splitlines()
    assert planned == "planned hopper"
    assert "needs Numba-CUDA" in message
    assert "mmaplug[cu13] (CUDA 13, NVIDIA driver R580" in message
    assert "mmaplug[cu12] (CUDA 12, driver R525" in message


def test_bench_without_its_extra_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mmaplug bench`` without torch says which extra to install."""
    monkeypatch.setattr(gpu, "cuda_device_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "needs torch" in err and "pip install 'mmaplug[bench]'" in err


GPU_TESTS = """
import pytest

@pytest.mark.gpu
def test_on_the_gpu():
    pass

def test_anywhere():
    pass
"""


@pytest.mark.parametrize(("devices", "outcomes"), [(0, {"skipped": 1}), (1, {})])
def test_the_pytest_plugin_gives_the_gpu_marker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, devices: int, outcomes: dict
) -> None:
    """A plugin's own suite may mark tests ``gpu``: declared, and skipped without a GPU."""
    monkeypatch.setattr(gpu, "cuda_device_count", lambda: devices)
    pytester.makepyfile(GPU_TESTS)
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=2 - outcomes.get("skipped", 0), **outcomes)
    if devices == 0:
        result.stdout.fnmatch_lines(["*marked gpu: needs a CUDA GPU*"])
