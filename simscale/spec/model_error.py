"""The simulator's own error on setups whose facts are known, as a profile keeps it.

Even with every fact typed in and every parameter measured, the simulator misses a shape by a
few percent (runs/emulated-v2, fitted on those very runs: 3.9% mean). An interval that carries
only parameter uncertainty is then too narrow to cover the truth. This error is kept per group
of setups (``model_error_group``: the system that moves the gradients, and emulated or real
hardware) as the EMPIRICAL distribution of held-out conformity scores (split-conformal
prediction, calibration/model_error.py): never from the points it is judged on.

On real hardware the parameter-server and all-reduce groups are split by whether the
gradients cross a network (``/network``: more than one worker host, or dedicated server
hosts) or stay inside one host (``/one-host``: PCIe, NVLink, the host's memory). The facts a
published setup or a user's cluster leaves unstated are mostly network facts (the rate one
TCP connection gets, the NIC's achieved rate, NCCL's transport, the server hosts): a one-host
setup has none of them, and held out its errors are a third of the multi-host ones
(docs/data/validate-published.json at a2eb4c7: all-reduce 5.7% mean over 65 one-host points,
19.2% over 48 multi-host; parameter server 3.8% over 59, 12.4% over 50). One pool gave the
one-host setups the multi-host tail's margin. Conformal prediction per category (Mondrian
conformal prediction, Vovk, Gammerman and Shafer, Algorithmic Learning in a Random World,
2005) keeps the coverage guarantee within each category, as long as the category is a
property of the input: the host count is one, so a user's cluster is read from the same group
as the published points that were judged. The emulated cluster's network facts are typed in
(tc rates), so its groups stay whole; DDP/ZeRO's stay whole until the transformer set's
validation is re-run with the split.

A score is how far, in log space, the measured value lay outside the ranges-only band of its
held-out prediction (the central ``level`` of the point and its drawn inputs; the point alone
where no draws were kept): negative inside, positive outside. ``predict --interval`` widens its
own ranges-only band by the score quantile ``margin`` (or narrows it, when the margin is
negative): conformalized quantile regression (Romano, Patterson and Candes, NeurIPS 2019), in
log space. The residuals were measured at the nominal prediction of setups whose facts were
themselves uncertain, so they already hold the error of unknown facts: scaling the band by
that error again (a factor multiplied into every draw) would count it twice; the conformal
margin counts it once, and only beyond what the ranges explain.

Profiles made before the scores were kept hold a log-normal ``sigma_log`` per group instead;
they load and work as before (every draw times that factor's quantiles).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from simscale.spec.scenario import DIST_MODES, Scenario, is_real_hardware

# Fewer held-out residuals than this in a group say too little about its spread: the group
# gets no model error, and the interval's words say that model error is not included.
MIN_RESIDUALS = 3
# The interval levels whose scores a profile keeps (a score depends on the level of the band
# it is measured against). --interval at another level carries no model error, and says so.
CONFORMAL_LEVELS = (0.5, 0.8, 0.9, 0.95)


def level_key(level: float) -> str:
    """How a level is named in a profile: 0.9 -> "90"."""
    return f"{level * 100:g}"


def conformal_margin(scores: Sequence[float], level: float) -> float | None:
    """The split-conformal margin of ``scores`` at ``level``: their ceil(level (n+1))-th
    smallest, which a new exchangeable score stays at or below with probability >= level;
    None when n is too small for the level (the margin would be unbounded).

    Written out rather than numpy.quantile: method="higher" at level (n+1)/n lands one order
    statistic above this one for some n, and "inverted_cdf" can land one above by rounding."""
    n = len(scores)
    k = math.ceil(level * (n + 1) - 1e-9)
    if n == 0 or k > n:
        return None
    return sorted(scores)[max(k, 1) - 1]


@dataclass(frozen=True)
class ModelError:
    """Per group, the sorted held-out conformity scores of log(measured / predicted) per
    interval level (``scores``), how many held-out residuals each group has, how many drawn
    inputs each scored band had beside the point (0: the point alone), and the command and
    data they came from. ``sigma_log``: a log-normal 1-sigma per group, in profiles made
    before the scores were kept. Empty in profiles made before either."""

    sigma_log: dict[str, float] = field(default_factory=dict)
    residuals: dict[str, int] = field(default_factory=dict)
    method: str = ""  # how the residuals were held out and scored
    source: str = ""  # the command and the data they came from
    scores: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)
    band_draws: int = 0

    def sigma_for(self, scenario: Scenario) -> tuple[str, float | None]:
        """The scenario's group and its log-normal sigma (None where the profile has none)."""
        group = self.kept_group(model_error_group(scenario))
        return group, self.sigma_log.get(group)

    def kept_group(self, group: str) -> str:
        """``group``, or the whole group it splits where the profile keeps nothing for the
        part (a profile made before the network split: ``allreduce/real/network`` is read
        from its ``allreduce/real``)."""
        if group in self.scores or group in self.sigma_log:
            return group
        whole = group.rsplit("/", 1)[0]
        if group.count("/") >= 2 and (whole in self.scores or whole in self.sigma_log):
            return whole
        return group

    def margin(self, group: str, level: float) -> float | None:
        """The conformal margin in log space for ``group`` at ``level`` (None where the
        profile keeps no scores for them, or too few for the level)."""
        kept = self.scores.get(group, {}).get(level_key(level))
        return conformal_margin(kept, level) if kept else None


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


# The systems whose real-hardware group is split by whether the gradients cross a network.
NETWORK_SPLIT = ("ps", "allreduce")


def model_error_group(scenario: Scenario) -> str:
    """The group a scenario's model error is read from, e.g. ``ps/emulated`` or
    ``allreduce/real/network``: the emulated cluster (CPU workers or emulated compute) and
    real accelerators err differently, and on real hardware a setup whose gradients cross a
    network errs more than one that stays inside a host (its unknown facts are network facts)."""
    system = system_of(scenario)
    if not is_real_hardware(scenario):
        return f"{system}/emulated"
    if system not in NETWORK_SPLIT:
        return f"{system}/real"
    return f"{system}/real/{'network' if crosses_network(scenario) else 'one-host'}"


def crosses_network(scenario: Scenario) -> bool:
    """Whether the gradients leave a host: more than one worker host, or dedicated
    parameter-server hosts beside the workers."""
    dedicated = scenario.cluster.server_hosts is not None and system_of(scenario) == "ps"
    return scenario.num_worker_hosts > 1 or dedicated
