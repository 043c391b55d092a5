"""A whole PS job inside the test process: scheduler, servers and workers as threads over real
zmq TCP sockets on 127.0.0.1, so tests can look inside the servers."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from realrun.ps.kv_server import KVServer
from realrun.ps.postoffice import Postoffice
from realrun.ps.roles import NodeEnv
from realrun.ps.scheduler import Scheduler

JOIN_LIMIT_S = 20.0
TEST_SECRET = "7e57" * 16  # the job's secret (realrun.auth); "" runs unauthenticated


class InProcessJob:
    """``with InProcessJob(2, 2) as job: results = job.run_workers(fn)``."""

    def __init__(
        self,
        workers: int,
        servers: int,
        heartbeat_timeout_s: float = 4.0,
        secret: str = TEST_SECRET,
        max_message_bytes: int | None = None,
        message_mac: str = "header",
    ) -> None:
        self.env = NodeEnv(
            "scheduler",
            "127.0.0.1",
            0,
            servers,
            workers,
            "127.0.0.1",
            heartbeat_timeout_s=heartbeat_timeout_s,
            start_timeout_s=20.0,
            secret=secret,
            max_message_bytes=max_message_bytes,
            message_mac=message_mac,
        )
        self.events: list[dict[str, Any]] = []
        self.servers: list[KVServer] = [KVServer(workers) for _ in range(servers)]
        self.exit_code: int | None = None
        self._threads: list[threading.Thread] = []

    def node_env(self, role: str, slot: int) -> NodeEnv:
        return dataclasses.replace(self.env, role=role, root_port=self.port, slot=slot)

    def __enter__(self) -> InProcessJob:
        scheduler = Scheduler(self.env, self.events.append)
        self.port = scheduler.port
        self._start(lambda: setattr(self, "exit_code", scheduler.run()), "scheduler")
        for i, server in enumerate(self.servers):
            self._start(lambda i=i, server=server: self._serve(i, server), f"server-{i}")
        return self

    def _serve(self, i: int, server: KVServer) -> None:
        po = Postoffice(self.node_env("server", i), handler=server.handle)
        try:
            po.start()
            po.wait_closed()
        finally:
            po.close()

    def run_workers(self, fn: Callable[[Postoffice], Any], finish: bool = True) -> list[Any]:
        """Run ``fn(postoffice)`` on every worker at once; return results in rank order."""
        results: dict[int, Any] = {}
        errors: list[BaseException] = []

        def work(slot: int) -> None:
            po = Postoffice(self.node_env("worker", slot))
            try:
                po.start()
                results[po.assignment.rank] = fn(po)
                if finish:
                    po.finish()
            except BaseException as e:
                errors.append(e)
            finally:
                po.close()

        threads = [threading.Thread(target=work, args=(r,)) for r in range(self.env.num_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_LIMIT_S)
        assert not any(t.is_alive() for t in threads), "a worker thread hung"
        if errors:
            raise errors[0]
        return [results[r] for r in range(self.env.num_workers)]

    def __exit__(self, *exc: object) -> None:
        for t in self._threads:
            t.join(JOIN_LIMIT_S)
        assert not any(t.is_alive() for t in self._threads), "a scheduler/server thread hung"

    def _start(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name)
        t.start()
        self._threads.append(t)
