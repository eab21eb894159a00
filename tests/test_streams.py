"""execute's launch path without a GPU: the caller's stream, framework allocation, threads.

A fake ``torch`` module (tensors with data pointers, a current stream, a caching allocator that
records the stream of each allocation) and a recording artifact stand in for the GPU, so the
fast path of ``CompiledFusion.execute`` runs exactly as it does on a device.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.matmul_analysis import analyze
from mmaplug.cuda import streams
from mmaplug.cuda.launching import BoundKernels, KernelParams
from mmaplug.planning.plan import plan_problem
from mmaplug.runtime.compiled_fusion import CompiledFusion

compile_module = importlib.import_module("mmaplug.runtime.compiled_fusion")
_TYPESTR = {"float16": "<f2", "float32": "<f4", "int16": "<i2", "bfloat16": "<V2"}


class FakeDType:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Tensor:
    """Just enough of a torch CUDA tensor for mmaplug: row-major, on device 0."""

    def __init__(self, torch: FakeTorch, shape: tuple[int, ...], dtype: FakeDType, ptr: int):
        self._torch, self.shape, self.dtype, self._ptr = torch, tuple(shape), dtype, ptr
        self.is_cuda, self.device = True, "cuda:0"
        self._strides = tuple(int(np.prod(self.shape[i + 1 :])) for i in range(len(shape)))

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def data_ptr(self) -> int:
        return self._ptr

    def get_device(self) -> int:
        return 0

    def view(self, dtype: FakeDType) -> Tensor:
        return Tensor(self._torch, self.shape, dtype, self._ptr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        size = self.dtype.itemsize
        return {
            "shape": self.shape,
            "strides": tuple(s * size for s in self.stride()),
            "typestr": _TYPESTR[self.dtype.name],
            "data": (self._ptr, False),
            "version": 3,
        }


Tensor.__module__ = "torch"


class FakeTorch(types.ModuleType):
    """torch's surface that mmaplug touches: dtypes, empty, the current stream, stream contexts."""

    def __init__(self) -> None:
        super().__init__("torch")
        for name, size in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("int16", 2)):
            setattr(self, name, FakeDType(name, size))
        self.current = 0x1110
        self.allocations: list[tuple[tuple[int, ...], str, int]] = []
        self._next = 1 << 20
        self._lock = threading.Lock()
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: self.current)
        external = type("ExternalStream", (), {"__init__": _external_init})
        self.cuda = types.SimpleNamespace(stream=self._stream, ExternalStream=external)

    def empty(self, shape: tuple[int, ...], dtype: FakeDType, device: str) -> Tensor:
        with self._lock:
            ptr, self._next = self._next, self._next + 256 * (1 + int(np.prod(shape)))
        self.allocations.append((tuple(shape), dtype.name, self.current))
        return Tensor(self, shape, dtype, ptr)

    def empty_strided(
        self, shape: tuple[int, ...], strides: tuple[int, ...], dtype: FakeDType, device: object
    ) -> Tensor:
        return self.empty(shape, dtype, "cuda")

    def tensor(self, shape: tuple[int, ...], dtype: str = "float16") -> Tensor:
        return self.empty(shape, getattr(self, dtype), "cuda:0")

    @contextlib.contextmanager
    def _stream(self, stream: Any) -> Iterator[None]:
        before, self.current = self.current, stream.cuda_stream
        try:
            yield
        finally:
            self.current = before


def _external_init(self: Any, handle: int, device: str = "") -> None:
    self.cuda_stream = handle


class RecordingArtifact:
    """A kernel artifact whose bound launches record what execute hands them."""

    kernel_name = "recording"

    def __init__(self, workspace: int = 0) -> None:
        self.workspace, self.binds = workspace, 0
        self.calls: list[tuple[list[int], list[float], int]] = []

    def ptx(self) -> str:
        return ""

    def launch(self, args: object) -> None:
        raise AssertionError("execute took the checked path")

    def bind(self, args: object) -> Any:
        self.binds += 1
        record, workspace = self.calls.append, self.workspace

        class Bound:
            def __init__(self) -> None:
                self.workspace = workspace

            def __call__(self, addresses: list[int], scalars: list[float], stream: int) -> None:
                record((list(addresses), list(scalars), stream))

        return Bound()


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> FakeTorch:
    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(compile_module, "relaxed_capture", contextlib.nullcontext)  # no driver
    return fake


def _compiled(pm: mp.PluginManager, artifact: RecordingArtifact, *, bias: bool = False) -> Any:
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([64, 32], dtype=mp.float16)
        w = fd.define_tensor([48, 32], dtype=mp.float16)
        b = fd.define_tensor([48], dtype=mp.float16) if bias else None
        fd.add_output(fd.ops.linear(x, w, b) if bias else fd.ops.linear(x, w))
    analysis = analyze(fd.fusion, pm=pm)
    spec = plan_problem(analysis.problem, mp.get_device("a100"), pm=pm)
    return CompiledFusion(analysis, spec, artifact)


def test_launches_on_torchs_current_stream_at_each_call(pm: mp.PluginManager, torch: FakeTorch):
    """The bound launch gets torch's current stream of the call, not the one it was bound on."""
    artifact = RecordingArtifact()
    compiled = _compiled(pm, artifact)
    x, w = torch.tensor((64, 32)), torch.tensor((48, 32))
    compiled.execute([x, w])
    torch.current = 0x2220
    (out,) = compiled.execute([x, w])
    assert [call[2] for call in artifact.calls] == [0x1110, 0x2220]
    assert artifact.binds == 1
    assert artifact.calls[1][0] == [x.data_ptr(), w.data_ptr(), out.data_ptr()]
    assert isinstance(out, Tensor) and out.shape == (64, 48) and out.dtype is torch.float16


@pytest.mark.parametrize(
    "stream",
    [
        0x3330,
        types.SimpleNamespace(cuda_stream=0x3330),
        type("Protocol", (), {"__cuda_stream__": lambda self: (0, 0x3330)})(),
    ],
    ids=["raw_handle", "torch_like", "cuda_stream_protocol"],
)
def test_explicit_stream_is_launched_on_and_allocated_on(
    pm: mp.PluginManager, torch: FakeTorch, stream: object
) -> None:
    """stream= takes any stream kind; outputs are allocated on it, torch's current is restored."""
    artifact = RecordingArtifact()
    compiled = _compiled(pm, artifact)
    x, w = torch.tensor((64, 32)), torch.tensor((48, 32))
    for _ in range(2):  # binding call, then the cached one
        torch.allocations.clear()
        compiled.execute([x, w], stream=stream)
        assert torch.allocations == [((64, 48), "float16", 0x3330)]
        assert torch.current == 0x1110
    assert [call[2] for call in artifact.calls] == [0x3330, 0x3330]


def test_explicit_current_stream_allocates_without_switching(
    pm: mp.PluginManager, torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stream= naming torch's current stream needs no stream context for the allocation."""
    compiled = _compiled(pm, RecordingArtifact())
    x, w = torch.tensor((64, 32)), torch.tensor((48, 32))
    compiled.execute([x, w])
    monkeypatch.setattr(torch.cuda, "stream", None)  # calling it would fail
    compiled.execute([x, w], stream=0x1110)


@pytest.mark.parametrize(
    ("stream", "match"),
    [("s1", r"'s1' \(str\) is not a stream"), (-1, r"-1 is not a stream handle"),
     (True, r"True \(bool\) is not a stream")],
    ids=["string", "negative", "bool"],
)  # fmt: skip
def test_wrong_stream_is_a_usage_error(
    pm: mp.PluginManager, torch: FakeTorch, stream: object, match: str
) -> None:
    """Anything that is not a stream names itself and the accepted kinds."""
    compiled = _compiled(pm, RecordingArtifact())
    with pytest.raises(mp.UsageError, match=match + ".*torch.cuda.Stream"):
        compiled.execute([torch.tensor((64, 32)), torch.tensor((48, 32))], stream=stream)


def test_workspace_comes_from_the_framework_each_call(pm: mp.PluginManager, torch: FakeTorch):
    """A launch that needs scratch gets a fresh float32 tensor of that size, its address last."""
    artifact = RecordingArtifact(workspace=1234)
    compiled = _compiled(pm, artifact, bias=True)
    inputs = [torch.tensor((64, 32)), torch.tensor((48, 32)), torch.tensor((48,))]
    for _ in range(2):
        torch.allocations.clear()
        (out,) = compiled.execute(inputs)
        assert torch.allocations == [((64, 48), "float16", 0x1110), ((1234,), "float32", 0x1110)]
    first, second = (call[0] for call in artifact.calls)
    assert first[:3] == second[:3] == [t.data_ptr() for t in inputs]
    assert second[3] == out.data_ptr() and len(second) == 5 and second[4] != first[4]


def test_threads_bind_once_and_launch_their_own_tensors(pm: mp.PluginManager, torch: FakeTorch):
    """8 threads calling one compiled fusion: one bind, every launch with its caller's tensors."""
    artifact = RecordingArtifact()
    compiled = _compiled(pm, artifact)
    results: dict[int, list[tuple[int, int, int]]] = {}
    start = threading.Barrier(8)

    def work(index: int) -> None:
        mine = results.setdefault(index, [])
        start.wait()
        for _ in range(40):
            x, w = torch.tensor((64, 32)), torch.tensor((48, 32))
            (out,) = compiled.execute([x, w])
            mine.append((x.data_ptr(), w.data_ptr(), out.data_ptr()))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert artifact.binds == 1
    launched = sorted(tuple(call[0]) for call in artifact.calls)
    assert launched == sorted(triple for calls in results.values() for triple in calls)


def test_bound_kernels_never_launch_another_threads_pointers() -> None:
    """Patching the shared parameter block and launching is atomic across threads."""
    params = KernelParams([(0, 8, 2), (0, 8, 2)])
    expected = threading.local()
    wrong: list[tuple[int, ...]] = []

    def launch(stream: int) -> None:
        got = (params.slots[4], params.slots[11])
        if got != expected.pair:
            wrong.append(got)

    bound = BoundKernels([launch], [(params, [0, 1])], [])

    def work(index: int) -> None:
        for i in range(300):
            expected.pair = (index * 1000 + i, index * 1000 + i + 1)
            bound(expected.pair, [], 0)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i + 1,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert wrong == []


def test_stream_handles_of_each_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    """Numba's default stream is legacy (0) or per-thread (2); CuPy's current stream by .ptr."""
    from numba import config

    assert streams.current_stream("numba", object()) == 0
    monkeypatch.setattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", 1, raising=False)
    assert streams.current_stream("numba", object()) == streams.PER_THREAD
    stream = type("Stream", (), {"ptr": 0x4440})()
    type(stream).__module__ = "cupy.cuda.stream"
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: stream)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert streams.current_stream("cupy", object()) == 0x4440
    assert streams.stream_handle(stream) == 0x4440


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((), ()), ((4,), (1,)), ((3, 5), (5, 1)), ((0, 5), (5, 1)), ((3, 0, 2), (2, 2, 1)),
     ((2, 1, 7), (7, 7, 1))],
)  # fmt: skip
def test_outputs_are_allocated_with_torchs_contiguous_strides(
    shape: tuple[int, ...], strides: tuple[int, ...]
) -> None:
    """torch.empty_strided gets the strides torch.empty would give (a 0 or 1 extent counts 1)."""
    from mmaplug.cuda.frameworks import contiguous_strides

    assert contiguous_strides(shape) == strides
