"""A prediction as one flat row: the columns every sweep, comparison and advice shares.

Rows hold plain values (numbers, strings, None) so that CSV, JSON, parquet and pandas read them
alike. Nothing that depends on the machine (wall time, events) goes in: the same point gives
the same row wherever it runs.
"""

from __future__ import annotations

from typing import Any

from simscale.report.results import Result
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario
from simscale.whatif.pricing import cost_fields

METRIC_COLUMNS = (
    "status",
    "message",
    "mode",
    "num_gpus",
    "num_workers",
    "num_servers",
    "throughput_samples_per_s",
    "ideal_samples_per_s",
    "scaling_efficiency",
    "iteration_time_s",
    "compute_s",
    "exposed_comm_s",
    "wait_for_workers_s",
    "bottleneck",
    "busiest_resource",
    "busiest_busy_fraction",
    "stable",
    "approximate",
    "compute_assumed",
    "usd_per_hour",
    "samples_per_usd",
    "train_hours",
    "train_usd",
)


def result_row(
    scenario: Scenario, result: Result, costs: CostModel | None = None
) -> dict[str, Any]:
    """The metric columns of one successful prediction; with the ``costs`` it ran with,
    ``compute_assumed`` names the GPU/precision pairs whose compute a fitted profile only
    assumes (no published point fits it), "" where none."""
    top = result.top_utilization(1)
    row: dict[str, Any] = {
        "status": "ok",
        "message": "",
        "mode": result.mode,
        "num_gpus": result.num_gpus,
        "num_workers": result.num_workers,
        "num_servers": result.num_servers,
        "throughput_samples_per_s": result.throughput_samples_per_s,
        "ideal_samples_per_s": result.ideal_samples_per_s,
        "scaling_efficiency": result.scaling_efficiency,
        "iteration_time_s": result.iteration_time_s,
        "compute_s": result.breakdown["compute_s"],
        "exposed_comm_s": result.breakdown["exposed_comm_s"],
        "wait_for_workers_s": result.breakdown["wait_for_workers_s"],
        "bottleneck": result.bottleneck,
        "busiest_resource": top[0].description if top else "",
        "busiest_busy_fraction": top[0].busy_fraction if top else None,
        "stable": result.stable,
        "approximate": result.approximate,
        "compute_assumed": " ".join(sorted(assumed_compute(scenario, costs)))
        if costs is not None
        else "",
    }
    row.update(cost_fields(scenario, result.throughput_samples_per_s))
    return row


def assumed_compute(scenario: Scenario, costs: CostModel) -> dict[str, float]:
    """GPU/precision -> the assumed efficiency, for the scenario's workers whose compute the
    ``costs`` (a fitted profile) hold no value for (simscale.spec.costs.CostModel)."""
    precision = scenario.training.compute_precision
    return costs.unfitted_efficiencies(
        f"{g.resolved()[1]}/{precision}" for g in scenario.cluster.hosts
    )


def compute_efficiency_used(scenario: Scenario, costs: CostModel) -> dict[str, float]:
    """GPU/precision -> the fraction of peak the prediction computed at, for each worker GPU."""
    precision = scenario.training.compute_precision
    keys = sorted({f"{g.resolved()[1]}/{precision}" for g in scenario.cluster.hosts})
    return {key: costs.efficiency(*key.split("/", 1)) for key in keys}


def failed_row(status: str, message: str) -> dict[str, Any]:
    """The metric columns of a point that could not be predicted, with the reason."""
    row: dict[str, Any] = dict.fromkeys(METRIC_COLUMNS)
    row["status"] = status
    row["message"] = message
    return row
