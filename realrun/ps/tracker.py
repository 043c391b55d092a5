"""Request tracking (ps-lite's Customer): handles that callers wait on, completed by the I/O thread.

A handle may cover several requests (one per server slice of an array); it completes when the
last one is answered and fails as soon as any one fails or the job aborts, so that no caller
ever waits on an answer that cannot come.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any


class JobAborted(RuntimeError):
    """The job stopped (a node died, or the scheduler said so); the message says why."""


class RequestFailed(RuntimeError):
    """A server rejected a request; the message is the server's."""


class Handle:
    """What ``push``/``pull``/``barrier`` return: ``wait()`` until every part is answered."""

    def __init__(self, parts: int, what: str) -> None:
        self.what = what
        self._remaining = parts
        self._error: BaseException | None = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.done_unix_s: float | None = None  # wall clock of the last answer (timelines)
        if parts == 0:
            self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until answered; raise the failure if there was one, TimeoutError on timeout."""
        if not self._event.wait(timeout):
            raise TimeoutError(f"{self.what}: no answer within {timeout} s")
        if self._error is not None:
            raise self._error

    def _part_done(self) -> None:
        with self._lock:
            self._remaining -= 1
            if self._remaining == 0:
                self.done_unix_s = time.time()
                self._event.set()

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
            self._event.set()


OnResponse = Callable[[Any], None]


class Tracker:
    """Outstanding requests by id; thread-safe."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[Handle, OnResponse | None]] = {}
        self._lock = threading.Lock()
        self._aborted: JobAborted | None = None

    def add(self, handle: Handle, on_response: OnResponse | None = None) -> int:
        """A new request id whose answer completes one part of ``handle``."""
        with self._lock:
            if self._aborted is not None:
                raise self._aborted
            rid = next(self._ids)
            self._pending[rid] = (handle, on_response)
            return rid

    def complete(self, request_id: int, response: Any) -> bool:
        """Run the request's callback on ``response`` and mark its part done; False if unknown."""
        with self._lock:
            entry = self._pending.pop(request_id, None)
        if entry is None:
            return False
        handle, on_response = entry
        try:
            if on_response is not None:
                on_response(response)
        except Exception as e:  # a bad answer fails its handle, never the I/O thread
            handle._fail(RequestFailed(f"{handle.what}: cannot use the answer: {e}"))
            return True
        handle._part_done()
        return True

    def fail(self, request_id: int, error: BaseException) -> bool:
        with self._lock:
            entry = self._pending.pop(request_id, None)
        if entry is None:
            return False
        entry[0]._fail(error)
        return True

    def fail_all(self, error: JobAborted) -> None:
        """Fail everything outstanding and everything asked from now on."""
        with self._lock:
            self._aborted = error
            pending, self._pending = self._pending, {}
        for handle, _ in pending.values():
            handle._fail(error)

    @property
    def outstanding(self) -> int:
        with self._lock:
            return len(self._pending)
