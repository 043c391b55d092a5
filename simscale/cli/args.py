"""What the commands share: their exit codes and the arguments several of them take."""

from __future__ import annotations

import argparse

EXIT_BAD_INPUT = 2
EXIT_INCOMPLETE = 3  # --max-seconds struck before one measured iteration was complete


def add_scenario_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    """The scenario file (or ``many`` files and folders) and ``--set PATH=VALUE`` overrides."""
    p.add_argument(
        "scenario",
        nargs="+" if many else None,
        help="scenario YAML files, or folders of them" if many else "scenario YAML file",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. --set kvstore.servers=16 (repeatable)",
    )


def add_force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="overwrite output files that exist")
