"""mmaplug.tune.measure's timing and float64-check helpers (bench, the tuner, the scripts and the
GPU tier share them) and scripts/probes.py, here with a stand-in torch: what is timed,
synchronised and compared."""

from __future__ import annotations

import contextlib
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


@pytest.mark.parametrize(
    ("operands", "l2", "copies"),
    [
        (32 << 20, 60 << 20, 4),  # 1x4096x4096 bf16's weight: 4 copies span 120 MiB
        (120 << 20, 60 << 20, 1),  # one copy already spans two L2 sizes
        (100 << 20, 60 << 20, 2),
        (1 << 10, 60 << 20, measure.COLD_MAX_COPIES),  # latency-bound: capped
        (32 << 20, 0, 1),  # L2's size unknown
    ],
)
def test_cold_copies_span_two_l2_sizes(operands: int, l2: int, copies: int) -> None:
    assert measure.cold_copies(operands, l2) == copies


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in torch whose CUDA graphs are numbered as captured: the log of eager calls,
    captures ("capture", "captured"), replays ("replay <graph>") and timed replays ("timed
    <graph>": 1 ms each, as its event pair reports)."""
    log: list[str] = []

    class Graph:
        def __init__(self) -> None:
            self.number = sum(entry == "capture" for entry in log)

        def replay(self) -> None:
            log.append(f"replay {self.number}")

    class Capture:
        def __init__(self, graph: Graph) -> None:
            log.append("capture")
            graph.number = sum(entry == "capture" for entry in log) - 1

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            log.append("captured")

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            return None

        def record(self) -> None:
            return None

        def synchronize(self) -> None:
            return None

        def elapsed_time(self, end: Event) -> float:
            return 1.0  # ms a replay

    class Stream:
        def wait_stream(self, other: object) -> None:
            return None

    cuda = types.SimpleNamespace(
        Stream=Stream,
        current_stream=Stream,
        stream=lambda stream: contextlib.nullcontext(),
        CUDAGraph=Graph,
        graph=Capture,
        Event=Event,
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return log


def test_graph_us_captures_copies_in_turn(graphs: list[str]) -> None:
    """Given the same call on several operand copies, graph_us calls each once eagerly (binding
    its launch), then captures them in turn, at least one call each, and divides each replay's
    time by the calls captured."""
    log = graphs
    fns = [lambda i=i: log.append(f"call{i}") for i in range(3)]
    us = measure.graph_us(fns, calls=4, reps=2, warmup=1)
    captured = log[log.index("capture") + 1 : log.index("captured")]
    assert log[: log.index("capture")] == ["call0", "call1", "call2"]
    assert captured == ["call0", "call1", "call2", "call0"]
    assert log.count("replay 0") == 1 + 2 and us == pytest.approx(1e3 / 4)
    log.clear()
    measure.graph_us(fns, calls=2, reps=1, warmup=0)  # fewer calls than copies: one each
    assert log[log.index("capture") + 1 : log.index("captured")] == ["call0", "call1", "call2"]


def test_two_sides_are_replayed_in_turn_each_round_starting_one_later(graphs: list[str]) -> None:
    """interleaved_graph_us captures each side's graph, warms them up in turn, then times one
    replay of each a round, the first side rotating, so neither always goes first (runs 242-244:
    the first of a round ran slower); each side's time is over its own calls."""
    log = graphs
    us = measure.interleaved_graph_us(
        {"ours": lambda: log.append("ours"), "torch": [lambda: log.append("torch")] * 2},
        calls=2, reps=3, warmup=1,
    )  # fmt: skip
    replays = [entry for entry in log if entry.startswith("replay")]
    warm_up, *rounds = (replays[i : i + 2] for i in range(0, len(replays), 2))
    assert warm_up == ["replay 0", "replay 1"]
    assert rounds == [["replay 0", "replay 1"], ["replay 1", "replay 0"], ["replay 0", "replay 1"]]
    assert us == {"ours": pytest.approx(1e3 / 2), "torch": pytest.approx(1e3 / 2)}
