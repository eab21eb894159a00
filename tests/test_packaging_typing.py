"""Typing: mypy passes over the package, and a user's script in strict mode sees real types."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")

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
def package_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed layout (mmaplug/, mmaplug/plugins/, mmaplug/heuristics/) as symlinks.

    mypy cannot see through the import hook of an editable install, and the source folders are
    named core/, plugins/ and heuristics/.
    """
    tree = tmp_path_factory.mktemp("typed") / "mmaplug"
    tree.mkdir()
    for path in (ROOT / "core").iterdir():
        if path.name != "__pycache__":
            (tree / path.name).symlink_to(path)
    (tree / "plugins").symlink_to(ROOT / "plugins")
    (tree / "heuristics").symlink_to(ROOT / "heuristics")
    return tree.parent


def mypy(args: list[str], tree: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MYPYPATH=str(tree))
    cache = ["--cache-dir", str(cwd / ".mypy_cache")]
    return subprocess.run(
        [sys.executable, "-m", "mypy", *cache, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_the_package_type_checks(package_tree: Path, tmp_path: Path) -> None:
    """mypy with pyproject.toml's settings finds no error in core/, plugins/, heuristics/."""
    done = mypy(
        ["--config-file", str(ROOT / "pyproject.toml"), "-p", "mmaplug"], package_tree, tmp_path
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_a_user_script_sees_real_types_in_strict_mode(package_tree: Path, tmp_path: Path) -> None:
    """``mypy --strict`` on a user's script: no error, and the public API's real types."""
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\n"
        "[mypy-mmaplug.*]\nfollow_imports = silent\n"  # as for an installed package
        "[mypy-numba.*,llvmlite.*,cuda.*,torch.*,cupy.*,matplotlib.*]\n"
        "follow_imports = skip\nignore_missing_imports = True\n"
    )
    done = mypy(["--config-file", "mypy.ini", "user.py"], package_tree, tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    revealed = [BUILTIN.sub("", t) for t in re.findall(r'Revealed type is "(.*)"', done.stdout)]
    assert len(revealed) == len(REVEALED), done.stdout
    for got, wanted in zip(revealed, REVEALED, strict=True):
        assert re.fullmatch(wanted, got), f"revealed {got!r}, wanted {wanted!r}"
        assert "Any" not in got.replace("tuple[Any, ...]", "").replace("dtype[Any]", "")
