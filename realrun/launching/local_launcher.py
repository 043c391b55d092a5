"""The local launcher: every node a child process on this machine, on 127.0.0.1.

Each child gets its own session (process group) so that tearing the job down kills whatever
a node started too, and nothing outlives the launcher.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from typing import IO, Any

from realrun.launching.launch import child_environ


class LocalProcess:
    """A node running as a local child process."""

    def __init__(self, role: str, rank: int, host: str, popen: subprocess.Popen) -> None:
        self.role = role
        self.rank = rank
        self.host = host
        self.popen = popen
        self.pid = popen.pid
        self.stdout: IO[str] | None = popen.stdout

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # start_new_session made the pid the group id


class LocalLauncher:
    """Starts nodes with ``subprocess`` on this host."""

    name = "local"
    scheduler_host = "127.0.0.1"

    def host_of(self, role: str, rank: int) -> str:
        return "127.0.0.1"

    def describe(self) -> dict[str, Any]:
        # No shaping: every node shares this machine's CPUs and the loopback interface, so
        # "hosts" and NIC figures in the scenario are labels only here.
        return {"hosts": "all nodes on this machine, over 127.0.0.1", "link_shaping": None}

    def start(self, role: str, rank: int, argv: Sequence[str], env: dict[str, str]) -> LocalProcess:
        popen = subprocess.Popen(
            list(argv),
            env=child_environ(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if role == "scheduler" else subprocess.DEVNULL,
            stderr=None,  # logs go straight to the launcher's stderr
            text=True,
            start_new_session=True,
        )
        return LocalProcess(role, rank, self.host_of(role, rank), popen)
