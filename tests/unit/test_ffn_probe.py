"""scripts/ffn_probe.py (the fused FFN benchmark the lead runs on the H200), here without a GPU:
its command line, its fusion and the plan it times."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import mmaplug as mp

SCRIPT = Path(__file__).parents[2] / "scripts" / "ffn_probe.py"


@pytest.fixture(scope="module")
def probe(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("ffn_probe")


def test_help_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--shape M N K" in done.stdout and "--check-shape M N K" in done.stdout


def test_arguments(probe: ModuleType) -> None:
    args = probe.parse_args([])
    assert tuple(args.shape) == (2048, 14336, 5120) and args.dtypes == ["bfloat16", "float16"]
    args = probe.parse_args(["--shape", "256", "512", "128", "--dtypes", "float16",
                             "--overrides", '{"stages": 3}'])  # fmt: skip
    assert tuple(args.shape) == (256, 512, 128) and args.overrides == {"stages": 3}
    with pytest.raises(SystemExit):
        probe.parse_args(["--dtypes", "float32"])
    assert list(probe.variants(probe.parse_args([]))) == ["default", "cooperative"]
    chosen = probe.variants(probe.parse_args(["--variants", "cooperative", "--overrides", "{}"]))
    assert list(chosen) == ["cooperative"]  # an empty custom variant is the default plan
    chosen = probe.variants(probe.parse_args(["--overrides", '{"stages": 3}']))
    assert chosen["custom"] == {"stages": 3} and chosen["default"] is None
    assert tuple(probe.parse_args([]).check_shape) == (300, 1000, 520)
    decode = probe.parse_args(["--shape", "1", "14336", "4096", "--graph", "--variants",
                               "default", "hopper"])  # fmt: skip
    assert decode.graph and tuple(decode.check_shape) == (1, 1000, 520)  # planned alike
    assert list(probe.variants(decode)) == ["default", "hopper"]


def test_a_decode_step_is_one_decode_kernel_and_hopper_without_it(probe: ModuleType) -> None:
    """At 1 x 14336 x 4096 the default is the horizontal decode kernel; the ``hopper`` variant
    blocks decode and times hopper's horizontal kernel, what ran there before."""
    fusion = probe.ffn_fusion(1, 14336, 4096, mp.bfloat16)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    spec = mp.compile(fusion, "h200", pm=pm).spec
    assert (spec.scheduler, spec.problem.horizontal) == ("decode", 2)
    blocked = mp.make_plugin_manager(load_entrypoints=False, block=probe.BLOCKED["hopper"])
    assert mp.compile(fusion, "h200", pm=blocked).spec.scheduler == "hopper"


def test_the_timed_fusion_is_one_horizontal_hopper_kernel(probe: ModuleType) -> None:
    fusion = probe.ffn_fusion(2048, 14336, 5120, mp.bfloat16)
    pm = mp.make_plugin_manager(load_entrypoints=False, strict=True)
    spec = mp.compile(fusion, "h200", pm=pm).spec
    assert (spec.scheduler, spec.problem.horizontal) == ("hopper", 2)
    assert spec.params.cta_tile.as_tuple() == (64, 256, 64)
    assert spec.params.tiling_strategy.value == "persistent_pingpong"
    spec = mp.compile(fusion, "h200", pm=pm, overrides=probe.COOPERATIVE).spec
    assert spec.params.cta_tile.as_tuple() == (128, 256, 64)
    assert spec.params.tiling_strategy.value == "persistent"


def test_without_torch_it_says_what_it_needs(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert probe.main([]) == 2
    assert "needs torch" in capsys.readouterr().err
