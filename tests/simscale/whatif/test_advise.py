"""advise finds the brute-force optimum of a small space; compare explains differences; both
turn impossible requests into one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import simscale
from simscale.cli import main
from simscale.whatif import WhatIfError
from simscale.whatif.compare import compare, explain
from simscale.whatif.pricing import cost_fields

BASE = {
    "name": "small",
    "cluster": {
        "hosts": [
            {"count": 2, "gpus_per_host": 2, "gpu": "V100", "nic_gbps": 1, "usd_per_hour": 3.0}
        ],
        "server_hosts": {"count": 1, "nic_gbps": 1, "usd_per_hour": 1.0},
    },
    "model": {"name": "mlp"},
    "training": {"batch_per_gpu": 64, "dataset_samples": 1_000_000, "epochs": 2},
    "kvstore": {"mode": "dist_sync", "servers": 1, "placement": "dedicated"},
    "simulation": {"warmup_iterations": 1, "measured_iterations": 2, "seed": 0},
}
HOSTS = [1, 2, 4]
SERVERS = [1, 2, 4]


@pytest.fixture
def small(scenario_file) -> Path:
    return scenario_file(BASE, "small.yaml")


def _brute_force(path: Path) -> list[tuple[int, int, float, float]]:
    """(hosts, servers, samples/s, $ to train) of every shape, each predicted on its own."""
    out = []
    for h, s in itertools.product(HOSTS, SERVERS):
        settings = {
            "cluster.hosts[0].count": h,
            "cluster.server_hosts.count": s,
            "kvstore.servers": s,
        }
        r = simscale.predict(path, set=settings)
        from simscale.whatif.api import scenario_of

        cost = cost_fields(scenario_of(path, settings), r.throughput_samples_per_s)
        out.append((h, s, r.throughput_samples_per_s, cost["train_usd"]))
    return out


def test_advise_finds_the_brute_force_optimum(small: Path) -> None:
    shapes = _brute_force(small)
    speeds = sorted(t for *_, t, _ in shapes)
    target = speeds[len(speeds) // 2]  # half the shapes meet it
    feasible = [x for x in shapes if x[2] >= target]
    cheapest = min(feasible, key=lambda x: (x[3], -x[2]))
    fastest = max(feasible, key=lambda x: (x[2], -x[3]))
    advice = simscale.advise(
        small,
        vary={
            "cluster.hosts[0].count": HOSTS,
            "cluster.server_hosts.count+kvstore.servers": SERVERS,
        },
        target_throughput=target,
        executor="serial",
    )
    best = advice.cheapest[0][0]
    assert (best["cluster.hosts[0].count"], best["kvstore.servers"]) == cheapest[:2]
    assert best["train_usd"] == pytest.approx(cheapest[3])
    top = advice.fastest[0][0]
    assert (top["cluster.hosts[0].count"], top["kvstore.servers"]) == fastest[:2]
    assert len(advice.feasible) == len(feasible)
    # runner-ups are the next cheapest, each saying why it lost
    costs = [r["train_usd"] for r, _ in advice.cheapest]
    assert costs == sorted(costs)
    assert all("more" in why or "slower" in why for _, why in advice.cheapest[1:])


def test_advise_deadline_and_budget(small: Path) -> None:
    shapes = _brute_force(small)
    hours = {(h, s): 2_000_000 / t / 3600 for h, s, t, _ in shapes}
    deadline = sorted(hours.values())[3]
    budget = sorted(c for *_, c in shapes)[-1]  # every shape fits the budget
    advice = simscale.advise(
        small,
        vary={
            "cluster.hosts[0].count": HOSTS,
            "cluster.server_hosts.count+kvstore.servers": SERVERS,
        },
        deadline_hours=deadline,
        budget_usd=budget,
        executor="serial",
    )
    assert all(r["train_hours"] <= deadline for r in advice.feasible)
    assert len(advice.feasible) == sum(1 for v in hours.values() if v <= deadline)


def test_advice_says_which_gpus_compute_is_only_assumed(
    scenario_file, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real-hardware profile fits V100 fp32 but has no H100 point: a sweep row on H100 names
    it in ``compute_assumed``, and advice that recommends it says its compute is a guess."""
    base = {
        "model": "resnet18",
        "cluster": {"hosts": [{"count": 1, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 25}]},
        "training": {"batch_per_gpu": 32, "precision": "fp32"},
        "kvstore": {"mode": "local"},
    }
    path = scenario_file(base, "one.yaml")
    advice = simscale.advise(
        path,
        vary={"cluster.hosts[0].gpu": ["V100", "H100"]},
        target_throughput=1.0,
        executor="serial",
    )
    assumed = {r["cluster.hosts[0].gpu"]: r["compute_assumed"] for r in advice.feasible}
    assert assumed == {"V100": "", "H100": "H100/fp32"}
    assert advice.compute_assumed == ["H100/fp32"]
    args = ["advise", str(path), "--vary", "cluster.hosts[0].gpu=V100,H100", "--no-progress"]
    assert main([*args, "--executor", "serial", "--target-throughput", "1"]) == 0
    assert "compute assumed, not fitted, for H100/fp32" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--target-throughput", "1e12"], "no shape of the 3 predicted meets"),
        (["--target-throughput", "-5"], "expected a number > 0"),
        (["--deadline", "1", "--set", "training.epochs=null"], "need training.dataset_samples"),
        (["--target-throughput", "10", "--vary", "kvstore.servers=9..1"], "empty range"),
    ],
)
def test_advise_impossible_or_bad_requests_are_one_line(
    small: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["advise", str(small), "--vary", "cluster.hosts[0].count=1,2,4", "--no-progress"]
    assert main([*args, "--executor", "serial", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_compare_explains_the_differences(small: Path) -> None:
    entries = compare([small], ["four:cluster.hosts[0].count=4"], executor="serial")
    assert [e.label for e in entries] == ["small", "four"]
    words = "\n".join(explain(entries))
    a, b = entries[0].result, entries[1].result
    assert f"{b.throughput_samples_per_s:,.0f} vs {a.throughput_samples_per_s:,.0f}" in words
    assert "cluster.hosts[0].count: 2 -> 4" in words
    assert "rents for $13.00/h vs $7.00/h" in words
    with pytest.raises(WhatIfError, match="share a label"):
        compare([small], ["small:kvstore.servers=1"], executor="serial")


def test_cli_compare_needs_two(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(small)]) == 2
    assert "two or more" in capsys.readouterr().err


def test_cli_compare_names_a_malformed_vs(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(small), "--vs", "bad"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simscale: error: --vs: got 'bad', expected [NAME:]path=value")
    assert "\n" not in err
