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
    # Every column as wide as its widest cell, so rows line up whatever the zoo holds.
    cells = [
        (
            r["name"],
            str(r["arrays"]),
            f"{r['parameters']:,}",
            f"{r['mb_fp32']:.1f}",
            f"{r['gflops_per_sample']:.2f}",
        )
        for r in rows
    ]
    head = ("model", "arrays", "parameters", "MB fp32", "GFLOPs/sample")
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    for line in (head, *cells):
        first, *rest = line
        right = (f"{v:>{w}}" for v, w in zip(rest, widths[1:], strict=True))
        print(" ".join([f"{first:<{widths[0]}}", *right]))
    print("GFLOPs: forward pass per sample, multiply-add = 2 FLOPs; backward is modelled as 2x.")
    return 0


COMMANDS = {"models": cmd_models}
