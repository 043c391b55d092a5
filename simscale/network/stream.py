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
BytePS / realrun: messages wait in a priority queue (acks first, then the lowest rank, i.e. the
earliest layer; a key's pull request carries its key's rank and so waits right behind its own
push, as realrun's Postoffice orders by priority and then sequence) and are handed to the socket
only while the data bytes in it that have not yet left stay within ``window_bytes`` (0: one
message at a time, as P3's credit of one; realrun allows 256 KiB). That is what lets an early
layer's push and pull overtake later layers' pushes still waiting, so the two directions of a
NIC work at once.

What is "in the socket" is handed to the network as one ``connection`` (this stream): the
network sends those messages back to back as ONE flow, so a busy connection costs the
fair-share solver nothing per message. A control message in the socket still waits until the
data ahead of it has left, so data behind it is handed over only then.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Hashable

import simpy

from simscale.network import Network

# A message at most this big is a control message: latency only, no bandwidth share. A ps-lite
# header and a few keys fit well within it.
CONTROL_MESSAGE_BYTES = 256


class Stream:
    """A connection from ``src`` to ``dst`` over ``net`` (``priority`` picks the discipline)."""

    __slots__ = (
        "_in_flight",
        "_queue",
        "_ready_s",
        "_seq",
        "_socket",
        "_unsent",
        "ack",
        "dst",
        "env",
        "latency_s",
        "net",
        "priority",
        "receive_delay",
        "src",
        "window_bytes",
    )

    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        src: int,
        dst: int,
        latency_s: float,
        priority: bool = False,
        window_bytes: float = 0.0,
        receive_delay: Callable[[Hashable], float] | None = None,
    ) -> None:
        self.env = env
        self.net = net
        self.src = src
        self.dst = dst
        self.latency_s = latency_s  # one-way latency of a control message on this connection
        self.priority = priority
        self.window_bytes = window_bytes if priority else math.inf
        self._queue: list[tuple[float, int, float, Callable[[], None]]] = []  # application
        # Handed to the socket, in order, but not yet to the network: what waits behind a
        # control message that waits for the data ahead of it to leave.
        self._socket: deque[tuple[float, Callable[[], None]]] = deque()
        self._seq = itertools.count()
        self._in_flight = 0.0  # data bytes handed to the socket and not yet credited back
        self._unsent = 0  # data messages handed to the network whose last byte has not left
        # How the receiver's acknowledgement of a data message travels back, crediting the byte
        # window: a control message on the reverse connection (set by the owner), where it waits
        # behind the data already in that socket, as realrun's does behind a big pull reply on
        # the same TCP connection; None: one latency after the data arrived.
        self.ack: Callable[[Callable[[], None]], None] | None = None
        # The receiver's stack between a message's arrival and its handling, drawn per message
        # by its tag (simscale.comm.ps.stack_delay); None: handled on arrival. Messages are
        # handled in order, so one is never handled before the one ahead of it.
        self.receive_delay = receive_delay
        self._ready_s = 0.0  # when the receiver has handled the last message that arrived

    def send(
        self,
        nbytes: float,
        on_arrival: Callable[[], None],
        rank: float | None = None,
        tag: Hashable = None,
    ) -> None:
        """Queue a message; ``on_arrival()`` is called when its last byte has arrived. With
        ``priority``, a lower ``rank`` leaves first; a control message without a rank (an ack)
        leaves before data, one with a rank (a key's pull request) queues at that rank behind
        the messages of that rank already queued (its own push), as realrun's Postoffice heap
        orders them (realrun/ps/postoffice.py: (-priority, sequence), pull request right behind
        its push). ``tag`` (default: ``rank``) names the message's sequence of stack delays
        where the receiver has them (an ack carries its key's tag but no rank)."""
        if self.receive_delay is not None:
            delay_s = self.receive_delay(rank if tag is None else tag)
            on_arrival = self._handled_after(delay_s, on_arrival)
        if not self.priority:
            order = 0.0
        elif rank is None:
            order = -1.0 if nbytes <= CONTROL_MESSAGE_BYTES else 0.0
        else:
            order = rank
        heapq.heappush(self._queue, (order, next(self._seq), nbytes, on_arrival))
        self._admit()

    def _handled_after(self, delay_s: float, handle: Callable[[], None]) -> Callable[[], None]:
        """``handle`` run ``delay_s`` after the message's arrival, and not before the messages
        ahead of it on this connection have been handled."""

        def arrived() -> None:
            env = self.env
            at = max(env.now + delay_s, self._ready_s)
            self._ready_s = at
            env.timeout(at - env.now).callbacks.append(lambda _e: handle())

        return arrived

    def _admit(self) -> None:
        """Hand queued messages to the socket while the window allows."""
        queue = self._queue
        while queue:
            nbytes = queue[0][2]
            data = nbytes > CONTROL_MESSAGE_BYTES
            if data and self._in_flight > 0 and self._in_flight + nbytes > self.window_bytes:
                break
            _, _, nbytes, on_arrival = heapq.heappop(queue)
            if data:
                self._in_flight += nbytes
            self._socket.append((nbytes, on_arrival))
        self._drain()

    def _drain(self) -> None:
        """Pass the socket's messages on in order: data to the network's connection at once,
        a control message once no data ahead of it is still leaving."""
        socket = self._socket
        while socket:
            nbytes, on_arrival = socket[0]
            if nbytes <= CONTROL_MESSAGE_BYTES:
                if self._unsent:
                    break
                socket.popleft()
                self.env.timeout(self.latency_s).callbacks.append(lambda _e, f=on_arrival: f())
            else:
                socket.popleft()
                self._unsent += 1
                self.net.transfer(
                    self.src,
                    self.dst,
                    nbytes,
                    on_sent=lambda n=nbytes: self._sent(n),
                    connection=self,
                ).callbacks.append(lambda _e, f=on_arrival, n=nbytes: self._arrived(n, f))

    def _sent(self, nbytes: float) -> None:
        self._unsent -= 1
        if self.window_bytes == 0:
            # A credit of one message: the next may go as soon as this one has left.
            self._release(nbytes)
        else:
            self._drain()

    def _arrived(self, nbytes: float, on_arrival: Callable[[], None]) -> None:
        on_arrival()
        if 0 < self.window_bytes < math.inf:
            # A byte window is credited back by the receiver's acknowledgement
            # (realrun/ps/postoffice.py counts unacknowledged bytes).
            if self.ack is not None:
                self.ack(lambda: self._release(nbytes))
            else:
                self.env.timeout(self.latency_s).callbacks.append(lambda _e: self._release(nbytes))

    def _release(self, nbytes: float) -> None:
        self._in_flight -= nbytes
        if self._queue:
            self._admit()
        else:
            self._drain()
