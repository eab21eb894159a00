"""execute's per-call host path without a GPU: probing, capture checks, tensor maps, parameter
blocks, and the stub-driver benchmark (``scripts/host_overhead_stub.py``) that times it all."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda import frameworks, streams
from mmaplug.cuda.launching import BoundKernels, ByValue, KernelParams
from mmaplug.errors import KernelBuildError
from mmaplug.plugins.hopper import maps

sys.path.insert(0, str(Path(__file__).parent))
from test_streams import FakeTorch, RecordingArtifact, _compiled, compile_module  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "host_overhead_stub.py"


class TorchLike:
    """A torch tensor as probe reads one (its class claims to live in torch)."""

    dtype = "float16"

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], ptr: int) -> None:
        self.shape, self._strides, self._ptr = shape, strides, ptr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def data_ptr(self) -> int:
        return self._ptr

    def get_device(self) -> int:
        return 0


TorchLike.__module__ = "torch"


class Holder:
    """A ``__cuda_array_interface__`` holder (a Numba-style device array)."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (4, 8), "strides": None, "typestr": "<f2", "data": (ptr, False), "version": 3,
        }  # fmt: skip


def test_probe_all_gives_probes_signatures_and_addresses() -> None:
    """The hot path's inline torch probe keys and addresses exactly as probe does, any kind."""
    inputs = [
        TorchLike((4, 8), (8, 1), 0x1008),
        2.5,
        Holder(0x2000),
        TorchLike((4, 8), (1, 4), 0x3010),
    ]
    key, addresses = frameworks.probe_all(inputs, (3, 0, 2))
    expected = [frameworks.probe(inputs[i]) for i in (3, 0, 2)]
    assert key == tuple(sig for _, sig in expected)
    assert addresses == [0x3010, 0x1008, 0x2000]
    assert key[1][-1] == 8 and key[0][-1] == 0  # the address modulo 16 is in the signature


def test_probe_all_keys_differ_with_layout_and_alignment() -> None:
    """Strides, shape and the alignment class each change the key (a new bound launch)."""
    base = frameworks.probe_all([TorchLike((4, 8), (8, 1), 0x1000)], (0,))[0]
    for other in (
        TorchLike((4, 8), (1, 4), 0x1000),
        TorchLike((8, 4), (4, 1), 0x1000),
        TorchLike((4, 8), (8, 1), 0x1004),
    ):
        assert frameworks.probe_all([other], (0,))[0] != base
    assert frameworks.probe_all([TorchLike((4, 8), (8, 1), 0x5000)], (0,))[0] == base


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> FakeTorch:
    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(compile_module, "relaxed_capture", contextlib.nullcontext)  # no driver
    return fake


def test_explicit_current_stream_takes_the_bound_allocators(
    pm: mp.PluginManager, torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stream= naming the framework's current stream costs what the default does: the bound
    launch's allocators, no per-call framework lookup."""
    artifact = RecordingArtifact()
    compiled = _compiled(pm, artifact)
    x, w = torch.tensor((64, 32)), torch.tensor((48, 32))
    compiled.execute([x, w])

    def refuse(*args: object) -> None:
        raise AssertionError("allocated through frameworks.allocate")

    monkeypatch.setattr(compile_module, "allocate", refuse)
    torch.allocations.clear()
    compiled.execute([x, w], stream=torch.current)
    assert torch.allocations == [((64, 48), "float16", 0x1110)]
    assert artifact.calls[-1][2] == 0x1110


def test_explicit_other_stream_gets_outputs_and_scratch_allocated_on_it(
    pm: mp.PluginManager, torch: FakeTorch
) -> None:
    """Binding call and cached call alike: outputs and workspace ordered on the stream asked."""
    artifact = RecordingArtifact(workspace=1234)
    compiled = _compiled(pm, artifact, bias=True)
    inputs = [torch.tensor((64, 32)), torch.tensor((48, 32)), torch.tensor((48,))]
    for _ in range(2):
        torch.allocations.clear()
        compiled.execute(inputs, stream=0x3330)
        assert torch.allocations == [((64, 48), "float16", 0x3330), ((1234,), "float32", 0x3330)]
        assert torch.current == 0x1110
    assert [call[2] for call in artifact.calls] == [0x3330, 0x3330]
    assert artifact.binds == 1


@pytest.fixture
def capture_queries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The driver's cuStreamIsCapturing replaced: records handles, answers 'capturing' for 9."""
    asked: list[int] = []

    def query(handle: int) -> tuple[int, str]:
        asked.append(handle)
        return 0, "active" if handle == 9 else "none"

    monkeypatch.setattr(streams, "_capture_query", [query, "active"])
    monkeypatch.setattr(streams, "simulating", lambda: False)
    return asked


def test_legacy_stream_is_answered_without_the_driver(capture_queries: list[int]) -> None:
    """0 and CU_STREAM_LEGACY are never captured: no driver query on torch's default stream."""
    assert streams.is_capturing(0) is False
    assert streams.is_capturing(1) is False
    assert capture_queries == []
    assert streams.is_capturing(9) is True
    assert streams.is_capturing(streams.PER_THREAD) is False
    assert capture_queries == [9, streams.PER_THREAD]  # the per-thread stream can be captured


def test_refused_capture_query_counts_as_capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "_capture_query", [lambda handle: (700, "none"), "active"])
    monkeypatch.setattr(streams, "simulating", lambda: False)
    assert streams.is_capturing(5) is True


def test_per_thread_default_stream_setting_makes_0_a_capturable_handle() -> None:
    """With cuda.bindings' per-thread default stream, handle 0 is that stream: it is asked."""
    code = "from mmaplug.cuda import streams; print(sorted(streams._NEVER_CAPTURED))"
    for value, expected in (("1", "[1]"), (None, "[0, 1]")):
        env = dict(os.environ)
        env.pop("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", None)
        if value is not None:
            env["CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == expected, out.stderr


@pytest.fixture
def host_maps(monkeypatch: pytest.MonkeyPatch) -> tuple[maps.HostMaps, list[int]]:
    """HostMaps whose encodings are recorded (by A address)."""
    from mmaplug.cuda.tensormap import TensorMapSpec

    encoded: list[int] = []

    def encode(spec: object, address: int) -> np.ndarray:
        encoded.append(address)
        return np.full(16, address, np.uint64)

    monkeypatch.setattr(maps, "encode", encode)
    spec = TensorMapSpec(mp.float16, (64, 64, 1), (128, 8192), (64, 64, 1), 128)
    return maps.HostMaps(spec, spec), encoded


def test_tensor_maps_are_the_words_the_kernel_takes_by_value(host_maps: Any) -> None:
    """A pair's maps are its encodings back to back, 64-bit words: what the launch copies."""
    cache, _ = host_maps
    words, address = cache.get(16, 32)
    assert address == words.ctypes.data  # kept beside them: a bound launch points there
    assert words.dtype == np.uint64 and words.flags.c_contiguous
    assert [int(w) for w in words[::16]] == [16, 32] and words.nbytes == 256


def test_tensor_maps_in_use_get_a_second_chance(host_maps: Any) -> None:
    """A pair used since the last eviction outlives older idle pairs (LRU order, no lock)."""
    cache, encoded = host_maps
    size = maps.MAP_CACHE_SIZE
    hot = cache.get(16, 32)
    for a in range(1, 3 * size):
        cache.get(0x100000 * a, 32)
        assert cache.get(16, 32) is hot  # used between every two new pairs
    assert encoded.count(16) == 1
    cache.get(0x100000, 32)  # idle since the cache filled: evicted, encoded anew
    assert encoded.count(0x100000) == 2


def test_tensor_maps_all_in_use_evict_the_oldest(host_maps: Any) -> None:
    """When every kept pair was used since the last eviction, the oldest one goes."""
    cache, encoded = host_maps
    pairs = [(0x100000 * (a + 1), 32) for a in range(maps.MAP_CACHE_SIZE)]
    for pair in pairs * 2:  # stored, then each used again
        cache.get(*pair)
    cache.get(16, 32)
    assert len(cache._cache) == maps.MAP_CACHE_SIZE
    for pair in pairs[1:]:
        cache.get(*pair)
    assert encoded.count(pairs[1][0]) == 1  # kept
    cache.get(*pairs[0])
    assert encoded.count(pairs[0][0]) == 2  # was evicted: encoded anew


def test_tensor_map_hit_never_waits_for_an_encoding(host_maps: Any) -> None:
    """A cached pair is returned while another thread holds the lock (encoding a new pair)."""
    cache, _ = host_maps
    entry = cache.get(16, 32)
    got: list[Any] = []
    with cache._lock:
        reader = threading.Thread(target=lambda: got.append(cache.get(16, 32)))
        reader.start()
        reader.join(timeout=5)
    assert got == [entry]


def test_an_evicted_pairs_words_stay_with_whoever_holds_them(host_maps: Any) -> None:
    """Eviction drops the cache's reference only: a launch holding the words keeps them."""
    cache, _ = host_maps
    held, _ = cache.get(16, 32)
    for a in range(1, 2 * maps.MAP_CACHE_SIZE):
        cache.get(0x100000 * a, 32)
    assert (16, 32) not in cache._cache and [int(w) for w in held[::16]] == [16, 32]


def test_by_value_arguments_point_at_their_bytes_per_call() -> None:
    """A by-value argument takes seven slots as an array does; its data slot's pointer points
    at zeroed bytes of its size until a call points it at the call's words."""
    params = KernelParams([ByValue(256), (0, 8, 2), 7])
    assert params.by_value_slots == [4] and params.pointer_slots == [11]
    assert list(params.slots)[:7] == [0, 0, 32, 8, 0, 32, 8] and params.slots[14] == 7
    start = np.ctypeslib.as_array((ctypes.c_uint64 * 32).from_address(params.ptrs[4]))
    assert not start.any()
    seen: list[tuple[int, int]] = []

    class Launch:
        def __init__(self) -> None:
            self.params = params

        def run(self, stream: int) -> None:
            seen.append((params.ptrs[4], params.slots[11]))

    bound = BoundKernels([Launch()], [(params, [0])], [])
    words = np.arange(32, dtype=np.uint64)
    bound._launch([0x500], [], 0, (words.ctypes.data,))
    assert seen == [(words.ctypes.data, 0x500)]
    with pytest.raises(ValueError):  # one host address per by-value slot
        bound._launch([0x500], [], 0, ())


def test_bound_kernels_write_adjacent_arrays_in_runs() -> None:
    """Addresses land in their pointer slots whether they run in order or not (split-K)."""
    params = KernelParams([(0, 8, 2), (0, 8, 2), 5, (0, 8, 4), (0, 8, 2), (0, 8, 2)])
    seen: list[list[int]] = []
    bound = BoundKernels(
        [lambda stream: seen.append([params.slots[s] for s in params.pointer_slots])],
        [(params, [0, 1, 4, 2, 3])],
        [],
    )
    bound([10, 11, 12, 13, 14], [], 0)
    assert seen == [[10, 11, 14, 12, 13]]
    assert params.slots[14] == 5  # the scalar between the arrays is left alone


def test_bound_kernels_refuse_a_layout_without_one_address_per_array() -> None:
    params = KernelParams([(0, 8, 2), (0, 8, 2)])
    with pytest.raises(KernelBuildError, match="maps 3 addresses to a parameter block with 2"):
        BoundKernels([lambda stream: None], [(params, [0, 1, 2])], [])


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no cc")
def test_stub_benchmark_runs_every_path_against_the_driver_calls() -> None:
    """The benchmark binds and times a cached execute through the real ctypes and cuda.bindings
    calls of a stub libcuda: one launch per call, two with split-K (its workspace allocated)."""
    cases = ["ampere-3-static", "hopper-2-symbolic"]
    for splitk, launches in ((0, 1), (2, 2)):
        cmd = [sys.executable, str(SCRIPT), "--reps", "50", "--json", "--splitk", str(splitk)]
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        done = subprocess.run(
            [*cmd, "--cases", *cases], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["cases"]
        assert [r["case"] for r in rows] == cases
        assert all(r["launches_per_call"] == launches for r in rows)
        assert all(0 < r["execute_us"]["median"] < 10_000 for r in rows)
        assert all(f"_k{splitk or 1}_" in r["kernel"] for r in rows)
