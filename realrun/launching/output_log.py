"""The job's log: everything written to the launcher's stderr, its nodes' included, kept in a file
and shown on the console while someone reads it.

A launcher's nodes inherit its stderr (local and netns children directly, ssh ones through ssh's
own stderr), and a job is often run under something that reads that stream: a pipe to ``tee``, a
CI step, a notebook. When the reader goes away, the next write raises ``BrokenPipeError`` (Python
ignores SIGPIPE), which used to end the job mid-run and lose its log. Here file descriptor 2 is
replaced, for the job's duration, by a pipe this process reads itself: a relay thread copies
every byte to the log file and, until a write to it fails, to the original stderr. A write to fd
2 can then only fail if this process does, so the job runs to the end and the record is written
whoever stops reading. The fd is replaced rather than ``sys.stderr`` so that child processes
and C libraries are caught as well.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import TextIO

RELAY_JOIN_S = 2.0  # after the job, how long the relay may take to copy what is left
CHUNK_BYTES = 1 << 16


class Console(io.TextIOBase):
    """The original stderr, for a live progress line: written directly (not into the log),
    silently dropped once its reader has gone."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._tty = os.isatty(fd)
        self.gone = False

    def isatty(self) -> bool:
        return self._tty

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not self.gone:
            self.gone = not _write_all(self._fd, text.encode(errors="replace"))
        return len(text)


class StderrLog:
    """``with StderrLog(path) as log:`` fd 2 goes to ``path`` and, while it is read, to the
    console; ``log.console`` is the console alone (for a progress line on a terminal)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.console: TextIO = sys.stderr
        self._saved = -1
        self._read = -1
        self._file: io.BufferedWriter | None = None
        self._relay: threading.Thread | None = None
        self.console_gone = False

    def __enter__(self) -> StderrLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("wb")
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.console = Console(self._saved)  # type: ignore[assignment]
        self._relay = threading.Thread(target=self._copy, name="stderr-log", daemon=True)
        self._relay.start()
        return self

    def _copy(self) -> None:
        assert self._file is not None
        while chunk := os.read(self._read, CHUNK_BYTES):
            self._file.write(chunk)
            self._file.flush()
            if not self.console_gone:
                self.console_gone = not _write_all(self._saved, chunk)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        # Give fd 2 back: the pipe then ends once no child holds it (the job tore them down).
        os.dup2(self._saved, 2)
        assert self._relay is not None and self._file is not None
        self._relay.join(RELAY_JOIN_S)
        if self._relay.is_alive():
            return  # a node outlived the job and holds the pipe: leave the daemon relay be
        os.close(self._read)
        os.close(self._saved)
        self._file.close()


def _write_all(fd: int, data: bytes) -> bool:
    """Write every byte to ``fd``; False when its reader has gone (or it cannot be written)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:  # BrokenPipeError, or a closed or full-disk descriptor
            return False
    return True


def log_path(record: Path) -> Path:
    """Where the log of the run recorded in ``record`` goes: beside it, ``NAME.log``."""
    return record.with_suffix(".log")
