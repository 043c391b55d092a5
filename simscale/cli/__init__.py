"""The ``simscale`` command: ``main`` runs one subcommand and turns bad input into one line.

One module per command beside this file (predict.py, check.py, models.py, traces.py, whatif.py
for sweep/compare/advise, schema.py), plus the commands other packages register (calibration's
calibrate, validate and plot): registry.py says how both are found. Bad input never shows a
traceback: it prints one line naming the file and field and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Sequence

from simscale import __version__
from simscale.cli import registry
from simscale.cli.args import EXIT_BAD_INPUT
from simscale.lifetime import interrupted_exit_code, stop_on_signals
from simscale.spec.config import ConfigError


def build_parser(commands: registry.Registry | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simscale",
        description="Predict data-parallel training throughput before renting the cluster.",
    )
    parser.add_argument("--version", action="version", version=f"simscale {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    (commands or registry.load()).add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    commands = registry.load()
    for problem in commands.problems:
        print(f"simscale: warning: {problem}", file=sys.stderr)
    args = build_parser(commands).parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        stop_on_signals()  # SIGTERM stops a command (and its fold processes) as Ctrl-C does
    try:
        return commands.commands[args.command](args)
    except (ConfigError, *commands.errors) as e:
        print(f"simscale: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        print(f"simscale: interrupted{f' ({e.args[0]})' if e.args else ''}", file=sys.stderr)
        return interrupted_exit_code()
    except BrokenPipeError:
        # The reader of our output went away (`simscale ... | head`): stop quietly, and keep
        # Python from reporting the same broken pipe again when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):  # stdout may be no real file
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        # What the checks before the work cannot foresee (a full disk, a folder that refuses
        # files even to root): still one line, not a traceback.
        where = f"{e.filename}: " if e.filename else ""
        print(f"simscale: error: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
