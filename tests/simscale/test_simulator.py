"""The simulator against analytic bounds, MXNet's semantics and common sense."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from simscale.cli import main
from simscale.simulator import Simulation, simulate
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario, load_scenario, scenario_from_dict
from tests.support.costs import NETWORK_ONLY
from tests.support.paths import ROOT


def comm_bound(
    workers: int,
    servers: int,
    *,
    keys: int = 100,
    elements: int = 250_000,
    nic_gbps: float = 10.0,
    mode: str = "dist_sync",
    placement: str = "dedicated",
    fwd_gflops: float = 0.0,
    **extra: Any,
) -> Scenario:
    """``keys`` equal arrays (1 MB each by default), CPU 'GPUs' with ~no compute."""
    cluster: dict[str, Any] = {
        "hosts": [
            {
                "count": workers,
                "gpus_per_host": 1,
                "gpu": "cpu",
                "nic_gbps": nic_gbps,
                "latency_us": 25,
            }
        ]
    }
    if placement == "dedicated":
        cluster["server_hosts"] = {"count": servers, "nic_gbps": nic_gbps, "latency_us": 25}
    data = {
        "cluster": cluster,
        "model": {
            "arrays": [
                {"name": f"w{i}", "elements": elements, "fwd_gflops": fwd_gflops}
                for i in range(keys)
            ]
        },
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": mode, "servers": servers, "placement": placement},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 6},
    }
    for path, value in extra.items():
        section, field = path.split("__")
        data.setdefault(section, {})[field] = value
    return scenario_from_dict(data)


def analytic_bound_s(workers: int, servers: int, model_bytes: float, nic_gbps: float) -> float:
    """BytePS OSDI'20 §2: dedicated servers need at least max(M/B, n*M/(k*B)) per iteration."""
    nic_Bps = nic_gbps * 1e9 / 8
    return max(model_bytes / nic_Bps, workers * model_bytes / (servers * nic_Bps))


@pytest.mark.parametrize(
    "workers,servers",
    [
        pytest.param(4, 2, marks=pytest.mark.slow),
        (2, 4),
        (4, 4),
        pytest.param(8, 1, marks=pytest.mark.slow),
    ],
)
def test_comm_bound_iteration_meets_the_analytic_bound(workers: int, servers: int) -> None:
    """Dedicated servers, no compute, 1000 equal keys and a scheduler that lets pushes and pulls
    pipeline (control messages first, P3-style): the iteration is within 2% of the bound; the
    excess is the fill and drain of one key. (8, 1) is one server for many workers."""
    s = comm_bound(workers, servers, keys=1000, elements=25_000, kvstore__scheduling="priority")
    bound = analytic_bound_s(workers, servers, 1000 * 25_000 * 4, 10.0)
    r = simulate(s, NETWORK_ONLY)
    assert r.iteration_time_s == pytest.approx(bound, rel=0.02)
    assert r.iteration_time_s >= bound * 0.999  # nothing beats the bound


def test_mxnet_fifo_connections_do_not_pipeline_when_all_pushes_are_queued_at_once() -> None:
    """MXNet sends a key's pull request only after its push is acknowledged, on the same
    in-order connection: with no compute every push is already queued, so all pulls wait for
    all pushes — a push phase then a pull phase, twice the bound (within 2%)."""
    s = comm_bound(4, 2, keys=100, elements=250_000)
    assert s.kvstore.scheduling == "fifo"
    bound = analytic_bound_s(4, 2, 100 * 250_000 * 4, 10.0)
    assert simulate(s, NETWORK_ONLY).iteration_time_s == pytest.approx(2 * bound, rel=0.02)


def test_one_server_for_many_workers_is_named_the_bottleneck() -> None:
    """With 8 workers and 1 server, the server's NIC is what saturates."""
    r = simulate(comm_bound(8, 1), NETWORK_ONLY)
    assert "server 0" in r.bottleneck and "NIC" in r.bottleneck, r.bottleneck


@pytest.mark.parametrize("knob", ["nic_gbps", "servers"])
def test_more_bandwidth_or_more_servers_never_predicts_less(knob: str) -> None:
    """Server-bound case (4 workers, dedicated servers): throughput is monotone in NIC speed
    and in the number of servers, with default costs."""
    values = [1.0, 2.5, 10.0, 25.0, 100.0] if knob == "nic_gbps" else [1, 2, 3, 4, 8]
    tput = []
    for v in values:
        s = comm_bound(
            4,
            2 if knob == "nic_gbps" else int(v),
            keys=40,
            fwd_gflops=0.01,
            **({"nic_gbps": v} if knob == "nic_gbps" else {}),
        )
        tput.append(simulate(s).throughput_samples_per_s)
    assert all(b >= a * 0.999 for a, b in itertools.pairwise(tput)), tput
    assert tput[-1] > 1.5 * tput[0]


def test_sync_workers_move_in_lockstep_async_workers_do_not() -> None:
    """dist_sync: a slow host (p3.8xlarge, 10 Gbit/s) sets everyone's pace; dist_async: the
    fast hosts run ahead and nobody waits for other workers."""
    sync = simulate(
        load_scenario(ROOT / "scenarios/mxnet/3s-3w-async.yaml", ["kvstore.mode=dist_sync"])
    )
    times = [w.iteration_time_s for w in sync.per_worker]
    assert max(times) == pytest.approx(min(times), rel=1e-3)
    asy = simulate(load_scenario(ROOT / "scenarios/mxnet/3s-3w-async.yaml"))
    assert all(w.wait_for_workers_s == 0 for w in asy.per_worker)
    per_gpu = [w.samples_per_s / w.gpus for w in asy.per_worker]
    assert asy.throughput_samples_per_s == pytest.approx(
        sum(w.samples_per_s for w in asy.per_worker)
    )
    assert len(set(round(x, 3) for x in per_gpu)) > 1  # workers run at their own pace


def test_a_co_located_server_shares_its_hosts_nic() -> None:
    """3 workers, servers on hosts 0 and 1 (launch.py cycles them over the hosts): those NICs
    carry their worker's traffic and their server's, so they are busier than host 2's.
    (CPU contention between a server and its co-hosted worker is not modelled.)"""
    s = comm_bound(3, 2, placement="colocated", mode="dist_async", keys=60, fwd_gflops=0.01)
    r = simulate(s)
    busy = {u.resource: u.busy_fraction for u in r.utilization}
    assert [w.co_hosts_server for w in r.per_worker] == [True, True, False]
    for d in ("egress", "ingress"):
        assert busy[f"host0.{d}"] > 1.2 * busy[f"host2.{d}"]
        assert busy[f"host1.{d}"] > 1.2 * busy[f"host2.{d}"]


def test_compute_bound_64gpu_is_efficient_and_says_so() -> None:
    """64 V100s on ResNet-50 batch 128 with a server per host: communication hides behind
    compute; the ideal is 64 x one V100's rate."""
    r = simulate(load_scenario(ROOT / "scenarios/64gpu.yaml"))
    assert r.num_gpus == 64 and r.num_servers == 8
    assert r.scaling_efficiency > 0.9
    assert "GPU compute" in r.bottleneck
    assert r.ideal_samples_per_s == pytest.approx(64 * 384, rel=0.01)  # DLPerf: 384 img/s/V100


def test_deterministic_for_a_seed_and_seed_matters_with_jitter() -> None:
    s = comm_bound(
        3, 2, keys=20, fwd_gflops=0.05, simulation__compute_jitter=0.1, simulation__seed=1
    )
    a, b = simulate(s), simulate(s)
    assert a.throughput_samples_per_s == b.throughput_samples_per_s
    other = comm_bound(
        3, 2, keys=20, fwd_gflops=0.05, simulation__compute_jitter=0.1, simulation__seed=2
    )
    assert simulate(other).throughput_samples_per_s != a.throughput_samples_per_s
    assert a.breakdown["wait_for_workers_s"] > 0  # stragglers make the others wait


def test_two_bit_compression_speeds_up_a_push_bound_job() -> None:
    """2-bit compression shrinks only worker->server traffic 16x: a push-bound job speeds up."""
    plain = simulate(comm_bound(4, 1, keys=40))
    packed = simulate(comm_bound(4, 1, keys=40, kvstore__gradient_compression={"type": "2bit"}))
    assert packed.throughput_samples_per_s > 1.3 * plain.throughput_samples_per_s


def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_model() -> None:
    """Flat ring over n single-GPU hosts, no compute: 2(n-1)/n * M/B per iteration (within 3%;
    the rest is 2(n-1) step latencies)."""
    n = 4
    s = comm_bound(
        n,
        1,
        placement="colocated",
        mode="allreduce",
        kvstore__allreduce={"algorithm": "ring", "fusion_mb": 1000, "cycle_ms": 0},
    )
    r = simulate(s, NETWORK_ONLY)
    model_bytes, nic_Bps = 100 * 250_000 * 4, 10e9 / 8
    assert r.iteration_time_s == pytest.approx(2 * (n - 1) / n * model_bytes / nic_Bps, rel=0.03)


def test_device_aggregation_beats_cpu_aggregation_on_8_gpu_hosts() -> None:
    """dist_sync_device sums over NVLink instead of PCIe: never slower, less copy-engine time."""
    base = ROOT / "scenarios/mxnet/2s-2w-sync.yaml"
    cpu = simulate(load_scenario(base, ["training.batch_per_gpu=16"]))
    dev = simulate(
        load_scenario(base, ["training.batch_per_gpu=16", "kvstore.mode=dist_sync_device"])
    )
    assert dev.throughput_samples_per_s >= cpu.throughput_samples_per_s
    busy = {u.resource: u.busy_fraction for u in cpu.utilization}
    busy_dev = {u.resource: u.busy_fraction for u in dev.utilization}
    assert busy_dev["worker0.copies"] < busy["worker0.copies"]


def test_fifo_network_model_can_be_chosen_by_name() -> None:
    s = comm_bound(4, 2, simulation__network_model="fifo")
    r = simulate(s, NETWORK_ONLY)
    assert r.network_model == "fifo"
    assert r.iteration_time_s >= 0.999 * 0.16  # FIFO sharing cannot beat the bound either


def test_trace_has_one_measured_iteration_per_worker(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    assert (
        main(
            [
                "predict",
                str(ROOT / "scenarios/mxnet/2s-2w-sync.yaml"),
                "--trace",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    events = json.loads(out.read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert processes == {"worker0", "worker1"}
    assert {"compute", "key 0"} <= threads  # a thread per key: see tests/test_trace.py
    spans = [e for e in events if e["ph"] == "X"]
    fwd0 = [e for e in spans if e["name"] == "fwd 0"]
    assert len(fwd0) == 2  # one forward of layer 0 per worker: exactly one iteration


def test_json_output_has_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(ROOT / "scenarios/mxnet/1s-2w-sync.yaml"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in (
        "throughput_samples_per_s",
        "scaling_efficiency",
        "iteration_time_s",
        "per_worker",
        "utilization",
        "bottleneck",
    ):
        assert k in d
    assert d["per_worker"][0]["samples_per_s"] > 0


def test_measurement_stops_once_stable() -> None:
    """Deterministic sync runs are stable after warm-up: 3 measured iterations suffice."""
    sim = Simulation(load_scenario(ROOT / "scenarios/mxnet/1s-2w-sync.yaml"))
    r = sim.run()
    assert r.stable and r.iterations_measured == 3


def test_pull_with_push_takes_the_ack_and_request_trips_off_the_critical_path() -> None:
    """One worker, one server, one 1 MB key (0.8 ms at 10 Gbit/s), a 10 ms update, 1 ms per
    NIC (2 ms one way). MXNet (after_ack): push arrives at 2.8 ms, update to 12.8, ack at 14.8,
    pull request at 16.8, weights at 19.6. realrun's pushpull (with_push): the request arrives
    right behind the push, waits out the update, weights at 15.6: 4 ms less."""
    costs = CostModel(
        bandwidth_factor=1.0,
        message_overhead_us=0.0,
        server_merge_ns_per_byte=0.0,
        server_update_ns_per_byte=10.0,  # 1 MB x 10 ns = 10 ms
        server_request_us=0.0,
    )

    def iteration_s(pull_request: str) -> float:
        d = comm_bound(1, 1, keys=1, elements=250_000, kvstore__pull_request=pull_request)
        d = d.to_dict()
        d["cluster"]["hosts"][0]["latency_us"] = 1000
        d["cluster"]["server_hosts"]["latency_us"] = 1000
        return simulate(scenario_from_dict(d), costs).iteration_time_s

    assert iteration_s("after_ack") - iteration_s("with_push") == pytest.approx(0.004, rel=0.01)


def test_hosts_sharing_two_cores_are_slowed_by_their_combined_cpu_work() -> None:
    """Server CPU work that runs in parallel on separate hosts queues for the cores when all
    hosts share two (an emulated cluster on one machine): 4 servers whose updates each take
    10 ms per iteration need at least 4 x 10 / 2 = 20 ms of a 2-core machine."""
    costs = CostModel(
        bandwidth_factor=1.0,
        message_overhead_us=0.0,
        server_merge_ns_per_byte=0.0,
        server_update_ns_per_byte=10.0,  # 1 MB per server per iteration -> 10 ms
        server_request_us=0.0,
    )
    d = comm_bound(1, 4, keys=4, elements=250_000, nic_gbps=1000.0).to_dict()
    own = simulate(scenario_from_dict(d), costs).iteration_time_s
    d["cluster"]["shared_cpu_cores"] = 2
    shared = simulate(scenario_from_dict(d), costs).iteration_time_s
    assert own == pytest.approx(0.010, rel=0.1)  # the 4 updates run in parallel
    assert shared == pytest.approx(0.020, rel=0.1)  # two at a time
