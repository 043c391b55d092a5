"""Round by round, how a co-located PS job's pushes and pull replies shared each host's NIC, from
the delay wires' frame logs (``REALRUN_WIRE_LOG_DIR``, realrun/emulated/delay_wire.py): the
same view of realrun and of MXNet, since both go through the same emulated cluster.

Each frame is a push byte or a reply byte by its connection's listening end: data sent to a
server's listening port is a worker's push (or pull request), data sent from it (realrun:
answers on the worker's own connection) or to a worker's listening port (ps-lite: the server's
own connection) is a server's answer. Listening ports come from ``ss -tlnp`` snapshots taken
during the run (``LISTENERS``: namespace, port, pid, command line), since ps-lite binds random
ports: a command line with ``plan`` is an MXNet worker, any other a server or the scheduler.

Rounds: worker w's round-t pushes leave after its iteration t ends and its round-t replies are
in before its iteration t+1 ends (the iteration times of the run's record or MXNet's outputs).
Per measured round it prints, per worker, when (from the round's first push) its pushes left
its NIC (its last frame of at least ``REQUEST_BYTES`` to a server) and when its last reply byte
left the last server's NIC; per server host, when it answered, and how many bytes of its own
worker's *next* round of pushes left that NIC while it was still answering the round: the
interference that lets an early worker make the others late.

    python -m benchmarks.wire_timeline LOG_DIR --run ssx-15652-ee6d1b --record REC.json
    python -m benchmarks.wire_timeline LOG_DIR --run ssx-15165-f4cad0 --mxnet-outputs DIR
    python -m benchmarks.wire_timeline LOG_DIR --run ... --record REC.json --nic 2 --round 4

``--nic H --round T`` prints instead the bytes that left host H's NIC per 50 ms of round T, by
class and destination host: which of its worker's pushes and its server's replies shared it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

LISTENERS = "listeners.tsv"
SCHEDULER_PORT_MXNET = 9091
# Frames to a server smaller than this are pull requests (a meta frame: realrun's header, JSON
# body and tag, ps-lite's packed meta, each under 300 bytes) or the tiniest keys' pushes: "push
# done" is the last larger frame, so that it times the gradients, not the requests after acks.
REQUEST_BYTES = 400


def host_of_address(address: str) -> int:
    return int(address.rsplit(".", 1)[1]) - 1  # realrun.emulated: host i is 10.77.0.(i+1)


def listeners(folder: Path, run: str) -> dict[tuple[int, int], str]:
    """(host, port) -> "server" | "worker" | "scheduler" for the run's namespaces."""
    out: dict[tuple[int, int], str] = {}
    with (folder / LISTENERS).open() as f:
        for line in f:
            ns, port, _pid, *cmd = line.rstrip("\n").split("\t")
            if not ns.startswith(run + "-h"):
                continue
            host = int(ns.rsplit("-h", 1)[1])
            text = " ".join(cmd)
            role = "worker" if "plan" in text else "server"
            out[(host, int(port))] = role
    return out


def frames(folder: Path, run: str) -> list[dict]:
    """Every data frame that left a host's NIC (the host side of its wire), with its class."""
    rows = []
    for path in sorted(folder.glob(f"wire-{run}-sw-h*.tsv")):
        with path.open() as f:
            for r in csv.DictReader(f, delimiter="\t"):
                if r["from"] != "host" or int(r["payload"]) <= 0:
                    continue
                rows.append(
                    {
                        "t": float(r["time_s"]),
                        "src": host_of_address(r["src"]),
                        "dst": host_of_address(r["dst"]),
                        "sport": int(r["sport"]),
                        "dport": int(r["dport"]),
                        "bytes": int(r["payload"]),
                    }
                )
    rows.sort(key=lambda r: r["t"])
    return rows


def classify(rows: list[dict], ports: dict[tuple[int, int], str], mxnet: bool) -> None:
    """Mark each frame push (worker -> server) or reply (server -> worker) or other."""
    for r in rows:
        to = ports.get((r["dst"], r["dport"]))
        frm = ports.get((r["src"], r["sport"]))
        to_scheduler = mxnet and r["dport"] == SCHEDULER_PORT_MXNET
        if to_scheduler or (not mxnet and to is None and frm is None):
            r["cls"] = "other"
        elif to == "server":
            r["cls"] = "push"
        elif to == "worker" or frm == "server":
            r["cls"] = "reply"
        else:
            r["cls"] = "other"


def iteration_ends(args) -> tuple[dict[int, list[float]], int]:
    """Per host's worker: its iterations' end times (unix s); and the warm-up count."""
    ends: dict[int, list[float]] = defaultdict(list)
    if args.record:
        rec = json.loads(Path(args.record).read_text())
        for it in sorted(rec["iterations"], key=lambda i: (i["worker"], i["iteration"])):
            ends[it["worker"]].append(it["start_unix_s"] + it["total_s"])
        warmup = rec["scenario"]["simulation"]["warmup_iterations"]
    else:
        for path in sorted(Path(args.mxnet_outputs).glob("out-*.json")):
            host = int(path.stem.split("-")[1])
            res = json.loads(path.read_text())
            ends[host] = [i["start_unix"] + i["total_s"] for i in res["iterations"]]
        warmup = args.warmup
    return dict(ends), warmup


def nic_table(
    rows: list[dict], ends: dict[int, list[float]], host: int, rnd: int, bucket_s: float = 0.05
) -> None:
    """Bytes leaving ``host``'s NIC per ``bucket_s`` from round ``rnd``'s first iteration end
    (over about two rounds), by class and destination host."""
    t0 = min(e[rnd] for e in ends.values())
    print(
        "iteration ends from the round's start (ms), per worker: "
        + ", ".join(
            f"w{h} " + " ".join(f"{(e - t0) * 1e3:.0f}" for e in ends[h][rnd : rnd + 3])
            for h in sorted(ends)
        )
    )
    table: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        dt = r["t"] - t0
        if r["src"] == host and r["cls"] != "other" and -bucket_s <= dt < 1.6:
            table[int(dt // bucket_s)][f"{r['cls']}->h{r['dst']}"] += r["bytes"]
    names = sorted({k for c in table.values() for k in c})
    print("   ms " + " ".join(f"{k:>10}" for k in names) + "   (KB)")
    for b in sorted(table):
        cells = " ".join(f"{table[b][k] / 1e3:>10.0f}" for k in names)
        print(f"{b * bucket_s * 1e3:5.0f} {cells}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--run", required=True, help="the cluster's prefix (wire-<run>-sw-h*.tsv)")
    ap.add_argument("--record", help="realrun's run record")
    ap.add_argument("--mxnet-outputs", help="the MXNet replay's out-<host>.json folder")
    ap.add_argument("--warmup", type=int, default=2, help="MXNet: warm-up iterations")
    ap.add_argument("--verbose", action="store_true", help="one line per worker and round")
    ap.add_argument("--nic", type=int, help="host whose NIC to show per 50 ms (with --round)")
    ap.add_argument("--round", type=int, default=4, help="the round --nic shows")
    args = ap.parse_args()
    mxnet = args.mxnet_outputs is not None
    ports = listeners(args.folder, args.run)
    rows = frames(args.folder, args.run)
    classify(rows, ports, mxnet)
    ends, warmup = iteration_ends(args)
    if args.nic is not None:
        nic_table(rows, ends, args.nic, args.round)
        return 0
    hosts = sorted(ends)
    n = min(len(v) for v in ends.values())
    totals: dict[str, int] = defaultdict(int)
    stats: dict[str, list[float]] = defaultdict(list)
    for t in range(warmup, n - 1):
        round_start = min(ends[h][t] for h in hosts)
        push_last: dict[int, float] = {}
        reply_last: dict[int, float] = {}
        per_host_reply: dict[int, tuple[float, float]] = {}
        for h in hosts:
            # pushes of worker h for round t: after its iteration t ends, before t+1 ends
            lo, hi = ends[h][t], ends[h][t + 1]
            mine = [r for r in rows if r["src"] == h and r["cls"] == "push" and lo <= r["t"] <= hi]
            data = [r for r in mine if r["bytes"] >= REQUEST_BYTES]
            if data:
                push_last[h] = data[-1]["t"] - round_start
                totals["push"] += sum(r["bytes"] for r in mine)
            got = [r for r in rows if r["dst"] == h and r["cls"] == "reply" and lo <= r["t"] <= hi]
            if got:
                reply_last[h] = got[-1]["t"] - round_start
                totals["reply"] += sum(r["bytes"] for r in got)
        for j in hosts:
            # server j's round-t replies: to each worker w in (ends[w][t], ends[w][t+1]]
            answers = [
                r
                for r in rows
                if r["src"] == j
                and r["cls"] == "reply"
                and ends[r["dst"]][t] <= r["t"] <= ends[r["dst"]][t + 1]
            ]
            if not answers:
                continue
            a0, a1 = answers[0]["t"], answers[-1]["t"]
            per_host_reply[j] = (a0 - round_start, a1 - round_start)
            # worker j's next-round pushes leaving the same NIC while it still answers
            nxt = [
                r
                for r in rows
                if r["src"] == j
                and r["cls"] == "push"
                and a0 <= r["t"] <= a1
                and r["t"] > ends[j][t + 1]
            ]
            replied = sum(r["bytes"] for r in answers)
            stats["reply_phase_ms"].append((a1 - a0) * 1e3)
            stats["next_push_bytes_during_replies"].append(sum(r["bytes"] for r in nxt))
            stats["reply_bytes"].append(replied)
        if reply_last:
            spread = max(reply_last.values()) - min(reply_last.values())
            stats["reply_end_spread_ms"].append(spread * 1e3)
            stats["push_end_spread_ms"].append(
                (max(push_last.values()) - min(push_last.values())) * 1e3 if push_last else 0
            )
            stats["start_spread_ms"].append((max(ends[h][t] for h in hosts) - round_start) * 1e3)
        if args.verbose:
            print(
                f"round {t}: starts "
                + " ".join(f"w{h}:{(ends[h][t] - round_start) * 1e3:.0f}" for h in hosts)
                + " | push done "
                + " ".join(f"w{h}:{push_last.get(h, float('nan')) * 1e3:.0f}" for h in hosts)
                + " | replies in "
                + " ".join(f"w{h}:{reply_last.get(h, float('nan')) * 1e3:.0f}" for h in hosts)
                + " | server answering "
                + " ".join(
                    f"s{j}:{a * 1e3:.0f}-{b * 1e3:.0f}" for j, (a, b) in per_host_reply.items()
                )
                + " ms"
            )
    rounds = n - 1 - warmup
    print(
        f"{rounds} measured rounds; per round: push bytes on the wire "
        f"{totals['push'] / rounds:.0f}, reply bytes {totals['reply'] / rounds:.0f}"
    )
    for name, values in stats.items():
        if values:
            print(
                f"  {name}: median {statistics.median(values):.1f}, "
                f"mean {statistics.fmean(values):.1f}, max {max(values):.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
