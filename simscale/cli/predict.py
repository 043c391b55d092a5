"""``simscale predict``: simulate one scenario and report throughput, efficiency and bottleneck.

The report is a table (or ``--json``), the cluster's cost, the costs' source and, on request,
an interval from the profile's uncertainty and a Perfetto timeline of one measured iteration.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simscale.cli.args import EXIT_BAD_INPUT, EXIT_INCOMPLETE, add_force_arg, add_scenario_args
from simscale.report.outputs import refuse_overwrite, write_text_atomic
from simscale.spec.config import ConfigError, positive_seconds
from simscale.whatif.errors import WhatIfError

if TYPE_CHECKING:
    from simscale.report.results import Result
    from simscale.simulator import Progress
    from simscale.spec.costs import CostModel
    from simscale.spec.profile import Profile
    from simscale.spec.scenario import Scenario
    from simscale.whatif.uncertainty import Interval

ERRORS = (WhatIfError,)  # --interval's bad level or profile


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="simulate a scenario: throughput, efficiency, bottleneck")
    add_scenario_args(p)
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
        help="apply a calibration profile (fitted cost parameters); default: "
        "profiles/real-v1.yaml for real accelerators, plain defaults otherwise; 'none' for "
        "the plain defaults",
    )
    p.add_argument(
        "--max-seconds",
        type=positive_seconds,
        metavar="S",
        help="stop after S seconds of wall time and report the iterations measured so far",
    )
    p.add_argument(
        "--path",
        choices=("auto", "exact", "symmetric"),
        default="auto",
        help="model path: identical workers simulated once where that holds (auto, the "
        "default), every worker simulated (exact), or the reduction insisted on (symmetric)",
    )
    p.add_argument(
        "--force-profile",
        action="store_true",
        help="apply the profile even to scenarios outside its scope (other worker devices)",
    )
    add_force_arg(p)
    p.add_argument(
        "--interval",
        type=float,
        metavar="LEVEL",
        help="also give a LEVEL%% interval (e.g. 90) from the profile's parameter uncertainty "
        "and seeded repetitions",
    )
    p.add_argument("--draws", type=int, default=24, metavar="N", help="simulations for --interval")


def cmd_predict(args: argparse.Namespace) -> int:
    from simscale.report.trace import simulation_spans, write_trace
    from simscale.simulator import IncompleteRun, Simulation
    from simscale.spec.scenario import load_scenario

    refuse_overwrite([args.output] if args.output is not None else [], args.force)
    refuse_overwrite([args.trace] if args.trace is not None else [], args.force, "--trace")
    scenario = load_scenario(args.scenario, args.overrides)
    costs, where, profile = _costs(args, scenario)
    trace = args.trace is not None
    try:
        refuse_if_too_long(scenario, args.scenario, costs, args.path, trace)
        sim = Simulation(scenario, costs, trace=trace, path=args.path)
    except ValueError as e:  # --path symmetric where the reduction does not hold
        print(f"simscale: error: --path {args.path}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    show = _SimulationProgress()
    try:
        result = sim.run(max_seconds=args.max_seconds, progress=show)
    except IncompleteRun as e:
        show.close()
        print(f"simscale: {e}; nothing measured to report", file=sys.stderr)
        return EXIT_INCOMPLETE
    show.close()
    _say_how_complete(result)
    if args.trace is not None:
        iteration = scenario.simulation.warmup_iterations
        write_trace(args.trace, simulation_spans(sim), iteration, f"{scenario.name} (predicted)")
    extra, iv = _extra_fields(args, scenario, costs, profile, result)
    payload = json.dumps({**result.to_dict(), **extra}, indent=2, allow_nan=False)
    if args.output is not None:
        write_text_atomic(args.output, payload + "\n")
    if args.json:
        print(payload)
    else:
        _print_report(args, scenario, costs, result, extra, iv, where)
    return 0


def _costs(args: argparse.Namespace, scenario: Scenario) -> tuple[CostModel, str, Profile | None]:
    """The cost model to predict with, where it comes from in words, and the profile (if any)."""
    from simscale.spec.costs import CostModel
    from simscale.spec.profile import default_costs, load_profile

    if args.profile is None:
        return (*default_costs(scenario), None)
    if str(args.profile).lower() == "none":
        return CostModel(), "default costs (--profile none)", None
    profile = load_profile(args.profile)
    costs = profile.costs_for(scenario, force=args.force_profile)
    where = f"profile {args.profile}"
    if not (args.force_profile or profile.applies_to(scenario)):
        where = default_costs(scenario)[1]
        print(
            f"note: profile {args.profile} applies to {profile.describe_scope()}; this "
            "scenario is outside it, so the default costs are used (--force-profile to "
            "apply it anyway)",
            file=sys.stderr,
        )
    return costs, where, profile


def _say_how_complete(result: Result) -> None:
    """A partial (--max-seconds) or approximate (symmetric path) answer says so on stderr."""
    if result.stopped_early:
        print(f"simscale: {result.stopped_early}; the result is partial", file=sys.stderr)
    if result.approximate:
        print(
            "simscale: note: an approximate answer (symmetric path beyond its validated loads; "
            "the report's model path says how far off it has been)",
            file=sys.stderr,
        )


def _extra_fields(
    args: argparse.Namespace,
    scenario: Scenario,
    costs: CostModel,
    profile: Profile | None,
    result: Result,
) -> tuple[dict[str, Any], Interval | None]:
    """What the report adds to the simulation's result (cost, interval, assumed compute), and
    the interval itself for its words."""
    from simscale.whatif.pricing import cluster_price, cost_fields
    from simscale.whatif.rows import assumed_compute

    extra: dict[str, Any] = {
        "cost": {
            **cost_fields(scenario, result.throughput_samples_per_s),
            "price_sources": cluster_price(scenario).describe(),
        }
    }
    iv = None
    if args.interval is not None:
        from simscale.whatif.uncertainty import interval

        iv = interval(
            scenario,
            profile,
            level=args.interval / 100,
            draws=args.draws,
            force_profile=args.force_profile,
        )
        extra["interval"] = iv.to_dict()
    assumed = assumed_compute(scenario, costs)
    if assumed:
        extra["compute_efficiency_assumed"] = assumed
    return extra, iv


def _print_report(
    args: argparse.Namespace,
    scenario: Scenario,
    costs: CostModel,
    result: Result,
    extra: dict[str, Any],
    iv: Interval | None,
    where: str,
) -> None:
    from simscale.report.results import format_table
    from simscale.whatif.rows import compute_efficiency_used

    print(format_table(result))
    print(f"\ncost          {_cost_words(extra['cost'])}")
    if iv is not None:
        print(f"\ninterval      {iv.words}")
    print(f"costs         {where}")
    assumed = extra.get("compute_efficiency_assumed", {})
    for key, value in compute_efficiency_used(scenario, costs).items():
        if key not in assumed:  # an assumed one gets its own warning below
            print(f"compute       {key} at {value:.3g} of its peak FLOP/s ({where})")
    for key, value in extra.get("compute_efficiency_assumed", {}).items():
        print(
            f"              {key}: no fitted compute efficiency (no published point for "
            f"it); {value:g} of peak assumed (simscale/spec/costs.py), so compute is a guess"
        )
    if args.trace is not None:
        print(
            f"trace of iteration {scenario.simulation.warmup_iterations} written to "
            f"{args.trace} (open in ui.perfetto.dev)"
        )


def refuse_if_too_long(
    scenario: Scenario, source: str, costs: CostModel, path: str, trace: bool
) -> None:
    """ConfigError, before anything is built, for a scenario that would simulate for hours on
    the path it will take (ValueError where that path cannot be taken)."""
    from simscale.report.budget import estimate

    work = estimate(scenario, costs, path, trace=trace)
    if work.too_long:
        raise ConfigError("", work.explain(), source)


def _cost_words(cost: dict[str, object]) -> str:
    """$/hour, samples per dollar and time and cost to train, in one line (or why not)."""
    usd_h, per_usd = cost["usd_per_hour"], cost["samples_per_usd"]
    if usd_h is None:
        words = f"unknown: {cost['price_sources']} (set usd_per_hour in the scenario)"
    else:
        words = f"${usd_h:,.2f}/hour, {per_usd:,.0f} samples per dollar"
    hours, usd = cost["train_hours"], cost["train_usd"]
    if hours is not None:
        words += f"; to train: {hours:,.2f} h" + (f", ${usd:,.0f}" if usd is not None else "")
    return words


class _SimulationProgress:
    """Progress of a long prediction on stderr: nothing for the first ``QUIET_S`` seconds, then
    the simulated iteration, clock and event rate (one updating line on a terminal, a line every
    few seconds otherwise)."""

    QUIET_S = 2.0
    PLAIN_EVERY_S = 5.0

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown = False
        self.last_plain_s = -math.inf

    def __call__(self, p: Progress) -> None:
        if p.wall_s < self.QUIET_S:
            return
        phase = "warm-up" if p.iteration <= p.warmup else "measuring"
        text = (
            f"simulating: iteration {p.iteration}/{p.iterations} ({phase}), "
            f"{p.simulated_s:.3f} simulated s, {p.events:,} events, "
            f"{p.events_per_s:,.0f} events/s, {p.wall_s:.0f} s"
        )
        if self.tty:
            print(f"\r{text}   ", end="", file=sys.stderr, flush=True)
            self.shown = True
        elif p.wall_s - self.last_plain_s >= self.PLAIN_EVERY_S:
            self.last_plain_s = p.wall_s
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)
            self.shown = False


COMMANDS = {"predict": cmd_predict}
