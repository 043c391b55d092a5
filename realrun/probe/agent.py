"""The probe's ends, run on every host by the launcher: ``python -m realrun.probe.agent ROLE``.

Each prints one JSON line with its result (a listening end prints "listening" first) and
bounds its own run time, so none outlives an interrupted probe for long.
"""

from __future__ import annotations

import argparse
import json
import sys

from realrun.probe import (
    allreduce_bw,
    gpu_rates,
    ps_round_trip,
    round_trip,
    server_cost,
    tcp_rate,
)
from simscale.lifetime import stop_on_signals


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = p.add_subparsers(dest="role", required=True)
    s = roles.add_parser("sink")
    for name, kind in (("port", int), ("connections", int), ("burst", int), ("rounds", int)):
        s.add_argument(f"--{name}", type=kind, required=True)
    s.add_argument("--timeout", type=float, required=True)
    src = roles.add_parser("source")
    src.add_argument("--address", required=True)
    for name in ("port", "connections", "burst", "rounds"):
        src.add_argument(f"--{name}", type=int, required=True)
    e = roles.add_parser("echo")
    e.add_argument("--port", type=int, required=True)
    e.add_argument("--timeout", type=float, required=True)
    pg = roles.add_parser("ping")
    pg.add_argument("--address", required=True)
    pg.add_argument("--port", type=int, required=True)
    pg.add_argument("--count", type=int, required=True)
    ps = roles.add_parser("ps-serve")
    ps.add_argument("--address", required=True)
    ps.add_argument("--port", type=int, required=True)
    ps.add_argument("--secret", required=True)
    ps.add_argument("--timeout", type=float, required=True)
    pp = roles.add_parser("ps-push")
    pp.add_argument("--address", required=True)
    pp.add_argument("--port", type=int, required=True)
    pp.add_argument("--secret", required=True)
    pp.add_argument("--count", type=int, required=True)
    pp.add_argument("--cap-bytes", type=int, default=0, help="a large key's bytes (0: whole)")
    pp.add_argument("--dilation", type=float, default=1.0, help="the replay's time dilation")
    sc = roles.add_parser("server-cost")
    sc.add_argument("--pushers", type=int, required=True)
    sc.add_argument("--rounds", type=int, required=True)
    sc.add_argument("--momentum", type=float, required=True)
    ar = roles.add_parser("allreduce")
    for name in ("rank", "world", "port", "reps"):
        ar.add_argument(f"--{name}", type=int, required=True)
    ar.add_argument("--master", required=True)
    ar.add_argument("--sizes", required=True)
    g = roles.add_parser("gpu")
    g.add_argument("--model", required=True)
    g.add_argument("--batch", type=int, required=True)
    g.add_argument("--reps", type=int, required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    a = _parser().parse_args(argv)
    if a.role == "sink":
        result = tcp_rate.sink(a.port, a.connections, a.burst, a.rounds, a.timeout)
    elif a.role == "source":
        result = tcp_rate.source(a.address, a.port, a.connections, a.burst, a.rounds)
    elif a.role == "echo":
        result = round_trip.echo(a.port, a.timeout)
    elif a.role == "ping":
        result = round_trip.ping(a.address, a.port, a.count)
    elif a.role == "ps-serve":
        result = ps_round_trip.serve(a.address, a.port, a.secret, a.timeout)
    elif a.role == "ps-push":
        result = ps_round_trip.push_acks(
            a.address, a.port, a.secret, a.count, a.cap_bytes or None, a.dilation
        )
    elif a.role == "server-cost":
        result = server_cost.measure(
            a.pushers, server_cost.DEFAULT_SIZES_BYTES, a.rounds, a.momentum
        )
    elif a.role == "allreduce":
        sizes = [int(s) for s in a.sizes.split(",")]
        result = allreduce_bw.measure(a.rank, a.world, a.master, a.port, sizes, a.reps)
    else:
        result = gpu_rates.measure(a.model, a.batch, a.reps)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
