"""How faithful is an emulated link? Bulk TCP rate and small-message RTT against configured.

For each configured rate, builds a two-host cluster (both NICs at that rate and latency), then
takes the median of ``--repeats`` bulk transfers and round-trip probes and prints them as
ratios of the configured values. Needs root. Run from the repository root:

    python -m benchmarks.bench_netns_link [--rates 10 100 1000] [--latency-us 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from realrun.emulated.emulated_cluster import EmulatedCluster, HostLink
from realrun.emulated.linkprobe import measure_round_trip, measure_throughput
from realrun.emulated.netns import NetnsUnavailable


def bench_rate(
    rate_mbit: float, latency_us: float, repeats: int, duration_s: float
) -> dict[str, float]:
    """Median measured rate and RTT over ``repeats`` runs on one two-host cluster."""
    links = [HostLink("a", rate_mbit, latency_us), HostLink("b", rate_mbit, latency_us)]
    with EmulatedCluster(links) as cluster:
        rates = [
            measure_throughput(cluster, "a", "b", duration_s=duration_s).rate_mbit
            for _ in range(repeats)
        ]
        rtts = [measure_round_trip(cluster, "a", "b", count=50).median_s for _ in range(repeats)]
        configured_rtt_s = 2 * cluster.one_way_latency_s("a", "b")
    return {
        "rate_mbit": rate_mbit,
        "measured_mbit": statistics.median(rates),
        "rtt_configured_ms": configured_rtt_s * 1e3,
        "rtt_measured_ms": statistics.median(rtts) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 100.0, 1000.0])
    parser.add_argument("--latency-us", type=float, default=1000.0, help="one-way, per NIC")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per transfer")
    args = parser.parse_args(argv)
    print(f"two hosts, one-way NIC latency {args.latency_us:g} us each, median of {args.repeats}")
    print(
        f"{'rate Mbit/s':>12} {'measured':>10} {'ratio':>7} "
        f"{'RTT cfg ms':>11} {'RTT ms':>8} {'ratio':>7}"
    )
    try:
        for rate in args.rates:
            row = bench_rate(rate, args.latency_us, args.repeats, args.duration)
            rate_ratio = row["measured_mbit"] / rate
            rtt_cfg = row["rtt_configured_ms"]
            rtt_ratio = row["rtt_measured_ms"] / rtt_cfg if rtt_cfg > 0 else float("nan")
            print(
                f"{rate:>12g} {row['measured_mbit']:>10.1f} {rate_ratio:>7.3f} "
                f"{rtt_cfg:>11.3f} {row['rtt_measured_ms']:>8.3f} {rtt_ratio:>7.3f}",
                flush=True,
            )
    except NetnsUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
