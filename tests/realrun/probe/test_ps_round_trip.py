"""The psrtt step's replay: the trainer's own timeline around ResNet-18's fc bias, the large keys
cut to the link's rate yet held behind the bias as the whole ones were, and nothing left
running after the step."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from realrun.emulated import netns
from realrun.probe import ps_round_trip as psrtt
from realrun.probe.hosts import LocalHosts, NetnsHosts, ProbeHost
from realrun.probe.runner import ProbeOptions, probe
from realrun.ps.message import Kind, Message
from realrun.ps.postoffice import Postoffice
from realrun.ps.roles import NodeEnv
from realrun.ps.tracker import Handle
from realrun.training.emulated_compute import emulated_device
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT
from tests.support.recording_van import RecordingVan
from tests.support.system import needs_netns, root_links


def test_the_replay_is_the_trainers_timeline_around_resnet18s_fc_bias() -> None:
    """REPLAY is what realrun's EmulatedTrainer does at the end of a ResNet-18 forward on a
    V100 at batch 32 (the 1w/1s shape of runs/emulated-v2): the last two layers' backward
    times, their keys last one first, each key's bytes and host-copy time."""
    scenario = load_scenario(
        ROOT / "scenarios" / "emulated" / "resnet18-dedicated.yaml",
        ["cluster.hosts[0].count=1", "cluster.server_hosts.count=1"],
    )
    device = emulated_device(scenario, 0)
    layers = [i for i, keys in enumerate(device.layer_keys) if keys][-len(psrtt.REPLAY) :]
    for (backward_s, replayed), layer in zip(psrtt.REPLAY, reversed(layers), strict=True):
        assert backward_s == pytest.approx(device.backward_s[layer], rel=1e-3)
        keys = list(reversed(device.layer_keys[layer]))  # the trainer hands them on so
        assert [k.key for k in replayed] == keys
        assert [k.nbytes for k in replayed] == [device.key_elements[k] * 4 for k in keys]
        for k in replayed:
            assert k.reduce_s == pytest.approx(device.reduce_s[k.key], rel=1e-3, abs=1e-9)
    # The measured key is the fc bias, the first handed on, and it is small.
    first = psrtt.REPLAY[0][1][0]
    assert first.key == psrtt.MEASURED_KEY and first.nbytes == psrtt.KEY_BYTES
    assert first.nbytes <= psrtt.LARGE_BYTES


def test_large_keys_are_cut_to_the_links_rate_and_small_ones_stay_whole() -> None:
    weight, conv = psrtt.REPLAY[0][1][1], psrtt.REPLAY[1][1][2]
    bias = psrtt.REPLAY[0][1][0]
    assert psrtt.replay_bytes(bias, 1000) == bias.nbytes
    assert psrtt.replay_bytes(weight, None) == psrtt.replay_bytes(conv, None) == 2_048_000
    cap = 375_001  # 15 ms at 200 Mbit/s, not a multiple of 4
    assert psrtt.replay_bytes(weight, cap) == psrtt.replay_bytes(conv, cap) == 375_000

    shaped = SimpleNamespace(
        hosts=(ProbeHost("a", "10.0.0.1", 200.0), ProbeHost("b", "10.0.0.2", 50.0))
    )
    assert psrtt.cap_bytes_for(shaped, 0, 1) == int(50e6 / 8 * psrtt.LARGE_WIRE_S)
    assert psrtt.cap_bytes_for(LocalHosts(2), 0, 1) is None  # no nominal rate: whole keys


def test_a_cut_large_key_waits_for_every_byte_in_flight_as_the_whole_one_did() -> None:
    """The workers that recorded runs/emulated-v2 sent a key above the 256 KiB window only
    with nothing in flight (no double buffer then, none in the simulator). With the probe's
    window the cut keys are held the same way, while the small keys pass them."""
    sizes = {k.key: psrtt.replay_bytes(k, 375_000) for _, layer in psrtt.REPLAY for k in layer}
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"))
    po.van.close()
    po.van = RecordingVan()
    psrtt.hold_large_keys(po, sizes)
    handle = Handle(100, "replay")

    def push(key: int) -> None:  # the copy engine's post, and the I/O thread it wakes
        grad = np.zeros(sizes[key] // 4, np.float32)
        po.request("server-0", Message(Kind.PUSH, key=key, arrays=(grad,)), handle, -key)
        po._flush()

    def ack(i: int) -> None:
        po._from_server("server-0", Message(Kind.RESPONSE, po.van.request_ids[i]))
        po._flush()

    po.request(
        "server-0", Message(Kind.PUSH, key=61, arrays=(np.zeros(1000, np.float32),)), handle, -61
    )
    po.request("server-0", Message(Kind.PULL, key=61), handle, -61)
    po._flush()  # sent while the weight's host copy runs
    push(60)  # priority -60, above the bias's -61: only the window holds it
    assert [k for _, k in po.van.sent] == [61, 61]  # the weight waits for the bias's ack
    for key in (59, 58, 57):  # the next layer, 1.57 ms later: its small keys pass the weight
        push(key)
    assert [k for _, k in po.van.sent] == [61, 61, 59, 58]
    ack(0)  # the bias's ack: 59 and 58 are still in flight, so the weight still waits
    assert [k for _, k in po.van.sent] == [61, 61, 59, 58]
    ack(2)
    ack(3)
    # Nothing in flight: one held key goes alone, the conv first (priority -57).
    assert [k for _, k in po.van.sent] == [61, 61, 59, 58, 57]
    ack(4)
    assert [k for _, k in po.van.sent] == [61, 61, 59, 58, 57, 60]


def _running_with_mark(mark: str) -> list[int]:
    """Processes whose environment carries this test's mark (probe ends and the nodes they
    start)."""
    mine = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if f"SIMSCALE_TEST_MARK={mark}".encode() in environ.split(b"\0"):
            mine.append(int(entry.name))
    return mine


@pytest.mark.slow
def test_the_step_replays_the_hand_off_and_leaves_nothing_running(tmp_path, monkeypatch) -> None:
    """On local hosts (no nominal rate: whole keys, no dilation): every sample has the bias's
    round trip, its post lateness and the next layer's first post, which the compute thread
    hands on a backward later; the record says what was replayed; the worker, the scheduler
    and the server are gone afterwards."""
    mark = f"psrtt-{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv("SIMSCALE_TEST_MARK", mark)
    options = ProbeOptions(
        ps_rtt_count=6,
        skip=frozenset({"rtt", "tcp", "aggregate", "incast", "server", "allreduce", "gpu"}),
    )
    with LocalHosts(2) as hosts:
        record = probe(hosts, options)
    m = record.measured("ps_push_ack_s")
    assert m is not None and len(m.samples) == 6
    ctx = m.context
    assert len(ctx["handoff_late_s"]) == len(ctx["next_post_s"]) == 6
    assert all(x >= 0 for x in ctx["handoff_late_s"])
    next_layer_s = psrtt.REPLAY[1][0]
    assert all(x >= 0.5 * next_layer_s for x in ctx["next_post_s"])  # each lateness < 0.8 ms
    assert ctx["dilation"] == 1.0 and ctx["large_key_wire_s"] is None
    assert [[k[0], k[1]] for k in ctx["replay"][0]["keys"]] == [[61, 4000], [60, 2_048_000]]
    assert all(s > 50e-6 for s in m.samples)  # a push, a merge, an update and the ack back
    assert _running_with_mark(mark) == []


@pytest.mark.slow
@pytest.mark.netns
@needs_netns
def test_on_the_emulated_cluster_the_replay_is_dilated_and_its_large_keys_cut() -> None:
    """1 Gbit/s at dilation 5 (200 Mbit/s shaped, 5 times the delay): the replay's backward
    is dilated as the trainer's is, the large keys are 15 ms of the shaped link, and the
    namespaces are gone afterwards."""
    before = root_links()
    scenario = load_scenario(
        ROOT / "scenarios" / "emulated" / "mlp-colocated.yaml",
        ["cluster.hosts[0].nic_gbps=1", "realrun.dilation=5"],
    )
    options = ProbeOptions(
        ps_rtt_count=5,
        skip=frozenset({"rtt", "tcp", "aggregate", "incast", "server", "allreduce", "gpu"}),
    )
    with NetnsHosts(scenario) as hosts:
        prefix = str(hosts.netns.cluster.prefix)
        record = probe(hosts, options)
    ctx = record.measured("ps_push_ack_s").context
    assert ctx["dilation"] == 5.0
    cut = int(200e6 / 8 * psrtt.LARGE_WIRE_S)
    assert [k[1] for k in ctx["replay"][0]["keys"]] == [4000, cut]
    assert all(x >= 0.5 * 5 * psrtt.REPLAY[1][0] for x in ctx["next_post_s"])
    assert all(s >= 2e-3 for s in record.measured("ps_push_ack_s").samples)  # 4 x 500 us
    assert [n for n in netns.list_namespaces() if n.startswith(prefix)] == []
    assert root_links() == before
