"""The ``simscale`` command: predict, check, models.

Bad input never shows a traceback: it prints one line naming the file and field and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from simscale import __version__
from simscale.config import ConfigError

EXIT_BAD_INPUT = 2


def _add_scenario_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    p.add_argument("scenario", nargs="+" if many else None, help="scenario YAML file")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. --set kvstore.servers=16 (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simscale",
        description="Predict data-parallel training throughput before renting the cluster.",
    )
    parser.add_argument("--version", action="version", version=f"simscale {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("predict", help="simulate a scenario: throughput, efficiency, bottleneck")
    _add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-o", "--output", type=Path, help="also write the JSON result to this file")
    p.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="write a Chrome-trace/Perfetto JSON timeline of one measured iteration",
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="PROFILE.yaml",
        help="apply a calibration profile (fitted cost parameters)",
    )

    p = sub.add_parser("check", help="validate scenario files without simulating")
    _add_scenario_args(p, many=True)

    p = sub.add_parser("models", help="list the model zoo")
    p.add_argument("--json", action="store_true", help="print as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"simscale: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("simscale: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from simscale.profile import load_profile
    from simscale.scenario import load_scenario
    from simscale.simulator import Simulation
    from simscale.trace import write_trace

    scenario = load_scenario(args.scenario, args.overrides)
    costs = load_profile(args.profile).costs_for(scenario) if args.profile else None
    sim = Simulation(scenario, costs, trace=args.trace is not None)
    result = sim.run()
    if args.trace is not None:
        assert sim.spans is not None
        write_trace(args.trace, sim.spans, scenario.simulation.warmup_iterations, scenario.name)
    payload = result.to_json()
    if args.output is not None:
        _write_atomic(args.output, payload + "\n")
    if args.json:
        print(payload)
    else:
        from simscale.results import format_table

        print(format_table(result))
        if args.trace is not None:
            print(
                f"trace of iteration {scenario.simulation.warmup_iterations} written to "
                f"{args.trace} (open in ui.perfetto.dev)"
            )
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from simscale.scenario import load_scenario

    failed = 0
    for path in args.scenario:
        try:
            s = load_scenario(path, args.overrides)
        except ConfigError as e:
            print(f"simscale: error: {e}", file=sys.stderr)
            failed += 1
            continue
        print(
            f"{path}: ok ({s.num_workers} workers, {s.num_gpus} GPUs, {s.num_servers} servers, "
            f"{s.kvstore.mode}, model {s.model.spec().name})"
        )
    return EXIT_BAD_INPUT if failed else 0


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
    print(f"{'model':<15} {'arrays':>6} {'parameters':>13} {'MB fp32':>9} {'GFLOPs/sample':>14}")
    for r in rows:
        print(
            f"{r['name']:<15} {r['arrays']:>6} {r['parameters']:>13,} {r['mb_fp32']:>9.1f} "
            f"{r['gflops_per_sample']:>14.2f}"
        )
    print("GFLOPs: forward pass per sample, multiply-add = 2 FLOPs; backward is modelled as 2x.")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


COMMANDS = {"predict": cmd_predict, "check": cmd_check, "models": cmd_models}


if __name__ == "__main__":
    sys.exit(main())
