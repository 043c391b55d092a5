"""``simscale check``: validate scenario files (or folders of them) without simulating."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from simscale.cli.args import EXIT_BAD_INPUT, add_scenario_args
from simscale.spec.config import ConfigError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="validate scenario files without simulating")
    add_scenario_args(p, many=True)


def cmd_check(args: argparse.Namespace) -> int:
    from simscale.spec.scenario import load_scenario

    failed = 0
    for path in _scenario_files(args.scenario):
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


def _scenario_files(paths: Sequence[str]) -> list[str]:
    """The files to check: a folder stands for every .yaml/.yml file under it, in path order."""
    out: list[str] = []
    for path in paths:
        folder = Path(path)
        if folder.is_dir():
            found = sorted(str(f) for f in folder.rglob("*") if f.suffix in (".yaml", ".yml"))
            if not found:
                raise ConfigError("", "no .yaml or .yml file under this folder", path)
            out.extend(found)
        else:
            out.append(path)
    return out


COMMANDS = {"check": cmd_check}
