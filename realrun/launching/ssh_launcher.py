"""The ssh launcher: nodes started on real machines over ssh, as MXNet's ``launch.py -H``.

The hostfile lists one host per line (``#`` comments allowed). As MXNet's ssh launcher does,
servers and workers are cycled over the hosts (server i and worker i on host ``i % hosts``)
and the scheduler runs on the first host, which is also ``DMLC_PS_ROOT_URI``. Every remote
node gets its ``DMLC_*`` variables in the remote command's environment and runs this
checkout's ``python -m realrun.node`` from the same path (a shared or identical file system,
as launch.py assumes). ssh options (``-o Port=2222``, ``-o IdentityFile=...``) are passed to
every ssh call.

Ending a job must end the remote processes too: closing an ssh session without a terminal
does not signal them. Each remote node therefore starts in a new session (``setsid``) and
first prints its process-group id; ``signal_group`` sends the signal to that whole remote
group with a second ssh call, and to the local ssh client.

The job's secret (``REALRUN_JOB_SECRET``) never appears in a command line, where ``ps`` on
either host would show it to every user: the remote shell reads it from the ssh session's
stdin, the first line the launcher writes there, and exports it to the node alone.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from realrun.auth import SECRET_VARIABLE
from realrun.launching.launch import project_root
from realrun.launching.local_launcher import LocalProcess

SSH_CONNECT_TIMEOUT_S = 10
PGID_TIMEOUT_S = 30.0  # ssh connect + remote shell start; the first line names the group
KILL_TIMEOUT_S = 15.0
PGID_PREFIX = "realrun-pgid "


def read_hostfile(path: str | Path) -> list[str]:
    """The hosts of a hostfile, in order; ValueError when there is none."""
    hosts = []
    for line in Path(path).read_text().splitlines():
        host = line.split("#", 1)[0].strip()
        if host:
            hosts.append(host.split()[0])
    if not hosts:
        raise ValueError(f"{path}: no host in the hostfile")
    return hosts


def remote_command(argv: Sequence[str], env: dict[str, str], workdir: str) -> str:
    """The shell line run on the remote host: new session, report its group, exec the node.

    Every variable but the job secret is on the line; the secret, if ``env`` has one, is read
    from stdin (``stdin_payload``) so that no process's argv carries it."""
    public = {k: v for k, v in env.items() if k != SECRET_VARIABLE}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(public.items()))
    node = f"exec env {assignments} {' '.join(shlex.quote(a) for a in argv)}"
    if SECRET_VARIABLE in env:
        # read is a shell builtin: the secret goes from the pipe into the shell's memory and
        # the node's environment (readable only by its own user), never into an argv.
        node = f"IFS= read -r {SECRET_VARIABLE} && export {SECRET_VARIABLE} && {node}"
    # setsid makes the inner shell a session (and group) leader: $$ is the group id, and the
    # node it execs keeps it. stdout carries the group id first, then the node's output.
    # --wait: the ssh session lasts as long as the node and ends with its exit status.
    inner = f"echo {PGID_PREFIX}$$; {node}"
    return f"cd {shlex.quote(workdir)} && exec setsid --wait sh -c {shlex.quote(inner)}"


def stdin_payload(env: dict[str, str]) -> str:
    """What the launcher writes to the ssh session's stdin: the secret's line, or nothing."""
    secret = env.get(SECRET_VARIABLE)
    return "" if secret is None else secret + "\n"


class SshProcess(LocalProcess):
    """A node running on a remote host, seen through its local ssh client (whose poll and wait
    are the local process's; only reading output and signalling differ)."""

    def __init__(
        self, role: str, rank: int, host: str, popen: subprocess.Popen, ssh: list[str]
    ) -> None:
        super().__init__(role, rank, host, popen)
        self._ssh = ssh
        self.remote_pgid = self._read_pgid()
        self.stdout: IO[str] | None = popen.stdout if role == "scheduler" else None
        if role != "scheduler" and popen.stdout is not None:
            # Other roles print nothing on stdout, but a full pipe must never block them.
            threading.Thread(target=_drain, args=(popen.stdout,), daemon=True).start()

    def _read_pgid(self) -> int | None:
        out = self.popen.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], PGID_TIMEOUT_S)
        line = out.readline() if ready else ""
        if line.startswith(PGID_PREFIX):
            return int(line[len(PGID_PREFIX) :].strip())
        return None  # ssh failed; poll() will say so

    def signal_group(self, sig: int) -> None:
        # Once the ssh session has ended, so has the remote group (setsid --wait).
        if self.remote_pgid is not None and self.popen.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run(
                    [*self._ssh, f"kill -{int(sig)} -- -{self.remote_pgid} 2>/dev/null; true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=KILL_TIMEOUT_S,
                    check=False,
                )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # the local ssh client, in its own session


def _address(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host  # let the node report what it cannot resolve


def _drain(stream: IO[str]) -> None:
    """Read a node's stdout to its end (the ssh session's), then close it."""
    with contextlib.suppress(OSError, ValueError):
        for _ in stream:
            pass
    with contextlib.suppress(OSError):
        stream.close()


class SshLauncher:
    """Starts nodes on the hostfile's hosts over ssh."""

    name = "ssh"

    def __init__(self, hosts: Sequence[str], ssh_options: Sequence[str] = ()) -> None:
        if not hosts:
            raise ValueError("the ssh launcher needs at least one host")
        self.hosts = list(hosts)
        self.ssh_options = list(ssh_options)
        self.scheduler_host = _address(self.hosts[0])

    def ssh_host(self, role: str, rank: int) -> str:
        """The hostfile entry a node runs on."""
        if role == "scheduler":
            return self.hosts[0]
        return self.hosts[rank % len(self.hosts)]

    def host_of(self, role: str, rank: int) -> str:
        # Servers bind this address, and zmq binds IP addresses, not host names.
        return _address(self.ssh_host(role, rank))

    def ssh_argv(self, host: str) -> list[str]:
        argv = [
            "ssh",
            *("-o", "BatchMode=yes"),
            *("-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"),
            *("-o", "StrictHostKeyChecking=accept-new"),
        ]
        for option in self.ssh_options:
            argv += ["-o", option]
        return [*argv, host]

    def describe(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "placement": "servers and workers cycled over the hosts, scheduler on the first",
            "ssh_options": self.ssh_options,
            "link_shaping": None,
        }

    def start(self, role: str, rank: int, argv: Sequence[str], env: dict[str, str]) -> SshProcess:
        host = self.ssh_host(role, rank)
        root = str(project_root())
        remote_env = {**env, "PYTHONPATH": root, "PYTHONUNBUFFERED": "1"}
        # argv[0] is this interpreter's path: the remote host must have the same one (launch.py
        # assumes a shared file system too).
        ssh = self.ssh_argv(host)
        popen = subprocess.Popen(
            [*ssh, remote_command(argv, remote_env, root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            start_new_session=True,
        )
        assert popen.stdin is not None
        # The node's stdin ends after the secret's line, as /dev/null did before.
        with contextlib.suppress(OSError):  # ssh already failed: poll() will say so
            popen.stdin.write(stdin_payload(remote_env))
            popen.stdin.close()
        return SshProcess(role, rank, host, popen, ssh)
