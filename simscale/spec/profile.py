"""Calibration profiles: fitted cost parameters, where they apply, and what they were fitted on.

A profile fitted on one world (say realrun on CPU workers over an emulated network) must not
silently change predictions for unrelated hardware: it applies to scenarios whose worker devices
are all in its ``scope`` and, when it names one, whose ``realrun.compute`` is its ``compute``
(a profile fitted on emulated V100s is not one for a real V100 cluster); others keep the
defaults unless the user forces it.

Real-hardware scenarios (every worker an accelerator, real compute) default to the real-cluster
profile shipped in ``profiles/real-v1.yaml``, fitted on published measurements
(calibration/published_fit.py); everything else (CPU workers, emulated compute) keeps the plain
defaults of simscale.spec.costs, which is the world the emulated-cluster profiles were fitted on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simscale.spec.config import ConfigError, from_mapping, read_yaml, to_mapping
from simscale.spec.costs import CostModel, real_hardware_costs
from simscale.spec.model_error import ModelError
from simscale.spec.scenario import Scenario, is_real_hardware

PROFILE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FitInfo:
    """Provenance: what the profile was fitted on and how well."""

    date: str = ""
    records: tuple[str, ...] = ()  # sha256 of each run record used
    parameters: tuple[str, ...] = ()  # names of the fitted parameters
    # 1-sigma per parameter: of log(value) (a relative sigma) unless in linear_parameters.
    uncertainty: dict[str, float] = field(default_factory=dict)
    # Covariance of the fitted coordinates (log(value), or the value for linear_parameters),
    # rows and columns in ``parameters`` order; empty in profiles fitted before it was kept.
    covariance: tuple[tuple[float, ...], ...] = ()
    linear_parameters: tuple[str, ...] = ()
    # Fitted parameters the data could not pin down, each with the reason (at a search bound,
    # a direction of the Jacobian the residuals do not feel): --interval holds them at their
    # fitted value instead of sampling a meaningless sigma (calibration/identifiability.py).
    unidentified: dict[str, str] = field(default_factory=dict)
    train_mape: float = 0.0
    method: str = ""


@dataclass(frozen=True)
class Profile:
    schema_version: int
    costs: CostModel
    # Worker devices (simscale.spec.hardware GPU names) the fit is valid for; empty means
    # everywhere.
    scope: tuple[str, ...] = ()
    # The realrun compute mode of the runs it was fitted on ("real" or "emulated"); empty: any.
    compute: str = ""
    fit: FitInfo = field(default_factory=FitInfo)
    description: str = ""
    # The simulator's own error on known setups, per group (simscale/spec/model_error.py);
    # empty in older profiles, whose intervals then say that model error is not included.
    model_error: ModelError = field(default_factory=ModelError)

    def validate(self) -> None:
        if self.schema_version != PROFILE_SCHEMA_VERSION:
            raise ConfigError(
                "schema_version",
                f"got {self.schema_version}, expected "
                f"{PROFILE_SCHEMA_VERSION} (this simscale's profile format)",
            )

    def applies_to(self, scenario: Scenario) -> bool:
        if self.compute and scenario.realrun.compute != self.compute:
            return False
        if not self.scope:
            return True
        return all(g.resolved()[1] in self.scope for g in scenario.cluster.hosts)

    def describe_scope(self) -> str:
        """Where the profile applies, in words."""
        devices = ", ".join(self.scope) or "any"
        return f"worker devices {devices}" + (
            f", realrun.compute: {self.compute}" if self.compute else ""
        )

    def costs_for(self, scenario: Scenario, force: bool = False) -> CostModel:
        """The fitted costs when the scenario is in scope (or forced), else the defaults."""
        return self.costs if force or self.applies_to(scenario) else default_costs(scenario)[0]

    def to_yaml(self) -> str:
        return yaml.safe_dump(to_mapping(self), sort_keys=False)


def load_profile(path: str | Path) -> Profile:
    data = read_yaml(path)
    try:
        return from_mapping(Profile, data)
    except ConfigError as e:
        raise e.in_file(str(path)) from None


def save_profile(profile: Profile, path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(profile.to_yaml(), encoding="utf-8")
    tmp.replace(p)


def profile_dict(profile: Profile) -> dict[str, Any]:
    return to_mapping(profile)


# The real-cluster profile real-hardware scenarios use when no profile is given.
REAL_PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "real-v1.yaml"


def default_profile(scenario: Scenario) -> Profile | None:
    """The profile a scenario is predicted with when none is named: the real-hardware profile
    for real accelerators it applies to, else None (the plain defaults)."""
    if is_real_hardware(scenario) and REAL_PROFILE.is_file():
        profile = _real_profile(REAL_PROFILE.stat().st_mtime_ns)
        if profile.applies_to(scenario):
            return profile
    return None


@functools.lru_cache(maxsize=1)
def _real_profile(_mtime_ns: int) -> Profile:
    """The shipped real-hardware profile, read once per version of the file: a sweep asks for
    it at every point."""
    return load_profile(REAL_PROFILE)


def default_costs(scenario: Scenario) -> tuple[CostModel, str]:
    """The costs a scenario gets with no profile named, and where they come from in words:
    the real-cluster profile for real hardware (its published starting figures when the
    profile file is absent, as in an installed copy without ``profiles/``), else the defaults."""
    if not is_real_hardware(scenario):
        return CostModel(), "default costs (no real-hardware mechanisms)"
    profile = default_profile(scenario)
    if profile is not None:
        return profile.costs, f"real-hardware profile {REAL_PROFILE.name}"
    return real_hardware_costs(), "real-hardware mechanisms at their published starting figures"
