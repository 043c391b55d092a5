"""How a role is started: its argv and environment, independent of where it runs.

A launcher strategy (``realrun.launching.local_launcher`` here; network namespaces, ssh later)
decides
*where*: it receives ``start(role, rank, argv, env)`` and returns a handle to the process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import realrun
from realrun.ps.roles import PARENT_PID_VARIABLE, NodeEnv


@dataclass(frozen=True)
class RoleCommand:
    """What to execute for one node: the program and its environment additions."""

    role: str
    rank: int
    argv: tuple[str, ...]
    env: dict[str, str]


class NodeProcess(Protocol):
    """A started node, wherever it runs."""

    role: str
    rank: int
    host: str
    pid: int
    stdout: IO[str] | None  # the scheduler's event stream; None for other roles

    def poll(self) -> int | None: ...

    def signal_group(self, sig: int) -> None: ...

    def wait(self, timeout_s: float) -> int | None: ...


class Launcher(Protocol):
    """Where nodes run: ``host_of`` gives the address a node listens on."""

    name: str
    scheduler_host: str

    def host_of(self, role: str, rank: int) -> str: ...

    def describe(self) -> dict[str, Any]:
        """Where the job ran (hosts, link shaping...), copied into the run record."""
        ...

    def start(
        self, role: str, rank: int, argv: Sequence[str], env: dict[str, str]
    ) -> NodeProcess: ...


def project_root() -> Path:
    """The directory that contains the ``realrun`` package (children import from it)."""
    return Path(realrun.__file__).resolve().parent.parent


def node_command(
    node: NodeEnv,
    rank: int,
    scenario_path: str | None = None,
    overrides: Sequence[str] = (),
    worker_args: Sequence[str] = (),
) -> RoleCommand:
    """argv and environment of ``python -m realrun.node`` for one node."""
    argv = [sys.executable, "-m", "realrun.node"]
    if node.role == "worker":
        if scenario_path is None:
            raise ValueError("a worker needs the scenario path")
        argv += ["--scenario", str(Path(scenario_path).resolve())]
        for item in overrides:
            argv += ["--set", item]
        argv += worker_args
    return RoleCommand(node.role, rank, tuple(argv), node.to_env())


def child_environ(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus ``extra``, with the project importable uninstalled."""
    env = dict(os.environ)
    env.update(extra)
    # The node ends itself if this launcher dies without tearing it down (simscale.lifetime).
    env[PARENT_PID_VARIABLE] = str(os.getpid())
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(project_root()) + (os.pathsep + old if old else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env
