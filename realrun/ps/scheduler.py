"""The scheduler: rendezvous (addresses in, ranks out), barriers, liveness, clean shutdown.

It never touches parameters. Everything it learns that a launcher may want (its port, the
ranks, per-iteration reports, the end or the failure of the job) goes out through ``emit`` as
plain dicts; ``realrun.node`` prints them as JSON lines on stdout.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from realrun.ps.message import Kind, Message
from realrun.ps.roles import HEARTBEAT_INTERVAL_S, NodeEnv
from realrun.ps.van import RateLimitedLog, Van

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
BYE_TIMEOUT_S = 5.0  # how long servers get to acknowledge the shutdown


@dataclass
class NodeInfo:
    """A registered node, as the scheduler knows it."""

    identity: bytes
    role: str
    host: str
    port: int
    pid: int
    hostname: str
    slot: int | None
    arrival: int
    rank: int = -1
    last_seen: float = field(default_factory=time.monotonic)

    def describe(self) -> str:
        rank = f"rank {self.rank}" if self.rank >= 0 else "(no rank yet)"
        return f"{self.role} {rank} on {self.host} (host {self.hostname}, pid {self.pid})"


class Scheduler:
    """One job's scheduler; ``run()`` returns the process exit code (0 = the job finished)."""

    def __init__(self, env: NodeEnv, emit: Emit) -> None:
        self.env = env
        self.emit = emit
        self.van = Van(env.secret_key, mac_mode=env.message_mac)
        self.port = self.van.bind(socket.gethostbyname(env.root_uri), env.root_port)
        self.nodes: dict[bytes, NodeInfo] = {}
        self.assigned = False
        self.finished: set[int] = set()
        self.byes: set[int] = set()
        self.barriers: dict[str, list[tuple[bytes, int]]] = {}
        self.error: str | None = None
        self._warn = RateLimitedLog(log)

    def run(self) -> int:
        try:
            self.emit({"event": "listening", "host": self.env.root_uri, "port": self.port})
            return self._run()
        finally:
            self.van.close()

    def _run(self) -> int:
        env = self.env
        started = time.monotonic()
        next_beat = started
        shutdown_at: float | None = None
        while True:
            for inc in self.van.poll(0.05):
                assert inc.identity is not None
                try:
                    self._handle(inc.identity, inc.msg)
                except Exception as e:  # nothing a peer sends may stop the scheduler
                    self._warn.handler_failed(inc.msg, inc.identity, e)
            if self.error is not None:
                return self._abort(self.error)
            now = time.monotonic()
            if not self.assigned:
                if now - started > env.start_timeout_s:
                    return self._abort(self._missing(env.start_timeout_s))
            elif shutdown_at is None:
                for node in self.nodes.values():
                    if now - node.last_seen > env.heartbeat_timeout_s:
                        return self._abort(
                            f"{node.describe()} stopped responding: no heartbeat "
                            f"for {now - node.last_seen:.1f} s"
                        )
                if len(self.finished) == env.num_workers:
                    self._broadcast(Message(Kind.SHUTDOWN))
                    shutdown_at = now
            elif len(self.byes) == env.num_servers or now - shutdown_at > BYE_TIMEOUT_S:
                missing = env.num_servers - len(self.byes)
                if missing:
                    log.warning("%d server(s) did not acknowledge the shutdown", missing)
                self.emit({"event": "done"})
                return 0
            if now >= next_beat:
                self._broadcast(Message(Kind.HEARTBEAT))
                next_beat = now + HEARTBEAT_INTERVAL_S

    def _handle(self, who: bytes, msg: Message) -> None:
        node = self.nodes.get(who)
        if node is not None:
            node.last_seen = time.monotonic()
        if msg.kind is Kind.REGISTER:
            self._register(who, msg.body)
        elif node is None:
            log.warning("ignored %s from unregistered %r", msg.kind.name, who)
        elif msg.kind is Kind.HEARTBEAT:
            pass
        elif msg.kind is Kind.BARRIER:
            self._barrier(who, msg)
        elif msg.kind is Kind.REPORT and node.role == "worker":
            self.emit({"event": "report", "rank": node.rank, **msg.body})
        elif msg.kind is Kind.FINISH and node.role == "worker":
            self.finished.add(node.rank)
            self.emit({"event": "finished", "rank": node.rank})
        elif msg.kind is Kind.BYE and node.role == "server":
            self.byes.add(node.rank)
        elif msg.kind is Kind.FAIL:
            self.error = f"{node.describe()} failed: {msg.body.get('message', 'no reason given')}"
        else:
            log.warning("ignored unexpected %s from %s", msg.kind.name, node.describe())

    def _register(self, who: bytes, body: dict[str, Any]) -> None:
        try:
            node = NodeInfo(
                who,
                _text(body["role"], "role"),
                _text(body["host"], "host"),
                _bounded_int(body["port"], "port", 0, 65535),
                _bounded_int(body["pid"], "pid", 1, 1 << 32),
                _text(body.get("hostname", "?"), "hostname"),
                None
                if body.get("slot") is None
                else _bounded_int(body["slot"], "slot", 0, 1 << 16),
                len(self.nodes),
            )
        except (KeyError, TypeError, ValueError) as e:
            self._warn.warning(
                "registration", "rejected a malformed registration from %r: %s", who, e
            )
            return
        expected = {"worker": self.env.num_workers, "server": self.env.num_servers}
        have = sum(1 for n in self.nodes.values() if n.role == node.role)
        if (
            who in self.nodes
            or node.role not in expected
            or self.assigned
            or have >= expected[node.role]
        ):
            # Refused and logged, never fatal: a late, repeated or surplus registration must
            # not take a rank or stop the job that is running (issue 13).
            self._warn.warning(
                "late",
                "refused %s: the job (%d workers, %d servers) %s",
                node.describe(),
                self.env.num_workers,
                self.env.num_servers,
                "has started" if self.assigned else "has all its nodes of that role",
            )
            return
        self.nodes[who] = node
        self.emit(
            {
                "event": "registered",
                "role": node.role,
                "host": node.host,
                "pid": node.pid,
                "slot": node.slot,
            }
        )
        if len(self.nodes) == self.env.num_workers + self.env.num_servers:
            self._assign()

    def _assign(self) -> None:
        for role in ("server", "worker"):
            group = [n for n in self.nodes.values() if n.role == role]
            slots = {n.slot for n in group}
            # Honour the launcher's slots when they are a permutation of 0..n-1 (the launcher
            # then knows each rank's host up front); otherwise ranks follow arrival order.
            if slots == set(range(len(group))):
                group.sort(key=lambda n: n.slot)
            else:
                group.sort(key=lambda n: n.arrival)
            for rank, n in enumerate(group):
                n.rank = rank
        servers = sorted(
            (n for n in self.nodes.values() if n.role == "server"), key=lambda n: n.rank
        )
        addresses = [f"tcp://{n.host}:{n.port}" for n in servers]
        for n in self.nodes.values():
            self.van.reply(
                n.identity,
                Message(
                    Kind.ASSIGN,
                    body={
                        "rank": n.rank,
                        "num_workers": self.env.num_workers,
                        "num_servers": self.env.num_servers,
                        "servers": addresses,
                    },
                ),
            )
        self.assigned = True
        self.emit(
            {
                "event": "assigned",
                "nodes": [
                    {
                        "role": n.role,
                        "rank": n.rank,
                        "host": n.host,
                        "hostname": n.hostname,
                        "pid": n.pid,
                        "port": n.port,
                    }
                    for n in self.nodes.values()
                ],
            }
        )

    def _barrier(self, who: bytes, msg: Message) -> None:
        group = msg.body.get("group")
        sizes = {
            "worker": self.env.num_workers,
            "server": self.env.num_servers,
            "all": self.env.num_workers + self.env.num_servers,
        }
        if group not in sizes:
            log.warning("ignored a barrier of unknown group %r", group)
            return
        waiting = self.barriers.setdefault(group, [])
        waiting.append((who, msg.request_id))
        if len(waiting) == sizes[group]:
            self.barriers[group] = []
            for identity, rid in waiting:
                self.van.reply(identity, Message(Kind.BARRIER_DONE, rid))

    def _missing(self, waited_s: float) -> str:
        parts = []
        for role, n in (("worker", self.env.num_workers), ("server", self.env.num_servers)):
            have = sorted(
                x.slot for x in self.nodes.values() if x.role == role and x.slot is not None
            )
            count = sum(1 for x in self.nodes.values() if x.role == role)
            if count < n:
                absent = sorted(set(range(n)) - set(have)) if len(have) == count else []
                which = f" (missing rank {', '.join(map(str, absent))})" if absent else ""
                parts.append(f"{count} of {n} {role}s{which}")
        return (
            f"job did not start: only {' and '.join(parts)} registered with the scheduler "
            f"at {self.env.root_address} within {waited_s:.0f} s"
        )

    def _abort(self, message: str) -> int:
        log.error("%s", message)
        self._broadcast(Message(Kind.ABORT, body={"message": message}))
        self.emit({"event": "error", "message": message})
        time.sleep(0.1)  # give zmq a moment to hand the ABORTs to the kernel
        return 1

    def _broadcast(self, msg: Message) -> None:
        for n in self.nodes.values():
            self.van.reply(n.identity, msg)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > 255:
        raise ValueError(f"{name}: expected a string of at most 255 characters")
    return value


def _bounded_int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}: got {value!r}, expected an integer in [{low}, {high}]")
    return value
