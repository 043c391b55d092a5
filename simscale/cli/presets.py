"""``simscale presets``: the instance and GPU presets a scenario can name, with what they leave
open (the declared ranges ``predict --interval`` samples) and where each figure comes from."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "presets",
        help="list the cloud instances and GPUs a scenario can name, with their specs, "
        "their unknowns as ranges, and sources",
    )
    p.add_argument("--json", action="store_true", help="print as JSON")


def _instance_rows() -> list[dict[str, Any]]:
    from simscale.spec.hardware import INSTANCES

    return [
        {
            "name": i.name,
            "gpus": i.gpus,
            "gpu": i.gpu,
            "nic_gbps": i.nic_gbps,
            "vcpus": i.vcpus,
            "transport": i.transport,
            "nccl_sockets": i.nccl_sockets,
            "usd_per_hour": i.usd_per_hour,
            "source": i.source,
            "ranges": [
                {"fact": r.fact, "low": r.low, "high": r.high, "choices": list(r.choices)}
                | {"words": r.describe(), "source": r.source}
                for r in i.ranges
            ],
        }
        for i in INSTANCES.values()
    ]


def _gpu_rows() -> list[dict[str, Any]]:
    from simscale.spec.hardware import GPUS

    return [
        {
            "name": g.name,
            "peak_fp32_tflops": g.peak_fp32_tflops,
            "peak_fp16_tflops": g.peak_fp16_tflops,
            "host_link_gbytes_per_s": g.host_link_gbytes_per_s,
            "peer_link_gbytes_per_s": g.peer_link_gbytes_per_s,
            "memory_gib": g.memory_gib,
            "source": g.source,
        }
        for g in GPUS.values()
    ]


def cmd_presets(args: argparse.Namespace) -> int:
    instances, gpus = _instance_rows(), _gpu_rows()
    if args.json:
        print(json.dumps({"instances": instances, "gpus": gpus}, indent=2))
        return 0
    print(
        f"{'instance':<15} {'GPUs':>4} {'GPU':<5} {'NIC Gbit/s':>10} {'vCPUs':>5} "
        f"{'transport':<9} {'$/hour':>7}"
    )
    for r in instances:
        price = f"{r['usd_per_hour']:.2f}" if r["usd_per_hour"] is not None else "-"
        print(
            f"{r['name']:<15} {r['gpus']:>4} {r['gpu'] or '-':<5} {r['nic_gbps']:>10g} "
            f"{r['vcpus']:>5} {r['transport']:<9} {price:>7}"
        )
        for rng in r["ranges"]:
            print(f"{'':<17}unknown: {rng['words']}")
    print()
    print(f"{'GPU':<5} {'FP32 TFLOPS':>11} {'FP16 TFLOPS':>11} {'PCIe GB/s':>9} {'peer GB/s':>9}")
    for g in gpus:
        print(
            f"{g['name']:<5} {g['peak_fp32_tflops']:>11g} {g['peak_fp16_tflops']:>11g} "
            f"{g['host_link_gbytes_per_s']:>9g} {g['peer_link_gbytes_per_s']:>9g}"
        )
    print(
        "Name an instance in a scenario (cluster.hosts[i].instance); its unknowns are sampled "
        "by `simscale predict --interval`, and a scenario's own `unknowns:` replace them. "
        "Sources: simscale presets --json."
    )
    return 0


COMMANDS = {"presets": cmd_presets}
