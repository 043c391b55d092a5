"""What a run leaves for diagnosis: kernel counters of each emulated host, and the opt-in
message trace of every node."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from realrun.emulated.net_counters import device_tx_dropped, leaf_qdisc, tcp_counters
from realrun.ps.message import Kind, Message
from realrun.ps.msgtrace import HEADER, TRACE_DIR_VARIABLE
from realrun.ps.postoffice import Postoffice
from realrun.ps.roles import NodeEnv
from realrun.ps.tracker import Handle

# What `tc -s -j qdisc show dev eth0` prints for the emulated NIC: a root HTB and its bfifo.
TC_JSON = json.dumps(
    [
        {
            "kind": "htb",
            "handle": "1:",
            "root": True,
            "bytes": 9000,
            "packets": 9,
            "drops": 1,
            "overlimits": 40,
        },
        {
            "kind": "bfifo",
            "handle": "10:",
            "parent": "1:1",
            "bytes": 8000,
            "packets": 8,
            "drops": 3,
            "overlimits": 0,
        },
    ]
)
SNMP = "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 1000 7\nUdp: InDatagrams\nUdp: 5\n"
NETSTAT = "TcpExt: TCPTimeouts TCPLossProbes TCPFastRetrans\nTcpExt: 2 3 4\n"


def test_queue_counters_come_from_the_byte_fifo_where_packets_are_dropped():
    q = leaf_qdisc(TC_JSON)
    assert (q.sent_bytes, q.sent_packets) == (8000, 8)
    assert q.dropped_packets == 3 + 1  # the leaf's drops and any the root made itself
    assert q.overlimits == 40  # HTB's: how often the rate held a packet back


def test_tcp_counters_are_read_from_both_procfs_tables():
    assert tcp_counters(SNMP, NETSTAT) == {
        "OutSegs": 1000,
        "RetransSegs": 7,
        "TCPTimeouts": 2,
        "TCPLossProbes": 3,
        "TCPFastRetrans": 4,
    }


def test_tap_drops_are_the_devices_transmit_drops():
    link = json.dumps([{"ifname": "h0", "stats64": {"tx": {"dropped": 5}, "rx": {"dropped": 9}}}])
    assert device_tx_dropped(link) == 5


def test_no_qdisc_listed_is_an_error_not_zeros():
    with pytest.raises(ValueError, match="no qdisc"):
        leaf_qdisc("[]")


class RecordingVan:
    def send(self, peer: str, msg: Message) -> None:
        pass

    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_traced_node_logs_what_it_queues_and_hands_to_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_DIR_VARIABLE, str(tmp_path))
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"))
    po.van.close()
    po.van = RecordingVan()
    grad = np.zeros(1000, dtype=np.float32)
    po.request("server-0", Message(Kind.PUSH, key=7, arrays=(grad,)), Handle(1, "push"), 0)
    po._flush()
    po.trace.close()
    po.trace.log("post", "server-0", Message(Kind.PULL, key=7))  # after close: ignored
    (trace,) = tmp_path.glob("worker-*.tsv")
    lines = trace.read_text().splitlines()
    assert lines[0] + "\n" == HEADER
    events = [line.split("\t") for line in lines[1:]]
    assert [(e[1], e[2], e[3], e[4], e[7]) for e in events] == [
        ("post", "server-0", "PUSH", "7", "4000"),
        ("send", "server-0", "PUSH", "7", "4000"),
    ]


def test_without_the_variable_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_DIR_VARIABLE, raising=False)
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"))
    po.van.close()
    assert po.trace is None
