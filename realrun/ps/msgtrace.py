"""An opt-in log of every message a node queues, sends and receives, for finding where an
iteration's time goes (which key waited, on which peer, for how long).

Set ``REALRUN_TRACE_DIR`` in the launcher's environment; each worker and server then writes
``<dir>/<role>-<pid>.tsv`` with one line per event: wall time (s), event (post|send|recv),
peer, message kind, key, slice start, request id, payload bytes; and one ``rank`` event whose
peer column is the rank the scheduler assigned. Off, it costs one attribute
test per message.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from realrun.ps.message import Message

TRACE_DIR_VARIABLE = "REALRUN_TRACE_DIR"
HEADER = "time_s\tevent\tpeer\tkind\tkey\tstart\trequest_id\tbytes\n"


class MessageTrace:
    """Appends message events to one file; safe to call from the I/O and the caller threads."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("w", buffering=1 << 16)
        self._file.write(HEADER)
        self._lock = threading.Lock()

    def log(self, event: str, peer: str, msg: Message) -> None:
        line = (
            f"{time.time():.6f}\t{event}\t{peer}\t{msg.kind.name}\t{msg.key}\t{msg.start}\t"
            f"{msg.request_id}\t{msg.nbytes}\n"
        )
        with self._lock:
            if not self._file.closed:  # a late post during shutdown is not worth a crash
                self._file.write(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def trace_from_environment(role: str) -> MessageTrace | None:
    """A trace for this process when ``REALRUN_TRACE_DIR`` is set, else None."""
    folder = os.environ.get(TRACE_DIR_VARIABLE)
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return MessageTrace(path / f"{role}-{os.getpid()}.tsv")
