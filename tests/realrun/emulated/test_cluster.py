"""realrun on an emulated cluster: emulated GPUs, time dilation, the netns launcher, real runs
through network namespaces and through this machine's sshd, the committed dataset. (The
machine-load verdict, campaigns, run's refusals and the ssh launcher's command line have their
own test files, beside their modules.)

The first half needs no privileges. The second half builds real namespaces (``netns``,
``slow``; skipped with the reason when not root) and checks a PS run against the analytic
bound of domain.md, and that nothing of a run is left behind.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from realrun import cli
from realrun.campaign import load_campaign
from realrun.emulated import netns
from realrun.launching.netns_launcher import NetnsLauncher, host_links
from realrun.records.record import load_record
from realrun.run import LaunchOptions, check_runnable, run_scenario
from realrun.training.emulated_compute import emulated_device, synthetic_gradients
from simscale.model.cluster import layout
from simscale.model.compute import layer_times
from simscale.spec.costs import CostModel
from simscale.spec.scenario import load_scenario
from tests.support.load import CpuWindow, within
from tests.support.paths import ROOT
from tests.support.system import (
    SSH_SKIP,
    alive,
    assert_nothing_left,
    local_sshd,
    needs_netns,
    root_links,
)

MLP_DEDICATED = ROOT / "scenarios" / "emulated" / "mlp-dedicated.yaml"
MLP_COLOCATED = ROOT / "scenarios" / "emulated" / "mlp-colocated.yaml"
KEYS = 64
KEY_ELEMENTS = 62_500  # 250 kB per key, 16 MB per push

# A communication-bound shape: 16 equal keys, no compute, 2 workers, dedicated servers.
_ARRAYS = ", ".join(f"{{name: k{i}, elements: {KEY_ELEMENTS}, fwd_gflops: 0}}" for i in range(KEYS))
BOUND_SCENARIO = f"""\
name: bound
cluster:
  hosts:
    - {{count: 2, gpus_per_host: 1, gpu: V100, nic_gbps: 0.1, latency_us: 50}}
  server_hosts: {{count: 1, nic_gbps: 0.1, latency_us: 50}}
model:
  arrays: [{_ARRAYS}]
training: {{batch_per_gpu: 1}}
kvstore: {{mode: dist_sync, placement: dedicated, scheduling: priority}}
simulation: {{warmup_iterations: 2, measured_iterations: 3, seed: 0}}
realrun: {{compute: emulated}}
"""


# -- emulated GPUs and dilation ----------------------------------------------------------------


def test_an_emulated_device_replays_the_simulators_layer_times_times_the_dilation() -> None:
    scenario = load_scenario(MLP_COLOCATED, ["realrun.dilation=4", "training.batch_per_gpu=512"])
    device = emulated_device(scenario, 0)
    expected = layer_times(scenario.model.spec(), "V100", "fp32", 512, CostModel())
    assert np.allclose(device.forward_s, expected.forward_s * 4)
    assert np.allclose(device.backward_s, expected.backward_s * 4)
    # mlp: three layers, each owning a weight and a bias, keys in layer order.
    assert device.layer_keys == ((0, 1), (2, 3), (4, 5))
    assert device.key_elements == (401_408, 512, 131_072, 256, 2_560, 10)
    assert device.iteration_s == pytest.approx(expected.iteration_s * 4)


def test_several_emulated_gpus_cost_the_simulators_host_copies() -> None:
    """8 V100 on PCIe 3 (15.75 GB/s): summing a key is 8 copies up plus 7 sums at 0.1 ns/B;
    the broadcast back is 8 copies down. One emulated CPU "GPU" costs nothing of the kind."""
    scenario = load_scenario(MLP_COLOCATED, ["cluster.hosts[0].gpus_per_host=8"])
    device = emulated_device(scenario, 1)
    nbytes = 401_408 * 4
    assert device.gpus == 8
    assert device.reduce_s[0] == pytest.approx(8 * nbytes / 15.75e9 + 7 * nbytes * 0.1e-9)
    assert device.broadcast_s[0] == pytest.approx(8 * nbytes / 15.75e9)
    one_cpu = emulated_device(load_scenario(MLP_COLOCATED, ["cluster.hosts[0].gpu=cpu"]), 0)
    assert one_cpu.reduce_s == (0.0,) * 6 and one_cpu.broadcast_s == (0.0,) * 6


def test_synthetic_gradients_have_the_keys_sizes_and_are_the_same_every_run() -> None:
    a = synthetic_gradients([5, 3], seed=0, rank=1)
    b = synthetic_gradients([5, 3], seed=0, rank=1)
    other = synthetic_gradients([5, 3], seed=0, rank=2)
    assert [g.shape for g in a] == [(5,), (3,)] and all(g.dtype == np.float32 for g in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], other[0])
    assert 0 < float(np.abs(a[0]).max()) < 0.01  # small: SGD weights stay finite


def test_links_are_dilated_and_real_compute_refuses_a_dilation() -> None:
    """64gpu: 25 Gbit/s, 25 us per NIC; at D=10 the emulated NIC runs 2500 Mbit/s, 250 us."""
    scenario = load_scenario(ROOT / "scenarios" / "64gpu.yaml")
    links = host_links(layout(scenario), 10.0)
    assert len(links) == 8
    assert (links[0].rate_mbit, links[0].latency_us) == (2_500.0, 250.0)
    with pytest.raises(ValueError, match="real compute cannot be slowed down"):
        check_runnable(
            load_scenario(MLP_COLOCATED, ["realrun.compute=real", "realrun.dilation=2"]),
            LaunchOptions(),
        )
    check_runnable(load_scenario(MLP_COLOCATED, ["realrun.dilation=2"]), LaunchOptions())


def test_the_netns_launcher_places_nodes_as_the_simulator_lays_them_out() -> None:
    """2 worker hosts + 2 dedicated server hosts: the scheduler on host 0, workers on 0 and 1,
    servers on hosts 2 and 3; nothing is built before the launcher is entered."""
    scenario = load_scenario(MLP_DEDICATED, ["cluster.server_hosts.count=2"])
    launcher = NetnsLauncher(scenario)
    addresses = [h.address for h in launcher.cluster.hosts]
    assert addresses == ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"]
    assert launcher.scheduler_host == "10.77.0.1"
    assert [launcher.host_of("worker", r) for r in range(2)] == addresses[:2]
    assert [launcher.host_of("server", r) for r in range(2)] == addresses[2:]
    assert [link.rate_mbit for link in launcher.cluster.links] == [50.0] * 4


def test_without_root_run_and_cleanup_say_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["run", str(MLP_COLOCATED), "--launcher", "netns"]) == 2
    assert cli.main(["cleanup"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"realrun: {netns.ROOT_MESSAGE}"] * 2


# -- real namespaces (root) ---------------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
@pytest.mark.parametrize("servers", [1, 2])
def test_a_communication_bound_run_reaches_the_analytic_bound(tmp_path: Path, servers: int):
    """2 workers, k dedicated servers, 100 Mbit/s (12.5 MB/s) NICs, M = 64 x 250 kB = 16 MB,
    no compute: an iteration takes at least max(M/B, n*M/(k*B)) (BytePS, domain.md), i.e.
    2.56 s with one server (its NIC carries both workers' bytes) and 1.28 s with two.
    Pushes of later keys overlap the pulls of earlier ones, so the run stays within 20%
    (quiet machine, 2026-11-28: 1.151, 1.167, 1.210 with two servers, and 1.154, 1.162, 1.193
    at the commit before, when 1.15 was the limit; a store-and-forward protocol takes 2x). That
    takes ``kvstore.scheduling: priority``: a pull request overtakes the pushes queued behind it.
    With ps-lite's ``fifo`` it waits behind them on the same connection, and two servers' shape
    then takes about 2x the bound, as MXNet does (docs/realrun-scheduling.md).
    Noise on a shared machine only ever adds time, so the test makes up to three runs and asks
    that one of them reaches the bound within 20% (every ratio is printed). When programs other
    than the cluster took over a quarter of the cores throughout (CI runs tests side by side;
    seen: 1.17, 1.15, 1.19 with 53% of the cores elsewhere), the wire's threads wait for a core
    and the bound loosens to 30%: still far from the 2x of a store-and-forward protocol."""
    scenario = tmp_path / "bound.yaml"
    scenario.write_text(BOUND_SCENARIO)
    links_before = root_links()
    overrides = [f"cluster.server_hosts.count={servers}"]
    model_bytes = KEYS * KEY_ELEMENTS * 4
    rate = 100e6 / 8
    bound_s = max(model_bytes / rate, 2 * model_bytes / (servers * rate))
    assert bound_s == pytest.approx(2.56 / servers)
    ratios: list[float] = []
    verdicts: list[str] = []
    others_busy: list[float] = []  # the share of all cores taken by programs outside the cluster
    window = CpuWindow()
    for attempt in range(3):
        record, _ = run_scenario(
            scenario,
            overrides,
            LaunchOptions("netns"),
            tmp_path / f"r{attempt}.json",
            progress=False,
            timeout_s=90,
        )
        assert record.complete, record.error
        assert_nothing_left(record, links_before)
        measured_s = record.summary.median_iteration_s
        ratios.append(measured_s / bound_s)
        print(
            f"k={servers} run {attempt}: median iteration {measured_s:.3f} s, bound "
            f"{bound_s:.3f} s, ratio {ratios[-1]:.3f}, load {record.environment['machine_load']}"
        )
        assert bound_s <= measured_s * 1.02  # never faster than the wire allows (2%: HTB burst)
        verdicts.append(record.invalid_reason if not record.valid else "")
        load = record.environment["machine_load"]
        others_busy.append(load["mean_cpu_busy"] - load["cluster_cpu_busy"])
        limit = 1.30 if min(others_busy) > 0.25 else 1.20
        if ratios[-1] <= limit and record.valid:
            break
    if min(ratios) > limit and (all(verdicts) or window.saturated):
        # The machine-load verdict ruled every run invalid, or all cores were saturated over
        # the runs (seen: ratios 1.49, 1.32, 1.17 with all cores 100% busy): this machine, not
        # the code, was the bottleneck. A miss with cores to spare fails.
        pytest.skip(
            f"this machine's load ({window.busy:.0%} of all cores busy; verdicts {verdicts}) "
            f"held every run back: ratios {ratios}"
        )
    assert min(ratios) <= limit, (ratios, verdicts, others_busy)
    assert record.valid, record.invalid_reason
    env = record.environment
    assert env["workers"]["0"]["compute"] == "emulated"
    assert env["dilation"]["raw_samples_per_s"] == record.summary.samples_per_s  # D = 1
    assert env["launcher_details"]["server_hosts"] == [f"server{s}" for s in range(servers)]
    assert_nothing_left(record, links_before)


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_a_failed_run_keeps_its_record_and_leaves_nothing(tmp_path: Path) -> None:
    """A run stopped by its time limit in the middle of training (dilation 50 makes each
    iteration over 2 minutes) is torn down: no namespace, no node, root links untouched."""
    scenario = tmp_path / "bound.yaml"
    scenario.write_text(BOUND_SCENARIO)
    links_before = root_links()
    record, out = run_scenario(
        scenario,
        ["realrun.dilation=50"],
        LaunchOptions("netns"),
        tmp_path / "r.json",
        progress=False,
        timeout_s=12,
    )
    assert not record.complete and "time limit" in (record.error or "")
    assert load_record(out).environment["dilation"]["factor"] == 50.0
    assert_nothing_left(record, links_before)


# -- ssh against this machine's own sshd (root) -------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(SSH_SKIP is not None, reason=SSH_SKIP or "")
def test_the_ssh_launcher_runs_a_job_through_this_machines_sshd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "5e" * 32
    monkeypatch.setattr("realrun.launching.job.secrets.token_hex", lambda n: secret)
    seen = _argv_watch(secret)
    with local_sshd(tmp_path) as options, seen:
        record, _ = run_scenario(
            ROOT / "scenarios" / "emulated" / "mlp-colocated.yaml",
            ["simulation.warmup_iterations=1", "simulation.measured_iterations=2"],
            options,
            tmp_path / "r.json",
            progress=False,
            timeout_s=90,
        )
        assert record.complete, record.error
        assert record.environment["launcher"] == "ssh"
        assert {n["host"] for n in record.environment["nodes"]} == {"127.0.0.1"}
        assert len(record.iterations) == 2 * 3
        # Every remote node has ended with the job.
        assert [n for n in record.environment["nodes"] if alive(int(n["pid"]))] == []
    # The job ran with the secret, and no process on this host (ssh clients, sshd's shells,
    # the nodes) ever showed it in its argv.
    assert seen.scans > 0
    assert seen.hits == []


class _argv_watch:
    """Scans every process's argv (/proc/PID/cmdline) for ``needle`` while the block runs."""

    def __init__(self, needle: str) -> None:
        self.needle = needle.encode()
        self.hits: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scan, daemon=True)

    def __enter__(self) -> _argv_watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _scan(self) -> None:
        while not self._stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    raw = cmdline.read_bytes()
                except OSError:
                    continue
                if self.needle in raw:
                    self.hits.append(raw.replace(b"\0", b" ").decode(errors="replace"))
            self.scans += 1
            self._stop.wait(0.05)


# -- the committed dataset ----------------------------------------------------------------------

DATASET = ROOT / "runs" / "emulated-v2"


def test_the_committed_dataset_loads_is_valid_and_spans_the_shapes_it_promises() -> None:
    """runs/emulated-v2 (campaigns/emulated-v2.yaml): every record loads and validates, none is
    incomplete or invalid, each configuration three times, and together they cover 1-8
    workers, 1-8 servers, both placements, sync and async, three link speeds, two models."""
    files = sorted(DATASET.glob("*.json"))
    assert len(files) >= 40
    records = [load_record(path) for path in files]
    assert [p.name for p, r in zip(files, records, strict=True) if not r.complete] == []
    assert [p.name for p, r in zip(files, records, strict=True) if not r.valid] == []
    campaign = load_campaign(ROOT / "campaigns" / "emulated-v2.yaml")
    assert sorted(f"{run.name}.json" for run in campaign.runs) == [p.name for p in files]
    shapes = [
        (
            r.environment["num_workers"],
            r.environment["num_servers"],
            r.scenario["kvstore"]["placement"],
            r.scenario["kvstore"]["mode"],
            r.scenario["cluster"]["hosts"][0]["nic_gbps"],
            r.scenario["model"]["name"],
        )
        for r in records
    ]
    assert {s[0] for s in shapes} >= {1, 2, 4, 8}
    assert {s[1] for s in shapes} >= {1, 2, 4, 8}
    assert {s[2] for s in shapes} == {"colocated", "dedicated"}
    assert {s[3] for s in shapes} == {"dist_sync", "dist_async"}
    assert {s[4] for s in shapes} >= {0.05, 0.2, 1.0}
    assert {s[5] for s in shapes} == {"mlp", "resnet18"}
    for r in records:
        assert r.environment["workers"]["0"]["compute"] == "emulated"
        assert r.environment["machine_load"]["max_run_delay_share"] <= 0.10
        # Every host's NIC and TCP counters were read before teardown.
        details = r.environment["launcher_details"]
        counters = details["network_counters"]
        assert [c["host"] for c in counters] == [h["name"] for h in details["hosts"]]
        assert all(c["tcp"]["OutSegs"] > 0 and c["egress"]["sent_bytes"] > 0 for c in counters)


@pytest.mark.slow
def test_emulated_iterations_last_the_replayed_compute_when_communication_is_free() -> None:
    """Two workers on 127.0.0.1 (communication nearly free), mlp on the emulated CPU "GPU" at
    batch 256: 1.07 MFLOP forward + 2.14 MFLOP backward per sample at 24 GFLOP/s achieved is
    34.3 ms per iteration, times the dilation 2. Every key reaches the servers each iteration."""
    from realrun.ps.kv_worker import KVWorker
    from realrun.ps.optimizer import SGD
    from realrun.training.emulated_compute import EmulatedTrainer
    from tests.support.realrun_inprocess import InProcessJob

    scenario = load_scenario(
        MLP_COLOCATED,
        ["cluster.hosts[0].gpu=cpu", "training.batch_per_gpu=256", "realrun.dilation=2"],
    )
    device = emulated_device(scenario, 0)
    expected = device.iteration_s
    assert expected == pytest.approx(2 * 0.034292, rel=1e-4)
    assert expected == pytest.approx(
        2 * layer_times(scenario.model.spec(), "cpu", "fp32", 256, CostModel()).iteration_s
    )
    iterations = 6

    def train(po):
        return EmulatedTrainer(KVWorker(po), device, iterations, 0, True, SGD(0.1)).run()

    with CpuWindow() as window, InProcessJob(2, 2) as job:
        results = job.run_workers(train)
    for timings in results:
        assert [t.iteration for t in timings] == list(range(iterations))
        compute = sorted(t.compute_s for t in timings)
        assert compute[0] >= expected * 0.99  # never shorter than the replayed times
        assert all(t.loss is None for t in timings)
    for timings in results:  # late wake-ups: a miss on a saturated machine skips, naming it
        late_s = sorted(t.compute_s for t in timings)[len(timings) // 2] - expected
        within(late_s, 0.010, window, "the median iteration past its replayed compute")
    updates = sorted(s.updates for srv in job.servers for s in srv.slices.values())
    assert set(updates) == {iterations}
