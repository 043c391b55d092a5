"""A node's link to the job (ps-lite's Postoffice): registration, ranks, barriers, heartbeats,
and the one I/O thread that owns every socket of a worker or server.

Other threads never touch a socket: they ``post`` messages into per-peer queues and wait on
handles. How the I/O thread empties the queues is the scenario's ``kvstore.scheduling``:

- ``"priority"`` (P3): the highest-priority message first, and at most ``window_bytes``
  unacknowledged per server, so that a late, high-priority key (the first layer's) overtakes a
  queue of low-priority bytes instead of waiting behind them.
- ``"fifo"`` (MXNet over ps-lite): every message goes to zmq as soon as it is posted, in the
  order posted; priorities are ignored and nothing waits for an acknowledgement.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from realrun.ps.message import Kind, Message
from realrun.ps.msgtrace import trace_from_environment
from realrun.ps.roles import HEARTBEAT_INTERVAL_S, NodeEnv
from realrun.ps.tracker import Handle, JobAborted, RequestFailed, Tracker
from realrun.ps.van import Incoming, RateLimitedLog, Van

log = logging.getLogger(__name__)

# Unacknowledged bytes per server. 16 MiB (a whole model) let the worker whose TCP stream
# won the larger share of a server's NIC run ahead: the server answers a key's pulls only
# once every worker's push of it has arrived, so its outgoing link idled early and queued
# late. Measured on the emulated cluster (2 workers -> 1 server, 100 Mbit/s, 64 x 250 kB keys):
# iteration 1.20x the bound max(M/B, nM/kB) at 16 MiB, 1.15x at 1 MiB, 1.14x at 512 KiB, 1.09x
# at 256 KiB. A small window also lets a high-priority key overtake (module docstring).
DEFAULT_WINDOW_BYTES = 256 << 10
# A message larger than the window went alone, and the next one waited for its acknowledgement,
# which the server sends after merging (and, for the last worker, updating) the slice: the link
# idled for that time plus a round trip after every big slice. ResNet-18 (slices up to 4.7 MB)
# on 2 co-located workers at 1 Gbit/s (dilation 5) reached 95 samples/s against MXNet's 116
# measured beside it (benchmarks/bench_mxnet_emulated.py), and 130-143 with a 64 MiB window
# (single runs on a machine loaded 12-19 by other work: ratios, not absolute figures).
# So once a peer has been sent a message larger than the window, its window becomes twice that
# message: the next big slice is already in the socket while the first one is acknowledged.
# Jobs whose slices all fit in the window (the measurement above) keep exactly their window.
DOUBLE_BUFFER = 2
SCHEDULER = "scheduler"

# How queued messages leave (module docstring; simscale.spec.scenario, kvstore.scheduling).
Scheduling = Literal["fifo", "priority"]


def window_bytes_for(send_window_mb: float) -> int:
    """The per-server window of a scenario's ``kvstore.send_window_mb`` (MiB, as the simulator
    reads it); 0, the field's default, is realrun's own ``DEFAULT_WINDOW_BYTES``."""
    return int(send_window_mb * 2**20) if send_window_mb > 0 else DEFAULT_WINDOW_BYTES


# A server's request handler: one incoming message in, the answers (to ROUTER identities) out.
Handler = Callable[[Incoming], list[tuple[bytes, Message]]]


@dataclass(frozen=True)
class Assignment:
    """What the scheduler tells a node once everyone has registered."""

    rank: int
    num_workers: int
    num_servers: int
    servers: tuple[str, ...]  # tcp://host:port of server rank 0, 1, ...


def server_peer(rank: int) -> str:
    return f"server-{rank}"


def worker_identity(rank: int) -> bytes:
    """How a worker's DEALER is known to servers; servers read the rank back from it."""
    return f"w{rank}".encode()


def worker_rank_of(identity: bytes) -> int | None:
    text = identity.decode(errors="replace")
    return int(text[1:]) if text[:1] == "w" and text[1:].isdigit() else None


class Postoffice:
    """Runs a worker's or server's I/O thread; ``handler`` answers requests on a server."""

    def __init__(
        self,
        env: NodeEnv,
        handler: Handler | None = None,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        scheduling: Scheduling = "priority",
    ) -> None:
        self.env = env
        self.handler = handler
        self.window_bytes = window_bytes
        self.scheduling: Scheduling = scheduling
        self.tracker = Tracker()
        self.van = Van(
            env.secret_key,
            env.max_message_bytes if env.role == "server" else None,
            env.message_mac,
        )
        self.port = self.van.bind(env.node_host) if env.role == "server" else 0
        self.hostname = socket.gethostname()
        self.assignment: Assignment | None = None
        self.error: str | None = None
        self._ready = threading.Event()
        self.shutdown = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._queues: dict[str, list[tuple[int, int, Message, int]]] = {}
        self._in_flight: dict[str, int] = {}
        self._window: dict[str, int] = {}  # per peer: window_bytes, or DOUBLE_BUFFER x its largest
        self._sent_bytes: dict[int, tuple[str, int]] = {}  # request id -> (peer, bytes)
        self._thread = threading.Thread(target=self._run, name=f"{env.role}-io", daemon=True)
        self._identity = f"{env.role}-{self.hostname}-{os.getpid()}-{secrets.token_hex(3)}"
        self.trace = trace_from_environment(env.role)
        self._warn = RateLimitedLog(log)
        self.schedule(scheduling, window_bytes)

    # ---- used from any thread ----

    def start(self) -> Assignment:
        """Register with the scheduler and wait for this node's rank."""
        self._thread.start()
        if not self._ready.wait(self.env.start_timeout_s + 1.0):
            self.close()
            raise JobAborted(
                f"no rank from the scheduler at {self.env.root_address} within "
                f"{self.env.start_timeout_s:.0f} s"
            )
        if self.error is not None:
            raise JobAborted(self.error)
        assert self.assignment is not None
        return self.assignment

    def schedule(self, scheduling: Scheduling, window_bytes: int = DEFAULT_WINDOW_BYTES) -> None:
        """Choose how queued messages leave (module docstring); before the first request."""
        if scheduling not in ("fifo", "priority"):
            raise ValueError(f"scheduling {scheduling!r}, expected fifo or priority")
        if window_bytes <= 0:
            raise ValueError(f"window_bytes {window_bytes}, expected a positive byte count")
        with self._lock:
            self.scheduling = scheduling
            self.window_bytes = window_bytes
            self._window.clear()

    def post(self, peer: str, msg: Message, priority: int = 0) -> None:
        """Queue ``msg`` for ``peer``; with "priority" scheduling, higher ``priority`` first."""
        if self.error is not None:
            raise JobAborted(self.error)
        nbytes = msg.nbytes
        fifo = self.scheduling == "fifo"
        with self._lock:
            heapq.heappush(
                self._queues.setdefault(peer, []),
                (0 if fifo else -priority, next(self._seq), msg, nbytes),
            )
            if not fifo and nbytes > self.window_bytes:
                window = self._window.get(peer, self.window_bytes)
                self._window[peer] = max(window, DOUBLE_BUFFER * nbytes)
        if self.trace is not None:
            self.trace.log("post", peer, msg)
        # A message posted by the I/O thread itself (a pull request its ack callback queues)
        # leaves with this round's flush: waking it through the pipe cost two system calls
        # and an extra poll round per acknowledged push.
        if threading.current_thread() is not self._thread:
            self._wake()

    def request(
        self,
        peer: str,
        msg: Message,
        handle: Handle,
        priority: int = 0,
        on_response: Callable[[Message], None] | None = None,
    ) -> None:
        """Post a message whose RESPONSE completes one part of ``handle``."""
        rid = self.tracker.add(handle, on_response)
        self.post(peer, msg.with_request_id(rid), priority)

    def barrier(self, group: str = "worker") -> Handle:
        """A handle that completes when every node of ``group`` (worker|server|all) got here."""
        handle = Handle(1, f"barrier of {group}s")
        self.request(SCHEDULER, Message(Kind.BARRIER, body={"group": group}), handle)
        return handle

    def report(self, body: dict) -> None:
        self.post(SCHEDULER, Message(Kind.REPORT, body=body))

    def finish(self, timeout_s: float = 30.0) -> None:
        """Tell the scheduler this worker is done; wait until it shuts the job down."""
        self.post(SCHEDULER, Message(Kind.FINISH))
        deadline = time.monotonic() + timeout_s
        while not self.shutdown.wait(0.05):
            if self.error is not None:
                raise JobAborted(self.error)
            if time.monotonic() > deadline:
                raise JobAborted(f"no shutdown from the scheduler within {timeout_s:.0f} s")

    def fail(self, message: str) -> None:
        """Tell the scheduler this node failed, so it stops the job with our message."""
        if self.error is None and self._thread.is_alive():
            self.post(SCHEDULER, Message(Kind.FAIL, body={"message": message}))
            time.sleep(0.2)  # let the I/O thread hand it to zmq before we close

    def wait_closed(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def close(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5.0)
        if not self._thread.is_alive():  # finished, or never started
            self._close_van()

    def _wake(self) -> None:
        van = self.van
        if van is not None:
            van.wake()

    # ---- the I/O thread ----

    def _run(self) -> None:
        env = self.env
        try:
            self.van.connect(SCHEDULER, env.root_address, self._identity)
            self.van.send(
                SCHEDULER,
                Message(
                    Kind.REGISTER,
                    body={
                        "role": env.role,
                        "host": env.node_host,
                        "port": self.port,
                        "pid": os.getpid(),
                        "hostname": self.hostname,
                        "slot": env.slot,
                    },
                ),
            )
            started = last_heard = time.monotonic()
            next_beat = started
            while not self._stop.is_set():
                for inc in self.van.poll(0.05):
                    if self.trace is not None:
                        self.trace.log("recv", inc.peer or repr(inc.identity), inc.msg)
                    if inc.peer == SCHEDULER:
                        last_heard = time.monotonic()
                        self._from_scheduler(inc.msg)
                    elif inc.peer is not None:
                        self._from_server(inc.peer, inc.msg)
                    else:
                        self._serve(inc)
                self._flush()
                now = time.monotonic()
                if now >= next_beat:
                    self.van.send(SCHEDULER, Message(Kind.HEARTBEAT))
                    next_beat = now + HEARTBEAT_INTERVAL_S
                if self.assignment is None and now - started > env.start_timeout_s:
                    self._abort(
                        f"{env.role} got no rank from the scheduler at {env.root_address} "
                        f"within {env.start_timeout_s:.0f} s: is it running there, and are "
                        "DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT right?"
                    )
                elif self.assignment and now - last_heard > env.heartbeat_timeout_s:
                    self._abort(
                        f"{env.role} lost the scheduler at {env.root_address}: "
                        f"nothing heard for {env.heartbeat_timeout_s:.0f} s"
                    )
                if self.error is not None or (self.shutdown.is_set() and env.role == "server"):
                    break
        except Exception as e:  # the I/O thread must never die silently
            log.exception("%s I/O thread failed", env.role)
            self._abort(f"{env.role} I/O thread failed: {type(e).__name__}: {e}")
        finally:
            self._ready.set()
            if self._stop.is_set() or self.error is not None or self.shutdown.is_set():
                self._close_van()

    def _from_scheduler(self, msg: Message) -> None:
        if msg.kind is Kind.ASSIGN and self.assignment is None:
            b = msg.body
            self.assignment = Assignment(
                int(b["rank"]), int(b["num_workers"]), int(b["num_servers"]), tuple(b["servers"])
            )
            if self.trace is not None:
                self.trace.log("rank", str(self.assignment.rank), msg)
            if self.env.role == "worker":
                for i, address in enumerate(self.assignment.servers):
                    self.van.connect(
                        server_peer(i), address, worker_identity(self.assignment.rank).decode()
                    )
            self._ready.set()
        elif msg.kind is Kind.BARRIER_DONE:
            self.tracker.complete(msg.request_id, msg)
        elif msg.kind is Kind.ABORT:
            self._abort(str(msg.body.get("message", "aborted by the scheduler")))
        elif msg.kind is Kind.SHUTDOWN:
            if self.env.role == "server":
                self.van.send(SCHEDULER, Message(Kind.BYE))
            self.shutdown.set()
        elif msg.kind is not Kind.HEARTBEAT:
            log.warning("ignored unexpected %s from the scheduler", msg.kind.name)

    def _from_server(self, peer: str, msg: Message) -> None:
        sent = self._sent_bytes.pop(msg.request_id, None)
        if sent is not None:
            self._in_flight[sent[0]] -= sent[1]
        if msg.kind is Kind.RECEIVED:  # the push's bytes arrived; its RESPONSE comes later
            if sent is None and self.scheduling == "priority":
                log.warning("ignored RECEIVED of unknown request %d from %s", msg.request_id, peer)
            return
        if msg.kind is Kind.RESPONSE:
            known = self.tracker.complete(msg.request_id, msg)
        elif msg.kind is Kind.ERROR:
            known = self.tracker.fail(
                msg.request_id,
                RequestFailed(f"{peer}: {msg.body.get('message', 'request rejected')}"),
            )
        else:
            known = False
        if not known:
            log.warning(
                "ignored unexpected %s (request %d) from %s", msg.kind.name, msg.request_id, peer
            )

    def _serve(self, inc: Incoming) -> None:
        if self.handler is None:
            log.warning("ignored a %s request: this node serves nothing", inc.msg.kind.name)
            return
        assert inc.identity is not None
        try:
            answers = self.handler(inc)
        except Exception as e:  # a request no handler foresaw: drop it, keep serving
            self._warn.handler_failed(inc.msg, inc.identity, e)
            return
        for identity, answer in answers:
            self.van.reply(identity, answer)
            if self.trace is not None:
                self.trace.log("send", repr(identity), answer)

    def _flush(self) -> None:
        with self._lock:
            ready: list[tuple[str, Message]] = []
            if self.scheduling == "fifo":  # ps-lite: everything, in the order posted
                for peer, heap in self._queues.items():
                    ready.extend((peer, heapq.heappop(heap)[2]) for _ in range(len(heap)))
            for peer, heap in self._queues.items():
                busy = self._in_flight.get(peer, 0)
                window = self._window.get(peer, self.window_bytes)
                # A message without payload (a pull request, a control message) takes no room
                # in the window and never waits for it: a pushpull's pull request leaves right
                # behind its push, as designed, not after that push is acknowledged.
                while heap and (heap[0][3] == 0 or busy == 0 or busy + heap[0][3] <= window):
                    _, _, msg, nbytes = heapq.heappop(heap)
                    if nbytes and msg.request_id:
                        busy += nbytes
                        self._sent_bytes[msg.request_id] = (peer, nbytes)
                    ready.append((peer, msg))
                self._in_flight[peer] = busy
        for peer, msg in ready:
            self.van.send(peer, msg)
            if self.trace is not None:
                self.trace.log("send", peer, msg)

    def _abort(self, message: str) -> None:
        if self.error is None:
            self.error = message  # the role's main logs it once, with who it is
        self.tracker.fail_all(JobAborted(message))
        self._ready.set()

    def _close_van(self) -> None:
        with self._lock:
            if self.van is None:
                return
            van, self.van = self.van, None  # type: ignore[assignment]
        van.close()
        if self.trace is not None:
            self.trace.close()
