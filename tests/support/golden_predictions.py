"""Golden predictions: what every shipped scenario and every published point predicts, to the byte.

A refactoring of the simulator must not move a single prediction. This module writes, and the test
``test_golden_predictions`` re-computes and compares, the ``--json`` answer of each shipped scenario
(default costs and profiles/real-v1.yaml; the auto path and, where it is cheap, the exact one) and
the simulated value of each published point, all with the wall-clock fields removed.

Regenerate only when a change is meant to move predictions, and say which and why in the commit:

    python -m tests.support.golden_predictions --write

A newly shipped scenario gets its cases without recomputing (or moving) the others:

    python -m tests.support.golden_predictions --add-missing
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "data" / "golden"
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))
# The default (real-v1 for real accelerators), plain costs, and the emulated cluster's profile.
PROFILES = {"default": None, "none": "none", "emulated-v2": "profiles/emulated-v2.yaml"}
VOLATILE = ("wall_s",)  # the only field that depends on the machine, not the model
# The exact path on shapes it answers in a few seconds; the rest are checked on their auto path.
EXACT_MAX_WORKERS = 8


def scenario_cases() -> list[tuple[str, list[str]]]:
    """(case name, predict arguments) for every shipped scenario, profile and path."""
    cases = []
    for path in SCENARIOS:
        rel = path.relative_to(ROOT).as_posix()
        for pname, profile in PROFILES.items():
            base = [rel, "--json"] + (["--profile", profile, "--force-profile"] if profile else [])
            cases.append((f"{rel}|{pname}|auto", base))
            cases.append((f"{rel}|{pname}|exact", [*base, "--path", "exact"]))
    return cases


def predict_json(args: list[str]) -> str:
    """``simscale predict ARGS`` through the command a user types, its JSON without wall time."""
    out = subprocess.run(
        [sys.executable, "-m", "simscale.cli", "predict", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if out.returncode != 0:
        return f"rc={out.returncode}: {out.stderr.strip()}"
    data = json.loads(out.stdout)
    for k in VOLATILE:
        data.pop(k, None)
    return json.dumps(data, indent=1, sort_keys=True)


def published_values(source: str | None = None, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Each published point's simulated value under plain costs and real-v1's, as repr();
    ``source``: only that file's points; ``skip``: points ("source/name") left out."""
    from calibration.published import load_published
    from calibration.published_fit import predict_point
    from simscale.spec.costs import CostModel
    from simscale.spec.profile import load_profile

    out = {}
    real = load_profile(ROOT / "profiles" / "real-v1.yaml").costs
    for name, costs in (("none", CostModel()), ("real-v1", real)):
        for p in load_published():
            if (source is not None and p.source != source) or f"{p.source}/{p.name}" in skip:
                continue
            out[f"{p.source}/{p.name}|{name}"] = repr(float(predict_point(p, costs)))
    return out


def published_sources() -> list[str]:
    from calibration.published import PUBLISHED_DIR

    return sorted(f.stem for f in PUBLISHED_DIR.glob("*.yaml"))


def exact_is_cheap(name: str) -> bool:
    return "exact" not in name.split("|")[-1] or not any(
        big in name for big in ("64gpu", "32gpu", "16gpu", "1024gpu")
    )


def compute_all() -> dict[str, str]:
    return {name: predict_json(args) for name, args in scenario_cases() if exact_is_cheap(name)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="write the golden files")
    p.add_argument(
        "--add-missing",
        action="store_true",
        help="compute and add only the scenario cases the golden file lacks (a new scenario)",
    )
    p.add_argument(
        "--scenarios-only",
        action="store_true",
        help="with --write: rewrite only scenarios.json (a change of words, not of numbers)",
    )
    a = p.parse_args()
    if a.write and a.scenarios_only:
        scen = compute_all()
        (GOLDEN_DIR / "scenarios.json").write_text(
            json.dumps(scen, indent=1, sort_keys=True) + "\n"
        )
        print(f"{len(scen)} scenario cases written")
        return
    if a.add_missing:
        path = GOLDEN_DIR / "scenarios.json"
        golden = json.loads(path.read_text())
        new = {
            name: predict_json(args)
            for name, args in scenario_cases()
            if exact_is_cheap(name) and name not in golden
        }
        path.write_text(json.dumps({**golden, **new}, indent=1, sort_keys=True) + "\n")
        print(f"added {len(new)} scenario cases: {', '.join(sorted(new)) or 'none'}")
        return
    scen = compute_all()
    pub = published_values()
    if a.write:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        (GOLDEN_DIR / "scenarios.json").write_text(
            json.dumps(scen, indent=1, sort_keys=True) + "\n"
        )
        (GOLDEN_DIR / "published.json").write_text(json.dumps(pub, indent=1, sort_keys=True) + "\n")
    print(f"{len(scen)} scenario cases, {len(pub)} published points")


if __name__ == "__main__":
    main()
