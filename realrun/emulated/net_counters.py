"""Kernel counters of an emulated host: what its NIC queues dropped and how TCP coped.

Read after a run so that a record says whether the emulated network itself misbehaved (queue
drops, retransmissions, retransmission timeouts), which no throughput figure shows on its own:
one 200 ms minimum RTO in a 0.5 s iteration is a 40% slowdown the simulator does not model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from realrun.emulated.netns import run_command

# /proc/net/snmp and /proc/net/netstat fields kept (Linux names): segments sent and
# retransmitted, timeouts (RTO fired), and the recoveries that avoided one.
TCP_FIELDS = {
    "Tcp": ("OutSegs", "RetransSegs"),
    "TcpExt": ("TCPTimeouts", "TCPLossProbes", "TCPFastRetrans", "TCPSlowStartRetrans"),
}


@dataclass(frozen=True)
class QdiscCounters:
    """One qdisc's totals since it was created (tc -s)."""

    sent_bytes: int
    sent_packets: int
    dropped_packets: int
    overlimits: int
    device_dropped_packets: int = 0  # frames the tap refused (its ring full: the wire lagged)


@dataclass(frozen=True)
class HostCounters:
    """Both ends of one host's NIC and the TCP stack of its namespace."""

    host: str
    egress: QdiscCounters  # host -> switch, shaped on the host's device
    ingress: QdiscCounters  # switch -> host, shaped on the switch port
    tcp: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def leaf_qdisc(tc_json: str) -> QdiscCounters:
    """The byte-FIFO leaf's counters from ``tc -s -j qdisc show dev D`` (where drops happen);
    the root HTB's when there is no leaf."""
    qdiscs = json.loads(tc_json or "[]")
    if not qdiscs:
        raise ValueError("tc listed no qdisc")
    leaf = next((q for q in qdiscs if q.get("kind") in ("bfifo", "pfifo")), qdiscs[0])
    root = next((q for q in qdiscs if q.get("root")), leaf)
    return QdiscCounters(
        sent_bytes=int(leaf.get("bytes", 0)),
        sent_packets=int(leaf.get("packets", 0)),
        dropped_packets=int(leaf.get("drops", 0)) + int(root.get("drops", 0)),
        overlimits=int(root.get("overlimits", 0)),
    )


def tcp_counters(snmp: str, netstat: str) -> dict[str, int]:
    """The ``TCP_FIELDS`` from the text of /proc/net/snmp and /proc/net/netstat (header line,
    value line, per protocol)."""
    found: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = text.splitlines()
        for header, values in zip(lines[::2], lines[1::2], strict=False):
            proto, names = header.split(":", 1)
            wanted = TCP_FIELDS.get(proto)
            if not wanted:
                continue
            row = dict(zip(names.split(), values.split(":", 1)[1].split(), strict=False))
            found.update({name: int(row[name]) for name in wanted if name in row})
    return found


def device_tx_dropped(ip_json: str) -> int:
    """Transmit drops of one device from ``ip -j -s link show dev D``."""
    links = json.loads(ip_json or "[]")
    return sum(int(link.get("stats64", {}).get("tx", {}).get("dropped", 0)) for link in links)


def read_qdisc(namespace: str, device: str) -> QdiscCounters:
    """The egress counters of ``device`` in ``namespace``: its qdisc's and the device's drops."""
    tc = run_command(["tc", "-n", namespace, "-s", "-j", "qdisc", "show", "dev", device])
    link = run_command(["ip", "-n", namespace, "-j", "-s", "link", "show", "dev", device])
    return replace(leaf_qdisc(tc), device_dropped_packets=device_tx_dropped(link))


def read_tcp(namespace: str) -> dict[str, int]:
    """TCP counters of ``namespace`` (procfs shows the reading process's namespace)."""
    exec_ = ["ip", "netns", "exec", namespace, "cat"]
    return tcp_counters(
        run_command([*exec_, "/proc/net/snmp"]), run_command([*exec_, "/proc/net/netstat"])
    )
