"""Progress of a run on stderr: a live line on a terminal, a few plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_EVERY_S = 5.0  # without a terminal, at most one line this often (plus the last)


class Progress:
    """``update(done)`` as iterations complete; ``close()`` at the end."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self._last_line = 0.0
        self._started = time.monotonic()

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if self.tty:
            self.stream.write(f"\r{self._text(now)}")
            self.stream.flush()
        elif now - self._last_line >= PLAIN_EVERY_S or done == self.total:
            self.stream.write(self._text(now) + "\n")
            self.stream.flush()
            self._last_line = now

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _text(self, now: float) -> str:
        return (
            f"{self.label}: {self.done}/{self.total} worker-iterations "
            f"({now - self._started:.1f} s)"
        )
