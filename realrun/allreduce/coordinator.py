"""The all-reduce job's coordinator: hosts the TCP store the ranks meet at, relays their reports
to the launcher, and ends the job at the first failure, naming the rank.

realrun's launchers start it in the place of the PS scheduler (``python -m
realrun.allreduce.coordinator``, on the first host, its stdout the launcher's event stream) and
it speaks the scheduler's events: ``listening`` (the port it got, so none is guessed),
``assigned``, ``report``, ``done``, ``error``. The ranks never send it data: gloo and NCCL
connect them directly; only JSON reports (a queue in the store) and heartbeats (a counter per
rank) pass through here.

Failure rules, as the PS scheduler's: a rank that never joins within the start timeout, or whose
heartbeat stops for the heartbeat timeout, ends the job with its rank and host named. A rank's
own failure report is held back ``FAILURE_GRACE_S``: when a peer dies, the survivors' collectives
fail at once with "connection closed", and the launcher, watching the processes, should name the
dead rank first.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from realrun import safejson
from realrun.allreduce.membership import ReportVerifier
from realrun.allreduce.rendezvous import STORE_EVENTS_KEY, heartbeat_key
from realrun.auth import SECRET_VARIABLE, parse_secret
from realrun.ps.roles import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    HEARTBEAT_INTERVAL_S,
    RoleError,
    _float,
    _int,
    _required,
)

POLL_S = 0.05
FAILURE_GRACE_S = 1.0
STORE_TIMEOUT_S = 30.0
# A report line (a rank's measured timeline is the biggest) and its JSON nesting.
MAX_REPORT_BYTES = 64 << 20
MAX_REPORT_DEPTH = 16
REJECT_LOG_INTERVAL_S = 10.0


@dataclass
class RankState:
    """What the coordinator knows of one rank."""

    host: str
    pid: int
    beats: int = 0
    beat_at: float = field(default_factory=time.monotonic)
    finished: bool = False


class Coordinator:
    """One job of ``world_size`` ranks; ``emit`` receives the launcher events."""

    def __init__(
        self,
        host: str,
        port: int,
        world_size: int,
        emit: Callable[[dict[str, Any]], None],
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        key: bytes = b"",
    ) -> None:
        self.host = host
        self.verifier = ReportVerifier(key)
        self.rejected = 0
        self._rejected_logged_at = -REJECT_LOG_INTERVAL_S
        self.world_size = world_size
        self.emit = emit
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.start_timeout_s = start_timeout_s
        # TCPStore binds every interface whatever host it is given; a socket bound to the job's
        # address only, handed over, keeps the store off the host's other networks.
        listener = socket.create_server((host, port), backlog=1024)
        self.store = dist.TCPStore(
            host,
            listener.getsockname()[1],
            None,
            True,
            timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S),
            wait_for_workers=False,
            master_listen_fd=listener.detach(),  # the store owns it now
        )
        self.port = self.store.port
        self.ranks: dict[int, RankState] = {}
        self._failure: tuple[float, str] | None = None

    def run(self) -> int:
        """Serve until every rank finished (0) or the first failure (1)."""
        self.emit({"event": "listening", "host": self.host, "port": self.port})
        started = time.monotonic()
        next_beat_check = started
        while True:
            error = self._drain()
            now = time.monotonic()
            if error is None and self._failure is not None and now >= self._failure[0]:
                error = self._failure[1]
            late = now - started > self.start_timeout_s
            if error is None and len(self.ranks) < self.world_size and late:
                error = self._missing(now - started)
            if error is None and now >= next_beat_check:
                error = self._check_heartbeats(now)
                next_beat_check = now + HEARTBEAT_INTERVAL_S
            if error is not None:
                self.emit({"event": "error", "message": error})
                return 1
            if len(self.ranks) == self.world_size and all(r.finished for r in self.ranks.values()):
                self.emit({"event": "done"})
                return 0
            time.sleep(POLL_S)

    def _drain(self) -> str | None:
        for _ in range(self.store.queue_len(STORE_EVENTS_KEY)):
            event, why = self.verifier.open(
                self.store.queue_pop(STORE_EVENTS_KEY, block=False), self._decode
            )
            if event is None:
                self._reject(why)
                continue
            error = self._handle(event)
            if error is not None:
                return error
        return None

    @staticmethod
    def _decode(raw: Any) -> Any:
        return safejson.loads(raw, max_bytes=MAX_REPORT_BYTES, max_depth=MAX_REPORT_DEPTH)

    def _reject(self, why: str) -> None:
        """Drop a line no member signed; say so on stderr at most every 10 s."""
        self.rejected += 1
        now = time.monotonic()
        if now - self._rejected_logged_at >= REJECT_LOG_INTERVAL_S:
            self._rejected_logged_at = now
            print(
                f"realrun.allreduce.coordinator: dropped a report from the store ({why}); "
                f"{self.rejected} dropped so far",
                file=sys.stderr,
            )

    def _handle(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        rank = int(event.get("rank", -1))
        if kind == "hello":
            if not 0 <= rank < self.world_size or rank in self.ranks:
                return (
                    f"unexpected worker rank {rank} on {event.get('host')} tried to join a job "
                    f"of {self.world_size} ranks"
                )
            self.ranks[rank] = RankState(str(event.get("host")), int(event.get("pid", 0)))
            if len(self.ranks) == self.world_size:
                nodes = [
                    {"role": "worker", "rank": r, "host": s.host, "pid": s.pid}
                    for r, s in sorted(self.ranks.items())
                ]
                self.emit({"event": "assigned", "nodes": nodes})
        elif kind in ("environment", "iteration", "trace"):
            self.emit({"event": "report", **event})
        elif kind == "finished":
            self.ranks[rank].finished = True
        elif kind == "failed" and self._failure is None:
            # A failed membership proof is the cause, never the echo of a dead peer: no grace.
            cause = event.get("cause") is True
            self._failure = (
                time.monotonic() + (0.0 if cause else FAILURE_GRACE_S),
                f"{self._describe(rank)} failed: {event.get('message')}",
            )
        return None

    def _check_heartbeats(self, now: float) -> str | None:
        for rank, state in self.ranks.items():
            if state.finished:
                continue
            beats = self.store.add(heartbeat_key(rank), 0)
            if beats != state.beats:
                state.beats, state.beat_at = beats, now
            elif now - state.beat_at > self.heartbeat_timeout_s:
                return (
                    f"{self._describe(rank)} stopped responding: no heartbeat "
                    f"for {now - state.beat_at:.1f} s"
                )
        return None

    def _describe(self, rank: int) -> str:
        state = self.ranks.get(rank)
        where = f" on {state.host} (pid {state.pid})" if state else ""
        return f"worker rank {rank}{where}"

    def _missing(self, waited_s: float) -> str:
        absent = sorted(set(range(self.world_size)) - set(self.ranks))
        return (
            f"job did not start: only {len(self.ranks)} of {self.world_size} ranks joined "
            f"within {waited_s:.0f} s (missing rank {', '.join(map(str, absent))})"
        )


def coordinator_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The coordinator's settings from its environment (the launcher's MASTER_* and timeouts)."""
    env = os.environ if environ is None else environ
    return {
        "host": _required(env, "MASTER_ADDR"),
        "port": _int(env, "MASTER_PORT", 0, 65535),
        "world_size": _int(env, "WORLD_SIZE", 1, 1 << 16),
        "heartbeat_timeout_s": _float(
            env, "REALRUN_HEARTBEAT_TIMEOUT_S", DEFAULT_HEARTBEAT_TIMEOUT_S
        ),
        "start_timeout_s": _float(env, "REALRUN_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S),
        "key": _key(env),
    }


def _key(env: Mapping[str, str]) -> bytes:
    try:
        return parse_secret(_required(env, SECRET_VARIABLE))
    except ValueError as e:
        raise RoleError(str(e)) from None


def main() -> int:
    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    try:
        settings = coordinator_env()
    except RoleError as e:
        print(f"realrun.allreduce.coordinator: {e}", file=sys.stderr)
        return 2
    try:
        coordinator = Coordinator(emit=emit, **settings)
    except (OSError, RuntimeError, dist.DistError) as e:
        emit({"event": "error", "message": f"coordinator: cannot host the store: {e}"})
        return 1
    return coordinator.run()


if __name__ == "__main__":
    sys.exit(main())
