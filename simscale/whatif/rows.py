"""A prediction as one flat row: the columns every sweep, comparison and advice shares.

Rows hold plain values (numbers, strings, None) so that CSV, JSON, parquet and pandas read them
alike. Nothing that depends on the machine (wall time, events) goes in: the same point gives
the same row wherever it runs.
"""

from __future__ import annotations

from typing import Any

from simscale.results import Result
from simscale.scenario import Scenario
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
    "usd_per_hour",
    "samples_per_usd",
    "train_hours",
    "train_usd",
)


def result_row(scenario: Scenario, result: Result) -> dict[str, Any]:
    """The metric columns of one successful prediction."""
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
    }
    row.update(cost_fields(scenario, result.throughput_samples_per_s))
    return row


def failed_row(status: str, message: str) -> dict[str, Any]:
    """The metric columns of a point that could not be predicted, with the reason."""
    row: dict[str, Any] = dict.fromkeys(METRIC_COLUMNS)
    row["status"] = status
    row["message"] = message
    return row
