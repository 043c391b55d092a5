"""The symmetric fast path against the exact model (simscale.model.symmetry).

A seeded generator draws a family of cluster shapes across every axis the scenario has (network
model, sync/async/device modes, all-reduce, co-located and dedicated servers and their number,
gradient compression, key placement, mixed host groups, stragglers, unequal TCP shares, link
speed, model); for each, the default ("auto") prediction must equal the exact one within 1%,
and the family must exercise the fast path often enough for that to mean something.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest
import simpy

from simscale.comm.ps.server import ServerGroup
from simscale.model import cluster, symmetry
from simscale.network import solvers
from simscale.network.fairshare import solve_grouped, solve_rounds
from simscale.simulator import Simulation, simulate
from simscale.spec.costs import CostModel
from simscale.spec.profile import default_costs
from simscale.spec.scenario import scenario_from_dict

FAMILY_SEED = 20261122
FAMILY_SIZE = 40
TOLERANCE = 0.01


def _shape(rng: random.Random, i: int) -> dict[str, Any]:
    """One generated scenario (plain data, as a YAML file would hold it)."""
    hosts = rng.choice([2, 3, 4, 6, 8])
    gpus = rng.choice([1, 2, 4, 8])
    nic = rng.choice([10, 25, 25, 50, 100])
    model = rng.choice(["resnet18", "resnet50", "resnet50", "resnet34"])
    group = {"count": hosts, "gpus_per_host": gpus, "gpu": "V100", "nic_gbps": nic}
    groups = [group]
    if rng.random() < 0.15:  # a second, different host group
        groups.append({"count": 1, "gpus_per_host": gpus, "gpu": "V100", "nic_gbps": nic / 2})
    n_hosts = sum(g["count"] for g in groups)
    mode = rng.choice(["dist_sync"] * 5 + ["dist_sync_device"] * 2 + ["dist_async", "allreduce"])
    data: dict[str, Any] = {
        "name": f"family-{i}",
        "cluster": {"hosts": groups},
        "model": model,
        "training": {
            "batch_per_gpu": rng.choice([32, 64, 128]),
            # Drawn apart, like the placements below, so the family's other draws stay as they were.
            "precision": random.Random(FAMILY_SEED + 10_000 + i).choice(
                ["fp32"] * 3 + ["fp16", "amp"]
            ),
        },
        "kvstore": {"mode": mode},
        "simulation": {
            "warmup_iterations": 1,
            "measured_iterations": 6,
            "network_model": "fifo" if rng.random() < 0.1 else "fairshare",
            "compute_jitter": 0.05 if rng.random() < 0.1 else 0.0,
        },
    }
    if mode != "allreduce":
        if rng.random() < 0.35:
            n_srv_hosts = rng.choice([1, 2, max(1, n_hosts // 2), n_hosts])
            data["cluster"]["server_hosts"] = {"count": n_srv_hosts, "nic_gbps": nic}
            data["kvstore"]["placement"] = "dedicated"
            data["kvstore"]["servers"] = n_srv_hosts * rng.choice([1, 1, 2])
        else:
            data["kvstore"]["placement"] = "colocated"
            data["kvstore"]["servers"] = rng.choice([n_hosts, n_hosts, max(1, n_hosts // 2)])
        if rng.random() < 0.2:
            data["kvstore"]["gradient_compression"] = {"type": "2bit", "threshold": 0.5}
        if rng.random() < 0.2:
            data["kvstore"]["bigarray_bound"] = rng.choice([100_000, 10_000_000])
        # TensorFlow's placements, drawn apart so that the family's other draws stay as they were.
        placement = random.Random(FAMILY_SEED + i).choice(["hash"] * 3 + ["greedy", "round_robin"])
        data["kvstore"]["key_placement"] = placement
        if mode in symmetry.SYNC_MODES:  # TensorFlow's step barrier, drawn apart likewise
            sync = random.Random(FAMILY_SEED + 20_000 + i).choice(["key"] * 3 + ["step"])
            data["kvstore"]["sync"] = sync
    return data


def _family() -> list[tuple[dict[str, Any], CostModel]]:
    rng = random.Random(FAMILY_SEED)
    out = []
    for i in range(FAMILY_SIZE):
        costs = CostModel(tcp_share_sigma=0.5) if rng.random() < 0.1 else CostModel()
        out.append((_shape(rng, i), costs))
    return out


FAMILY = _family()
FAST_LANE_MEMBERS = 8


@pytest.mark.parametrize(
    ("data", "costs"),
    [
        # Each member costs 1-5 CPU seconds (tests.support.cpu_report): the first
        # FAST_LANE_MEMBERS run in the fast lane, every member runs in CI.
        pytest.param(d, c, id=d["name"], marks=[pytest.mark.slow] if i >= FAST_LANE_MEMBERS else [])
        for i, (d, c) in enumerate(FAMILY)
    ],
)
def test_fast_path_equals_exact(data: dict[str, Any], costs: CostModel) -> None:
    """Whichever path "auto" picks, its throughput is the exact model's within 1%."""
    scenario = scenario_from_dict(data)
    exact = simulate(scenario, costs, path="exact")
    auto = simulate(scenario, costs)
    assert exact.path == "exact"
    rel = auto.throughput_samples_per_s / exact.throughput_samples_per_s - 1
    assert abs(rel) <= TOLERANCE, (auto.path, auto.path_reason, rel)
    assert len(auto.per_worker) == len(exact.per_worker)
    assert auto.num_workers == exact.num_workers and auto.num_gpus == exact.num_gpus


def test_family_exercises_both_paths() -> None:
    """The generated family is not vacuous: the fast path runs on a good part of it, and every
    kind of reason to fall back occurs."""
    paths = []
    for data, costs in FAMILY:
        scenario = scenario_from_dict(data)
        reason = symmetry.reason_for_exact(scenario, cluster.layout(scenario), costs)
        paths.append(reason)
    fast = sum(r is None for r in paths)
    assert fast >= FAMILY_SIZE // 3, paths
    reasons = " ".join(r for r in paths if r)
    for why in ("mode dist_async", "mode allreduce", "communication-heavy"):
        assert why in reasons, reasons


def test_symmetric_path_refused_with_reason() -> None:
    """Asking for the reduction where workers differ is a one-line error naming why."""
    data, _ = next((d, c) for d, c in FAMILY if d["kvstore"]["mode"] == "dist_async")
    with pytest.raises(ValueError, match="does not apply: mode dist_async"):
        Simulation(scenario_from_dict(data), path="symmetric")


def test_result_says_which_path_ran() -> None:
    data = {
        "name": "two",
        "cluster": {"hosts": [{"count": 4, "instance": "p3.16xlarge"}]},
        "model": "resnet50",
        "training": {"batch_per_gpu": 128, "precision": "fp32"},
        "kvstore": {"mode": "dist_sync", "servers": 4},
    }
    fast = simulate(scenario_from_dict(data))
    assert fast.path == "symmetric" and "4 identical workers" in fast.path_reason
    assert fast.to_dict()["path"] == "symmetric"
    exact = simulate(scenario_from_dict(data), path="exact")
    assert exact.path == "exact" and exact.path_reason == "asked for"


def test_solve_grouped_matches_expanded_problem() -> None:
    """A grouped flow equals the same flow listed on every link of its group: three hosts,
    hand-built. Flow 0 (group 0, cancelled on link 0) loads links 2 and 4 once each and link 1
    three times; flow 1 loads link 0 twice. The expanded problem, solved by solve_rounds with
    per-link weights, must give the same rates."""
    cap = np.array([10.0, 9.0, 6.0, 8.0, 7.0, np.inf])
    links = np.array([[1, 0], [0, 5]])
    weight = np.array([[3.0, -1.0], [2.0, 0.0]])
    group = np.array([0, -1])
    group_links = np.zeros((1, 6), dtype=bool)
    group_links[0, [0, 2, 4]] = True
    grouped = solve_grouped(cap, links, weight, group, np.array([1.0, 1.0]), group_links)
    expanded = solve_rounds(
        cap,
        np.array([[1, 2, 4], [0, 5, 5]]),
        np.full(2, np.inf),
        np.array([[3.0, 1.0, 1.0], [2.0, 0.0, 0.0]]),
    )
    # By hand: flow 0 is held by link 1 (9 / 3 = 3) first; flow 1 then fills link 0 alone: 5.
    np.testing.assert_allclose(grouped, [3.0, 5.0])
    np.testing.assert_allclose(grouped, expanded)


def _per_host_servers(hosts: int, model: str, nic_gbps: float = 25.0) -> dict[str, Any]:
    """p3.16xlarge hosts with a co-located server each (the shipped layout)."""
    return {
        "name": f"{model}-{hosts}",
        "cluster": {"hosts": [{"count": hosts, "instance": "p3.16xlarge", "nic_gbps": nic_gbps}]},
        "model": model,
        "training": {"batch_per_gpu": 128, "precision": "fp32"},
        "kvstore": {"mode": "dist_sync", "servers": hosts},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 6},
    }


def test_long_merge_burst_runs_exact() -> None:
    """A shape the NIC bound alone let through, where the reduction was 1.9% low: 16 hosts of
    ResNet-18 with the merge cost doubled (one round of a 2.4 MB slice keeps its server busy 5%
    of the compute time). "auto" must run the exact model there, and so agree with it."""
    scenario = scenario_from_dict(_per_host_servers(16, "resnet18"))
    costs, _ = default_costs(scenario)
    costs = dataclasses.replace(costs, server_merge_ns_per_byte=2 * costs.server_merge_ns_per_byte)
    assert symmetry.nic_load(scenario, cluster.layout(scenario), costs) <= 0.5
    auto = Simulation(scenario, costs)
    assert auto.path == "exact" and "merge burst" in auto.path_reason
    assert not auto.approximate


def test_connection_bound_parameter_server_runs_exact() -> None:
    """Four ResNet-50 workers and two dedicated servers on 100 Gbit/s NICs: the NICs carry the
    model with room to spare, but each server's four connections at 5 Gbit/s cannot (a
    server's 51 MB share out to four workers at 2.5 GB/s is about compute's length). The load
    counts what the connections carry, so "auto" runs the exact model, and says why."""
    data = {
        "cluster": {
            "hosts": [{"count": 4, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 100}],
            "server_hosts": {"count": 2, "nic_gbps": 100},
        },
        "model": "resnet50",
        "training": {"batch_per_gpu": 32},
        "kvstore": {"mode": "dist_sync", "servers": 2, "placement": "dedicated"},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 4},
    }
    scenario = scenario_from_dict(data)
    layout = cluster.layout(scenario)
    free = CostModel()
    assert symmetry.nic_load(scenario, layout, free) <= 0.5
    assert Simulation(scenario, free).path == "symmetric"
    capped = free.with_values(connection_gbps=5.0)
    assert symmetry.nic_load(scenario, layout, capped) > 0.5
    auto = Simulation(scenario, capped)
    assert auto.path == "exact" and "connections" in auto.path_reason


@pytest.mark.slow  # measured over 2 CPU s (tests/support/cpu_report.py)
def test_beyond_the_merge_bound_the_reduction_stays_within_its_stated_error() -> None:
    """16 hosts of ResNet-18 with the shipped profile: one round of a 2.4 MB slice keeps its
    server busy 5% of the compute time, past the 4% bound, so "auto" runs exact; forced, the
    reduction must stay within the error path_reason states for merge-bound shapes (it measured
    -1.4% here with 4 measured iterations, and -5.3% when a representative's W copies were
    merged back to back after it arrived; -0.8% with the current profile pulling slice by slice,
    -4.5% since a split key is pulled after its last ack)."""
    data = _per_host_servers(16, "resnet18")
    data["simulation"]["measured_iterations"] = 4
    scenario = scenario_from_dict(data)
    costs, _ = default_costs(scenario)
    assert (
        symmetry.merge_burst(scenario, cluster.layout(scenario), costs) > symmetry.MAX_MERGE_BURST
    )
    exact = Simulation(scenario, costs, path="exact").run().throughput_samples_per_s
    reduced = Simulation(scenario, costs, path="symmetric").run().throughput_samples_per_s
    assert abs(reduced / exact - 1) <= symmetry.MERGE_BOUND_ERROR
    assert f"{100 * symmetry.MERGE_BOUND_ERROR:.1f}%" in symmetry.APPROXIMATION_ERROR


def test_out_of_reach_runs_approximate_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the validated loads, where the exact model would take hours, "auto" answers with the
    reduction and marks the result approximate, naming both reasons; forced, the reduction is
    approximate there too, and not within its bounds."""
    scenario = scenario_from_dict(_per_host_servers(4, "resnet50", nic_gbps=2))
    costs, _ = default_costs(scenario)
    assert Simulation(scenario, costs).path == "exact"  # communication-bound, exact in reach
    monkeypatch.setattr(symmetry, "EXACT_PUSHES_IN_REACH", 100)
    result = simulate(scenario, costs)
    assert result.path == "symmetric" and result.approximate
    for words in ("APPROXIMATE: communication-heavy", "out of reach", "below"):
        assert words in result.path_reason
    assert result.to_dict()["approximate"] is True
    forced = Simulation(scenario, costs, path="symmetric")
    assert forced.approximate and "out of reach" not in forced.path_reason
    within = scenario_from_dict(_per_host_servers(4, "resnet50"))
    assert not Simulation(within, costs, path="symmetric").approximate


def _count_grouped_solves(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the grouped solver's calls from now on: {"n": calls}."""
    calls = {"n": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return solve_grouped(*args, **kwargs)

    monkeypatch.setattr(solvers, "solve_grouped", counted)
    return calls


def test_grouped_solves_are_memoised_without_changing_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A training iteration repeats the same network states, so the symmetric path solves each
    distinct one once: fewer solver calls than re-solves, and bit-for-bit the same prediction as
    with the memo switched off."""
    scenario = scenario_from_dict(_per_host_servers(4, "resnet50"))
    calls = _count_grouped_solves(monkeypatch)
    memoised = simulate(scenario)
    with_memo = calls["n"]
    calls["n"] = 0
    monkeypatch.setattr(solvers, "GROUPED_MEMO_ENTRIES", 0)
    plain = simulate(scenario)
    assert memoised.path == plain.path == "symmetric"
    assert memoised.throughput_samples_per_s == plain.throughput_samples_per_s
    assert with_memo < calls["n"] / 2


def test_a_memo_that_rarely_hits_is_dropped_and_the_answer_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 256 hosts and more nearly every network state is new, and keeping them only costs
    time: once the first look-ups hit less often than the minimum rate, the run solves every
    state afresh, with the same prediction."""
    scenario = scenario_from_dict(_per_host_servers(4, "resnet50"))
    calls = _count_grouped_solves(monkeypatch)
    monkeypatch.setattr(solvers, "GROUPED_MEMO_ENTRIES", 0)
    plain = simulate(scenario)
    solves = calls["n"]
    calls["n"] = 0
    monkeypatch.setattr(solvers, "GROUPED_MEMO_ENTRIES", 8192)
    monkeypatch.setattr(solvers, "GROUPED_MEMO_PROBATION", 20)
    monkeypatch.setattr(solvers, "GROUPED_MEMO_MIN_HIT_RATE", 1.01)  # no run can keep it
    dropped = simulate(scenario)
    assert dropped.throughput_samples_per_s == plain.throughput_samples_per_s
    # At most the first 20 look-ups were answered from the memo; every later state was solved.
    assert solves - 20 <= calls["n"] < solves


class _InstantStream:
    """A connection that delivers at once (the server's own timing is what is tested)."""

    def send(self, nbytes: float, deliver: Any, key: int | None = None, tag: Any = None) -> None:
        deliver()


@pytest.mark.parametrize(
    ("own_arrival_s", "acked_s"),
    [
        # The other three are merged as they come (3 x 110 us, done by 0.33 ms); the
        # representative's own push at 5 ms leaves its own merge (110 us), the update
        # (1 MB x 0.39 ns = 390 us) and the acks to its middle turn (2 x 20 us): 5.54 ms.
        (5e-3, 5e-3 + 110e-6 + 390e-6 + 40e-6),
        # Its own push at 0.2 ms finds the others' merges still running: its merge waits for
        # them (0.33 ms), then the same 110 + 390 + 40 us.
        (0.2e-3, 330e-6 + 110e-6 + 390e-6 + 40e-6),
    ],
)
def test_a_representative_push_finds_the_others_merged_as_they_came(
    own_arrival_s: float, acked_s: float
) -> None:
    """One push standing for W = 4: the other three reach the server while the representative's
    travels and are merged as they come (``push_sent``); only its own merge is left when it
    arrives, where back to back after it (the burst) the four took 440 us."""
    env = simpy.Environment()
    costs = CostModel(
        server_request_us=10.0,
        server_merge_ns_per_byte=0.1,
        server_update_ns_per_byte=0.39,
        message_overhead_us=20.0,
    )
    servers = ServerGroup(env, lambda s, w: _InstantStream(), costs, (1,), 1, sync=True, copies=4)
    acked: list[float] = []
    servers.push_sent(0, 1e6)
    arrive = env.timeout(own_arrival_s)
    arrive.callbacks.append(
        lambda _e: servers.push(0, 0, 0, 1e6, 0, lambda _w: acked.append(env.now))
    )
    env.run()
    assert acked == [pytest.approx(acked_s)]
    assert servers.threads[0].busy_s == pytest.approx(4 * 110e-6 + 390e-6 + 4 * 20e-6)
