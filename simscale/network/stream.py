"""One connection between two processes: messages leave in order, one after another.

ps-lite's ZMQ van keeps one TCP connection per (sender, receiver) pair, and a TCP stream carries
its messages in order: a message starts to leave only when the one before it has left. That is
what makes a parameter server pipeline — the first key's push is complete and being updated while
later pushes still flow — and it is why a pull request waits behind pushes already queued to the
same server. Concurrent connections share the NICs through whichever network model runs.

Small control messages (acks, pull requests) need no bandwidth model: once at the head of the
stream they leave at once and arrive one path latency later.

Two disciplines: ``fifo`` is MXNet over ps-lite (every message handed to the socket at once,
strictly in order). ``priority`` is the application-level scheduler of P3 / ByteScheduler /
BytePS: messages wait in a priority queue and only one at a time is handed to the socket, so a
control message goes next, then the lowest priority number (the earliest layer) — which is what
lets a pull overtake pushes still waiting and the two directions of a NIC work at once.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import simpy

from simscale.network import Network

# A message at most this big is a control message: latency only, no bandwidth share. A ps-lite
# header and a few keys fit well within it.
CONTROL_MESSAGE_BYTES = 256


class Stream:
    """A connection from ``src`` to ``dst`` over ``net`` (``priority`` picks the discipline)."""

    __slots__ = ("_busy", "_queue", "_seq", "dst", "env", "latency_s", "net", "priority", "src")

    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        src: int,
        dst: int,
        latency_s: float,
        priority: bool = False,
    ) -> None:
        self.env = env
        self.net = net
        self.src = src
        self.dst = dst
        self.latency_s = latency_s  # one-way latency of a control message on this connection
        self.priority = priority
        self._queue: list[tuple[float, int, float, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._busy = False

    def send(self, nbytes: float, on_arrival: Callable[[], None], rank: float = 0.0) -> None:
        """Queue a message; ``on_arrival()`` is called when its last byte has arrived. With
        ``priority``, a lower ``rank`` leaves first and control messages leave before data."""
        order = (-1.0 if nbytes <= CONTROL_MESSAGE_BYTES else rank) if self.priority else 0.0
        heapq.heappush(self._queue, (order, next(self._seq), nbytes, on_arrival))
        if not self._busy:
            self._drain()

    def _drain(self) -> None:
        while self._queue and not self._busy:
            _, _, nbytes, on_arrival = heapq.heappop(self._queue)
            if nbytes <= CONTROL_MESSAGE_BYTES:
                self.env.timeout(self.latency_s).callbacks.append(lambda _e, f=on_arrival: f())
            else:
                self._busy = True
                self.net.transfer(self.src, self.dst, nbytes, on_sent=self._sent).callbacks.append(
                    lambda _e, f=on_arrival: f()
                )

    def _sent(self) -> None:
        self._busy = False
        self._drain()
