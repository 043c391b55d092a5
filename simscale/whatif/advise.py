"""Advice: the cheapest and the fastest cluster shapes that meet a target, with the runner-ups
and why each lost.

The space is a sweep grid (hosts, instances, servers, placement, mode: whatever ``--vary``
names), predicted point by point; a shape *meets* the target when its throughput reaches
``target_samples_per_s``, or when it trains ``dataset_samples x epochs`` within
``deadline_hours``, and (with a budget) costs at most ``budget_usd`` to train. The search is
exhaustive over the given grid, so the answer is the grid's true optimum under the model.

"Cheapest" is the lowest cost to train when the scenario gives the dataset size and epochs,
else the lowest $/hour; "fastest" is the highest throughput. Ties go to the other criterion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simscale.whatif.errors import WhatIfError


@dataclass(frozen=True)
class Target:
    samples_per_s: float | None = None
    deadline_hours: float | None = None
    budget_usd: float | None = None

    def validate(self) -> None:
        if (self.samples_per_s is None) == (self.deadline_hours is None):
            raise WhatIfError("advise: give exactly one of --target-throughput or --deadline")
        for name, v in (
            ("--target-throughput", self.samples_per_s),
            ("--deadline", self.deadline_hours),
            ("--budget", self.budget_usd),
        ):
            if v is not None and not v > 0:
                raise WhatIfError(f"advise: {name} {v:g}: expected a number > 0")

    def describe(self) -> str:
        what = (
            f"{self.samples_per_s:,.0f} samples/s"
            if self.samples_per_s is not None
            else f"training within {self.deadline_hours:g} h"
        )
        return what + (f" for at most ${self.budget_usd:,.0f}" if self.budget_usd else "")


@dataclass
class Advice:
    target: Target
    cost_key: str  # "train_usd" or "usd_per_hour"
    columns: list[str]
    feasible: list[dict[str, Any]]
    cheapest: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    fastest: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    missed: int = 0
    invalid: int = 0
    unpriced: int = 0

    @property
    def compute_assumed(self) -> list[str]:
        """GPU/precision pairs of the advised shapes whose compute is assumed, not fitted."""
        shown = [r for r, _ in self.cheapest + self.fastest]
        return sorted({k for r in shown for k in (r.get("compute_assumed") or "").split()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.__dict__,
            "cost_key": self.cost_key,
            "cheapest": [{"row": r, "why": w} for r, w in self.cheapest],
            "fastest": [{"row": r, "why": w} for r, w in self.fastest],
            "feasible": len(self.feasible),
            "missed_target": self.missed,
            "invalid": self.invalid,
            "unpriced": self.unpriced,
            "compute_assumed": self.compute_assumed,
        }


def _needs_dataset(rows: Sequence[dict[str, Any]]) -> bool:
    return all(r["train_hours"] is None for r in rows if r["status"] == "ok")


def _meets(r: dict[str, Any], t: Target) -> str | None:
    """None when the row meets the target, else why not (in words)."""
    if t.samples_per_s is not None and r["throughput_samples_per_s"] < t.samples_per_s:
        return (
            f"misses the target: {r['throughput_samples_per_s']:,.0f} < "
            f"{t.samples_per_s:,.0f} samples/s"
        )
    if t.deadline_hours is not None and r["train_hours"] > t.deadline_hours:
        return f"misses the deadline: {r['train_hours']:,.2f} h > {t.deadline_hours:g} h"
    if t.budget_usd is not None:
        if r["train_usd"] is None:
            return "no price for its hosts, so the budget cannot be checked"
        if r["train_usd"] > t.budget_usd:
            return f"over budget: ${r['train_usd']:,.0f} > ${t.budget_usd:,.0f} to train"
    return None


def choose(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    target: Target,
    runners_up: int = 3,
) -> Advice:
    """Pick from predicted sweep rows; WhatIfError when nothing meets the target."""
    target.validate()
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise WhatIfError(
            f"advise: none of the {len(rows)} shapes could be predicted (all invalid); "
            "check the --vary values"
        )
    if (target.deadline_hours is not None or target.budget_usd is not None) and _needs_dataset(ok):
        raise WhatIfError(
            "advise: --deadline and --budget need training.dataset_samples and training.epochs "
            "in the scenario (or --set them)"
        )
    feasible = []
    missed = 0
    best_miss: dict[str, Any] | None = None
    for r in ok:
        if _meets(r, target) is None:
            feasible.append(r)
        else:
            missed += 1
            if (
                best_miss is None
                or r["throughput_samples_per_s"] > best_miss["throughput_samples_per_s"]
            ):
                best_miss = r
    if not feasible:
        assert best_miss is not None
        raise WhatIfError(
            f"advise: no shape of the {len(ok)} predicted meets {target.describe()}; the "
            f"fastest, {describe_point(best_miss, columns)}, {_meets(best_miss, target)}"
        )
    cost_key = "usd_per_hour" if _needs_dataset(ok) else "train_usd"
    priced = [r for r in feasible if r[cost_key] is not None]
    advice = Advice(
        target,
        cost_key,
        list(columns),
        feasible,
        missed=missed,
        invalid=len(rows) - len(ok),
        unpriced=len(feasible) - len(priced),
    )
    if priced:
        by_cost = sorted(priced, key=lambda r: (r[cost_key], -r["throughput_samples_per_s"]))
        best = by_cost[0]
        advice.cheapest = [(best, "cheapest that meets the target")] + [
            (r, _costs_more(r, best, cost_key)) for r in by_cost[1 : 1 + runners_up]
        ]
    by_speed = sorted(
        feasible,
        key=lambda r: (
            -r["throughput_samples_per_s"],
            r[cost_key] if r[cost_key] is not None else float("inf"),
        ),
    )
    top = by_speed[0]
    advice.fastest = [(top, "fastest that meets the target")] + [
        (r, _slower(r, top)) for r in by_speed[1 : 1 + runners_up]
    ]
    return advice


def _costs_more(r: dict[str, Any], best: dict[str, Any], key: str) -> str:
    unit = "to train" if key == "train_usd" else "per hour"
    extra = r[key] - best[key]
    if extra <= 1e-9:
        return (
            f"costs the same {unit} but is slower ({r['throughput_samples_per_s']:,.0f} samples/s)"
        )
    return f"costs ${extra:,.2f} more {unit} ({extra / best[key]:+.0%})"


def _slower(r: dict[str, Any], top: dict[str, Any]) -> str:
    gap = 1 - r["throughput_samples_per_s"] / top["throughput_samples_per_s"]
    if gap <= 1e-9:
        return "as fast, but costs more"
    return f"{gap:.0%} slower ({r['throughput_samples_per_s']:,.0f} samples/s)"


def describe_point(r: dict[str, Any], columns: Sequence[str]) -> str:
    """The varied columns of a row, as 'a=1, b=2'."""
    shown = []
    for c in columns:
        if c == "status":
            break
        if c != "point":
            shown.append(f"{c}={r[c]}")
    return ", ".join(shown) or f"point {r['point']}"


def format_advice(a: Advice) -> str:
    unit = "to train" if a.cost_key == "train_usd" else "per hour"

    def line(r: dict[str, Any], why: str) -> str:
        cost = r[a.cost_key]
        money = f"${cost:,.2f} {unit}" if cost is not None else "no price"
        eff = f"{r['scaling_efficiency']:.0%}"
        return (
            f"  {describe_point(r, a.columns)}\n"
            f"      {r['throughput_samples_per_s']:,.0f} samples/s ({eff} efficiency), {money}"
            f" — {why}"
        )

    out = [
        f"target: {a.target.describe()}; {len(a.feasible)} shapes meet it, {a.missed} miss it, "
        f"{a.invalid} invalid"
    ]
    if a.cheapest:
        out += ["", "cheapest:", *(line(r, w) for r, w in a.cheapest)]
    else:
        out += ["", "cheapest: none of the shapes that meet the target has a price"]
    out += ["", "fastest:", *(line(r, w) for r, w in a.fastest)]
    if a.unpriced:
        out.append(f"\n{a.unpriced} shapes that meet the target have no price (set usd_per_hour)")
    if a.compute_assumed:
        out.append(
            f"\ncompute assumed, not fitted, for {', '.join(a.compute_assumed)} (no published "
            "point for it; simscale/spec/costs.py): the shapes on it rest on a guess"
        )
    return "\n".join(out)
