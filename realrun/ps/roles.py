"""Who a process is and where the job meets: the ps-lite/MXNet ``DMLC_*`` environment.

Any launcher (ours, ssh, mpirun, Slurm) starts a job by setting these variables, so this is the
one place they are read and checked.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from realrun.auth import MAC_VARIABLE, SECRET_VARIABLE, parse_mode, parse_secret

ROLES = ("scheduler", "server", "worker")

HEARTBEAT_INTERVAL_S = 0.5
# A node silent this long is declared dead. MXNet's PS_HEARTBEAT_TIMEOUT is off by default (and
# a dead worker hangs the job); 4 s tolerates a loaded 2-core machine and keeps the whole
# failure path (detect, abort, tear down) under the 10 s the project promises.
DEFAULT_HEARTBEAT_TIMEOUT_S = 4.0
DEFAULT_START_TIMEOUT_S = 60.0  # every node must have registered by then
# The launcher's pid, set by every launcher that starts nodes as its children: a node whose
# launcher died without tearing it down notices and ends itself (simscale.lifetime).
PARENT_PID_VARIABLE = "REALRUN_PARENT_PID"


class RoleError(ValueError):
    """The environment does not describe a valid node; the message names the variable."""


@dataclass(frozen=True)
class NodeEnv:
    """The ``DMLC_*`` settings of one process (plus realrun's optional timeouts)."""

    role: str
    root_uri: str
    root_port: int
    num_servers: int
    num_workers: int
    node_host: str
    slot: int | None = None  # rank the launcher wants this node to get (REALRUN_SLOT)
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    # The job's shared secret, hex (REALRUN_JOB_SECRET; realrun.auth). Node processes must have
    # one; the empty default only serves nodes built inside one process (tests, benchmarks).
    secret: str = ""
    # The largest message a server accepts (REALRUN_MAX_MESSAGE_BYTES): the job's largest key
    # slice plus headroom, so a peer cannot make a server buffer more than the model needs.
    max_message_bytes: int | None = None
    # What each message's tag covers (REALRUN_MESSAGE_MAC, realrun.auth): "header" (the meta
    # data and the arrays' lengths) or "full" (every byte, at a measured cost).
    message_mac: str = "header"

    @property
    def secret_key(self) -> bytes:
        return parse_secret(self.secret) if self.secret else b""

    @property
    def root_address(self) -> str:
        return f"tcp://{self.root_uri}:{self.root_port}"

    def to_env(self) -> dict[str, str]:
        """The variables that recreate this NodeEnv in a child process."""
        env = {
            "DMLC_ROLE": self.role,
            "DMLC_PS_ROOT_URI": self.root_uri,
            "DMLC_PS_ROOT_PORT": str(self.root_port),
            "DMLC_NUM_SERVER": str(self.num_servers),
            "DMLC_NUM_WORKER": str(self.num_workers),
            "DMLC_NODE_HOST": self.node_host,
            "REALRUN_HEARTBEAT_TIMEOUT_S": str(self.heartbeat_timeout_s),
            "REALRUN_START_TIMEOUT_S": str(self.start_timeout_s),
        }
        if self.slot is not None:
            env["REALRUN_SLOT"] = str(self.slot)
        if self.secret:
            env[SECRET_VARIABLE] = self.secret
        if self.max_message_bytes is not None:
            env["REALRUN_MAX_MESSAGE_BYTES"] = str(self.max_message_bytes)
        if self.message_mac != "header":
            env[MAC_VARIABLE] = self.message_mac
        return env


def node_env(environ: Mapping[str, str] | None = None) -> NodeEnv:
    """Read and check the node's environment (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    role = _required(env, "DMLC_ROLE")
    if role not in ROLES:
        raise RoleError(f"DMLC_ROLE={role!r}, expected one of {', '.join(ROLES)}")
    root_uri = _required(env, "DMLC_PS_ROOT_URI")
    # Port 0 only makes sense for the scheduler: it binds a free port and reports it.
    root_port = _int(env, "DMLC_PS_ROOT_PORT", 0 if role == "scheduler" else 1, 65535)
    num_servers = _int(env, "DMLC_NUM_SERVER", 1, 1 << 16)
    num_workers = _int(env, "DMLC_NUM_WORKER", 1, 1 << 16)
    host = env.get("DMLC_NODE_HOST") or (
        interface_address(env["DMLC_INTERFACE"])
        if env.get("DMLC_INTERFACE")
        else route_address(root_uri)
    )
    slot = _int(env, "REALRUN_SLOT", 0, 1 << 16) if env.get("REALRUN_SLOT") else None
    secret = _required(env, SECRET_VARIABLE)
    try:
        parse_secret(secret)
    except ValueError as e:
        hint = "every node of a job shares one, e.g. secrets.token_hex(32)"
        raise RoleError(f"{e} ({hint})") from None
    max_message = (
        _int(env, "REALRUN_MAX_MESSAGE_BYTES", 1024, 1 << 40)
        if env.get("REALRUN_MAX_MESSAGE_BYTES")
        else None
    )
    try:
        message_mac = parse_mode(env.get(MAC_VARIABLE, ""))
    except ValueError as e:
        raise RoleError(str(e)) from None
    return NodeEnv(
        role,
        root_uri,
        root_port,
        num_servers,
        num_workers,
        host,
        slot,
        _float(env, "REALRUN_HEARTBEAT_TIMEOUT_S", DEFAULT_HEARTBEAT_TIMEOUT_S),
        _float(env, "REALRUN_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S),
        secret,
        max_message,
        message_mac,
    )


def route_address(root_uri: str) -> str:
    """The local address the kernel would use to reach the scheduler (no packet is sent)."""
    try:
        if ipaddress.ip_address(socket.gethostbyname(root_uri)).is_loopback:
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((root_uri, 9))
            return s.getsockname()[0]
    except OSError as e:
        raise RoleError(
            f"cannot find a local address towards DMLC_PS_ROOT_URI={root_uri}: "
            f"{e}; set DMLC_NODE_HOST or DMLC_INTERFACE"
        ) from None


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name`` (DMLC_INTERFACE)."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise RoleError(f"DMLC_INTERFACE={name!r} has no IPv4 address: {e}") from None
    return socket.inet_ntoa(packed[20:24])


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise RoleError(f"{name} is not set")
    return value


def _int(env: Mapping[str, str], name: str, lo: int, hi: int) -> int:
    raw = _required(env, name)
    try:
        value = int(raw)
    except ValueError:
        raise RoleError(f"{name}={raw!r}, expected an integer") from None
    if not lo <= value <= hi:
        raise RoleError(f"{name}={value}, expected {lo}..{hi}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise RoleError(f"{name}={raw!r}, expected a number of seconds") from None
    if value <= 0:
        raise RoleError(f"{name}={value}, expected a positive number of seconds")
    return value
