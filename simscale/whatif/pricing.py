"""What a cluster costs: $/hour from instance presets or the scenario, and what a result means
in money — samples per dollar, and with ``training.dataset_samples`` and ``training.epochs``,
the time and cost to train.

A host group's price is its ``usd_per_hour`` when the scenario gives one, else its instance
preset's on-demand price (simscale.spec.hardware, each with its source and the date it was read).
A group with neither makes the whole cluster's price unknown (None), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simscale.spec import hardware
from simscale.spec.scenario import DIST_MODES, Scenario

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class GroupPrice:
    """The price of one host group: ``count`` hosts at ``usd_per_hour`` each."""

    what: str  # "8 x p3.16xlarge (workers)"
    count: int
    usd_per_hour: float | None
    source: str


@dataclass(frozen=True)
class ClusterPrice:
    groups: tuple[GroupPrice, ...]

    @property
    def usd_per_hour(self) -> float | None:
        """Total $/hour, or None when any group has no known price."""
        if any(g.usd_per_hour is None for g in self.groups):
            return None
        return sum(g.count * g.usd_per_hour for g in self.groups)  # type: ignore[operator]

    def describe(self) -> str:
        parts = []
        for g in self.groups:
            price = f"${g.usd_per_hour:,.2f}/h" if g.usd_per_hour is not None else "no price"
            parts.append(f"{g.what} at {price} [{g.source}]")
        return "; ".join(parts)


def _group(what: str, count: int, instance: str | None, override: float | None) -> GroupPrice:
    if override is not None:
        return GroupPrice(what, count, override, "scenario usd_per_hour")
    if instance is None:
        return GroupPrice(what, count, None, "no instance preset and no usd_per_hour")
    preset = hardware.INSTANCES[instance]
    source = f"{preset.price_source}, read {hardware.PRICES_READ_ON}"
    return GroupPrice(what, count, preset.usd_per_hour, source)


def cluster_price(s: Scenario) -> ClusterPrice:
    """Every host the scenario rents: worker groups, and dedicated server hosts when used."""
    groups = [
        _group(
            f"{g.count} x {g.instance or 'custom host'} (workers)",
            g.count,
            g.instance,
            g.usd_per_hour,
        )
        for g in s.cluster.hosts
    ]
    sh = s.cluster.server_hosts
    if sh is not None and s.kvstore.mode in DIST_MODES and s.kvstore.placement == "dedicated":
        groups.append(
            _group(
                f"{sh.count} x {sh.instance or 'custom host'} (servers)",
                sh.count,
                sh.instance,
                sh.usd_per_hour,
            )
        )
    return ClusterPrice(tuple(groups))


def cost_fields(s: Scenario, samples_per_s: float) -> dict[str, Any]:
    """$/hour, samples per dollar, and time and cost to train (None where unknown)."""
    usd_h = cluster_price(s).usd_per_hour
    out: dict[str, Any] = {
        "usd_per_hour": usd_h,
        "samples_per_usd": None,
        "train_hours": None,
        "train_usd": None,
    }
    if usd_h is not None and usd_h > 0 and samples_per_s > 0:
        out["samples_per_usd"] = samples_per_s * SECONDS_PER_HOUR / usd_h
    t = s.training
    if t.dataset_samples is not None and t.epochs is not None and samples_per_s > 0:
        hours = t.dataset_samples * t.epochs / samples_per_s / SECONDS_PER_HOUR
        out["train_hours"] = hours
        out["train_usd"] = hours * usd_h if usd_h is not None else None
    return out
