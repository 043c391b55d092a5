"""The ``simscale`` command: predict, check, models, calibrate, validate, plot, combine-traces.

Bad input never shows a traceback: it prints one line naming the file and field and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from simscale import __version__
from simscale.lifetime import interrupted_exit_code, stop_on_signals
from simscale.report.outputs import check_figure, refuse_overwrite
from simscale.spec.config import ConfigError, integer_at_least, positive_seconds

if TYPE_CHECKING:
    from simscale.simulator import Progress
    from simscale.spec.scenario import Scenario

EXIT_BAD_INPUT = 2
EXIT_INCOMPLETE = 3  # --max-seconds struck before one measured iteration was complete


def _add_scenario_args(p: argparse.ArgumentParser, many: bool = False) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simscale",
        description="Predict data-parallel training throughput before renting the cluster.",
    )
    parser.add_argument("--version", action="version", version=f"simscale {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("predict", help="simulate a scenario: throughput, efficiency, bottleneck")
    _add_scenario_args(p)
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
    _add_force_arg(p)
    p.add_argument(
        "--interval",
        type=float,
        metavar="LEVEL",
        help="also give a LEVEL%% interval (e.g. 90) from the profile's parameter uncertainty "
        "and seeded repetitions",
    )
    p.add_argument("--draws", type=int, default=24, metavar="N", help="simulations for --interval")

    p = sub.add_parser(
        "combine-traces",
        help="put timelines (predict --trace, realrun run --trace) in one file for ui.perfetto.dev",
    )
    p.add_argument("traces", nargs="+", type=Path, help="Chrome-trace JSON files")
    p.add_argument("-o", "--output", type=Path, required=True, help="combined trace to write")
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")

    p = sub.add_parser("check", help="validate scenario files without simulating")
    _add_scenario_args(p, many=True)

    p = sub.add_parser("models", help="list the model zoo")
    p.add_argument("--json", action="store_true", help="print as JSON")

    p = sub.add_parser("calibrate", help="fit the simulator's cost parameters to measured runs")
    p.add_argument("runs", nargs="*", type=Path, help="run records (JSON files or folders)")
    p.add_argument("-o", "--output", type=Path, required=True, help="profile YAML to write")
    p.add_argument(
        "--published",
        action="store_true",
        help="fit the real-hardware profile to the published measurements instead of runs",
    )
    _add_fit_args(p)
    _add_force_arg(p)

    p = sub.add_parser(
        "validate", help="cross-validate on held-out shapes (and against published figures)"
    )
    p.add_argument("runs", nargs="*", type=Path, help="run records (JSON files or folders)")
    _add_fit_args(p)
    p.add_argument("--kfold", type=int, metavar="K", help="k-fold over shapes instead of LOSO")
    p.add_argument(
        "--jobs",
        type=integer_at_least(1),
        metavar="N",
        help="folds fitted in parallel (default: one per core)",
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="leave-one-source-out validation on the published measurements in "
        "calibration/published (with --fit none: the starting figures, no fit)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="with --published: write the held-out scatter and scaling figures "
        "(e.g. docs/published.png gives docs/published-scatter.png and -scaling.png); with "
        "run records: the held-out PS-vs-all-reduce chart (throughput against worker hosts "
        "per way of moving gradients)",
    )
    _add_force_arg(p)

    p = sub.add_parser("plot", help="predicted-vs-measured scatter and scaling curves")
    p.add_argument("runs", nargs="+", type=Path, help="run records (JSON files or folders)")
    p.add_argument("--profile", type=Path, help="calibration profile to predict with")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        help="e.g. /tmp/cal.png: writes -scatter, -scaling, -workers files",
    )
    _add_force_arg(p)
    from simscale.whatif import cli as whatif_cli

    whatif_cli.add_parsers(sub, _add_scenario_args)
    return parser


def _add_force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="overwrite output files that exist")


def _add_fit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fit",
        default=None,
        metavar="P1,P2",
        help="parameters to fit (default: the standard set; 'none' fits nothing)",
    )
    p.add_argument(
        "--scope",
        default=None,
        metavar="GPU1,GPU2",
        help="worker devices the profile applies to (default: those in the runs)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    from calibration.errors import CalibrationError
    from simscale.whatif import WhatIfError
    from simscale.whatif import cli as whatif_cli

    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        stop_on_signals()  # SIGTERM stops a command (and its fold processes) as Ctrl-C does
    commands = {**COMMANDS, **whatif_cli.COMMANDS}
    try:
        return commands[args.command](args)
    except (ConfigError, CalibrationError, WhatIfError) as e:
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


def cmd_predict(args: argparse.Namespace) -> int:
    from simscale.report.trace import simulation_spans, write_trace
    from simscale.simulator import IncompleteRun, Simulation
    from simscale.spec.costs import CostModel
    from simscale.spec.profile import default_costs, load_profile
    from simscale.spec.scenario import load_scenario

    refuse_overwrite([args.output] if args.output is not None else [], args.force)
    refuse_overwrite([args.trace] if args.trace is not None else [], args.force, "--trace")
    scenario = load_scenario(args.scenario, args.overrides)
    refuse_if_too_long(scenario, args.scenario)
    profile = None
    if args.profile is None:
        costs, where = default_costs(scenario)
    elif str(args.profile).lower() == "none":
        costs, where = CostModel(), "default costs (--profile none)"
    else:
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
    try:
        sim = Simulation(scenario, costs, trace=args.trace is not None, path=args.path)
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
    if result.stopped_early:
        print(f"simscale: {result.stopped_early}; the result is partial", file=sys.stderr)
    if result.approximate:
        print(
            "simscale: note: an approximate answer (symmetric path beyond its validated loads; "
            "the report's model path says how far off it has been)",
            file=sys.stderr,
        )
    if args.trace is not None:
        iteration = scenario.simulation.warmup_iterations
        write_trace(args.trace, simulation_spans(sim), iteration, f"{scenario.name} (predicted)")
    from simscale.whatif.pricing import cluster_price, cost_fields

    cost = {
        **cost_fields(scenario, result.throughput_samples_per_s),
        "price_sources": cluster_price(scenario).describe(),
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
    from simscale.whatif.rows import assumed_compute

    assumed = assumed_compute(scenario, costs)
    extra = {
        "cost": cost,
        **({"interval": iv.to_dict()} if iv is not None else {}),
        **({"compute_efficiency_assumed": assumed} if assumed else {}),
    }
    payload = json.dumps({**result.to_dict(), **extra}, indent=2, allow_nan=False)
    if args.output is not None:
        _write_atomic(args.output, payload + "\n")
    if args.json:
        print(payload)
    else:
        from simscale.report.results import format_table

        print(format_table(result))
        print(f"\ncost          {_cost_words(cost)}")
        if iv is not None:
            print(f"\ninterval      {iv.words}")
        print(f"costs         {where}")
        for key, value in assumed.items():
            print(
                f"              {key}: no fitted compute efficiency (no published point for "
                f"it); {value:g} of peak assumed (simscale/spec/costs.py), so compute is a guess"
            )
        if args.trace is not None:
            print(
                f"trace of iteration {scenario.simulation.warmup_iterations} written to "
                f"{args.trace} (open in ui.perfetto.dev)"
            )
    return 0


def refuse_if_too_long(scenario: Scenario, source: str) -> None:
    """ConfigError, before anything is built, for a scenario that would simulate for hours."""
    from simscale.report.budget import estimate

    work = estimate(scenario)
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
    _write_atomic(args.output, json.dumps(combined))
    print(f"{len(traces)} timelines written to {args.output} (open in ui.perfetto.dev)")
    return 0


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


def cmd_models(args: argparse.Namespace) -> int:
    from simscale import zoo

    rows = []
    for name in zoo.names():
        m = zoo.get(name)
        rows.append(
            {
                "name": name,
                "arrays": len(m.arrays),
                "parameters": m.params,
                "mb_fp32": m.nbytes("fp32") / 1e6,
                "gflops_per_sample": m.fwd_flops / 1e9,
                "input_shape": list(m.input_shape),
                "source": m.source,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':<15} {'arrays':>6} {'parameters':>13} {'MB fp32':>9} {'GFLOPs/sample':>14}")
    for r in rows:
        print(
            f"{r['name']:<15} {r['arrays']:>6} {r['parameters']:>13,} {r['mb_fp32']:>9.1f} "
            f"{r['gflops_per_sample']:>14.2f}"
        )
    print("GFLOPs: forward pass per sample, multiply-add = 2 FLOPs; backward is modelled as 2x.")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _fit_names(text: str | None) -> tuple[str, ...]:
    from calibration.fit import DEFAULT_FIT

    if text is None:
        return DEFAULT_FIT
    if text.strip().lower() == "none":
        return ()
    return tuple(n.strip() for n in text.split(",") if n.strip())


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


def _progress(what: str) -> Callable[[int, float], None]:
    def report(i: int, value: float) -> None:
        print(
            f"\r{what}: evaluation {i}, mean error {value:.1%}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return report


def _stage_progress(stage: str, n: int) -> None:
    print(f"\rfitting {stage}: evaluation {n}   ", end="", file=sys.stderr, flush=True)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from calibration.calibrate import calibrate, calibrate_published
    from calibration.errors import CalibrationError
    from simscale.spec.profile import save_profile

    refuse_overwrite([args.output], args.force)
    if args.published:
        if args.runs:
            raise CalibrationError("give run records or --published, not both")
        names = None if args.fit is None else _fit_names(args.fit)
        profile, fitted = calibrate_published(names, progress=_stage_progress)
        print(file=sys.stderr)
        save_profile(profile, args.output)
        print(
            f"fitted {len(fitted.fitted_points)} published points"
            + (f" ({len(fitted.left_out)} costly ones predicted only)" if fitted.left_out else "")
        )
        for name, value in fitted.values.items():
            sigma = fitted.sigma_rel.get(name, float("nan"))
            print(f"  {name:<32} {value:12.4g}   (1-sigma {sigma:.1%} of the value)")
        print(f"training error: mean {profile.fit.train_mape:.1%} over the fitted points")
        print(f"profile written to {args.output} (applies to {profile.describe_scope()})")
        return 0
    if not args.runs:
        raise CalibrationError("give run records to fit, or --published")

    profile, runset, result = calibrate(
        args.runs, _fit_names(args.fit), args.scope, progress=_progress("fitting")
    )
    print(file=sys.stderr)
    save_profile(profile, args.output)
    print(
        f"fitted {len(result.shapes)} configurations ({len(runset.runs)} runs"
        f"{f', {len(runset.skipped)} set aside' if runset.skipped else ''}) in "
        f"{result.evaluations} simulations of each"
    )
    for name, value in result.values.items():
        sigma = result.sigma_rel.get(name, float("nan"))
        print(f"  {name:<32} {value:12.4g}   (1-sigma {sigma:.1%} of the value)")
    print(
        f"training error: mean {result.mape:.1%}, worst {result.ape.max():.1%} "
        "(in-sample; run `simscale validate` for held-out error)"
    )
    print(f"profile written to {args.output} (applies to {profile.describe_scope()})")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from calibration.errors import CalibrationError
    from calibration.published import load_published

    out: dict[str, object] = {}
    if args.plot is not None:  # before minutes of fitting: a bad figure path is one line now
        check_figure(args.plot, "--plot")
        figures = _published_figure_paths(args.plot) if args.published else [args.plot]
        refuse_overwrite(figures, args.force, "--plot")
    if args.runs:
        from calibration.runs import load_runs
        from calibration.validate import cross_validate

        runset = load_runs(args.runs)

        def progress(i: int, n: int) -> None:
            print(f"\rvalidating: fold {i}/{n}   ", end="", file=sys.stderr, flush=True)

        report = cross_validate(
            list(runset.runs),
            _fit_names(args.fit),
            folds=args.kfold,
            progress=progress,
            jobs=args.jobs,
        )
        print(file=sys.stderr)
        out["cross_validation"] = report.to_dict()
        if not args.json:
            print(report.format())
        if args.plot is not None and not args.published:
            from calibration.comparison_plot import servers_comparison

            written = servers_comparison(report.predictions, args.plot, report.method)
            print(f"wrote {written}", file=sys.stderr)
    elif not args.published:
        raise CalibrationError("give run records to cross-validate, or --published")
    if args.published:
        from calibration import published_fit as pf
        from simscale.spec.costs import real_hardware_costs

        points = load_published()
        costly = [p for p in points if pf.too_costly_to_judge(p)]
        points = [p for p in points if not pf.too_costly_to_judge(p)]
        if costly:
            print(
                f"not simulated ({len(costly)}, over {pf.JUDGE_COST_LIMIT} host-keys, minutes "
                f"each): {', '.join(p.name for p in costly)}",
                file=sys.stderr,
            )
        fits: dict[str, pf.PublishedFit] = {}
        if args.fit is not None and args.fit.strip().lower() == "none":
            judged = pf.judge(points, real_hardware_costs())
            method = "no fit: the mechanisms' published starting figures"
        else:
            names = pf.COMM_FIT if args.fit is None else _fit_names(args.fit)

            def held_out(campaign: str) -> None:
                print(
                    f"\rvalidating: holding out {campaign:<30}", end="", file=sys.stderr, flush=True
                )

            judged, fits = pf.leave_one_source_out(points, names, progress=held_out, jobs=args.jobs)
            print(file=sys.stderr)
            method = "leave-one-source-out (each campaign predicted by a fit on the others)"
        published = pf.report_dict(judged, method)
        published["not_simulated"] = [p.name for p in costly]
        published["fitted_per_fold"] = pf.fold_values(fits)
        out["published"] = published["published"]
        out["published_summary"] = {k: v for k, v in published.items() if k != "published"}
        if not args.json:
            print(pf.format_report(judged, method) + pf.format_folds(fits))
        if args.plot is not None:
            for path in _published_figures(judged, method, args.plot):
                print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _published_figure_paths(out: Path) -> list[Path]:
    """The held-out scatter and the scaling curves ``validate --published --plot OUT`` writes."""
    stem, suffix = out.with_suffix(""), out.suffix or ".png"
    return [Path(f"{stem}-scatter{suffix}"), Path(f"{stem}-scaling{suffix}")]


def _published_figures(judged: list, method: str, out: Path) -> list[Path]:
    """Draw them (their paths were checked before the validation ran)."""
    from calibration import published_plots

    paths = _published_figure_paths(out)
    return [
        published_plots.scatter(judged, paths[0], method),
        published_plots.scaling(judged, paths[1], method),
    ]


def cmd_plot(args: argparse.Namespace) -> int:
    from calibration.plots import figure_paths, plot_all
    from calibration.runs import load_runs
    from simscale.spec.costs import CostModel

    check_figure(args.output)
    refuse_overwrite(figure_paths(args.output), args.force)
    runset = load_runs(args.runs)
    costs = CostModel()
    title = "simulator with default costs"
    if args.profile is not None:
        from simscale.spec.profile import load_profile

        profile = load_profile(args.profile)
        costs = profile.costs
        title = f"simulator with profile {args.profile.name}"
    for path in plot_all(list(runset.runs), costs, args.output, title):
        print(f"wrote {path}")
    return 0


COMMANDS = {
    "predict": cmd_predict,
    "check": cmd_check,
    "combine-traces": cmd_combine_traces,
    "models": cmd_models,
    "calibrate": cmd_calibrate,
    "validate": cmd_validate,
    "plot": cmd_plot,
}


if __name__ == "__main__":
    sys.exit(main())
