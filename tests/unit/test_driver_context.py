"""The driver calls made without a current context (a thread that never launched): the call
is made again once in the device's primary context, and a second failure is raised. A fake
libcuda stands in for the driver, so this runs without a GPU."""

from __future__ import annotations

import pytest

from mmaplug.cuda import driver
from mmaplug.errors import LaunchError

INVALID_CONTEXT = 201


class FakeLib:
    """``cuMemsetD32Async`` answering from *results* in turn; records its calls."""

    def __init__(self, *results: int) -> None:
        self.results, self.calls = list(results), []

    def cuMemsetD32Async(self, *args: object) -> int:  # noqa: N802 - the driver's name
        self.calls.append(args)
        return self.results.pop(0)

    def cuGetErrorName(self, err: int, out: object) -> int:  # noqa: N802
        return 1  # no name: the message falls back to the number


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeLib, list[int]]:
    contexts: list[int] = []
    lib = FakeLib()
    monkeypatch.setattr(driver, "_lib", lambda: lib)
    monkeypatch.setattr(driver, "ensure_context", lambda: contexts.append(0) or 0)
    return lib, contexts


def test_memset_without_a_context_retries_once_in_the_primary_one(fake: tuple) -> None:
    lib, contexts = fake
    lib.results = [INVALID_CONTEXT, 0]
    driver.memset_d32(0x1000, 0, 1, 7)
    assert lib.calls == [(0x1000, 0, 1, 7)] * 2 and contexts == [0]


def test_memset_in_a_context_is_one_call(fake: tuple) -> None:
    lib, contexts = fake
    lib.results = [0]
    driver.memset_d32(0x2000, 0, 4, 0)
    assert lib.calls == [(0x2000, 0, 4, 0)] and contexts == []


def test_memset_failing_again_raises_naming_the_call(fake: tuple) -> None:
    lib, contexts = fake
    lib.results = [INVALID_CONTEXT, INVALID_CONTEXT]
    with pytest.raises(LaunchError, match="cuMemsetD32Async failed"):
        driver.memset_d32(0x3000, 0, 1, 0)
    assert len(lib.calls) == 2 and contexts == [0]
