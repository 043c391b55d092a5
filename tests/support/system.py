"""Helpers for tests that start real processes, network namespaces and sshd: what they need
to run, and checks that they left nothing behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from realrun.emulated import netns
from realrun.run import LaunchOptions


def netns_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"needs iproute2: {', '.join(missing)} not on PATH"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun (CONFIG_TUN)"
    return None


NETNS_SKIP = netns_skip_reason()
needs_netns = pytest.mark.skipif(NETNS_SKIP is not None, reason=NETNS_SKIP or "")


def root_links() -> set[str]:
    out = netns.run_command(["ip", "-o", "link", "show"])
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def assert_nothing_left(record, links_before: set[str]) -> None:
    prefix = record.environment["launcher_details"]["prefix"]
    assert [n for n in netns.list_namespaces() if n.startswith(prefix)] == []
    assert root_links() == links_before
    assert record.environment["nodes"], "the scheduler reported its nodes"
    assert [n for n in record.environment["nodes"] if alive(int(n["pid"]))] == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ssh_skip_reason() -> str | None:
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        return "needs openssh-server (/usr/sbin/sshd) and the ssh client"
    if os.geteuid() != 0:
        return "sshd needs root to switch to the logged-in user"
    return None


SSH_SKIP = ssh_skip_reason()


@contextlib.contextmanager
def local_sshd(tmp_path: Path) -> Iterator[LaunchOptions]:
    """This machine's sshd on a free port, trusting a fresh key, while the block runs: the
    ssh launcher's options for one host, 127.0.0.1. Afterwards sshd is gone."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
            check=True,
            timeout=30,
        )
    authorized = keys / "authorized_keys"
    authorized.write_text((keys / "client.pub").read_text())
    port = free_port()
    pidfile = tmp_path / "sshd.pid"
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    sshd = subprocess.Popen(
        [
            "/usr/sbin/sshd",
            "-D",
            "-e",
            "-p",
            str(port),
            "-o",
            "ListenAddress=127.0.0.1",
            "-h",
            str(keys / "host"),
            "-o",
            f"AuthorizedKeysFile={authorized}",
            "-o",
            "StrictModes=no",
            "-o",
            f"PidFile={pidfile}",
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "UsePAM=no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        hostfile = tmp_path / "hosts"
        hostfile.write_text("127.0.0.1\n")
        options = (
            f"Port={port}",
            f"IdentityFile={keys / 'client'}",
            f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
        )
        yield LaunchOptions("ssh", str(hostfile), options)
    finally:
        sshd.send_signal(signal.SIGTERM)
        try:
            sshd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sshd.kill()
            sshd.wait(timeout=10)
        assert sshd.stderr is not None
        sshd.stderr.close()
    assert not alive(sshd.pid)


def gone(pid: int) -> bool:
    """True when no process of group ``pid`` is left."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False
