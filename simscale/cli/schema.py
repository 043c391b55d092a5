"""``simscale schema``: the scenario JSON Schema, for editor completion and validation."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simscale.report.outputs import check_writable
from simscale.whatif.errors import WhatIfError

ERRORS = (WhatIfError,)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="write the scenario JSON Schema (editor completion)")
    p.add_argument("-o", "--output", type=Path, help="file to write (default: print it)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")


def cmd_schema(args: argparse.Namespace) -> int:
    from simscale.spec.schema import schema

    text = json.dumps(schema(), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    if args.output.exists() and not args.force:
        raise WhatIfError(f"{args.output}: exists; pass --force to overwrite it")
    check_writable(args.output, "-o")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"scenario schema written to {args.output}")
    return 0


COMMANDS = {"schema": cmd_schema}
