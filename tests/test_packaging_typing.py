"""Typing: mypy passes over the package, and a user's script in strict mode sees real types."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
try:  # the build backend that ``--no-build-isolation`` builds the wheel with
    SETUPTOOLS = importlib.metadata.version("setuptools")
except importlib.metadata.PackageNotFoundError:
    SETUPTOOLS = "0 (not installed)"
if int(SETUPTOOLS.split(".")[0]) < 77:
    pytest.skip(
        f"setuptools {SETUPTOOLS} cannot build mmaplug; the test extra brings setuptools>=77: "
        "pip install -e '.[test]'",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = """
import numpy as np

import mmaplug as mp
from mmaplug import MatmulParams, hookimpl


@hookimpl
def mmaplug_matmul_params(
    problem: mp.MatmulProblem, device: mp.Device, scheduler: str
) -> MatmulParams | None:
    if scheduler != "ampere" or problem.m < 1024:
        return None
    return MatmulParams(
        cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16), stages=3
    )


with mp.FusionDefinition() as fd:
    x = fd.define_tensor([256, 128], dtype=mp.float16)
    w = fd.define_tensor([64, 128], dtype=mp.float16)
    fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w)), mp.float16))
problem = mp.matmul_problem(fd.fusion)
compiled = mp.compile(fd.fusion, device="h200")
reveal_type(x)
reveal_type(problem)
reveal_type(mp.matmul_params(problem, mp.get_device("h200")))
reveal_type(compiled.params.cta_tile)
reveal_type(compiled.kernel_name)
reveal_type(compiled.ptx)
reveal_type(compiled.execute)
reveal_type(mp.evaluate(fd.fusion, [np.zeros((256, 128)), np.zeros((64, 128))]))
reveal_type(mp.explain(mp.plan_problem(problem, mp.get_device("h200"))))
reveal_type(mp.__version__)
"""

#: What mypy must reveal for each ``reveal_type`` line of USER_SCRIPT, in order.
REVEALED = [
    "mmaplug.ir.fusion.TensorView",
    "mmaplug.analysis.problem.MatmulProblem",
    "mmaplug.planning.params.MatmulParams",
    "mmaplug.planning.params.TileShape",
    "str",
    "str",
    r"def \(inputs: typing.Sequence\[object\].*\) -> list\[object\]",
    r"list\[numpy.ndarray\[.*\]\]",
    "str",
    "str",
]
BUILTIN = re.compile(r"\bbuiltins\.")  # mypy before 2.0 spells str as builtins.str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mmaplug installed from a wheel (``pip install --target``): the layout a user gets.

    mypy cannot see through the import hook of the editable install (the source folders are
    named core/, plugins/ and heuristics/), and a wheel also shows what the package ships: a
    subpackage missing from ``packages``, or py.typed missing, fails the tests below. Built
    from a copy, so that setuptools' build/ and egg-info never land in the checkout; without
    build isolation, so that no index is needed (the test extra brings setuptools).
    """
    base = tmp_path_factory.mktemp("wheel")
    source, site = base / "source", base / "site"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("core", "plugins", "heuristics"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
    done = subprocess.run(
        [*pip, "--no-build-isolation", "--target", str(site), str(source)],
        capture_output=True,
        text=True,
        cwd=base,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return site


def mypy(args: list[str], cwd: Path, **path: str) -> subprocess.CompletedProcess[str]:
    """Run mypy in *cwd* with its own cache; *path* sets ``MYPYPATH`` or ``PYTHONPATH``."""
    cache = ["--cache-dir", str(cwd / ".mypy_cache")]
    return subprocess.run(
        [sys.executable, "-m", "mypy", *cache, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **path},
        timeout=600,
    )


def test_the_package_type_checks(site: Path, tmp_path: Path) -> None:
    """mypy with pyproject.toml's settings finds no error in the installed package.

    On ``MYPYPATH`` the package is checked as the project's own code (errors reported); as an
    installed package mypy would silence them.
    """
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    done = mypy([*config, "-p", "mmaplug"], tmp_path, MYPYPATH=str(site))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_a_user_script_sees_real_types_in_strict_mode(site: Path, tmp_path: Path) -> None:
    """``mypy --strict`` on a user's script, mmaplug installed: no error, the real types.

    On ``PYTHONPATH`` mmaplug is an installed package to mypy, typed only through py.typed.
    """
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\n"
        "[mypy-numba.*,llvmlite.*,cuda.*,torch.*,cupy.*,matplotlib.*]\n"
        "follow_imports = skip\nignore_missing_imports = True\n"
    )
    done = mypy(["--config-file", "mypy.ini", "user.py"], tmp_path, PYTHONPATH=str(site))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    revealed = [BUILTIN.sub("", t) for t in re.findall(r'Revealed type is "(.*)"', done.stdout)]
    assert len(revealed) == len(REVEALED), done.stdout
    for got, wanted in zip(revealed, REVEALED, strict=True):
        assert re.fullmatch(wanted, got), f"revealed {got!r}, wanted {wanted!r}"
        assert "Any" not in got.replace("tuple[Any, ...]", "").replace("dtype[Any]", "")
