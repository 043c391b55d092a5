"""Does it matter whether two hosts' data in both directions shares one TCP connection?

realrun's worker connects one zmq DEALER to each server, so a push and the server's answer use
one TCP connection, one in each direction. The ps-lite inside MXNet 1.9.1 answers on a
connection of the server's own, so each connection carries data one way only (issue 36,
docs/realrun-scheduling.md). This takes the question to raw sockets on the emulated cluster.

``--hosts`` hosts as NetnsLauncher builds them (HTB-shaped NICs, delay wires, reno, TCP small
queues at 64 KiB). Each round, at a common start time, every host sends ``--bytes`` to every
other host and receives as much from each. ``one``: one connection per pair, used both ways.
``two``: a connection per direction. ``--stagger-ms`` starts host i's round i times that late,
as workers out of step do, so that early hosts' sends meet late hosts' traffic. The two layouts
alternate, ``--repeats`` times each. For each
group of rounds, the script prints the median time until every host has received everything,
and the median spread across hosts (both from the round's first start). Needs root. Hold the
namespaces lock:

    flock /tmp/netns.lock python -m benchmarks.bench_twoway_connections [--rate-mbit 200]
        [--latency-us 500] [--hosts 4] [--bytes 400000] [--rounds 25] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time

from realrun.emulated.emulated_cluster import EmulatedCluster, HostLink
from realrun.launching.netns_launcher import TCP_CONGESTION_CONTROL, TCP_LIMIT_OUTPUT_BYTES

PORT = 47100
START_DELAY_S = 2.0  # every host's connections are up well before the first round


CONNECT_LIMIT_S = 30.0  # a peer not listening by then has failed: say so, never hang


def _connect(address: str) -> socket.socket:
    deadline = time.monotonic() + CONNECT_LIMIT_S
    while True:
        try:
            return socket.create_connection((address, PORT))
        except OSError:
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"{address}:{PORT} did not accept within {CONNECT_LIMIT_S:.0f} s"
                ) from None
            time.sleep(0.05)


def peer(
    me: int,
    mode: str,
    addresses: list[str],
    t0: float,
    rounds: int,
    nbytes: int,
    gap_s: float,
    stagger_s: float = 0.0,
) -> list[float]:
    """Host ``me``'s side: when it had received everything, per round (ms after the round's
    first start; host ``me`` itself starts ``me * stagger_s`` later)."""
    n = len(addresses)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", PORT))
    listener.listen(16)
    send_on: dict[int, socket.socket] = {}
    recv_on: dict[int, socket.socket] = {}

    def accept(count: int) -> None:
        for _ in range(count):
            conn, _ = listener.accept()
            j = conn.recv(1)[0]
            recv_on[j] = conn
            if mode == "one":
                send_on[j] = conn

    # one: host i opens the pair's connection to every j > i; two: to every j, to send on
    targets = [j for j in range(n) if j > me] if mode == "one" else [j for j in range(n) if j != me]
    acceptor = threading.Thread(target=accept, args=(me if mode == "one" else n - 1,))
    acceptor.start()
    for j in targets:
        conn = _connect(addresses[j])
        conn.sendall(bytes([me]))
        send_on[j] = conn
        if mode == "one":
            recv_on[j] = conn
    acceptor.join()
    for conn in {*send_on.values(), *recv_on.values()}:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b"x" * nbytes

    def receive(conn: socket.socket) -> None:
        got = 0
        while got < nbytes:
            chunk = conn.recv(min(1 << 20, nbytes - got))
            if not chunk:
                raise ConnectionError("peer closed mid-round")
            got += len(chunk)

    done = []
    for r in range(rounds):
        start = t0 + r * gap_s + me * stagger_s
        while (left := start - time.time()) > 0:
            time.sleep(min(0.002, left))
        senders = [threading.Thread(target=c.sendall, args=(payload,)) for c in send_on.values()]
        receivers = [threading.Thread(target=receive, args=(c,)) for c in recv_on.values()]
        for t in senders + receivers:
            t.start()
        for t in receivers:
            t.join()
        done.append((time.time() - (t0 + r * gap_s)) * 1e3)  # from the round's first start
        for t in senders:
            t.join()
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=float, default=200.0)
    parser.add_argument("--latency-us", type=float, default=500.0)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--gap-s", type=float, default=0.25, help="between round starts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--stagger-ms",
        type=float,
        default=0.0,
        help="host i starts each round i times this late (workers out of step)",
    )
    parser.add_argument("--peer", nargs=6, help=argparse.SUPPRESS)  # one host's side
    args = parser.parse_args()
    if args.peer:
        me, mode, addresses, t0, rounds, gap_s = args.peer
        ms = peer(
            int(me),
            mode,
            addresses.split(","),
            float(t0),
            int(rounds),
            args.bytes,
            float(gap_s),
            args.stagger_ms / 1e3,
        )
        print(json.dumps(ms))
        return 0
    links = [HostLink(f"h{i}", args.rate_mbit, args.latency_us) for i in range(args.hosts)]
    with EmulatedCluster(links) as cluster:
        for host in cluster.hosts:
            subprocess.run(
                [
                    *("ip", "netns", "exec", host.namespace, "sysctl", "-q", "-w"),
                    f"net.ipv4.tcp_limit_output_bytes={TCP_LIMIT_OUTPUT_BYTES}",
                    f"net.ipv4.tcp_congestion_control={TCP_CONGESTION_CONTROL}",
                ],
                check=True,
            )
        addresses = ",".join(h.address for h in cluster.hosts)
        for repeat in range(args.repeats):
            for mode in ("one", "two") if repeat % 2 == 0 else ("two", "one"):
                t0 = time.time() + START_DELAY_S
                procs = [
                    cluster.popen(
                        i,
                        [
                            *(sys.executable, "-m", "benchmarks.bench_twoway_connections"),
                            *("--bytes", str(args.bytes), "--stagger-ms", str(args.stagger_ms)),
                            *("--peer", str(i), mode, addresses),
                            *(str(t0), str(args.rounds), str(args.gap_s)),
                        ],
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for i in range(args.hosts)
                ]
                per_host = [json.loads(p.communicate()[0]) for p in procs]
                rounds = list(zip(*per_host, strict=True))[
                    2:
                ]  # the first two rounds warm the connections
                worst = [max(r) for r in rounds]
                spread = [max(r) - min(r) for r in rounds]
                print(
                    f"{mode}: every host done after a median {statistics.median(worst):.1f} ms "
                    f"(p90 {sorted(worst)[int(0.9 * len(worst))]:.1f}), spread across hosts "
                    f"{statistics.median(spread):.1f} ms, {len(rounds)} rounds",
                    flush=True,
                )
        counters = [c.to_dict() for c in cluster.counters()]
    retrans = sum(c["tcp"]["RetransSegs"] for c in counters)
    drops = sum(c["egress"]["dropped_packets"] + c["ingress"]["dropped_packets"] for c in counters)
    print(f"over the whole run: {retrans} segments retransmitted, {drops} packets dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
