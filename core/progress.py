"""Progress lines on stderr for command-line steps that take seconds (a terminal, or asked for)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TextIO


class Progress:
    """Writes ``mmaplug: ...`` lines to *stream* (stderr) when *enabled*; None: when a terminal."""

    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self.stream) if enabled is None else enabled

    def say(self, text: str) -> None:
        """One progress line (nothing when disabled)."""
        if self.enabled:
            print(f"mmaplug: {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        """``text ...`` before the block, ``text: done in 1.2 s`` after it."""
        self.say(f"{text} ...")
        start = time.perf_counter()
        yield
        self.say(f"{text}: done in {time.perf_counter() - start:.1f} s")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False
