"""``realrun probe``: build the host set for the launcher, probe, write the record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from realrun.probe.hosts import HostSet, LocalHosts, NetnsHosts, ProbeHostError, SshHosts
from realrun.probe.runner import STEPS, ProbeOptions, probe
from realrun.records.probe_record import write_probe
from simscale.lifetime import interrupted_exit_code, stop_on_signals
from simscale.report.outputs import check_writable, refuse_overwrite


def host_set(args: argparse.Namespace) -> HostSet:
    """The hosts the probe runs on, from the command line (ValueError when they make no set)."""
    if args.launcher == "netns":
        if not args.scenario:
            raise ValueError("--launcher netns needs --scenario (the cluster to build)")
        from simscale.spec.scenario import load_scenario

        return NetnsHosts(load_scenario(args.scenario, args.set))
    if args.launcher == "ssh":
        if not args.hostfile:
            raise ValueError("--launcher ssh needs -H/--hostfile")
        from realrun.launching.ssh_launcher import read_hostfile

        return SshHosts(read_hostfile(args.hostfile), args.ssh_option)
    return LocalHosts(args.hosts)


def run_probe(args: argparse.Namespace) -> int:
    from realrun.emulated.netns import NetnsUnavailable
    from simscale.spec.scenario import ScenarioError

    stop_on_signals()  # SIGTERM tears the probe down as Ctrl-C does
    out = Path(args.output)
    skip = frozenset(s.strip() for s in args.skip.split(",") if s.strip())
    unknown = sorted(skip - set(STEPS))

    def say(line: str) -> None:
        if not args.no_progress:
            print(f"probe: {line}", file=sys.stderr, flush=True)

    try:
        if unknown:
            raise ValueError(f"--skip: unknown step(s) {unknown}; steps are {', '.join(STEPS)}")
        refuse_overwrite([out], args.force)
        check_writable(out, "-o")
        with host_set(args) as hosts:
            say(
                f"{len(hosts.hosts)} hosts over {hosts.launcher}: "
                + ", ".join(f"{h.name} {h.address}" for h in hosts.hosts)
            )
            record = probe(hosts, ProbeOptions(skip=skip), say)
    except ProbeHostError as e:
        print(f"realrun probe: {e}", file=sys.stderr)
        return 1
    except (ScenarioError, ValueError, OSError, NetnsUnavailable) as e:
        print(f"realrun probe: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("realrun probe: interrupted; every probe end stopped", file=sys.stderr)
        return interrupted_exit_code()
    write_probe(record, out)
    print(
        f"probe record {out}: {len(record.measurements)} measurements in "
        f"{record.environment['wall_s']:.0f} s"
    )
    return 0
