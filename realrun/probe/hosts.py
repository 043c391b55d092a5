"""Where the probe's ends run: the same three launchers as a training run, seen as hosts.

A probe needs, on host i, to start ``python -m realrun.probe.agent ...`` and read the one JSON
line it prints. ``LocalHosts`` runs every "host" on this machine over 127.0.0.1 (no shaping:
it measures this machine's loopback and CPU); ``NetnsHosts`` builds the emulated cluster of a
scenario with ``NetnsLauncher`` (the same namespaces, shaping and TCP settings as a training
run, and its machine-load sampler); ``SshHosts`` starts the ends over ssh on a hostfile's hosts
with the ssh launcher's options and remote command (new session, process group reported).

Every end is started in its own process group and stopped by ``close()`` (SIGTERM, then
SIGKILL); each agent also bounds its own run time, so nothing outlives a probe for long even
when the launcher is killed.
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from realrun.emulated.emulated_cluster import TERM_GRACE_S, python_env, stop_process_groups

AGENT_MODULE = "realrun.probe.agent"
READY_LINE = "listening"
START_TIMEOUT_S = 20.0  # an interpreter start (torch imports included) on a loaded machine


class ProbeHostError(RuntimeError):
    """A host failed a probe step; the message names the host, in one line."""


@dataclass(frozen=True)
class ProbeHost:
    """A host as the probe sees it: its name, the address peers reach it on, its nominal NIC
    (rate each way and one-way latency) when the launcher knows it."""

    name: str
    address: str
    rate_mbit: float | None = None
    latency_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "rate_mbit": self.rate_mbit,
            "latency_us": self.latency_us,
        }


class HostSet:
    """Start agent processes on hosts and collect their results; a context manager."""

    launcher = ""
    hosts: tuple[ProbeHost, ...] = ()
    # The time dilation D a training run on these hosts replays its compute at (the emulated
    # cluster's ``realrun.dilation``; real hosts run at 1): the psrtt step's replay uses it.
    dilation = 1.0

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []

    # -- for subclasses -----------------------------------------------------------------
    def _popen(self, index: int, argv: list[str]) -> subprocess.Popen[str]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {}

    def load(self) -> dict[str, Any] | None:
        """This machine's load while probing, where the launcher samples it."""
        return None

    def free_port(self) -> int | None:
        """A port a step's listener can take on every host, where the launcher can tell; None
        where it cannot (the runner then uses the step's fixed port)."""
        return None

    # -- life cycle ---------------------------------------------------------------------
    def __enter__(self) -> HostSet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        """Stop every agent still running (SIGTERM to its group, SIGKILL after a grace)."""
        procs, self._procs = self._procs, []
        stop_process_groups(procs, TERM_GRACE_S)

    # -- starting agents ----------------------------------------------------------------
    def agent_argv(self, role: str, *args: Any) -> list[str]:
        return [sys.executable, "-m", AGENT_MODULE, role, *(str(a) for a in args)]

    def start(self, index: int, role: str, *args: Any) -> subprocess.Popen[str]:
        """Start an agent ``role`` on host ``index``."""
        try:
            proc = self._popen(index, self.agent_argv(role, *args))
        except OSError as e:
            raise self.failed(index, f"could not start the {role} probe end: {e}") from None
        self._procs.append(proc)
        return proc

    def start_listener(self, index: int, role: str, *args: Any) -> subprocess.Popen[str]:
        """Start an agent that listens, and wait for its 'listening' line."""
        proc = self.start(index, role, *args)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline().strip() if ready else ""
        if line != READY_LINE:
            stop_process_groups([proc], TERM_GRACE_S)
            raise self.failed(index, f"the {role} probe end did not start", proc)
        return proc

    def result(
        self, index: int, proc: subprocess.Popen[str], timeout_s: float, what: str
    ) -> dict[str, Any]:
        """The JSON line an agent prints at its end; ProbeHostError naming the host otherwise."""
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_process_groups([proc], TERM_GRACE_S)
            raise self.failed(index, f"{what} did not finish within {timeout_s:.0f} s") from None
        lines = [ln for ln in (out or "").strip().splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = [ln.strip() for ln in (err or "").splitlines() if ln.strip()]
            detail = f": {tail[-1]}" if tail else ""
            raise self.failed(index, f"{what} failed (exit {proc.returncode}){detail}")
        result: dict[str, Any] = json.loads(lines[-1])
        return result

    def failed(
        self, index: int, what: str, proc: subprocess.Popen[str] | None = None
    ) -> ProbeHostError:
        """The one-line error of a failed step on host ``index``, with the end's last words."""
        host = self.hosts[index]
        detail = ""
        if proc is not None and proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                if proc.poll() is None:
                    stop_process_groups([proc], TERM_GRACE_S)
                tail = [ln.strip() for ln in proc.stderr.read().splitlines() if ln.strip()]
                detail = f": {tail[-1]}" if tail else ""
        return ProbeHostError(f"host {host.name} ({host.address}): {what}{detail}")


class LocalHosts(HostSet):
    """``count`` hosts that are all this machine, over 127.0.0.1 (nothing shaped)."""

    launcher = "local"

    def __init__(self, count: int) -> None:
        super().__init__()
        if count < 2:
            raise ValueError(f"the probe needs at least 2 hosts, got {count}")
        self.hosts = tuple(ProbeHost(f"local{i}", "127.0.0.1") for i in range(count))

    def _popen(self, index: int, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=python_env(),
        )

    def describe(self) -> dict[str, Any]:
        return {"hosts": "all on this machine, over 127.0.0.1", "link_shaping": None}

    def free_port(self) -> int | None:
        """One the kernel has free on 127.0.0.1: every host shares this machine's ports, so two
        local probes at once (a test suite's workers) would collide on the fixed ones."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


class NetnsHosts(HostSet):
    """The emulated cluster of ``scenario``, built exactly as ``realrun run --launcher netns``
    builds it (namespaces, HTB rates, delay wires, reno and the TCP small-queue limit)."""

    launcher = "netns"

    def __init__(self, scenario: Any) -> None:
        super().__init__()
        from realrun.launching.netns_launcher import NODE_NICE, NetnsLauncher

        self._nice = NODE_NICE
        self.netns = NetnsLauncher(scenario)
        self.dilation = float(scenario.realrun.dilation)
        self.hosts = tuple(
            ProbeHost(h.name, h.address, h.link.rate_mbit, h.link.latency_us)
            for h in self.netns.cluster.hosts
        )
        if len(self.hosts) < 2:
            raise ValueError("the probe needs a scenario of at least 2 hosts")
        self._entered = False

    def __enter__(self) -> NetnsHosts:
        self.netns.__enter__()
        self._entered = True
        return self

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            if self._entered:
                self._entered = False
                self.netns.close()

    def _popen(self, index: int, argv: list[str]) -> subprocess.Popen[str]:
        proc: subprocess.Popen[str] = self.netns.cluster.popen(
            index,
            ["nice", "-n", str(self._nice), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=python_env(),
        )
        self.netns._node_pids.append(proc.pid)  # the load sampler watches the probe's ends
        return proc

    def describe(self) -> dict[str, Any]:
        d = self.netns.describe()
        d.pop("worker_hosts", None)
        d.pop("server_hosts", None)
        return d

    def load(self) -> dict[str, Any] | None:
        from realrun.emulated.machine_load import verdict

        sampler = self.netns.sampler
        if sampler is None:
            return None
        sampler.sample()
        figures, reason = verdict(sampler.samples, None)
        return {**figures, "verdict": reason or "kept up"}


class SshHosts(HostSet):
    """The hostfile's hosts over ssh (the ssh launcher's options and remote command)."""

    launcher = "ssh"

    def __init__(self, hosts: Sequence[str], ssh_options: Sequence[str] = ()) -> None:
        super().__init__()
        from realrun.launching.ssh_launcher import SshLauncher

        if len(hosts) < 2:
            raise ValueError(f"the probe needs at least 2 hosts in the hostfile, got {len(hosts)}")
        self.ssh = SshLauncher(hosts, ssh_options)
        self.hosts = tuple(
            ProbeHost(h, self.ssh.host_of("worker", i)) for i, h in enumerate(self.ssh.hosts)
        )
        self._remote: list[tuple[list[str], int, subprocess.Popen[str]]] = []

    def _popen(self, index: int, argv: list[str]) -> subprocess.Popen[str]:
        from realrun.launching.launch import project_root
        from realrun.launching.ssh_launcher import PGID_PREFIX, remote_command

        root = str(project_root())
        ssh = self.ssh.ssh_argv(self.ssh.hosts[index])
        env = {"PYTHONPATH": root, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [*ssh, remote_command(argv, env, root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        # The remote end's first line is its process group (setsid), killed at close().
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if line.startswith(PGID_PREFIX):
            self._remote.append((ssh, int(line[len(PGID_PREFIX) :]), proc))
        return proc

    def close(self) -> None:
        for ssh, pgid, proc in self._remote:
            if proc.poll() is None:  # an interrupted probe: end the remote group too
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run(
                        [*ssh, f"kill -{int(signal.SIGKILL)} -- -{pgid} 2>/dev/null; true"],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=15,
                        check=False,
                    )
        self._remote = []
        self.stop_all()

    def describe(self) -> dict[str, Any]:
        return self.ssh.describe()
