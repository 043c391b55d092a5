"""``simscale combine-traces``: timelines of predictions and real runs in one Perfetto file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simscale.report.outputs import refuse_overwrite, write_text_atomic
from simscale.spec.config import ConfigError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "combine-traces",
        help="put timelines (predict --trace, realrun run --trace) in one file for ui.perfetto.dev",
    )
    p.add_argument("traces", nargs="+", type=Path, help="Chrome-trace JSON files")
    p.add_argument("-o", "--output", type=Path, required=True, help="combined trace to write")
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")


def cmd_combine_traces(args: argparse.Namespace) -> int:
    from simscale.report.trace import combine

    refuse_overwrite([args.output], args.force)
    traces = []
    for path in args.traces:
        try:
            traces.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError("", f"cannot read a trace: {e}", str(path)) from None
    try:
        combined = combine(traces)
    except ValueError as e:
        raise ConfigError("", str(e)) from None
    write_text_atomic(args.output, json.dumps(combined))
    print(f"{len(traces)} timelines written to {args.output} (open in ui.perfetto.dev)")
    return 0


COMMANDS = {"combine-traces": cmd_combine_traces}
