"""The real-cluster mechanisms of simscale.spec.costs, each derived by hand on a small case.

Every mechanism defaults to no effect (the emulated world has none of them); the tests switch
one on and check the change it makes against the arithmetic that defines it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simscale.model.compute import layer_times, winograd_layers, winograd_speedup
from simscale.simulator import simulate
from simscale.spec.config import ConfigError
from simscale.spec.costs import REAL_HARDWARE_COSTS, CostModel, real_hardware_costs
from simscale.spec.hardware import GPUS, INSTANCES
from simscale.spec.scenario import scenario_from_dict
from simscale.zoo import Layer, ModelSpec, ParamArray
from tests.support.costs import NETWORK_ONLY

TWO_LAYERS = ModelSpec(
    "two-layers",
    (
        Layer("conv3x3", 1e9, (ParamArray("conv3x3.weight", (8, 4, 3, 3)),)),
        Layer("conv1x1", 1e9, (ParamArray("conv1x1.weight", (8, 4, 1, 1)),)),
    ),
)


def test_mechanisms_default_to_no_effect() -> None:
    c = CostModel()
    assert (c.winograd_3x3_speedup, c.connection_gbps, c.allreduce_tensor_us) == (1.0, 0.0, 0.0)
    assert c.layer_overhead_us == 0.0
    real = real_hardware_costs()
    assert real.winograd_3x3_speedup == REAL_HARDWARE_COSTS["winograd_3x3_speedup"] == 2.25
    assert real.connection_gbps == pytest.approx(50 / 3)
    assert (c.socket_host_gbps, c.efa_ring_share) == (0.0, 1.0)
    # The medians of the public nccl-tests figures (simscale.spec.costs).
    assert real.socket_host_gbps == pytest.approx((37.6 + 48.0) / 2)
    assert real.efa_ring_share == pytest.approx(0.60)


def test_winograd_speeds_up_only_3x3_layers() -> None:
    """V100 fp32 at efficiency 0.5: 15.7e12 * 0.5 = 7.85e12 FLOP/s. A batch of 4 of a 1 GFLOP
    layer takes 4e9 / 7.85e12 = 0.5096 ms; the 3x3 layer with a 2.25x speed-up 0.2265 ms;
    backward twice each."""
    assert winograd_layers(TWO_LAYERS).tolist() == [True, False]
    costs = CostModel(compute_efficiency={"V100/fp32": 0.5}, winograd_3x3_speedup=2.25)
    t = layer_times(TWO_LAYERS, "V100", "fp32", 4, costs)
    rate = GPUS["V100"].peak_fp32_tflops * 1e12 * 0.5
    assert t.forward_s[1] == pytest.approx(4e9 / rate)
    assert t.forward_s[0] == pytest.approx(4e9 / rate / 2.25)
    assert t.backward_s[0] == pytest.approx(2 * 4e9 / rate / 2.25)
    plain = layer_times(
        TWO_LAYERS, "V100", "fp32", 4, CostModel(compute_efficiency={"V100/fp32": 0.5})
    )
    assert plain.forward_s[0] == pytest.approx(plain.forward_s[1])


def test_winograd_speeds_up_5x5_filters_at_the_same_tile() -> None:
    """F(m x m, r x r) saves (m r / (m + r - 1))^2 of the multiplies. A 3x3 speed-up of 2.25 is
    F(2x2, 3x3) (6^2 / 4^2), so a 5x5 filter gets F(2x2, 5x5): 10^2 / 6^2 = 2.78; 4.0 is
    F(4x4, 3x3) (12^2 / 6^2), so 5x5 gets 20^2 / 8^2 = 6.25. A 1x1 or 7x7 filter gets none."""
    assert winograd_speedup(3, 2.25) == pytest.approx(2.25)
    assert winograd_speedup(5, 2.25) == pytest.approx(100 / 36)
    assert winograd_speedup(5, 4.0) == pytest.approx(400 / 64)
    assert winograd_speedup(1, 4.0) == winograd_speedup(7, 4.0) == 1.0
    five = ModelSpec("five", (Layer("conv5x5", 1e9, (ParamArray("c.weight", (8, 4, 5, 5)),)),))
    costs = CostModel(compute_efficiency={"V100/fp32": 0.5}, winograd_3x3_speedup=2.25)
    rate = GPUS["V100"].peak_fp32_tflops * 1e12 * 0.5
    t = layer_times(five, "V100", "fp32", 4, costs)
    assert t.forward_s[0] == pytest.approx(4e9 / rate / (100 / 36))


def _ring_scenario(arrays: list[dict], nic_gbps: float = 100.0) -> dict:
    """Two hosts of one GPU in a ring, no compute, no coordinator cycle: every iteration is the
    all-reduce of the arrays alone."""
    return {
        "cluster": {
            "hosts": [
                {
                    "count": 2,
                    "gpus_per_host": 1,
                    "gpu": "V100",
                    "nic_gbps": nic_gbps,
                    "latency_us": 0,
                }
            ]
        },
        "model": {"arrays": arrays},
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": "allreduce", "allreduce": {"algorithm": "ring", "cycle_ms": 0}},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }


def test_one_connection_caps_the_ring() -> None:
    """A 2-host ring of one 25e6-element fp32 array (1e8 bytes): 2(n-1) = 2 steps of
    1e8 / 2 bytes each per host, i.e. 1e8 bytes leave every host per all-reduce. Over a
    100 Gbit/s NIC at usable fraction 1.0 that takes 1e8 / 12.5e9 = 8 ms; over one 10 Gbit/s
    connection 1e8 / 1.25e9 = 80 ms. Message costs are zero, so those are the iterations."""
    s = scenario_from_dict(_ring_scenario([{"name": "w", "elements": 25_000_000}]))
    free = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0)
    assert simulate(s, free).iteration_time_s == pytest.approx(0.008, rel=1e-6)
    capped = free.with_values(connection_gbps=10.0)
    assert simulate(s, capped).iteration_time_s == pytest.approx(0.080, rel=1e-6)
    # A connection faster than the NIC changes nothing: the NIC share is the limit.
    assert simulate(s, free.with_values(connection_gbps=400.0)).iteration_time_s == pytest.approx(
        0.008, rel=1e-6
    )


def test_an_rdma_ring_has_no_tcp_connection_ceiling() -> None:
    """The same 2-host ring over RDMA (InfiniBand, RoCE): the 10 Gbit/s ceiling of one TCP
    connection does not apply, the 100 Gbit/s NIC does: 8 ms again. One TCP host in the ring
    brings the ceiling back (80 ms)."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"][0]["transport"] = "rdma"
    capped = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0, connection_gbps=10.0)
    assert simulate(scenario_from_dict(data), capped).iteration_time_s == pytest.approx(
        0.008, rel=1e-6
    )
    host = data["cluster"]["hosts"][0]
    data["cluster"]["hosts"] = [{**host, "count": 1}, {**host, "count": 1, "transport": "tcp"}]
    assert simulate(scenario_from_dict(data), capped).iteration_time_s == pytest.approx(
        0.080, rel=1e-6
    )


@pytest.mark.parametrize(
    ("instance", "transport"),
    [("p3.16xlarge", "tcp"), ("p3dn.24xlarge", "efa"), ("p4d.24xlarge", "efa")],
)
def test_efa_instances_carry_the_ring_over_efa_unless_told_otherwise(
    instance: str, transport: str
) -> None:
    """NCCL on an instance with an Elastic Fabric Adapter goes through AWS's libfabric plugin,
    not TCP sockets, so its presets default to efa; a scenario's own transport wins. The
    2-host, one-GPU ring of 1e8 bytes above, at the preset's NIC (25, 100, 400 Gbit/s), one
    socket per neighbour and a 10 Gbit/s connection ceiling: 1e8 / 1.25e9 = 80 ms over TCP,
    1e8 / (NIC / 8) over EFA at its default share of the NIC, all of it."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [
        {"count": 2, "instance": instance, "gpus_per_host": 1, "latency_us": 0}
    ]
    data["kvstore"]["allreduce"]["sockets"] = 1
    capped = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0, connection_gbps=10.0)
    nic_Bps = INSTANCES[instance].nic_gbps * 1e9 / 8
    expected = {"tcp": 1e8 / 1.25e9, "efa": 1e8 / nic_Bps}
    s = scenario_from_dict(data)
    assert s.cluster.hosts[0].resolved_transport() == transport
    assert simulate(s, capped).iteration_time_s == pytest.approx(expected[transport], rel=1e-6)
    data["cluster"]["hosts"][0]["transport"] = "tcp"
    assert simulate(scenario_from_dict(data), capped).iteration_time_s == pytest.approx(
        expected["tcp"], rel=1e-6
    )


CUSTOM_HOST = {"gpus_per_host": 1, "gpu": "V100", "nic_gbps": 100}
P3_HOST = {"instance": "p3.16xlarge", "gpus_per_host": 1}


@pytest.mark.parametrize(
    ("host", "sockets", "iteration_s"),
    [
        (CUSTOM_HOST, None, 0.080),  # not an instance preset: NCCL's one socket
        (CUSTOM_HOST, 4, 0.020),  # 4 x 10 Gbit/s
        (CUSTOM_HOST, 16, 0.008),  # 160 Gbit/s of sockets: the 100 Gbit/s NIC binds
        (P3_HOST, None, 0.032),  # AWS: 16 sockets, the 25 Gbit/s NIC binds
        (P3_HOST, 1, 0.080),
    ],
)
def test_nccl_spreads_a_ring_hop_over_its_sockets(
    host: dict, sockets: int | None, iteration_s: float
) -> None:
    """NCCL's socket transport opens NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD sockets to each
    ring neighbour; since 2.4.8 it picks 2 x 8 on AWS's ENA NIC, 1 elsewhere. The 2-host ring of
    1e8 bytes at a 10 Gbit/s connection ceiling: 1e8 / (sockets x 1.25e9), or the NIC's
    1e8 / (NIC / 8) when the sockets together are faster."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [{"count": 2, "latency_us": 0, **host}]
    if sockets is not None:
        data["kvstore"]["allreduce"]["sockets"] = sockets
    capped = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0, connection_gbps=10.0)
    r = simulate(scenario_from_dict(data), capped)
    assert r.iteration_time_s == pytest.approx(iteration_s, rel=1e-6)


@pytest.mark.parametrize(
    ("socket_host_gbps", "iteration_s"),
    [
        (0.0, 0.008),  # 16 x 10 Gbit/s of sockets: the 100 Gbit/s NIC binds
        (40.0, 0.020),  # the host's socket transport binds: 1e8 / 5e9
        (200.0, 0.008),  # a ceiling above the NIC changes nothing
    ],
)
def test_nccl_socket_transport_moves_at_most_so_much_out_of_a_host(
    socket_host_gbps: float, iteration_s: float
) -> None:
    """NCCL's socket transport stages every byte through host buffers and the kernel's TCP
    stack: on 100 Gbit/s hosts it moved 4.7-6 GB/s however many sockets it opened (NVIDIA/nccl
    #398, #450). The 2-host ring of 1e8 bytes over 16 sockets of 10 Gbit/s each: 1e8 / 12.5e9
    = 8 ms at the NIC, 1e8 / 5e9 = 20 ms when one host's sockets together move 40 Gbit/s."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [{**CUSTOM_HOST, "count": 2, "latency_us": 0}]
    data["kvstore"]["allreduce"].update(sockets=16, algorithm="ring")
    costs = CostModel(
        bandwidth_factor=1.0,
        message_overhead_us=0.0,
        connection_gbps=10.0,
        socket_host_gbps=socket_host_gbps,
    )
    r = simulate(scenario_from_dict(data), costs)
    assert r.iteration_time_s == pytest.approx(iteration_s, rel=1e-6)
    if socket_host_gbps == 40.0:  # the prediction names what holds it back
        assert "40.0 Gbit/s (NCCL's socket transport) 100% busy" in r.bottleneck


def test_the_socket_ceiling_is_nccls_not_mpis() -> None:
    """Horovod's hierarchical variant crosses hosts with MPI, one connection per local rank:
    two hosts of 4 V100s at 100 Gbit/s with 40 Gbit/s connections have 160 Gbit/s of them, so
    the NIC binds (1e8 / 12.5e9 = 8 ms, plus NVLink's 2 x 3/4 x 1e8 bytes), whatever NCCL's
    socket transport would move."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [{**CUSTOM_HOST, "count": 2, "gpus_per_host": 4, "latency_us": 0}]
    data["kvstore"]["allreduce"]["algorithm"] = "hierarchical"
    costs = CostModel(
        bandwidth_factor=1.0, message_overhead_us=0.0, connection_gbps=40.0, socket_host_gbps=10.0
    )
    intra_s = 2 * 3 / 4 * 1e8 / (GPUS["V100"].peer_link_gbytes_per_s * 1e9)
    r = simulate(scenario_from_dict(data), costs)
    assert r.iteration_time_s == pytest.approx(intra_s + 0.008, rel=1e-6)


@pytest.mark.parametrize(
    ("transport", "iteration_s"),
    [("efa", 1e8 / (0.6 * 12.5e9)), ("rdma", 0.008), ("tcp", 1e8 / 5e9)],
)
def test_an_efa_ring_reaches_a_share_of_its_nic(transport: str, iteration_s: float) -> None:
    """NCCL's ring over EFA reached 50-64% of the line rate in public nccl-tests runs (p3dn,
    p4d: NVIDIA/nccl-tests#22, nccl#235, nccl#527). The 2-host, one-GPU ring of 1e8 bytes on
    p3dn.24xlarge (100 Gbit/s) at a 0.6 share: 1e8 / 7.5e9 = 13.3 ms; over InfiniBand-style
    rdma the NIC's 8 ms; over its TCP sockets the 40 Gbit/s socket ceiling's 20 ms."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [
        {
            "count": 2,
            "instance": "p3dn.24xlarge",
            "gpus_per_host": 1,
            "latency_us": 0,
            "transport": transport,
        }
    ]
    costs = CostModel(
        bandwidth_factor=1.0,
        message_overhead_us=0.0,
        connection_gbps=10.0,
        socket_host_gbps=40.0,
        efa_ring_share=0.6,
    )
    r = simulate(scenario_from_dict(data), costs)
    assert r.iteration_time_s == pytest.approx(iteration_s, rel=1e-6)


@pytest.mark.parametrize("sockets", [None, 16])
def test_hierarchical_all_reduce_crosses_hosts_over_one_connection_per_local_rank(
    sockets: int | None,
) -> None:
    """Horovod's hierarchical all-reduce reduce-scatters inside a host with NCCL, then each local
    rank runs MPI_Allreduce with its peers on the other hosts, over Open MPI's one TCP
    connection per peer, then all-gathers. Two hosts of 4 V100s, one 1e8-byte array, a
    100 Gbit/s NIC, 10 Gbit/s connections: the hosts exchange 1e8 bytes each way over 4
    connections, 1e8 / 5e9 = 20 ms (the NIC alone: 8 ms), plus the reduce-scatter and
    all-gather inside the host, 2 x 3/4 x 1e8 bytes over NVLink. NCCL's socket count does not
    apply: MPI carries this part."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["cluster"]["hosts"] = [{**CUSTOM_HOST, "count": 2, "gpus_per_host": 4, "latency_us": 0}]
    data["kvstore"]["allreduce"]["algorithm"] = "hierarchical"
    if sockets is not None:
        data["kvstore"]["allreduce"]["sockets"] = sockets
    capped = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0, connection_gbps=10.0)
    intra_s = 2 * 3 / 4 * 1e8 / (GPUS["V100"].peer_link_gbytes_per_s * 1e9)
    r = simulate(scenario_from_dict(data), capped)
    assert r.iteration_time_s == pytest.approx(intra_s + 0.020, rel=1e-6)


@pytest.mark.parametrize(("connection_gbps", "iteration_s"), [(0.0, 0.016), (10.0, 0.160)])
def test_one_connection_caps_each_worker_server_pair(
    connection_gbps: float, iteration_s: float
) -> None:
    """A worker and a dedicated server, 100 Gbit/s NICs, one 1e8-byte array, no compute and no
    server CPU: the push then the pull each move 1e8 bytes over the pair's one TCP connection,
    1e8 / 12.5e9 = 8 ms at the NIC's rate, 1e8 / 1.25e9 = 80 ms through a 10 Gbit/s connection
    (BytePS: one connection does not fill 25 Gbit/s; it runs more server instances)."""
    data = {
        "cluster": {
            "hosts": [{"count": 1, "gpus_per_host": 1, "gpu": "cpu", "nic_gbps": 100}],
            "server_hosts": {"count": 1, "nic_gbps": 100},
        },
        "model": {"arrays": [{"name": "w", "elements": 25_000_000}]},
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": "dist_sync", "servers": 1, "placement": "dedicated"},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }
    for group in (data["cluster"]["hosts"][0], data["cluster"]["server_hosts"]):
        group["latency_us"] = 0
    costs = NETWORK_ONLY.with_values(connection_gbps=connection_gbps)
    r = simulate(scenario_from_dict(data), costs)
    assert r.iteration_time_s == pytest.approx(iteration_s, rel=1e-3)


def test_tensor_overhead_is_paid_per_fused_tensor() -> None:
    """Ten 1000-element arrays fused into one buffer: the coordinator spends 10 x 200 us = 2 ms
    on them before the one all-reduce (40 kB over 12.5 GB/s = 3.2 us)."""
    arrays = [{"name": f"a{i}", "elements": 1000} for i in range(10)]
    s = scenario_from_dict(_ring_scenario(arrays))
    free = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0)
    base = simulate(s, free).iteration_time_s
    assert base == pytest.approx(40_000 / 12.5e9, rel=1e-6)
    paid = simulate(s, free.with_values(allreduce_tensor_us=200.0)).iteration_time_s
    assert paid - base == pytest.approx(10 * 200e-6, rel=1e-6)


@pytest.mark.parametrize(("gpu", "hop_s"), [("V100", 3.4e-6), ("K80", 5.7e-6)])
def test_a_flat_ring_pays_network_latency_only_on_its_network_hops(gpu: str, hop_s: float) -> None:
    """Two hosts of four GPUs in one flat ring of n = 8: 2(n-1) = 14 steps, of which 2(W-1) = 2
    cross the network and 12 stay inside a host at NCCL's hop latency (3.4 us over V100's NVLink,
    5.7 us over K80's PCIe). One 8000-element fp32 array: 14 chunks of 32000 / 8 = 4000 bytes
    leave each host, 56 kB over 12.5 GB/s = 4.48 us. With no network latency and no send cost the
    iteration is 4.48 us + 12 hops. With 25 us per NIC and a 20 us send cost, the stream's first
    byte arrives 50 us later, and the first network hop waits 50 + 20 us, the last pays only its
    send cost: + 50 + 70 + 20 us, where a ring paying every step's network latency added 13 x 70
    + 20 + 50 us."""
    data = _ring_scenario([{"name": "w", "elements": 8000}])
    data["cluster"]["hosts"][0].update(gpus_per_host=4, gpu=gpu)
    free = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0)
    t = simulate(scenario_from_dict(data), free).iteration_time_s
    assert t == pytest.approx(56_000 / 12.5e9 + 12 * hop_s, rel=1e-6)
    data["cluster"]["hosts"][0]["latency_us"] = 25
    paid = simulate(scenario_from_dict(data), free.with_values(message_overhead_us=20.0))
    assert paid.iteration_time_s - t == pytest.approx(50e-6 + 70e-6 + 20e-6, rel=1e-6)


def test_worker_sums_big_arrays_with_several_threads() -> None:
    """dist_sync on a host of 8 GPUs: a key is copied 8 times over a 16 GB/s link and 7 copies
    are summed at 1 ns/byte. A 4 MB key (at least the big-array bound of 1 MB) with 4 threads:
    8 * 4e6 / 16e9 = 2 ms of copies plus 7 * 4e6 * 1e-9 / 4 = 7 ms of sums; a 0.4 MB key takes
    one thread: 0.2 ms + 2.8 ms."""
    import simpy

    from simscale.model.worker import HostCopies

    copies = HostCopies(
        simpy.Environment(),
        0,
        8,
        on_cpu=False,
        device_mode=False,
        host_link_Bps=16e9,
        peer_link_Bps=100e9,
        merge_s_per_byte=1e-9,
        big_bytes=1e6,
        reduction_threads=4,
    )
    assert copies.reduce_s(4e6) == pytest.approx(2e-3 + 7e-3)
    assert copies.reduce_s(4e5) == pytest.approx(0.2e-3 + 2.8e-3)
    assert real_hardware_costs().worker_reduction_threads == 4
    assert CostModel().worker_reduction_threads == 1


def test_worker_copies_saturate_one_pcie_link_as_mxnet_measured() -> None:
    """MXNet's tools/bandwidth README (apache/mxnet, measure.py --kv-store local): ResNet-200's
    257.99 MB over 8 GPUs, copied to the CPU, summed and broadcast back in 0.29 s a round, "it
    saturates the single 16x link between all GPUs and the CPU". The model copies the 8 GPUs'
    gradients one after another over one PCIe 3.0 x16 link and the sum back the same way:
    2 * 8 * 257.99e6 / 15.75e9 = 0.262 s, plus 7 * 257.99e6 * 0.1e-9 / 4 = 45 ms of sums at
    the default merge rate with MXNet's 4 reduction threads: 0.307 s, within 10% of 0.29 s."""
    import simpy

    from simscale.model.worker import HostCopies
    from simscale.spec.hardware import PCIE3_X16_GBYTES

    nbytes = 257.991328e6
    copies = HostCopies(
        simpy.Environment(),
        0,
        8,
        on_cpu=False,
        device_mode=False,
        host_link_Bps=PCIE3_X16_GBYTES * 1e9,
        peer_link_Bps=PCIE3_X16_GBYTES * 1e9,
        merge_s_per_byte=CostModel().server_merge_ns_per_byte * 1e-9,
        big_bytes=1e6,
        reduction_threads=real_hardware_costs().worker_reduction_threads,
    )
    round_s = copies.reduce_s(nbytes) + copies.broadcast_s(nbytes)
    assert round_s == pytest.approx(2 * 8 * nbytes / 15.75e9 + 7 * nbytes * 0.1e-9 / 4)
    assert round_s == pytest.approx(0.29, rel=0.10)


def test_the_single_host_device_kvstore_keeps_gradients_on_the_gpus() -> None:
    """MXNet's "device" kvstore sums, updates and broadcasts a key on the GPUs (CommDevice), so,
    unlike a dist_sync_device worker, which pushes from host memory, it pays no GPU<->CPU copy.
    Two K80 dies, one 258 MB array, no compute: the copy into the GPU that sums it and the
    broadcast back, each 258e6 / 15.75e9 = 16.4 ms over the PCIe peer link, 32.8 ms an iteration
    (MXNet's tools/bandwidth README measured 23.2 ms for ResNet-200's 258 MB on two GPUs with
    13 GB/s peer links; MXNet spreads the keys' sums over both GPUs, the model does not)."""
    nbytes = 64_497_832 * 4
    data = _ring_scenario([{"name": "w", "elements": 64_497_832}])
    data["cluster"]["hosts"] = [{"count": 1, "gpus_per_host": 2, "gpu": "K80", "nic_gbps": 10}]
    data["kvstore"] = {"mode": "device"}
    free = CostModel(message_overhead_us=0.0, server_merge_ns_per_byte=0.0)
    peer_s = nbytes / (GPUS["K80"].peer_link_gbytes_per_s * 1e9)
    assert simulate(scenario_from_dict(data), free).iteration_time_s == pytest.approx(
        2 * peer_s, rel=1e-6
    )


@pytest.mark.parametrize("mode", ["local", "device"])
def test_one_gpu_on_one_machine_has_no_kvstore(mode: str) -> None:
    """MXNet creates no kvstore for one device on one machine (model._create_kvstore): the GPU
    updates its own weights. One K80 die at half its peak, one 258 MB array of 1 GFLOP forward
    (3 GFLOP with backward), and a CPU update of 1 ns/B that a kvstore would add (258 ms): the
    iteration is its compute alone, 3e9 / (peak * 0.5)."""
    data = _ring_scenario([{"name": "w", "elements": 64_497_832, "fwd_gflops": 1.0}])
    data["cluster"]["hosts"] = [{"count": 1, "gpus_per_host": 1, "gpu": "K80", "nic_gbps": 10}]
    data["kvstore"] = {"mode": mode}
    slow_cpu = CostModel(
        compute_efficiency={"K80/fp32": 0.5},
        server_update_ns_per_byte=1.0,
        server_merge_ns_per_byte=1.0,
    )
    r = simulate(scenario_from_dict(data), slow_cpu)
    compute_s = 3e9 / (GPUS["K80"].peak_fp32_tflops * 1e12 * 0.5)
    assert r.iteration_time_s == pytest.approx(compute_s, rel=1e-9)
    assert r.breakdown["exposed_comm_s"] == 0.0


@pytest.mark.parametrize(
    ("elements", "updates_on_cpu"), [(16 * 1024 * 1024, True), (16 * 1024 * 1024 + 1, False)]
)
def test_local_kvstore_leaves_the_update_to_the_gpus_above_16m_elements(
    elements: int, updates_on_cpu: bool
) -> None:
    """'local' on two GPUs: each GPU's gradient crosses PCIe to the CPU, the CPU sums the two
    (1 x nbytes x merge) and the sum crosses back to both GPUs. The CPU also runs the optimizer
    (nbytes x update) unless an array has more than 16M elements (``update_on_kvstore = False``
    in model._create_kvstore). Merge 0.1 ns/B, update 1 ns/B, no compute."""
    nbytes = elements * 4
    data = _ring_scenario([{"name": "w", "elements": elements}])
    data["cluster"]["hosts"] = [{"count": 1, "gpus_per_host": 2, "gpu": "K80", "nic_gbps": 10}]
    data["kvstore"] = {"mode": "local"}
    costs = CostModel(server_update_ns_per_byte=1.0, server_merge_ns_per_byte=0.1)
    pcie_s = nbytes / (GPUS["K80"].host_link_gbytes_per_s * 1e9)
    expected = 2 * pcie_s + nbytes * 0.1e-9 + 2 * pcie_s
    if updates_on_cpu:
        expected += nbytes * 1e-9
    iteration_s = simulate(scenario_from_dict(data), costs).iteration_time_s
    assert iteration_s == pytest.approx(expected, rel=1e-6)


def test_layer_overhead_is_paid_per_layer_whatever_the_batch() -> None:
    """100 us per layer and forward pass: at batch 4 the 1x1 layer takes 4e9 / 7.85e12 s +
    100 us forward and twice that backward; a batch of 1 pays the same 100 us, so one GPU's
    throughput per sample falls at small batches. CPU workers (the emulated world) never pay."""
    costs = CostModel(compute_efficiency={"V100/fp32": 0.5}, layer_overhead_us=100.0)
    rate = GPUS["V100"].peak_fp32_tflops * 1e12 * 0.5
    t = layer_times(TWO_LAYERS, "V100", "fp32", 4, costs)
    assert t.forward_s[1] == pytest.approx(4e9 / rate + 100e-6)
    assert t.backward_s[1] == pytest.approx(2 * (4e9 / rate + 100e-6))
    one = layer_times(TWO_LAYERS, "V100", "fp32", 1, costs)
    assert one.forward_s[1] == pytest.approx(1e9 / rate + 100e-6)
    cpu = layer_times(TWO_LAYERS, "cpu", "fp32", 4, costs)
    assert cpu.forward_s[1] == pytest.approx(
        layer_times(TWO_LAYERS, "cpu", "fp32", 4, CostModel()).forward_s[1]
    )


def _per_gpu_workers_scenario(workers_per_host: int) -> dict:
    """Two 4-device worker hosts on 1 Gbit/s NICs and one dedicated server host whose NIC is
    no limit; one 50 MB array and next to no compute; CPU devices (no GPU copy costs)."""
    return {
        "cluster": {
            "hosts": [
                {
                    "count": 2,
                    "gpus_per_host": 4,
                    "gpu": "cpu",
                    "nic_gbps": 1,
                    "latency_us": 0,
                    "workers_per_host": workers_per_host,
                }
            ],
            "server_hosts": {"count": 1, "nic_gbps": 1000, "latency_us": 0},
        },
        "model": {"arrays": [{"name": "w", "elements": 12_500_000, "fwd_gflops": 1e-6}]},
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": "dist_sync", "placement": "dedicated", "servers": 1},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }


@pytest.mark.parametrize("workers_per_host", [1, 2, 4])
def test_every_worker_of_a_host_pushes_and_pulls_the_model_over_its_nic(
    workers_per_host: int,
) -> None:
    """One worker per host sums its 4 devices' gradients first: 5e7 bytes leave each host
    (1 Gbit/s = 1.25e8 B/s: 0.4 s), then the updated weights come back (0.4 s): 0.8 s per
    iteration. With w workers per host each sends its own 5e7 bytes over the shared NIC:
    w x 0.8 s. Server costs and message overheads are zero, compute ~0."""
    s = scenario_from_dict(_per_gpu_workers_scenario(workers_per_host))
    assert s.num_workers == 2 * workers_per_host
    assert s.gpus_per_worker(0) == 4 // workers_per_host
    r = simulate(s, NETWORK_ONLY)
    assert r.iteration_time_s == pytest.approx(0.8 * workers_per_host, rel=1e-4)
    assert r.num_gpus == 8 and len(r.per_worker) == 2 * workers_per_host
    assert {w.gpus for w in r.per_worker} == {4 // workers_per_host}
    assert r.path == "exact"  # workers sharing a NIC are not reduced to one


def _straggler_scenario(mode: str) -> dict:
    """Two hosts of two CPU devices, 1 GFLOP per sample and next to nothing to send over
    100 Gbit/s NICs: an iteration is its compute."""
    return {
        "cluster": {
            "hosts": [{"count": 2, "gpus_per_host": 2, "gpu": "cpu", "nic_gbps": 100}],
            "server_hosts": {"count": 1, "nic_gbps": 100},
        },
        "model": {"arrays": [{"name": "w", "elements": 1_000, "fwd_gflops": 1.0}]},
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": mode, "placement": "dedicated", "servers": 1},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }


def test_expected_maximum_of_normals_matches_its_closed_forms() -> None:
    """E[max of 2 standard normals] = 1/sqrt(pi) = 0.56419; of 3, 3/(2 sqrt(pi)) = 0.84628;
    of one, the mean, 0: a single GPU never waits for another."""
    from simscale.model.stragglers import expected_max_of_normals

    assert expected_max_of_normals(1) == 0.0
    assert expected_max_of_normals(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_of_normals(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)


@pytest.mark.parametrize(
    ("mode", "waits_for"),
    [("dist_sync", 4), ("dist_async", 2)],
)
def test_a_synchronous_job_waits_for_its_slowest_gpu(mode: str, waits_for: int) -> None:
    """Spread 0.1: a dist_sync iteration waits for all 4 GPUs, so compute takes
    1 + 0.1 E[max of 4 normals] = 1 + 0.1 x 1.02938 = 1.10294 times as long; an async worker
    waits only for its own host's 2 GPUs: 1 + 0.1 / sqrt(pi) = 1.05642. Compute dominates, so
    the iteration time grows by the same factor (within the microseconds of sending 4 kB)."""
    s = scenario_from_dict(_straggler_scenario(mode))
    plain = simulate(s, NETWORK_ONLY)
    slow = simulate(s, NETWORK_ONLY.with_values(straggler_sigma=0.1))
    factor = {4: 1.102938, 2: 1 + 0.1 / math.sqrt(math.pi)}[waits_for]
    assert slow.iteration_time_s / plain.iteration_time_s == pytest.approx(factor, rel=2e-3)
    # The report says where the compute time went: 1 - 1/1.10294 = 9% of it waiting.
    if waits_for == 4:
        assert "9% of it waiting for the slowest of 4 GPUs" in slow.bottleneck
    assert CostModel().straggler_sigma == 0.0  # no effect unless a profile says so


def _barrier_scenario(sync: str, workers: int, measured: int = 3) -> dict:
    """``workers`` hosts of one CPU device and a dedicated server host, no latency, 100 Gbit/s:
    one 1,000-element array (4 kB, 0.3 us on the wire) and 1 GFLOP per sample, so an iteration
    is its compute, 1e9 x 3 / (0.08e12 x 0.3) = 125 ms, plus the server's request costs."""
    host = {"gpus_per_host": 1, "gpu": "cpu", "nic_gbps": 100, "latency_us": 0}
    return {
        "cluster": {
            "hosts": [{"count": workers, **host}],
            "server_hosts": {"count": 1, "nic_gbps": 100, "latency_us": 0},
        },
        "model": {"arrays": [{"name": "w", "elements": 1_000, "fwd_gflops": 1.0}]},
        "training": {"batch_per_gpu": 1},
        "kvstore": {"mode": "dist_sync", "placement": "dedicated", "servers": 1, "sync": sync},
        "simulation": {
            "warmup_iterations": 5,
            "measured_iterations": measured,
            "stable_tolerance": 0.0,  # run every measured iteration
        },
    }


def test_a_step_barrier_holds_the_reads_until_the_workers_meet() -> None:
    """One worker, a 1 ms request cost on the server's handler thread. MXNet's per-key sync:
    the push is merged (1 ms), then the pull answered (1 ms): 125 + 2 = 127 ms an iteration.
    TensorFlow's step barrier: the push applied (1 ms), the worker's one token (1 ms), then the
    read (1 ms): 128 ms."""
    costs = NETWORK_ONLY.with_values(server_request_us=1_000.0)
    key = simulate(scenario_from_dict(_barrier_scenario("key", 1)), costs)
    step = simulate(scenario_from_dict(_barrier_scenario("step", 1)), costs)
    assert key.iteration_time_s == pytest.approx(0.127, rel=1e-4)
    assert step.iteration_time_s == pytest.approx(0.128, rel=1e-4)


@pytest.mark.parametrize("workers", [2, 3])
def test_a_step_barrier_costs_the_server_w_squared_tokens(workers: int) -> None:
    """W workers, 1 ms a request. Per iteration MXNet's server merges W pushes and answers W
    pulls: 2W ms of handler work. Behind TensorFlow's step barrier it applies W pushes, takes
    every worker's W tokens (W^2) and answers W reads: (2W + W^2) ms, 8 for two workers and 15
    for three, whether every worker is simulated or one stands for all (its W tokens count W
    times on the server). Over 30 iterations, so that the measured window's edges count for
    under 1%."""
    costs = NETWORK_ONLY.with_values(server_request_us=1_000.0)
    for sync, work_ms in (("key", 2 * workers), ("step", 2 * workers + workers**2)):
        scenario = scenario_from_dict(_barrier_scenario(sync, workers, measured=30))
        # The same on every worker, and on one representative standing for all of them.
        for path in ("exact", "symmetric"):
            r = simulate(scenario, costs, path=path)
            (server,) = [u for u in r.utilization if u.kind == "server"]
            busy_ms = server.busy_fraction * r.iteration_time_s * 1e3
            assert busy_ms == pytest.approx(work_ms, rel=0.01), path


def test_a_step_barrier_needs_a_synchronous_parameter_server() -> None:
    data = _barrier_scenario("step", 2)
    data["kvstore"]["mode"] = "dist_async"
    with pytest.raises(ConfigError, match=r"kvstore\.sync"):
        scenario_from_dict(data)


def _images_scenario(data: str) -> dict:
    """One host of 4 CPU devices with 2 cores, batch 8 per device, 1 GFLOP per sample:
    compute 8 x 1e9 x 3 / (0.08e12 x 0.3) = 1 s per iteration (forward plus twice backward)."""
    return {
        "cluster": {
            "hosts": [
                {"count": 1, "gpus_per_host": 4, "gpu": "cpu", "cpu_cores": 2, "nic_gbps": 10}
            ]
        },
        "model": {"arrays": [{"name": "w", "elements": 1_000, "fwd_gflops": 1.0}]},
        "training": {"batch_per_gpu": 8, "data": data},
        "kvstore": {"mode": "local"},
        "simulation": {"warmup_iterations": 2, "measured_iterations": 4},
    }


@pytest.mark.parametrize(("decode_us", "iteration_s"), [(20_000.0, 1.0), (100_000.0, 1.6)])
def test_a_host_cannot_train_faster_than_its_cores_decode_images(
    decode_us: float, iteration_s: float
) -> None:
    """A batch is 4 x 8 = 32 images on 2 cores. At 20 ms per image that is 32 x 0.02 / 2 =
    0.32 s of decoding per 1 s of compute: hidden behind the GPUs. At 100 ms per image it is
    32 x 0.1 / 2 = 1.6 s: the host decodes slower than it trains, and every iteration waits
    for its batch. Synthetic data never waits."""
    costs = NETWORK_ONLY.with_values(
        compute_efficiency={"cpu/fp32": 0.3}, decode_us_per_sample=decode_us
    )
    real = simulate(scenario_from_dict(_images_scenario("images")), costs)
    synthetic = simulate(scenario_from_dict(_images_scenario("synthetic")), costs)
    assert synthetic.iteration_time_s == pytest.approx(1.0, rel=1e-3)
    assert real.iteration_time_s == pytest.approx(iteration_s, rel=1e-3)
    if iteration_s > 1.0:
        assert "input pipeline" in real.bottleneck


@pytest.mark.parametrize(
    ("devices", "mode", "data_threads", "iteration_s"),
    [
        (1, "local", None, 1.0),
        (1, "local", 2, 2.0),
        (4, "allreduce", 4, 2.0),
        (4, "allreduce", 1, 4.0),
    ],
)
def test_a_process_decodes_with_the_threads_its_script_gives_it(
    devices: int, mode: str, data_threads: int | None, iteration_s: float
) -> None:
    """8 cores, 500 ms per image, batch 8 per device, 1 s of compute. One process with every
    core decodes its 8 images in 8 x 0.5 / 8 = 0.5 s, hidden; held to 2 threads it takes
    8 x 0.5 / 2 = 2 s. Four all-reduce ranks (one per device) share the 8 cores, 2 each: with 4
    threads apiece they still get 2, so 32 x 0.5 / 8 = 2 s; with 1 thread apiece 4 cores
    decode, 32 x 0.5 / 4 = 4 s."""
    s = _images_scenario("images")
    s["cluster"]["hosts"][0].update(gpus_per_host=devices, cpu_cores=8)
    s["kvstore"]["mode"] = mode
    if data_threads is not None:
        s["training"]["data_threads"] = data_threads
    costs = NETWORK_ONLY.with_values(
        compute_efficiency={"cpu/fp32": 0.3}, decode_us_per_sample=500_000.0
    )
    result = simulate(scenario_from_dict(s), costs)
    assert result.iteration_time_s == pytest.approx(iteration_s, rel=2e-3)


def test_decoding_threads_need_images() -> None:
    s = _images_scenario("synthetic")
    s["training"]["data_threads"] = 4
    with pytest.raises(ConfigError, match=r"training\.data_threads"):
        scenario_from_dict(s)


def _grpc_scenario(rpc: str, servers: int, workers: int = 1) -> dict:
    """One-worker hosts and dedicated server hosts, all on NICs fast enough not to matter
    (1 Tbit/s), one 50 MB array split over the servers, next to no compute."""
    s = _per_gpu_workers_scenario(1)
    s["cluster"]["hosts"][0].update(nic_gbps=1000, count=workers)
    s["cluster"]["server_hosts"]["count"] = servers
    s["kvstore"].update(rpc=rpc, servers=servers, bigarray_bound=1_000_000)
    return s


@pytest.mark.parametrize("servers", [1, 2])
def test_grpc_copies_cap_each_server_process(servers: int) -> None:
    """At 1 ns/byte a server process copies 1 GB/s. Each of S servers holds 5e7 / S bytes of
    the array: one worker's push takes 0.05 / S s to copy in, then (after the update) the reply
    0.05 / S s to copy out: 0.1 / S s per iteration, plus well under a millisecond on the wire.
    More PS processes raise the total. ps-lite pays no such copies."""
    costs = replace(NETWORK_ONLY, grpc_ns_per_byte=1.0)
    r = simulate(scenario_from_dict(_grpc_scenario("grpc", servers)), costs)
    assert r.iteration_time_s == pytest.approx(0.1 / servers, rel=0.02)
    lite = simulate(scenario_from_dict(_grpc_scenario("ps-lite", servers)), costs)
    assert lite.iteration_time_s < 0.002
    assert CostModel().grpc_ns_per_byte == 0.0
    # Real hardware starts at the median public figure: (287.9 + 500) / 2 = 394 MB/s.
    assert real_hardware_costs().grpc_ns_per_byte == pytest.approx(1e3 / 393.95)


@pytest.mark.parametrize(
    ("placement", "iteration_ms"), [("hash", 40), ("greedy", 32), ("round_robin", 40)]
)
def test_tensorflows_greedy_placement_balances_whole_variables(
    placement: str, iteration_ms: float
) -> None:
    """Arrays a, b, c of 16, 8 and 8 MB, whole, on 2 servers copying 1 GB/s each way (gRPC at
    1 ns/byte). MXNet's hash (key * 9973 mod 2) puts a and c on server 0: backward pushes c then
    a, copied in over 0-8 and 8-24 ms, and a's reply is copied out over 24-40 ms. TensorFlow's
    greedy placement puts a on server 0, b and c on server 1 (8 < 16 MB held): a in over 0-16,
    out over 16-32 ms, while server 1 copies b and c in and out by 24 ms. Its round-robin puts
    a and c on server 1 (the global step took server 0's turn), b on server 0: as the hash."""
    s = _grpc_scenario("grpc", 2)
    s["model"] = {
        "arrays": [
            {"name": name, "elements": n, "fwd_gflops": 1e-6}
            for name, n in (("a", 4_000_000), ("b", 2_000_000), ("c", 2_000_000))
        ]
    }
    s["kvstore"].update(key_placement=placement, bigarray_bound=10**9)
    r = simulate(scenario_from_dict(s), replace(NETWORK_ONLY, grpc_ns_per_byte=1.0))
    assert r.iteration_time_s == pytest.approx(iteration_ms / 1e3, rel=0.02)


def test_grpc_serves_concurrent_calls_side_by_side() -> None:
    """Two workers put 0.1 s of copies on each way of one server per iteration (2 x 0.05 s in,
    2 x 0.05 s out). gRPC serves the two replies on their own streams at once, at half the rate
    each, so both arrive at 0.1 s and neither worker gets ahead: their pushes are copied in
    together over the next 0.1 s. An iteration takes 0.2 s (a FIFO copy thread would have sent
    the first reply whole at 0.05 s and let that worker's next push overlap the second reply)."""
    costs = replace(NETWORK_ONLY, grpc_ns_per_byte=1.0)
    r = simulate(scenario_from_dict(_grpc_scenario("grpc", 1, workers=2)), costs)
    assert r.iteration_time_s == pytest.approx(0.2, rel=0.02)
    assert "gRPC copies" in " ".join(u.description for u in r.utilization)


@pytest.mark.parametrize(
    ("precision", "iteration_s"), [("fp32", 0.008), ("fp16", 0.004), ("amp", 0.008)]
)
def test_mixed_precision_sends_fp32_gradients(precision: str, iteration_s: float) -> None:
    """The 2-host ring of one 25e6-element array from above, no compute: fp32 gradients are
    1e8 bytes and take 8 ms over 100 Gbit/s; a network cast to fp16 sends 5e7 bytes, 4 ms;
    automatic mixed precision computes in fp16 but keeps fp32 weights, so its gradients are
    fp32 again: 8 ms."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["training"]["precision"] = precision
    free = CostModel(bandwidth_factor=1.0, message_overhead_us=0.0)
    assert simulate(scenario_from_dict(data), free).iteration_time_s == pytest.approx(
        iteration_s, rel=1e-6
    )


def test_mixed_precision_computes_at_the_fp16_rate() -> None:
    """amp's layers take fp16's time (the tensor cores' peak at the fp16 efficiency), not fp32's:
    one GPU training a 1 GFLOP layer at efficiency 0.5 needs 3e9 / (V100's 125e12 * 0.5) = 48 us
    per iteration in fp16 and in amp, 3e9 / (15.7e12 * 0.5) = 382 us in fp32 (plus nanoseconds
    for updating the layer's ten weights, hence the 1e-3 tolerance)."""
    costs = CostModel(compute_efficiency={"V100/fp16": 0.5, "V100/fp32": 0.5})
    data = _ring_scenario([{"name": "fc", "elements": 10, "fwd_gflops": 1.0}])
    data["cluster"]["hosts"][0]["count"] = 1
    data["kvstore"] = {"mode": "local"}

    def iteration_s(precision: str) -> float:
        data["training"]["precision"] = precision
        return simulate(scenario_from_dict(data), costs).iteration_time_s

    fp16_s = 3e9 / (GPUS["V100"].peak_flops("fp16") * 0.5)
    assert iteration_s("amp") == pytest.approx(fp16_s, rel=1e-3)
    assert iteration_s("fp16") == pytest.approx(fp16_s, rel=1e-3)
    assert iteration_s("fp32") == pytest.approx(
        3e9 / (GPUS["V100"].peak_flops("fp32") * 0.5), rel=1e-3
    )


def test_horovod_without_gpu_allreduce_sums_in_host_memory() -> None:
    """reduce_in host: the 1e8-byte buffer goes to host memory over the V100's PCIe 3 x16
    (1e8 / 15.75e9 = 6.349 ms); a lone tensor, which Open MPI copies into the output buffer
    first (1e8 bytes at the 5 GB/s host rate: 20 ms); MPI's ring of the 2 ranks sends 1e8
    bytes per host over one 10 Gbit/s connection (80 ms; 1e8 bytes is above 2 MiB, so the ring
    goes in segments, whose further steps cost nothing here: no latency, no send cost), each
    rank sums the one chunk it receives (5e7 bytes at 5 GB/s: 10 ms), and the result goes back
    over PCIe (6.349 ms): 122.698 ms. Over RDMA the NIC (100 Gbit/s: 8 ms) replaces the
    connection: 50.698 ms."""
    data = _ring_scenario([{"name": "w", "elements": 25_000_000}])
    data["kvstore"]["allreduce"]["reduce_in"] = "host"
    costs = CostModel(
        bandwidth_factor=1.0,
        message_overhead_us=0.0,
        connection_gbps=10.0,
        host_reduce_gbytes_per_s=5.0,
    )
    copies_s = 2 * 1e8 / 15.75e9
    it = simulate(scenario_from_dict(data), costs).iteration_time_s
    assert it == pytest.approx(0.080 + 0.020 + 0.010 + copies_s, rel=1e-6)
    data["cluster"]["hosts"][0]["transport"] = "rdma"
    it = simulate(scenario_from_dict(data), costs).iteration_time_s
    assert it == pytest.approx(0.008 + 0.020 + 0.010 + copies_s, rel=1e-6)
