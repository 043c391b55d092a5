"""calibration's commands of ``simscale``: ``calibrate``, ``validate`` and ``plot``.

They register through the entry-point group ``simscale.commands`` (pyproject.toml), the way
any package adds commands to ``simscale`` (simscale/cli/registry.py): simscale itself never
imports calibration. Bad input is a CalibrationError (or ConfigError), one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from calibration.errors import CalibrationError
from simscale.cli.args import add_force_arg
from simscale.report.outputs import check_figure, refuse_overwrite
from simscale.spec.config import integer_at_least

if TYPE_CHECKING:
    from calibration.published_fit import Judged
    from simscale.spec.profile import Profile

ERRORS = (CalibrationError,)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    _add_calibrate(sub)
    _add_validate(sub)
    _add_plot(sub)


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit the simulator's cost parameters to measured runs")
    p.add_argument("runs", nargs="*", type=Path, help="run records (JSON files or folders)")
    p.add_argument("-o", "--output", type=Path, required=True, help="profile YAML to write")
    p.add_argument(
        "--published",
        action="store_true",
        help="fit the real-hardware profile to the published measurements instead of runs",
    )
    p.add_argument(
        "--transformers",
        action="store_true",
        help="with --published: fit the fraction of tensor-core peak per GPU generation on the "
        "transformer set (calibration/published/transformers), e.g. -o "
        "profiles/transformers-v1.yaml",
    )
    p.add_argument(
        "--probe",
        type=Path,
        nargs="+",
        metavar="PROBE.json",
        help="make the profile from realrun probe records (measured costs, no training run)",
    )
    p.add_argument(
        "--model-error-from",
        type=Path,
        metavar="VALIDATE.json",
        help="keep in the profile the simulator's own error per group (ps/allreduce/ddp-zero, "
        "emulated/real; real ps and allreduce also network/one-host), estimated from the "
        "held-out residuals of this `simscale validate --json` output; `predict --interval` "
        "widens by it",
    )
    p.add_argument(
        "--onto",
        type=Path,
        metavar="PROFILE.yaml",
        help="with --model-error-from: no fit; write PROFILE with only its model-error block "
        "replaced (its fitted costs, and so every point prediction, unchanged)",
    )
    _add_fit_args(p)
    add_force_arg(p)


def _add_validate(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument(
        "--interval-draws",
        type=integer_at_least(0),
        default=4,
        metavar="N",
        help="with --published: simulate each held-out point under N draws of its fold's "
        "identified parameters and of its scenario's declared ranges, each widened by the "
        "held-out model error of its group (no simulation), and report the held-out "
        "coverage of the 90%% and 50%% intervals (0: point error only; default 4)",
    )
    p.add_argument(
        "--transformers",
        action="store_true",
        help="with --published: the transformer set (calibration/published/transformers: "
        "DDP, ZeRO/FSDP), its fraction of peak per GPU generation fitted leave-one-campaign-out",
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
    add_force_arg(p)


def _add_plot(sub: argparse._SubParsersAction) -> None:
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
    add_force_arg(p)


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


def _fit_names(text: str | None) -> tuple[str, ...]:
    from calibration.fit import DEFAULT_FIT

    if text is None:
        return DEFAULT_FIT
    if text.strip().lower() == "none":
        return ()
    return tuple(n.strip() for n in text.split(",") if n.strip())


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


def _save(profile: Profile, args: argparse.Namespace) -> None:
    """Write the profile, with the model error of ``--model-error-from`` when given."""
    from dataclasses import replace

    from calibration.model_error import from_validation
    from simscale.spec.profile import save_profile

    if args.model_error_from is not None:
        profile = replace(profile, model_error=from_validation(args.model_error_from))
        me = profile.model_error
        groups = ", ".join(
            f"{g} {_signed_pct(me.margin(g, 0.9))} ({me.residuals[g]} residuals)" for g in me.scores
        )
        print(
            "model error (the 90% band's conformal margin, held out): "
            f"{groups or 'no group with enough'}"
        )
    save_profile(profile, args.output)


def _signed_pct(margin: float | None) -> str:

    return "unbounded (too few)" if margin is None else f"{math.expm1(margin):+.1%}"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from calibration.calibrate import calibrate

    refuse_overwrite([args.output], args.force)
    if args.model_error_from is not None:  # a bad file is one line now, not after the fit
        from calibration.model_error import residuals_from_validation

        residuals_from_validation(args.model_error_from)
    if args.onto is not None:
        return _model_error_onto(args)
    if args.transformers and not args.published:
        raise CalibrationError("--transformers fits the published transformer set: add --published")
    if args.published and args.transformers:
        return _calibrate_transformers(args)
    if args.published:
        return _calibrate_published(args)
    if args.probe:
        return _calibrate_probe(args)
    if not args.runs:
        raise CalibrationError("give run records to fit, or --published")

    profile, runset, result = calibrate(
        args.runs, _fit_names(args.fit), args.scope, progress=_progress("fitting")
    )
    print(file=sys.stderr)
    _save(profile, args)
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


def _model_error_onto(args: argparse.Namespace) -> int:
    """``--onto``: an existing profile with only its model-error block replaced."""
    from simscale.spec.profile import load_profile

    if args.model_error_from is None:
        raise CalibrationError(
            "--onto PROFILE.yaml replaces a model-error block: add --model-error-from"
        )
    if args.runs or args.published or args.probe:
        raise CalibrationError("--onto fits nothing: give no run records, --published or --probe")
    _save(load_profile(args.onto), args)
    print(f"profile written to {args.output} ({args.onto}'s fit, model error replaced)")
    return 0


def _calibrate_probe(args: argparse.Namespace) -> int:
    from calibration.probe_profile import calibrate_probe

    if args.runs:
        raise CalibrationError("give run records or --probe, not both")
    profile = calibrate_probe(args.probe, args.scope)
    _save(profile, args)
    print(f"measured {len(profile.fit.parameters)} parameters from {len(args.probe)} probe records")
    for name in profile.fit.parameters:
        sigma = profile.fit.uncertainty.get(name, float("nan"))
        value = getattr(profile.costs, name)
        print(f"  {name:<32} {value:12.4g}   (1-sigma {sigma:.1%} of the value)")
    print(f"profile written to {args.output} (applies to {profile.describe_scope()})")
    return 0


def _calibrate_transformers(args: argparse.Namespace) -> int:
    from calibration.calibrate import calibrate_transformers

    if args.runs or args.fit is not None:
        raise CalibrationError(
            "--published --transformers fits the fractions of peak only: no run records, no --fit"
        )
    profile, fitted = calibrate_transformers(progress=lambda s: print(s, file=sys.stderr))
    _save(profile, args)
    print(f"fitted {fitted.fitted_points} published transformer points")
    for key, value in sorted(fitted.fractions.items()):
        print(f"  fraction of peak {key:<14} {value:.4f}")
    print(f"training error: mean {profile.fit.train_mape:.1%} over the fitted points (in-sample)")
    print(f"profile written to {args.output} (applies to {profile.describe_scope()})")
    return 0


def _calibrate_published(args: argparse.Namespace) -> int:
    from calibration.calibrate import calibrate_published

    if args.runs:
        raise CalibrationError("give run records or --published, not both")
    names = None if args.fit is None else _fit_names(args.fit)
    profile, fitted = calibrate_published(names, progress=_stage_progress)
    print(file=sys.stderr)
    _save(profile, args)
    print(
        f"fitted {len(fitted.fitted_points)} published points"
        + (f" ({len(fitted.left_out)} costly ones predicted only)" if fitted.left_out else "")
    )
    for name, value in fitted.values.items():
        why = fitted.unidentified.get(name)
        if why is not None:
            print(f"  {name:<32} {value:12.4g}   NOT IDENTIFIED: {why}")
            continue
        sigma = fitted.sigma_rel.get(name, float("nan"))
        print(f"  {name:<32} {value:12.4g}   (1-sigma {sigma:.1%} of the value)")
    print(f"training error: mean {profile.fit.train_mape:.1%} over the fitted points")
    print(f"profile written to {args.output} (applies to {profile.describe_scope()})")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    out: dict[str, object] = {}
    if args.plot is not None:  # before minutes of fitting: a bad figure path is one line now
        check_figure(args.plot, "--plot")
        figures = _published_figure_paths(args.plot) if args.published else [args.plot]
        refuse_overwrite(figures, args.force, "--plot")
    if args.runs:
        _validate_runs(args, out)
    elif not args.published:
        raise CalibrationError("give run records to cross-validate, or --published")
    if args.published:
        _validate_published(args, out)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _validate_runs(args: argparse.Namespace, out: dict[str, object]) -> None:
    """Cross-validate over the run records' shapes; the report goes into ``out``."""
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


def _validate_published(args: argparse.Namespace, out: dict[str, object]) -> None:
    """Judge the published points held out, source by source; the report goes into ``out``."""
    from calibration import published_fit as pf
    from calibration.published import load_published
    from simscale.spec.costs import real_hardware_costs

    if getattr(args, "transformers", False):
        _validate_transformers(args, out)
        return
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

        def held_out(step: str) -> None:
            print(f"\rvalidating: {step:<44}", end="", file=sys.stderr, flush=True)

        judged, fits = pf.leave_one_source_out(
            points, names, progress=held_out, jobs=args.jobs, draws=args.interval_draws
        )
        print(file=sys.stderr)
        method = "leave-one-source-out (each campaign predicted by a fit on the others)"
    published = pf.report_dict(judged, method)
    published["not_simulated"] = [p.name for p in costly]
    published["fitted_per_fold"] = pf.fold_values(fits)
    out["published"] = published["published"]
    out["published_summary"] = {k: v for k, v in published.items() if k != "published"}
    if not args.json:
        print(pf.format_report(judged, method) + pf.format_coverage(judged) + pf.format_folds(fits))
    if args.plot is not None:
        for path in _published_figures(judged, method, args.plot):
            print(f"wrote {path}", file=sys.stderr)


def _validate_transformers(args: argparse.Namespace, out: dict[str, object]) -> None:
    """Judge the published transformer set, one campaign held out at a time."""
    from calibration import published_transformers as pt
    from calibration.published import load_transformers

    def held_out(campaign: str) -> None:
        print(f"\rvalidating: holding out {campaign:<30}", end="", file=sys.stderr, flush=True)

    judged, fits = pt.leave_one_campaign_out(
        load_transformers(), progress=held_out, draws=args.interval_draws
    )
    print(file=sys.stderr)
    report = pt.report_dict(judged, fits)
    out["published"] = report["published"]
    out["published_summary"] = {k: v for k, v in report.items() if k != "published"}
    if not args.json:
        print(pt.format_report(judged, fits))


def _published_figure_paths(out: Path) -> list[Path]:
    """The held-out scatter and the scaling curves ``validate --published --plot OUT`` writes."""
    stem, suffix = out.with_suffix(""), out.suffix or ".png"
    return [Path(f"{stem}-scatter{suffix}"), Path(f"{stem}-scaling{suffix}")]


def _published_figures(judged: list[Judged], method: str, out: Path) -> list[Path]:
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


COMMANDS = {"calibrate": cmd_calibrate, "validate": cmd_validate, "plot": cmd_plot}
