"""An emulated multi-host cluster on one machine: a network namespace per host on one switch.

Topology: host i lives in namespace ``<prefix>-h<i>`` with loopback and a NIC ``eth0``; a switch
namespace ``<prefix>-sw`` holds a Linux bridge ``br0`` with one port ``h<i>`` per host. Both NIC
ends are TAP devices joined by the host's delay wire (``realrun.emulated.delay_wire``), which adds
the
host's one-way latency in each direction; HTB on the egress of each end
(``realrun.emulated.shaping``)
gives the full-duplex rate: ``eth0`` shapes host->switch, ``h<i>`` shapes switch->host.

Latency convention: ``HostLink.latency_us`` is the one-way latency of that host's NIC, paid on
the way out and on the way in. A message from A to B waits lat(A) + lat(B); a round trip costs
2 * (lat(A) + lat(B)). Addresses are 10.77.x.y/16, reachable only between these namespaces:
nothing is connected to the root namespace, so no emulated packet can leave the machine.

Every cluster is torn down by ``close()`` (the context manager calls it), by an atexit hook,
and on SIGINT/SIGTERM of the launcher; ``realrun.emulated.netns.cleanup_leftovers`` removes what a
SIGKILLed launcher left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from realrun.emulated import delay_wire
from realrun.emulated.net_counters import HostCounters, read_qdisc, read_tcp
from realrun.emulated.netns import (
    PROJECT_TAG,
    NetnsUnavailable,
    RunPrefix,
    claim_prefix,
    delete_namespace,
    release_prefix,
    require_netns_support,
    run_command,
)
from realrun.emulated.shaping import dilate, kernel_hz, link_shape, tc_commands

HOST_DEVICE = "eth0"
BRIDGE = "br0"
SUBNET_PREFIX_LEN = 16
SUBNET_FIRST_OCTETS = (10, 77)  # private; exists only inside this run's namespaces
MAX_HOSTS = 254 * 256
WIRE_READY_TIMEOUT_S = 30.0  # a wire attaches two taps: milliseconds; over 10 s at load 12
TERM_GRACE_S = 3.0  # SIGTERM to SIGKILL for tracked process groups
KILLED_WAIT_S = 30.0  # SIGKILL to giving up on reaping (the namespaces' deletion kills it)
# Round trip the delay wires add on top of the configured latency (four frame hand-offs
# through Python): 0.2-0.4 ms measured at 1 ms per NIC on the 2-core dev VM
# (python -m benchmarks.bench_netns_link); counted when sizing queues to cover the real BDP.
WIRE_RTT_OVERHEAD_S = 0.5e-3


@dataclass(frozen=True)
class HostLink:
    """One emulated host and its full-duplex NIC: rate each way, one-way latency."""

    name: str
    rate_mbit: float
    latency_us: float

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a host needs a name")
        if not self.rate_mbit > 0:
            raise ValueError(f"host {self.name}: rate_mbit must be > 0, got {self.rate_mbit}")
        if not self.latency_us >= 0:
            raise ValueError(f"host {self.name}: latency_us must be >= 0, got {self.latency_us}")

    def dilated(self, factor: float) -> HostLink:
        """This NIC under time dilation ``factor``: rate/factor, latency*factor."""
        rate_mbit, latency_us = dilate(self.rate_mbit, self.latency_us, factor)
        return HostLink(self.name, rate_mbit, latency_us)


@dataclass(frozen=True)
class EmulatedHost:
    """A built host: its link spec, its namespace and its address on the emulated network."""

    index: int
    link: HostLink
    namespace: str
    address: str

    @property
    def name(self) -> str:
        return self.link.name


def host_address(index: int) -> str:
    """The address of host ``index``: 10.77.0.1 for host 0, ..., 10.77.0.254, 10.77.1.1, ..."""
    if not 0 <= index < MAX_HOSTS:
        raise ValueError(f"host index {index} outside 0..{MAX_HOSTS - 1}")
    return ".".join(str(o) for o in (*SUBNET_FIRST_OCTETS, index // 254, index % 254 + 1))


def python_module_argv(module: str, *args: str) -> list[str]:
    """argv that runs ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def python_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which a child Python can import this checkout's ``realrun``."""
    env = dict(os.environ if base is None else base)
    root = str(Path(__file__).resolve().parents[2])  # realrun/emulated/ -> the checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _kill_group(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop_process_groups(procs: Sequence[subprocess.Popen[Any]], grace_s: float) -> None:
    """SIGTERM the group of each still-running process, SIGKILL it after ``grace_s``, reap.

    Only groups whose leader we have not yet reaped are signalled: a reaped leader's pid may
    already belong to someone else. Stragglers of such a group are still inside the cluster's
    namespaces, where ``delete_namespace`` kills them.
    """
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        _kill_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            # SIGKILL ends it once it is scheduled, which took over 3 s at load 12; one that
            # still has not ended is inside the namespaces, where delete_namespace kills it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILLED_WAIT_S)
    for proc in procs:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


class EmulatedCluster:
    """Namespaces, bridge, shaped links and delay wires for a list of hosts; a context manager."""

    def __init__(self, links: Sequence[HostLink], tag: str = PROJECT_TAG) -> None:
        if not links:
            raise ValueError("an emulated cluster needs at least one host")
        if len(links) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts, got {len(links)}")
        names = [link.name for link in links]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"host names must be unique, repeated: {duplicates}")
        self.links = tuple(links)
        self.prefix = RunPrefix.new(tag)
        self.switch_namespace = f"{self.prefix}-sw"
        self.hosts = tuple(
            EmulatedHost(i, link, f"{self.prefix}-h{i}", host_address(i))
            for i, link in enumerate(self.links)
        )
        self._by_name = {host.name: host for host in self.hosts}
        self._wires: list[subprocess.Popen[Any]] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._created: list[str] = []
        self._started = False
        self._closed = False

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> EmulatedCluster:
        """Build every namespace, link, qdisc and wire; on any failure undo what was built."""
        if self._started:
            raise RuntimeError("cluster already started")
        require_netns_support()
        if not Path("/dev/net/tun").exists():
            raise NetnsUnavailable("the emulated cluster needs /dev/net/tun (kernel CONFIG_TUN)")
        self._started = True
        claim_prefix(self.prefix)
        _register(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _add_namespace(self, namespace: str) -> None:
        run_command(["ip", "netns", "add", namespace])
        self._created.append(namespace)
        run_command(["ip", "-n", namespace, "link", "set", "lo", "up"])

    def _build(self) -> None:
        sw = self.switch_namespace
        self._add_namespace(sw)
        run_command(["ip", "-n", sw, "link", "add", BRIDGE, "type", "bridge"])
        run_command(["ip", "-n", sw, "link", "set", BRIDGE, "up"])
        hz = kernel_hz()
        max_latency_s = max(link.latency_us for link in self.links) * 1e-6
        for host in self.hosts:
            ns, port = host.namespace, f"h{host.index}"
            self._add_namespace(ns)
            for namespace, device in ((ns, HOST_DEVICE), (sw, port)):
                run_command(
                    [
                        "ip",
                        "-n",
                        namespace,
                        "tuntap",
                        "add",
                        "dev",
                        device,
                        "mode",
                        "tap",
                        "vnet_hdr",
                    ]
                )
            address = f"{host.address}/{SUBNET_PREFIX_LEN}"
            run_command(["ip", "-n", ns, "addr", "add", address, "dev", HOST_DEVICE])
            run_command(["ip", "-n", ns, "link", "set", HOST_DEVICE, "up"])
            run_command(["ip", "-n", sw, "link", "set", port, "master", BRIDGE])
            run_command(["ip", "-n", sw, "link", "set", port, "up"])
            # The longest path through this NIC: to the slowest-latency peer and back.
            rtt_s = 2 * (host.link.latency_us * 1e-6 + max_latency_s) + WIRE_RTT_OVERHEAD_S
            shape = link_shape(host.link.rate_mbit, rtt_s, hz)
            for namespace, device in ((ns, HOST_DEVICE), (sw, port)):
                for argv in tc_commands(namespace, device, shape):
                    run_command(argv)
            self._start_wire(host, port)

    def _start_wire(self, host: EmulatedHost, port: str) -> None:
        argv = python_module_argv(
            "realrun.emulated.delay_wire",
            *("--host-dev", HOST_DEVICE, "--switch-netns", self.switch_namespace),
            *("--switch-dev", port, "--delay-us", repr(host.link.latency_us)),
        )
        wire = subprocess.Popen(
            self.exec_argv(host, argv),
            stdin=subprocess.PIPE,  # its lifeline: EOF when we close it or die
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=python_env(),
        )
        self._wires.append(wire)
        assert wire.stdout is not None
        ready, _, _ = select.select([wire.stdout], [], [], WIRE_READY_TIMEOUT_S)
        line = wire.stdout.readline().strip() if ready else ""
        if line != delay_wire.READY_LINE:
            stop_process_groups([wire], TERM_GRACE_S)
            assert wire.stderr is not None
            raise RuntimeError(
                f"delay wire of {host.name} did not come up within {WIRE_READY_TIMEOUT_S} s "
                f"(exit {wire.returncode}): {wire.stderr.read().strip() if wire.stderr else ''}"
            )

    def close(self) -> None:
        """Stop tracked processes (SIGTERM, then SIGKILL), the wires, delete the namespaces."""
        if self._closed or not self._started:
            return
        self._closed = True
        try:
            stop_process_groups(self._procs, TERM_GRACE_S)
            stop_process_groups(self._wires, TERM_GRACE_S)
        finally:
            errors = []
            for namespace in reversed(self._created):
                try:
                    delete_namespace(namespace)
                except Exception as exc:
                    errors.append(f"{namespace}: {exc}")
            release_prefix(self.prefix)
            _unregister(self)
            if errors:
                raise RuntimeError("emulated cluster teardown incomplete: " + "; ".join(errors))

    def __enter__(self) -> EmulatedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- using the hosts --------------------------------------------------------------------

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace of this cluster, switch first."""
        return (self.switch_namespace, *(host.namespace for host in self.hosts))

    def host(self, which: str | int | EmulatedHost) -> EmulatedHost:
        """A host by name, index or itself."""
        if isinstance(which, EmulatedHost):
            return which
        if isinstance(which, int):
            return self.hosts[which]
        try:
            return self._by_name[which]
        except KeyError:
            raise KeyError(f"no host {which!r}; hosts are {sorted(self._by_name)}") from None

    def exec_argv(self, host: str | int | EmulatedHost, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.host(host).namespace, *argv]

    def popen(
        self, host: str | int | EmulatedHost, argv: Sequence[str], **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``host``'s namespace in its own process group, stopped by close()."""
        if not self._started or self._closed:
            raise RuntimeError("popen needs a started, open cluster")
        proc: subprocess.Popen[Any] = subprocess.Popen(
            self.exec_argv(host, argv), start_new_session=True, **kwargs
        )
        self._procs.append(proc)
        return proc

    def one_way_latency_s(self, a: str | int | EmulatedHost, b: str | int | EmulatedHost) -> float:
        """Configured latency of a message from ``a`` to ``b``: both NICs' one-way latency."""
        return (self.host(a).link.latency_us + self.host(b).link.latency_us) * 1e-6

    def counters(self) -> list[HostCounters]:
        """Every host's NIC drops (both ends) and TCP counters since the cluster was built."""
        return [
            HostCounters(
                host=host.name,
                egress=read_qdisc(host.namespace, HOST_DEVICE),
                ingress=read_qdisc(self.switch_namespace, f"h{host.index}"),
                tcp=read_tcp(host.namespace),
            )
            for host in self.hosts
        ]

    def describe(self) -> dict[str, Any]:
        """The shaping actually applied, for a run record's environment section."""
        return {
            "kind": "netns",
            "shaping": "htb rate per direction + userspace tap delay wire",
            "latency_convention": "one-way per NIC; path A->B = lat(A) + lat(B)",
            "prefix": str(self.prefix),
            "hosts": [
                {
                    "name": host.name,
                    "namespace": host.namespace,
                    "address": host.address,
                    "rate_mbit": host.link.rate_mbit,
                    "latency_us": host.link.latency_us,
                }
                for host in self.hosts
            ],
        }


# -- teardown on exit and on signals ----------------------------------------------------------

_live: list[EmulatedCluster] = []
_previous_handlers: dict[int, Any] = {}
_atexit_registered = False


def _close_all_live() -> None:
    for cluster in list(_live):
        try:
            cluster.close()
        except Exception as exc:
            print(f"emulated cluster {cluster.prefix}: {exc}", file=sys.stderr)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _close_all_live()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # Re-deliver under the default action so the exit status still says "killed by signum".
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _register(cluster: EmulatedCluster) -> None:
    global _atexit_registered
    _live.append(cluster)
    if not _atexit_registered:
        atexit.register(_close_all_live)
        _atexit_registered = True
    # Python only lets the main thread set handlers; elsewhere atexit and close() remain.
    if not _previous_handlers and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            _previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)


def _unregister(cluster: EmulatedCluster) -> None:
    if cluster in _live:
        _live.remove(cluster)
    if _live or threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_previous_handlers.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, previous)
        del _previous_handlers[signum]
