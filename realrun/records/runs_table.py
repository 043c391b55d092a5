"""``python -m realrun.records.runs_table DIR``: one line per configuration of a campaign's records.

Loads (and so validates) every record in DIR, groups the repeats of a configuration (file
``<name>__r<k>.json``) and prints the cluster shape, the median iteration in the scenario's
time (mean over repeats and the spread between repeats), samples/s, and the worst machine-load
figures, so a dataset's README quotes only numbers this command printed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from realrun.records.record import RunRecord, load_record

_REPEAT = re.compile(r"^(?P<config>.+)__r(?P<k>\d+)$")


def shape(record: RunRecord) -> str:
    """workers/servers, placement, mode, model, effective NIC Mbit/s and dilation."""
    s = record.scenario
    env = record.environment
    nic = s["cluster"]["hosts"][0].get("nic_gbps")
    d = s.get("realrun", {}).get("dilation", 1.0)
    kv = s["kvstore"]
    rate = f"{nic * 1000:g}M" if nic is not None else "?"
    return (
        f"{env.get('num_workers')}w {env.get('num_servers')}s {kv['placement'][:4]} "
        f"{kv['mode'].removeprefix('dist_')} {s['model'].get('name') or 'custom'} {rate} D={d:g}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    files = sorted(Path(args.directory).glob("*.json"))
    for path in files:
        match = _REPEAT.match(path.stem)
        groups[match["config"] if match else path.stem].append(load_record(path))
    records = [r for rs in groups.values() for r in rs]
    print(
        f"{len(records)} records, {len(groups)} configurations; complete "
        f"{sum(r.complete for r in records)}, valid {sum(r.valid for r in records)}"
    )
    print(
        f"{'configuration':34} {'shape':40} {'iter ms':>8} {'spread':>7} {'samples/s':>10} "
        f"{'cpu':>5} {'delay':>6}"
    )
    for config, rs in groups.items():
        done = [r for r in rs if r.complete and r.summary is not None]
        if not done:
            print(f"{config:34} {'(no complete record)':40}")
            continue
        medians = [r.summary.median_iteration_s for r in done]
        mean = statistics.fmean(medians)
        spread = (max(medians) - min(medians)) / mean if mean > 0 else 0.0
        rate = statistics.fmean(r.summary.samples_per_s for r in done)
        loads = [r.environment.get("machine_load", {}) for r in done]
        cpu = max(x.get("cluster_cpu_busy", 0.0) for x in loads)
        delay = max(x.get("max_run_delay_share", 0.0) for x in loads)
        flag = "" if all(r.valid for r in rs) else "  INVALID"
        print(
            f"{config:34} {shape(done[0]):40} {mean * 1e3:8.1f} {spread:7.1%} {rate:10.1f} "
            f"{cpu:5.0%} {delay:6.1%}{flag}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
