"""The simulator's own error on setups whose facts are known, as a profile keeps it.

Even with every fact typed in and every parameter measured, the simulator misses a shape by a
few percent (runs/emulated-v2, fitted on those very runs: 3.9% mean). An interval that carries
only parameter uncertainty is then too narrow to cover the truth. This error is kept as a
log-normal factor per group of setups (``model_error_group``: the system that moves the
gradients, and emulated or real hardware), its 1-sigma of log(measured / predicted) estimated
from HELD-OUT residuals (calibration/model_error.py): never from the points it is judged on.
``predict --interval`` multiplies every draw by it as one more independent factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simscale.spec.scenario import DIST_MODES, Scenario, is_real_hardware

# Fewer held-out residuals than this in a group say too little about its spread: the group
# gets no sigma, and the interval's words say that model error is not included.
MIN_RESIDUALS = 3


@dataclass(frozen=True)
class ModelError:
    """1-sigma of log(measured / predicted) per group, how many held-out residuals each came
    from, and the command and data they came from; empty in profiles made before it was kept."""

    sigma_log: dict[str, float] = field(default_factory=dict)
    residuals: dict[str, int] = field(default_factory=dict)
    method: str = ""  # how the residuals were held out
    source: str = ""  # the command and the data they came from

    def sigma_for(self, scenario: Scenario) -> tuple[str, float | None]:
        """The scenario's group and its sigma (None where the profile has none for it)."""
        group = model_error_group(scenario)
        return group, self.sigma_log.get(group)


def system_of(scenario: Scenario) -> str:
    """How the gradients move: a parameter server (even with one worker: its pushes still
    cross the network), all-reduce, or DDP/ZeRO; or not at all, on one GPU without a server
    (its error is the compute model's alone)."""
    mode = scenario.kvstore.mode
    if mode in DIST_MODES:
        return "ps"
    if scenario.num_gpus == 1:
        return "single"
    if mode in ("ddp", "zero"):
        return "ddp-zero"
    return "allreduce"  # also one host's local/device aggregation


def model_error_group(scenario: Scenario) -> str:
    """The group a scenario's model error is read from, e.g. ``ps/emulated``: the emulated
    cluster (CPU workers or emulated compute) and real accelerators err differently."""
    return f"{system_of(scenario)}/{'real' if is_real_hardware(scenario) else 'emulated'}"
