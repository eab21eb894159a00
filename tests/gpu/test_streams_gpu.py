"""GPU tier: execute on the caller's stream — torch's current stream, stream=, threads.

Each check makes a wrong stream visible: the input is written on the caller's stream only after
a long ``torch.cuda._sleep`` there, so a kernel launched on any other stream reads the zeros
that were there before and the comparison with float64 fails. Both schedulers are run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.measure import rel_error

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

SLEEP_CYCLES = 200_000_000  # ~0.1 s on an H200: far longer than any launch takes to start
M, N, K = 256, 192, 128


@pytest.fixture(scope="module", params=["ampere", pytest.param("hopper", marks=pytest.mark.sm90)])
def case(
    request: pytest.FixtureRequest, scheduler_pm: Callable[[str], mp.PluginManager]
) -> tuple[mp.CompiledFusion, Callable[..., Any]]:
    """gelu(x @ w.T + b) compiled for the local GPU by one scheduler, and its float64 reference."""
    pm = scheduler_pm(request.param)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([M, K], dtype=mp.float16)
        w = fd.define_tensor([N, K], dtype=mp.float16)
        b = fd.define_tensor([N], dtype=mp.float16)
        fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))
    compiled = mp.compile(fd, pm=pm)
    assert compiled.spec.scheduler == request.param

    def reference(x: Any, w: Any, b: Any) -> Any:
        return torch.nn.functional.gelu(x.double() @ w.double().T + b.double())

    return compiled, reference


def _inputs(seed: int) -> list[Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [
        torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
        for shape in ((M, K), (N, K), (N,))
    ]


def test_current_torch_stream_orders_the_launch(case: tuple) -> None:
    """Inside ``torch.cuda.stream(side)`` the kernel runs after side's earlier work, not before."""
    compiled, reference = case
    x_true, w, b = _inputs(1)
    x = torch.zeros_like(x_true)
    compiled.execute([x, w, b])  # bind outside the timed part
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.copy_(x_true)
        (out,) = compiled.execute([x, w, b])
        doubled = out.float() * 2
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert rel_error(doubled / 2, reference(x_true, w, b)) < 1e-2


@pytest.mark.parametrize("form", ["torch_stream", "raw_handle"])
def test_explicit_stream_orders_the_launch(case: tuple, form: str) -> None:
    """``stream=`` (a torch.cuda.Stream or its raw handle) wins over the current stream."""
    compiled, reference = case
    x_true, w, b = _inputs(2)
    x = torch.zeros_like(x_true)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.copy_(x_true)
    stream = side if form == "torch_stream" else side.cuda_stream
    (out,) = compiled.execute([x, w, b], stream=stream)  # the current stream is the default one
    with torch.cuda.stream(side):
        doubled = out.float() * 2
    torch.cuda.synchronize()
    assert rel_error(doubled / 2, reference(x_true, w, b)) < 1e-2


def test_threads_on_their_own_streams(case: tuple) -> None:
    """Four threads, each on its own stream with its own tensors, 25 calls each: all correct."""
    compiled, reference = case
    failures: list[str] = []
    start = threading.Barrier(4)

    def work(index: int) -> None:
        stream = torch.cuda.Stream()
        results = []
        with torch.cuda.stream(stream):
            start.wait()
            for call in range(25):
                inputs = _inputs(100 * index + call)
                results.append((inputs, compiled.execute(inputs)[0]))
        stream.synchronize()
        for call, (inputs, out) in enumerate(results):
            err = rel_error(out, reference(*inputs))  # NaN: unwritten elements
            if not err < 1e-2:
                failures.append(f"thread {index} call {call}: relative error {err:.2e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_cupy_inputs_run_on_cupys_current_stream(case: tuple) -> None:
    """CuPy arrays in, inside ``with cupy_stream:``: CuPy outputs, right once that stream syncs."""
    cupy = pytest.importorskip("cupy")
    compiled, reference = case
    host = [t.cpu() for t in _inputs(3)]
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        x, w, b = (cupy.asarray(t.numpy()) for t in host)
        (out,) = compiled.execute([x, w, b])
        doubled = out.astype(cupy.float32) * 2
    side.synchronize()
    assert isinstance(out, cupy.ndarray)
    got = torch.tensor(cupy.asnumpy(doubled).astype(np.float64)) / 2
    assert rel_error(got, reference(*host).cpu()) < 1e-2
