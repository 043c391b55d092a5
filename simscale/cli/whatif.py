"""The what-if commands: ``simscale sweep``, ``compare`` and ``advise``.

They predict many scenarios at once through simscale.whatif (grid, executors, advice); each turns
bad input into a WhatIfError or ConfigError, which ``main`` prints as one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from simscale.cli.args import add_scenario_args
from simscale.report.outputs import check_figure, check_writable
from simscale.spec.config import integer_at_least
from simscale.whatif.errors import WhatIfError

ERRORS = (WhatIfError,)
MAX_ROWS_SHOWN = 60


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="predict every combination of varied fields: flat rows, charts, cost"
    )
    add_scenario_args(p)
    _add_space_args(p)
    p.add_argument("-o", "--output", type=Path, help="rows to .csv, .json or .parquet")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument(
        "--fresh", action="store_true", help="ignore the checkpoint of an interrupted sweep"
    )
    _add_run_args(p)
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the scaling chart")
    p.add_argument("--series", metavar="FIELD", help="one chart series per value of this column")
    p.add_argument(
        "--series-labels",
        metavar="V=TEXT,...",
        help="legend text per series value, e.g. '0=1 server,1=1:1,2=2:1'",
    )
    p.add_argument(
        "--overlay",
        type=Path,
        metavar="POINTS.csv",
        help="measured or published points to overlay (columns gpus, samples_per_s[, label])",
    )
    p.add_argument("--title", help="chart title")

    p = sub.add_parser(
        "compare", help="the same cluster under different choices, differences in words"
    )
    add_scenario_args(p, many=True)
    p.add_argument(
        "--vs",
        action="append",
        default=[],
        metavar="FIELD=VALUE[,FIELD=VALUE]",
        help="a variant of the first scenario, e.g. --vs kvstore.mode=allreduce (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    _add_run_args(p)

    p = sub.add_parser(
        "advise", help="cheapest and fastest shapes meeting a throughput target or deadline"
    )
    add_scenario_args(p)
    _add_space_args(p)
    goal = p.add_mutually_exclusive_group(required=True)
    goal.add_argument("--target-throughput", type=float, metavar="SAMPLES_PER_S")
    goal.add_argument(
        "--deadline", type=float, metavar="HOURS", help="train dataset_samples x epochs within"
    )
    p.add_argument("--budget", type=float, metavar="USD", help="at most this to train")
    p.add_argument("--runners-up", type=integer_at_least(0), default=3, metavar="N")
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    _add_run_args(p)


def _add_space_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="FIELD=VALUES",
        help="e.g. kvstore.servers=1,8,16 | cluster.hosts[0].count=1..16x2 | a+b=1/2,2/4",
    )
    p.add_argument(
        "--let",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="a sweep variable for --link expressions, e.g. servers_per_worker=0,1,2",
    )
    p.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="FIELD=EXPR",
        help="a field computed per point, e.g. kvstore.servers=2*{cluster.hosts[0].count}",
    )


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--executor",
        default="local",
        metavar="local|serial|dask://HOST:PORT",
        help="where points run (default: local processes, one per core)",
    )
    p.add_argument(
        "--jobs", type=integer_at_least(1), metavar="N", help="local processes (default: cores)"
    )
    p.add_argument("--profile", type=Path, metavar="PROFILE.yaml", help="calibration profile")
    p.add_argument(
        "--force-profile", action="store_true", help="apply the profile outside its scope"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _load_profile(args: argparse.Namespace) -> Any:
    if args.profile is None:
        return None
    from simscale.spec.profile import load_profile

    return load_profile(args.profile)


def progress_bar(enabled: bool, what: str) -> AbstractContextManager[Any]:
    """One progress display for every what-if command: tqdm on stderr."""
    if not enabled:
        return nullcontext(None)
    from tqdm import tqdm

    return tqdm(total=0, desc=what, unit="point", file=sys.stderr, dynamic_ncols=True)


def _updater(bar: Any) -> Callable[[int, int], None] | None:
    if bar is None:
        return None

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return update


def _eta_shower(bar: Any) -> Callable[[float | None], None] | None:
    """Show the sweep's own estimate of the time left (simscale.whatif.sweep.Eta) in place of
    tqdm's, which assumes every point costs the same."""
    if bar is None:
        return None
    bar.bar_format = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"

    def show(seconds: float | None) -> None:
        left = "?" if seconds is None else bar.format_interval(seconds)
        bar.set_postfix_str(f"~{left} left", refresh=True)

    return show


def _run_grid(
    args: argparse.Namespace, what: str, grid: Any, checkpoint: Path | None = None
) -> Any:
    from simscale.whatif.sweep import run_sweep

    with progress_bar(not args.no_progress, what) as bar:
        return run_sweep(
            args.scenario,
            grid,
            overrides=args.overrides,
            profile=_load_profile(args),
            force_profile=args.force_profile,
            executor=args.executor,
            jobs=args.jobs,
            checkpoint=checkpoint,
            progress=_updater(bar),
            eta=_eta_shower(bar),
        )


def cmd_sweep(args: argparse.Namespace) -> int:
    from simscale.whatif.grid import parse_grid
    from simscale.whatif.sweep import checkpoint_path
    from simscale.whatif.tables import check_output, format_rows, write_rows

    grid = parse_grid(args.vary, args.let, args.link)
    if not grid.axes:
        raise WhatIfError("sweep: nothing varied; give at least one --vary FIELD=VALUES")
    checkpoint = None
    if args.output is not None:
        checkpoint = checkpoint_path(args.output)
        if args.fresh:
            checkpoint.unlink(missing_ok=True)
        check_output(args.output, force=args.force)
    if args.plot is not None:
        _check_plot_args(args, grid.columns)
    try:
        outcome = _run_grid(args, "sweep", grid, checkpoint)
    except KeyboardInterrupt:
        if checkpoint is not None and checkpoint.exists():
            print(
                f"simscale: finished rows kept in {checkpoint}; run the same command again to "
                "continue",
                file=sys.stderr,
            )
        raise
    if args.output is not None:
        write_rows(args.output, outcome.rows, outcome.columns)
        if checkpoint is not None:
            checkpoint.unlink(missing_ok=True)
    print(format_rows(outcome.rows[:MAX_ROWS_SHOWN], outcome.columns))
    if len(outcome.rows) > MAX_ROWS_SHOWN:
        print(
            f"... {len(outcome.rows) - MAX_ROWS_SHOWN} more rows"
            + (f" in {args.output}" if args.output else " (write them all with -o FILE)")
        )
    resumed = f", {outcome.resumed} kept from the interrupted run" if outcome.resumed else ""
    print(
        f"\n{len(outcome.rows)} points: {len(outcome.rows) - outcome.failed} predicted, "
        f"{outcome.failed} invalid or failed{resumed}"
        + (f"; rows written to {args.output}" if args.output else "")
    )
    if args.plot is not None:
        from simscale.whatif.chart import load_overlay, scaling_chart

        overlay = load_overlay(args.overlay) if args.overlay else []
        scaling_chart(
            outcome.rows,
            args.plot,
            series=args.series,
            labels=_labels(args.series_labels),
            overlay=overlay,
            title=args.title or f"predicted scaling: {Path(args.scenario).name}",
        )
        print(f"chart written to {args.plot}")
    return 0


def _check_plot_args(args: argparse.Namespace, columns: list[str]) -> None:
    check_figure(args.plot, "--plot")
    if args.plot.exists() and not args.force:
        raise WhatIfError(f"--plot {args.plot}: exists; pass --force to overwrite it")
    check_writable(args.plot, "--plot")
    if args.series is not None and args.series not in columns:
        raise WhatIfError(
            f"--series {args.series!r}: not a varied column; varied: {', '.join(columns)}"
        )


def _labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        if "=" not in item:
            raise WhatIfError(f"--series-labels: {item!r} is not VALUE=TEXT")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from simscale.whatif.compare import compare, explain, format_comparison

    if len(args.scenario) + len(args.vs) < 2:
        raise WhatIfError("compare: give two or more scenarios, or one and --vs FIELD=VALUE")
    entries = compare(
        args.scenario,
        args.vs,
        overrides=args.overrides,
        profile=_load_profile(args),
        force_profile=args.force_profile,
        executor=args.executor,
    )
    if args.json:
        payload = {"entries": [e.to_dict() for e in entries], "differences": explain(entries)}
        print(json.dumps(payload, indent=2, allow_nan=False))
    else:
        print(format_comparison(entries))
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    import json

    from simscale.whatif.advise import Target, choose, format_advice
    from simscale.whatif.grid import parse_grid

    target = Target(args.target_throughput, args.deadline, args.budget)
    target.validate()
    grid = parse_grid(args.vary, args.let, args.link)
    if not grid.axes:
        raise WhatIfError("advise: no space to search; give --vary FIELD=VALUES")
    outcome = _run_grid(args, "advise", grid)
    advice = choose(outcome.rows, outcome.columns, target, args.runners_up)
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2, allow_nan=False))
    else:
        print(format_advice(advice))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "sweep": cmd_sweep,
    "compare": cmd_compare,
    "advise": cmd_advise,
}
