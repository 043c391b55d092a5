"""Key by key, where one iteration of a traced realrun parameter-server job spent its time.

Reads the message traces a run writes with ``REALRUN_TRACE_DIR`` set (realrun/ps/msgtrace.py:
``worker-<pid>.tsv`` and ``server-<pid>.tsv``, one clock: the emulated cluster's namespaces share
the machine's) of a one-worker, one-server job and prints, for the pushes of iteration ``-i``
in the order they left the worker, each push's and its pull's times from the iteration's first
post: posted, sent, received by the server, answered by the server, answer back at the worker.
A push's answer is its ack, which credits the worker's byte window; a pull's is the weights.

    python -m benchmarks.realrun_trace_keys TRACE_DIR [-i ITERATION]

What it showed on ResNet-18 1w/1s at 200 Mbit/s (docs/probe.md): the server's ack of a push
leaves only with the handler's answers, after the update, so a small key's ack can wait behind
a 9.4 MB pull reply, and the next big push behind that ack.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

COLUMNS = ("w_post", "w_send", "s_recv", "s_answer", "w_answer")


def read(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def one(folder: Path, role: str) -> Path:
    found = sorted(folder.glob(f"{role}-*.tsv"))
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one {role} trace, found {len(found)}")
    return found[0]


def events(folder: Path) -> tuple[dict[int, tuple[str, int, int]], dict[int, dict[str, float]]]:
    """Per request id: (kind, key, bytes) and its times under the COLUMNS names."""
    what: dict[int, tuple[str, int, int]] = {}
    at: dict[int, dict[str, float]] = {}
    for r in read(one(folder, "worker")):
        rid, t = int(r["request_id"]), float(r["time_s"])
        if r["kind"] in ("PUSH", "PULL") and r["event"] in ("post", "send"):
            what[rid] = (r["kind"], int(r["key"]), int(r["bytes"]))
            at.setdefault(rid, {})[f"w_{r['event']}"] = t
        elif r["kind"] == "RESPONSE" and r["event"] == "recv":
            at.setdefault(rid, {})["w_answer"] = t
    for r in read(one(folder, "server")):
        rid, t = int(r["request_id"]), float(r["time_s"])
        if r["kind"] in ("PUSH", "PULL") and r["event"] == "recv":
            at.setdefault(rid, {})["s_recv"] = t
        elif r["kind"] == "RESPONSE" and r["event"] == "send":
            at.setdefault(rid, {})["s_answer"] = t
    return what, at


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir", type=Path)
    ap.add_argument("-i", "--iteration", type=int, default=3, help="0: the first pushes")
    a = ap.parse_args()
    what, at = events(a.trace_dir)
    keys = {key for _, key, _ in what.values()}
    pushes = sorted((r for r in what if what[r][0] == "PUSH"), key=lambda r: at[r]["w_post"])
    pulls = sorted((r for r in what if what[r][0] == "PULL"), key=lambda r: at[r]["w_post"])
    mine = pushes[a.iteration * len(keys) : (a.iteration + 1) * len(keys)]
    if len(mine) < len(keys):
        print(f"no iteration {a.iteration} in {a.trace_dir}", file=sys.stderr)
        return 2
    t0 = min(at[r]["w_post"] for r in mine)
    pull_of: dict[int, int] = {}
    for r in pulls:  # the first pull of each key posted with this iteration's pushes
        if at[r]["w_post"] >= t0 - 1e-3:
            pull_of.setdefault(what[r][1], r)

    def times(rid: int | None) -> str:
        row = at.get(rid, {}) if rid is not None else {}
        return " ".join(f"{row[c] - t0:7.3f}" if c in row else "      -" for c in COLUMNS)

    print(f"{'key':>3} {'bytes':>8} | push: " + " ".join(COLUMNS) + " | pull: same")
    for r in sorted(mine, key=lambda r: at[r].get("w_send", at[r]["w_post"])):
        _, key, nbytes = what[r]
        print(f"{key:3d} {nbytes:8d} | {times(r)} | {times(pull_of.get(key))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
