"""mmaplug.tune.measure's timing and float64-check helpers (bench, the tuner, the scripts and the
GPU tier share them) and scripts/probes.py, here with a stand-in torch: what is timed,
synchronised and compared."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from mmaplug.ir.dtypes import DType
from mmaplug.tune import measure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import probes  # noqa: E402 (scripts/ is not a package)


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in torch whose ``cuda.synchronize`` appends "sync" to the returned list."""
    log: list[str] = []
    cuda = types.SimpleNamespace(synchronize=lambda: log.append("sync"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return log


def test_rel_error_is_the_relative_frobenius_error_and_nan_when_unwritten() -> None:
    ref = np.arange(1.0, 7.0).reshape(2, 3)
    got = ref + np.array([[0.1, 0, 0], [0, 0, -0.2]])
    assert measure.rel_error(got, ref) == pytest.approx(np.sqrt(0.05) / np.linalg.norm(ref))
    assert measure.rel_error(ref.astype(np.float16), ref) == 0.0
    for bad in (np.nan, np.inf):
        got[1, 1] = bad
        assert np.isnan(measure.rel_error(got, ref))  # never below a tolerance


def test_rel_error_against_an_all_zero_reference_is_absolute() -> None:
    """An exact zero result scores 0 and a wrong one fails any tolerance (no 0 / 0)."""
    zeros = np.zeros((2, 3))
    assert measure.rel_error(zeros, zeros) == 0.0
    assert measure.rel_error(zeros + 1e-3, zeros) > 1e20


def test_sample_summary_is_median_and_nearest_lower_ranks() -> None:
    assert measure.sample_summary([float(v) for v in range(100, -1, -1)]) == {
        "median": 50.0, "p10": 10.0, "p90": 90.0,
    }  # fmt: skip


def test_host_call_us_without_a_block_never_imports_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    calls: list[int] = []
    samples = measure.host_call_us(lambda: calls.append(1), 7)
    assert len(samples) == len(calls) == 7 and all(us >= 0 for us in samples)


def test_host_call_us_synchronises_between_blocks(synced: list[str]) -> None:
    samples = measure.host_call_us(lambda: synced.append("call"), 6, block=3)
    assert len(samples) == 6
    assert synced == ["sync", "call", "call", "call", "sync", "call", "call", "call", "sync"]
    synced.clear()
    assert measure.host_dispatch_us(lambda: synced.append("call"), reps=4) >= 0
    assert synced == ["sync", "call", "call", "call", "call", "sync"]


def test_interleaved_ms_times_each_function_in_turn_every_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timed: list[tuple[str, dict]] = []

    def median_ms(fn, **timing):  # noqa: ANN001, ANN003, ANN202
        timed.append((fn(), timing))
        return float(len(timed))

    monkeypatch.setattr(measure, "cuda_median_ms", median_ms)
    times = measure.interleaved_ms({"torch": lambda: "torch", "ours": lambda: "ours"}, 2, reps=5)
    assert times == {"torch": [1.0, 3.0], "ours": [2.0, 4.0]}
    assert timed == [(name, {"reps": 5}) for name in ("torch", "ours", "torch", "ours")]


def test_save_to_out_writes_json_only_where_out_is_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.chdir(tmp_path)  # a stray relative write would land here
    probes.save_to_out("rows.json", [1])
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("OUT", str(tmp_path))
    probes.save_to_out("rows.json", [{"shape": (8, 16, 32), "dtype": DType.float16}])
    assert json.loads((tmp_path / "rows.json").read_text()) == [
        {"shape": [8, 16, 32], "dtype": str(DType.float16)}
    ]


def test_probe_arguments_parse_variants_and_shapes() -> None:
    args = probes.probe_arguments(
        "x", ["--variant", 'pp={"stages": 6, "cta_tile": [128, 128, 64]}', "--only", "4096"]
    )
    assert args.variants == [("pp", {"stages": 6, "cta_tile": [128, 128, 64]})]
    assert probes.probe_arguments("x", []).variants == []
    assert probes.shape_wanted(4096, 4096, 512, args.only)
    assert not probes.shape_wanted(16384, 1024, 512, args.only)
    assert probes.shape_wanted(16384, 1024, 512, [])
