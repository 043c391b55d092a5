"""``realrun run SCENARIO --launcher local [-o RUN.json] [--set path=value ...]``."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from realrun.record import write_record

LAUNCHERS = ("local",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="realrun", description="Real parameter-server runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train a scenario for real and record what was measured")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--launcher", choices=LAUNCHERS, default="local")
    run.add_argument("-o", "--output", help="run record path (default: runs/NAME.json)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field, e.g. --set kvstore.servers=1",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop the job (record kept, complete=false) after this long",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    args = parser.parse_args(argv)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from realrun.job import Job
    from realrun.local_launcher import LocalLauncher
    from simscale.scenario import ScenarioError

    try:
        job = Job(
            args.scenario,
            LocalLauncher(),
            args.set,
            progress=not args.no_progress,
            timeout_s=args.timeout,
        )
    except (ScenarioError, ValueError, OSError) as e:
        print(f"realrun: {e}", file=sys.stderr)
        return 2
    # A launcher stopped by SIGTERM (a batch system, a timeout) tears the job down and keeps
    # the record, exactly as for Ctrl-C.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    record = job.run()
    out = Path(args.output) if args.output else Path("runs") / f"{job.scenario.name}.json"
    write_record(record, out)
    if not record.complete:
        print(f"realrun: run failed: {record.error} (partial record in {out})", file=sys.stderr)
        return 1
    s = record.summary
    assert s is not None
    print(
        f"{job.scenario.name}: {s.samples_per_s:.1f} samples/s over {job.num_workers} workers "
        f"(median iteration {s.median_iteration_s * 1e3:.1f} ms, mean wait "
        f"{s.mean_wait_s * 1e3:.1f} ms); record {out}"
    )
    return 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
