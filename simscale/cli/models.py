"""``simscale models``: the model zoo, one line (or JSON object) per model."""

from __future__ import annotations

import argparse
import json


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the model zoo")
    p.add_argument("--json", action="store_true", help="print as JSON")


def cmd_models(args: argparse.Namespace) -> int:
    from simscale import zoo

    rows = []
    for name in zoo.names():
        m = zoo.get(name)
        rows.append(
            {
                "name": name,
                "arrays": len(m.arrays),
                "parameters": m.params,
                "mb_fp32": m.nbytes("fp32") / 1e6,
                "gflops_per_sample": m.fwd_flops / 1e9,
                "input_shape": list(m.input_shape),
                "source": m.source,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    # As wide as the longest name, so every row lines up whatever the zoo holds.
    w = max(len("model"), *(len(r["name"]) for r in rows))
    print(f"{'model':<{w}} {'arrays':>6} {'parameters':>13} {'MB fp32':>9} {'GFLOPs/sample':>14}")
    for r in rows:
        print(
            f"{r['name']:<{w}} {r['arrays']:>6} {r['parameters']:>13,} {r['mb_fp32']:>9.1f} "
            f"{r['gflops_per_sample']:>14.2f}"
        )
    print("GFLOPs: forward pass per sample, multiply-add = 2 FLOPs; backward is modelled as 2x.")
    return 0


COMMANDS = {"models": cmd_models}
