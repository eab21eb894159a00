"""GPU tier: ``execute`` captured in ``torch.cuda.graph`` and replayed computes the right thing.

torch's recipe: warm up (bind) on a side stream, capture with static input tensors, then copy
new values into those inputs, poison the static outputs with NaN and replay; the outputs must
match float64 for the new values. torch captures in its "global" mode, so any allocation,
synchronisation or legacy-stream use on the capture path is an error, not a silent empty graph.
Both schedulers, with and without split-K (the workspace comes from the graph's memory pool).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mmaplug as mp
from mmaplug.cuda.presence import cuda_device_count
from mmaplug.tune.measure import rel_error

torch = pytest.importorskip("torch") if cuda_device_count() else None

pytestmark = pytest.mark.sm80

M, N, K = 200, 264, 256  # ragged in M and N for every tile
SCHEDULERS = ["ampere", pytest.param("hopper", marks=pytest.mark.sm90)]


def _compiled(pm_for: Callable, scheduler: str, epilogue: str, splitk: int) -> Any:
    pm = pm_for(scheduler)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([M, K], dtype=mp.float16)
        w = fd.define_tensor([N, K], dtype=mp.float16)
        if epilogue == "bias_gelu":
            b = fd.define_tensor([N], dtype=mp.float16)
            fd.add_output(fd.ops.cast(fd.ops.gelu(fd.ops.linear(x, w, b)), mp.float16))
        else:
            fd.add_output(fd.ops.linear(x, w))
    compiled = mp.compile(fd, pm=pm, overrides={"splitk_factor": splitk} if splitk > 1 else None)
    assert (compiled.spec.scheduler, compiled.params.splitk_factor) == (scheduler, splitk)
    return compiled


def _random(like: list[Any], seed: int) -> list[Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(t.shape, device="cuda", dtype=t.dtype, generator=gen) for t in like]


def _reference(inputs: list[Any]) -> Any:
    x, w, *b = (t.double() for t in inputs)
    y = x @ w.T
    return torch.nn.functional.gelu(y + b[0]) if b else y


def _static_inputs(epilogue: str) -> list[Any]:
    shapes = [(M, K), (N, K)] + ([(N,)] if epilogue == "bias_gelu" else [])
    return [torch.zeros(s, device="cuda", dtype=torch.float16) for s in shapes]


def _capture(compiled: mp.CompiledFusion, static: list[Any], *, warm: bool = True) -> tuple:
    """(graph, static outputs), captured after a warm-up call on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    if warm:
        with torch.cuda.stream(side):
            compiled.execute(static)
        torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = compiled.execute(static)
    return graph, outputs


def _replay_and_check(graph: Any, static: list[Any], outputs: list[Any], seed: int) -> None:
    new = _random(static, seed)
    for dst, src in zip(static, new, strict=True):
        dst.copy_(src)
    for out in outputs:
        out.fill_(float("nan"))  # whatever the replay leaves unwritten shows up
    graph.replay()
    torch.cuda.synchronize()
    err = rel_error(outputs[0], _reference(new))
    assert err < 1e-2, f"relative error {err:.2e} after replay (NaN: unwritten, an empty graph?)"


@pytest.mark.parametrize("splitk", [1, 2], ids=["splitk1", "splitk2"])
@pytest.mark.parametrize("epilogue", ["none", "bias_gelu"])
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_replay_computes_new_inputs(
    scheduler_pm: Callable, scheduler: str, epilogue: str, splitk: int
) -> None:
    """Two replays with new values in the static inputs both match float64."""
    compiled = _compiled(scheduler_pm, scheduler, epilogue, splitk)
    static = _static_inputs(epilogue)
    graph, outputs = _capture(compiled, static)
    for seed in (1, 2):
        _replay_and_check(graph, static, outputs, seed)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_replay_after_many_other_operands(scheduler_pm: Callable, scheduler: str) -> None:
    """Eager calls on 40 other operand buffers after the capture (hopper: more tensor-map pairs
    than its cache keeps) leave the graph's launches reading valid maps and workspaces."""
    compiled = _compiled(scheduler_pm, scheduler, "none", 1)
    static = _static_inputs("none")
    graph, outputs = _capture(compiled, static)
    for seed in range(40):
        compiled.execute(_random(static, 100 + seed))
    torch.cuda.synchronize()
    _replay_and_check(graph, static, outputs, 3)


# torch announces every debug_dump with a UserWarning ("DEBUG: calling debug_dump()" in older
# releases, "DEBUG: calling cudaGraphDebugDotPrint() with PATH" in 2.11)
@pytest.mark.filterwarnings("ignore:DEBUG. calling:UserWarning")
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_graph_holds_kernels_and_no_copies(
    scheduler_pm: Callable, scheduler: str, tmp_path: Path
) -> None:
    """The captured graph's nodes are kernel launches: no memcpy of argument data or maps."""
    compiled = _compiled(scheduler_pm, scheduler, "bias_gelu", 1)
    static = _static_inputs("bias_gelu")
    compiled.execute(static)
    torch.cuda.synchronize()
    try:  # torch >= 2.8 drops the captured cudaGraph_t once instantiated unless kept
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        graph = torch.cuda.CUDAGraph()
    graph.enable_debug_mode()
    with torch.cuda.graph(graph):
        compiled.execute(static)
    dot = tmp_path / "graph.dot"
    graph.debug_dump(str(dot))
    assert dot.exists(), "torch wrote no graph dump (run 31: torch 2.11 without keep_graph)"
    text = dot.read_text().upper()
    assert "KERNEL" in text, text[:2000]
    assert "MEMCPY" not in text and "MEMSET" not in text, text[:4000]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_first_call_inside_the_capture(scheduler_pm: Callable, scheduler: str) -> None:
    """No warm-up: the call that binds (and builds) runs inside the capture and still replays."""
    compiled = _compiled(scheduler_pm, scheduler, "bias_gelu", 1)
    static = _static_inputs("bias_gelu")
    graph, outputs = _capture(compiled, static, warm=False)
    _replay_and_check(graph, static, outputs, 4)
