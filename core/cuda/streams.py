"""Streams for launches: the caller's stream as a raw handle, and graph capture.

``execute`` launches on the stream the caller's framework considers current (torch's current
stream for torch tensors, CuPy's for CuPy arrays, Numba's default stream otherwise) or on an
explicit ``stream=``. While a stream is being captured into a CUDA graph, nothing may allocate
with ``cuMemAlloc``, synchronise, or touch the legacy stream in the capturing thread (torch
captures in the "global" mode that forbids it): :func:`relaxed_capture` wraps the cold paths
(building, binding), so the graph itself holds kernel launches only (with their parameters:
hopper's tensor maps among them, by value).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, Final

from mmaplug.cuda.launching import simulating
from mmaplug.errors import UsageError

__all__ = [
    "current_stream",
    "is_capturing",
    "relaxed_capture",
    "stream_handle",
]

#: CU_STREAM_PER_THREAD: the handle of the per-thread default stream.
PER_THREAD: Final = 2
_ACCEPTED: Final = (
    "a torch.cuda.Stream, a CuPy stream, a Numba stream, an object with __cuda_stream__, "
    "or a raw CUstream handle (an int >= 0; 0 is the legacy default stream)"
)


def stream_handle(stream: object, what: str = "stream=") -> int:
    """The raw ``CUstream`` handle of *stream* (any framework's stream object or an int)."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise UsageError(f"{what}{stream} is not a stream handle; pass {_ACCEPTED}")
        return stream
    try:
        if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, torch.cuda.ExternalStream
            return int(stream.cuda_stream)  # type: ignore[attr-defined]
        if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol: (version, handle)
            return int(stream.__cuda_stream__()[1])  # type: ignore[attr-defined]
        module = type(stream).__module__.split(".")[0]
        if module == "cupy" and hasattr(stream, "ptr"):
            return int(stream.ptr)  # type: ignore[attr-defined]
        if module in ("numba", "numba_cuda") and hasattr(stream, "handle"):
            return int(stream)  # type: ignore[call-overload]
    except (TypeError, ValueError, AttributeError) as error:
        raise UsageError(
            f"{what}{stream!r} gave no stream handle ({error}); pass {_ACCEPTED}"
        ) from None
    raise UsageError(
        f"{what}{stream!r} ({type(stream).__name__}) is not a stream; pass {_ACCEPTED}"
    )


def current_stream(kind: str, like: object) -> int:
    """The handle of the stream the caller's framework launches on now, for tensors of *kind*.

    *like* is one of the caller's tensors (its device picks torch's per-device stream).
    """
    if kind == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        index = like.get_device()  # type: ignore[attr-defined]
        if raw is not None:
            return int(raw(index))
        return int(torch.cuda.current_stream(index).cuda_stream)
    if kind == "cupy":
        return int(sys.modules["cupy"].cuda.get_current_stream().ptr)
    return default_stream()


def default_stream() -> int:
    """Numba's default stream: legacy (0), or per-thread when Numba is configured so."""
    from numba import config

    return PER_THREAD if getattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", 0) else 0


def is_capturing(handle: int) -> bool:
    """Whether work launched on *handle* now goes into a CUDA graph (never, in the simulator).

    The legacy default stream is never captured (CUDA refuses to), so its handles are answered
    without asking the driver: ``CU_STREAM_LEGACY`` and 0, unless cuda.bindings is configured
    to make 0 the per-thread default stream (``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``,
    read when this module is imported). A query the driver refuses counts as capturing: the
    caller then keeps what it makes alive, which is always safe.
    """
    if handle in _NEVER_CAPTURED or simulating():
        return False
    query = _capture_query[0] if _capture_query else _load_capture_query()
    err, status = query(handle)
    return bool(err) or status == _capture_query[1]


#: Stream handles of the legacy default stream, which CUDA never captures (see is_capturing).
_NEVER_CAPTURED: Final = frozenset(
    (1,) if "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM" in os.environ else (0, 1)
)
_capture_query: list[Any] = []  # cuStreamIsCapturing and the status meaning "capturing"


def _load_capture_query() -> Any:
    from cuda.bindings import driver

    from mmaplug.cuda.driver import ensure_driver

    ensure_driver()  # no driver: mmaplug's LaunchError, not cuda.pathfinder's

    active = driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    _capture_query[:] = [driver.cuStreamIsCapturing, active]
    return driver.cuStreamIsCapturing


@contextlib.contextmanager
def relaxed_capture() -> Iterator[None]:
    """Let this thread allocate and synchronise private streams while a graph is captured.

    Cold paths (compiling, binding, encoding maps) run inside it; work on the capturing stream
    itself is still captured. Outside a capture it changes nothing.
    """
    if simulating():
        yield
        return
    from cuda.bindings import driver

    from mmaplug.cuda.driver import ensure_driver

    ensure_driver()  # the first driver call of execute: no driver is mmaplug's LaunchError
    err, previous = driver.cuThreadExchangeStreamCaptureMode(
        driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    )
    try:
        yield
    finally:
        if int(err) == 0:
            driver.cuThreadExchangeStreamCaptureMode(previous)
