"""``realrun run SCENARIO [--launcher local|netns|ssh] [-o RUN.json] [--set path=value ...]``,
``realrun campaign FILE [-o DIR] [--repeats N]``, ``realrun probe -o PROBE.json`` and
``realrun cleanup``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from realrun.run import LAUNCHERS
from simscale.lifetime import interrupted_exit_code, stop_on_signals
from simscale.report.outputs import check_writable, refuse_overwrite
from simscale.spec.config import positive_seconds

if TYPE_CHECKING:
    from realrun.records.record import RunRecord


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realrun", description="Real parameter-server runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train a scenario for real and record what was measured")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument(
        "-o", "--output", help="run record path (default: a new runs/local/NAME-TIME.json)"
    )
    run.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field, e.g. --set kvstore.servers=1",
    )
    run.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop the job (record kept, complete=false) after this long",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="write the first measured iteration (real compute) as a Chrome/Perfetto "
        "timeline (default: $REALRUN_TRACE_DIR/NAME.trace.json when that is set)",
    )
    _launch_arguments(run)
    campaign = sub.add_parser("campaign", help="run a YAML campaign of scenarios and overrides")
    campaign.add_argument("campaign", help="campaign YAML file")
    campaign.add_argument("-o", "--output", help="directory of records (default: runs/NAME)")
    campaign.add_argument("--repeats", type=int, default=None, help="override the file's repeats")
    campaign.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="per run (default 600)",
    )
    _launch_arguments(campaign, default="netns")
    _add_probe(sub)
    cleanup = sub.add_parser("cleanup", help="delete emulated-cluster leftovers of dead runs")
    cleanup.add_argument("--force", action="store_true", help="also those of live runs")
    args = parser.parse_args(argv)
    if args.command == "cleanup":
        return _cleanup(args)
    from realrun.extra import problem

    if (missing := problem()) is not None:
        print(f"realrun: {missing}", file=sys.stderr)
        return 2
    if args.command == "campaign":
        return _campaign(args)
    if args.command == "probe":
        from realrun.probe.cli import run_probe

        return run_probe(args)
    return _run(args)


def _add_probe(sub: argparse._SubParsersAction) -> None:
    from realrun.probe.steps import STEPS

    probe = sub.add_parser(
        "probe", help="measure the cluster's network, servers, all-reduce and GPUs in minutes"
    )
    probe.add_argument("-o", "--output", required=True, help="probe record (JSON) to write")
    probe.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    probe.add_argument(
        "--scenario", help="netns: build this scenario's emulated cluster (its hosts and NICs)"
    )
    probe.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE", help="override a field"
    )
    probe.add_argument(
        "--hosts", type=int, default=4, metavar="N", help="local: how many hosts (default 4)"
    )
    probe.add_argument(
        "--skip", default="", metavar="STEP,...", help=f"steps to leave out of {','.join(STEPS)}"
    )
    probe.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    _launch_arguments(probe)


def _launch_arguments(parser: argparse.ArgumentParser, default: str = "local") -> None:
    parser.add_argument("--launcher", choices=LAUNCHERS, default=default)
    parser.add_argument(
        "-H", "--hostfile", help="ssh launcher: one host per line, servers and workers cycled"
    )
    parser.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="ssh launcher: passed as ssh -o OPTION, e.g. Port=2222 or IdentityFile=~/.ssh/k",
    )


def _options(args: argparse.Namespace):
    from realrun.run import LaunchOptions

    return LaunchOptions(args.launcher, args.hostfile, tuple(args.ssh_option))


def _run(args: argparse.Namespace) -> int:
    from realrun.emulated.netns import NetnsUnavailable
    from realrun.run import run_scenario
    from simscale.spec.scenario import ScenarioError

    # A launcher stopped by SIGTERM (a batch system, a timeout) tears the job down and keeps
    # the record, exactly as for Ctrl-C, and exits 143 (130 for Ctrl-C).
    stop_on_signals()
    try:
        if args.output:
            refuse_overwrite([Path(args.output)], args.force)
        if args.trace:
            check_writable(Path(args.trace), "--trace")
        record, out = run_scenario(
            args.scenario,
            args.set,
            _options(args),
            args.output,
            progress=not args.no_progress,
            timeout_s=args.timeout,
            trace=args.trace,
        )
    except (ScenarioError, ValueError, OSError, NetnsUnavailable) as e:
        print(f"realrun: {e}", file=sys.stderr)
        return 2
    try:
        return _report(record, out)
    except BrokenPipeError:
        # Whoever read our output went away; the record and its log are written all the same.
        _silence()
        return 0 if record.complete and record.valid else 1


def _report(record: RunRecord, out: Path) -> int:
    """Say how the run went (one line, or the failure on stderr) and return the exit code."""
    if not record.complete:
        print(f"realrun: run failed: {record.error} (partial record in {out})", file=sys.stderr)
        return interrupted_exit_code() if (record.error or "").startswith("interrupted") else 1
    s = record.summary
    assert s is not None
    name = record.scenario.get("name", "")
    workers = record.environment.get("num_workers")
    print(
        f"{name}: {s.samples_per_s:.1f} samples/s over {workers} workers "
        f"(median iteration {s.median_iteration_s * 1e3:.1f} ms, mean wait "
        f"{s.mean_wait_s * 1e3:.1f} ms); record {out}"
    )
    d = record.environment.get("dilation", {})
    if d.get("factor", 1.0) != 1.0:
        raw = d["raw_samples_per_s"]
        print(f"  in scenario time; raw on this machine at dilation {d['factor']:g}: {raw:.1f}")
    if not record.valid:
        print(f"realrun: record marked invalid: {record.invalid_reason}", file=sys.stderr)
        return 3
    return 0


def _silence() -> None:
    """Point stdout and stderr at /dev/null, so that Python's flush at exit does not report
    the same broken pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # no real file behind it
            os.dup2(devnull, stream.fileno())
    os.close(devnull)


def _campaign(args: argparse.Namespace) -> int:
    from realrun.campaign import CampaignError, load_campaign, run_campaign
    from realrun.emulated.netns import NetnsUnavailable

    stop_on_signals()
    try:
        campaign = load_campaign(args.campaign, repeats=args.repeats)
        return run_campaign(campaign, args.output, _options(args), timeout_s=args.timeout)
    except (CampaignError, NetnsUnavailable) as e:
        print(f"realrun: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("realrun: campaign interrupted; run it again to resume", file=sys.stderr)
        return interrupted_exit_code()


def _cleanup(args: argparse.Namespace) -> int:
    from realrun.emulated.netns import NetnsUnavailable, cleanup_leftovers

    try:
        deleted = cleanup_leftovers(force=args.force)
    except NetnsUnavailable as e:
        print(f"realrun: {e}", file=sys.stderr)
        return 2
    for namespace in deleted:
        print(f"deleted {namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
