"""The emulated cluster: link sizing rules, the delay wire, and (as root) real shaped namespaces.

The first half needs no privileges and runs everywhere. The second half builds real network
namespaces and is marked ``netns`` and ``slow``; it skips with the reason when not root or when
iproute2 or /dev/net/tun is missing (CI runs it as root).
"""

from __future__ import annotations

import gzip
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from realrun.emulated import emulated_cluster as ec
from realrun.emulated import netns
from realrun.emulated.delay_wire import DelayWire, frame_fields, write_frame_log
from realrun.emulated.emulated_cluster import EmulatedCluster, HostLink, host_address, python_env
from realrun.emulated.linkprobe import Throughput, measure_round_trip, measure_throughput
from realrun.emulated.machine_load import MAX_CPU_BUSY, LoadSampler
from realrun.emulated.machine_load import verdict as load_verdict
from realrun.emulated.shaping import (
    MIN_QUEUE_TSO_FRAMES,
    TSO_FRAME_BYTES,
    dilate,
    kernel_hz,
    link_shape,
    tc_commands,
)
from tests.support.load import CpuWindow, within
from tests.support.system import needs_netns

# -- sizing rules and naming (no privileges needed) -------------------------------------------


def test_dilation_divides_rate_and_multiplies_latency() -> None:
    """D=10 turns a 10 Gbit/s, 50 us NIC into 1 Gbit/s, 500 us: every duration 10x longer."""
    assert dilate(10_000.0, 50.0, 10.0) == (1_000.0, 500.0)
    assert dilate(100.0, 1_000.0, 1.0) == (100.0, 1_000.0)
    with pytest.raises(ValueError, match="dilation factor"):
        dilate(100.0, 1_000.0, 0.0)
    assert HostLink("w0", 25_000.0, 10.0).dilated(25.0) == HostLink("w0", 1_000.0, 250.0)


def test_gbit_shape_burst_covers_one_timer_tick_and_queue_one_bdp() -> None:
    """1 Gbit/s = 125e6 B/s: one HZ=250 tick earns 500 000 B; a 4.5 ms RTT holds 562 500 B."""
    shape = link_shape(1_000.0, 4.5e-3, hz=250)
    assert shape.rate_bit_s == 1e9
    assert shape.burst_bytes == 500_000
    assert shape.queue_limit_bytes == 562_500
    assert shape.quantum_bytes >= 1_500


def test_slow_link_shape_still_fits_whole_tso_frames() -> None:
    """At 10 Mbit/s a tick earns only 5 000 B and a BDP is ~5.6 kB, below one 64 KiB TSO frame:
    the floors (2 frames of burst, 4 frames of queue) apply instead."""
    shape = link_shape(10.0, 4.5e-3, hz=250)
    assert shape.burst_bytes == 2 * TSO_FRAME_BYTES == 131_072
    assert shape.queue_limit_bytes == MIN_QUEUE_TSO_FRAMES * TSO_FRAME_BYTES == 262_144


def test_link_shape_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="rate_mbit"):
        link_shape(0.0, 1e-3, hz=250)
    with pytest.raises(ValueError, match="path_rtt_s"):
        link_shape(100.0, -1e-3, hz=250)


def test_tc_commands_shape_egress_with_htb_and_a_byte_fifo() -> None:
    shape = link_shape(100.0, 4.5e-3, hz=250)
    commands = tc_commands("ssx-1-abc-h0", "eth0", shape)
    assert all(c[:3] == ["tc", "-n", "ssx-1-abc-h0"] for c in commands)
    assert [c[3] for c in commands] == ["qdisc", "class", "qdisc"]
    assert commands[0][3:] == [
        *("qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
    ]
    htb_class = commands[1]
    assert htb_class[htb_class.index("rate") + 1] == "100000000bit"
    assert htb_class[htb_class.index("ceil") + 1] == "100000000bit"
    assert htb_class[htb_class.index("burst") + 1] == "131072b"
    leaf = commands[2]
    assert leaf[-3:] == ["bfifo", "limit", "262144"]


def test_kernel_hz_is_read_from_the_kernel_config(tmp_path: Path) -> None:
    config = tmp_path / "config.gz"
    with gzip.open(config, "wt") as out:
        out.write("CONFIG_NO_HZ=y\nCONFIG_HZ_300=y\nCONFIG_HZ=300\n")
    assert kernel_hz(config) == 300
    assert kernel_hz(tmp_path / "absent.gz") == 100  # the conservative fallback


def test_host_links_are_validated() -> None:
    with pytest.raises(ValueError, match="rate_mbit"):
        HostLink("a", 0.0, 10.0)
    with pytest.raises(ValueError, match="latency_us"):
        HostLink("a", 100.0, -1.0)
    with pytest.raises(ValueError, match="unique"):
        EmulatedCluster([HostLink("a", 100.0, 1.0), HostLink("a", 100.0, 1.0)])


def test_host_addresses_count_through_the_slash_16() -> None:
    assert host_address(0) == "10.77.0.1"
    assert host_address(253) == "10.77.0.254"
    assert host_address(254) == "10.77.1.1"
    with pytest.raises(ValueError):
        host_address(-1)


def test_a_cluster_is_named_after_its_owner_and_path_latency_adds_both_nics() -> None:
    """Nothing is built before start(): naming and latency arithmetic need no root."""
    cluster = EmulatedCluster([HostLink("w0", 100.0, 1_000.0), HostLink("s0", 100.0, 250.0)])
    prefix = netns.RunPrefix.parse(cluster.switch_namespace)
    assert prefix is not None
    assert (prefix.tag, prefix.owner_pid) == ("ssx", os.getpid())
    assert cluster.namespaces == (f"{prefix}-sw", f"{prefix}-h0", f"{prefix}-h1")
    assert cluster.one_way_latency_s("w0", "s0") == pytest.approx(1.25e-3)
    assert cluster.exec_argv("s0", ["true"]) == ["ip", "netns", "exec", f"{prefix}-h1", "true"]
    assert cluster.describe()["hosts"][1] == {
        "name": "s0",
        "namespace": f"{prefix}-h1",
        "address": "10.77.0.2",
        "rate_mbit": 100.0,
        "latency_us": 250.0,
    }
    assert EmulatedCluster([HostLink("x", 1.0, 0.0)]).prefix != cluster.prefix
    assert netns.RunPrefix.parse("docker-netns") is None


def test_without_root_the_error_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    cluster = EmulatedCluster([HostLink("a", 100.0, 1_000.0)])
    with pytest.raises(PermissionError) as raised:
        cluster.start()
    assert str(raised.value) == (
        "realrun --launcher netns needs root to create network namespaces; "
        "run as root or use --launcher local"
    )
    with pytest.raises(PermissionError, match="needs root"):
        netns.cleanup_leftovers()
    cluster.close()  # never started: a no-op, not an error


def _through_delay_wire(delay_s: float) -> tuple[list[bytes], bytes, float, float, int]:
    """Three frames one way and a reply the other through a DelayWire: what arrived, and the
    seconds from sending until the three frames, then the reply, were received."""
    host_end, wire_a = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    switch_end, wire_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stop_r, stop_w = os.pipe()
    wire = DelayWire(wire_a.fileno(), wire_b.fileno(), delay_s)
    for sock in (wire_a, wire_b):
        sock.setblocking(False)
    thread = threading.Thread(target=wire.run, args=(stop_r,), daemon=True)
    thread.start()
    try:
        sent_at = time.monotonic()
        for frame in (b"first", b"second", b"third"):
            host_end.send(frame)
        switch_end.send(b"reply")
        switch_end.settimeout(5.0)
        host_end.settimeout(5.0)
        got = [switch_end.recv(100) for _ in range(3)]
        forward_s = time.monotonic() - sent_at
        reply = host_end.recv(100)
        both_s = time.monotonic() - sent_at
    finally:
        os.write(stop_w, b"x")
        thread.join(timeout=5.0)
        for closable in (host_end, wire_a, switch_end, wire_b):
            closable.close()
        os.close(stop_r)
        os.close(stop_w)
    assert not thread.is_alive()
    return got, reply, forward_s, both_s, wire.frames_carried


def test_delay_wire_holds_each_frame_for_the_delay_in_both_directions() -> None:
    """Frames through the wire arrive whole, in order, never sooner than the delay after
    sending, and soon after it: within 15 ms late in one of three tries (a loaded machine
    wakes the wire's thread late; a miss on a saturated machine skips, naming the load)."""
    delay_s, late_s = 0.02, 0.015
    window = CpuWindow()
    with window:
        for _ in range(3):
            got, reply, forward_s, both_s, carried = _through_delay_wire(delay_s)
            assert got == [b"first", b"second", b"third"]
            assert reply == b"reply"
            assert carried == 4
            assert delay_s <= forward_s and delay_s <= both_s  # never early, loaded or not
            if both_s < delay_s + late_s:
                break
    within(both_s - delay_s, late_s, window, "the last frame after the delay")


def _tcp_frame(payload: int, seq: int = 7, ack: int = 9, flags: int = 0x18) -> bytes:
    """A frame as a tap with IFF_VNET_HDR hands it over: virtio-net header, Ethernet, IPv4
    (20 bytes), TCP (32 bytes: 12 of options), then ``payload`` bytes."""
    vnet = bytes(10)
    eth = bytes(12) + b"\x08\x00"
    tcp_len = 32
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + tcp_len + payload,
        0,
        0,
        64,
        6,
        0,
        socket.inet_aton("10.77.0.1"),
        socket.inet_aton("10.77.0.3"),
    )
    tcp = struct.pack("!HHIIBBHHH", 40000, 9091, seq, ack, (tcp_len // 4) << 4, flags, 512, 0, 0)
    return vnet + eth + ip + tcp + bytes(12) + bytes(payload)


def test_the_frame_log_reads_addresses_ports_and_payload_from_the_frame(tmp_path: Path) -> None:
    """The wire logs a frame's head only; the payload comes from the whole frame's length
    (a TSO super-frame's IP length field may not hold it), and non-TCP frames are skipped."""
    frame = _tcp_frame(payload=3000, seq=123456789, ack=42)
    assert frame_fields(frame[:120], len(frame)) == (
        "10.77.0.1",
        "10.77.0.3",
        40000,
        9091,
        123456789,
        3000,
        0x18,
        42,
        512,
    )
    arp = bytes(10) + bytes(12) + b"\x08\x06" + bytes(28)
    assert frame_fields(arp, len(arp)) is None
    log = [(100.0, 3, len(frame), frame[:120]), (100.5, 4, len(arp), arp)]
    path = tmp_path / "wire.tsv"
    write_frame_log(path, log, host_fd=3)
    header, line, *rest = path.read_text().splitlines()
    assert rest == [] and header.split("\t")[:3] == ["time_s", "from", "src"]
    assert line.split("\t")[1:] == [
        "host",
        "10.77.0.1",
        "10.77.0.3",
        "40000",
        "9091",
        "123456789",
        "3000",
        "24",
        "42",
        "512",
    ]


# -- real namespaces (root) -------------------------------------------------------------------


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def _assert_gone(prefix: str) -> None:
    assert [n for n in netns.list_namespaces() if n.startswith(prefix)] == []
    assert _processes_mentioning(prefix) == []


@pytest.fixture
def two_hosts_100mbit(root_untouched: None) -> Iterator[EmulatedCluster]:
    links = [HostLink("a", 100.0, 1_000.0), HostLink("b", 100.0, 1_000.0)]
    with EmulatedCluster(links) as cluster:
        yield cluster
    _assert_gone(str(cluster.prefix))


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_100mbit_link_carries_90_to_100_mbit_each_way(two_hosts_100mbit: EmulatedCluster) -> None:
    for src, dst in (("a", "b"), ("b", "a")):
        measured = judged_under_load(
            two_hosts_100mbit,
            lambda src=src, dst=dst: measure_throughput(
                two_hosts_100mbit, src, dst, duration_s=3.0
            ),
            lambda m: m.rate_mbit >= 90.0,
        )
        # Above 100 only by the HTB burst (128 KiB over 3 s is +0.35 Mbit/s).
        assert 90.0 <= measured.rate_mbit <= 100.5, (src, dst, measured)


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_round_trip_is_twice_both_nics_latency(two_hosts_100mbit: EmulatedCluster) -> None:
    """1 ms per NIC: a -> b is 2 ms one way, 4 ms round trip; within 20%."""
    configured_s = 2 * two_hosts_100mbit.one_way_latency_s("a", "b")
    assert configured_s == pytest.approx(4e-3)
    measured = judged_under_load(
        two_hosts_100mbit,
        lambda: measure_round_trip(two_hosts_100mbit, "a", "b", count=50),
        lambda m: m.median_s == pytest.approx(configured_s, rel=0.2),
    )
    assert configured_s <= measured.min_s  # the delay is never skipped
    assert measured.median_s == pytest.approx(configured_s, rel=0.2)


def _concurrently(*calls: Callable[[], Throughput]) -> list[Throughput]:
    """Run bulk measurements at the same time, each in a thread; bounded by their own timeouts."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result(timeout=60) for future in futures]


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_nics_are_full_duplex(two_hosts_100mbit: EmulatedCluster) -> None:
    """a -> b and b -> a at the same time each get their direction's 100 Mbit/s, not half of a
    shared link. HTB counts 1514-byte frames for 1448 payload bytes, so a direction's goodput
    tops out at 100 * 1448 / 1514 = 95.6 Mbit/s; eight runs on an idle machine gave 93.9-95.5,
    and CI once gave 89.4 with the load verdict calling the machine idle. 85 keeps clear of that
    and of the 50 a half-duplex link would give."""
    forward, backward = judged_under_load(
        two_hosts_100mbit,
        lambda: _concurrently(
            lambda: measure_throughput(two_hosts_100mbit, "a", "b", duration_s=3.0, port=45_011),
            lambda: measure_throughput(two_hosts_100mbit, "b", "a", duration_s=3.0, port=45_012),
        ),
        lambda flows: min(f.rate_mbit for f in flows) >= 85.0,
    )
    assert forward.rate_mbit >= 85.0, forward
    assert backward.rate_mbit >= 85.0, backward


def _together_mbit(flows: Sequence[Throughput]) -> float:
    """Both streams' bytes over the window from the first one's first byte to the last one's
    last: summing each stream's own rate over-counts when a loaded machine starts them apart
    (73.5 + 30.5 Mbit/s seen on a 100 Mbit/s link, the windows 0.56 s apart)."""
    start = min(f.first_byte_s for f in flows)
    end = max(f.first_byte_s + f.seconds for f in flows)
    return sum(f.bytes_received for f in flows) * 8 / (end - start) / 1e6


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_two_senders_share_the_receivers_nic(root_untouched: None) -> None:
    """Incast: a and b (100 Mbit/s each) both send to c (100 Mbit/s). c's downlink, shaped on
    the switch side, is the bottleneck: together they get 90-100 Mbit/s, neither starves."""
    links = [HostLink(name, 100.0, 500.0) for name in ("a", "b", "c")]
    with EmulatedCluster(links) as cluster:
        flows = judged_under_load(
            cluster,
            lambda: _concurrently(
                lambda: measure_throughput(cluster, "a", "c", duration_s=4.0, port=45_021),
                lambda: measure_throughput(cluster, "b", "c", duration_s=4.0, port=45_022),
            ),
            lambda flows: _together_mbit(flows) >= 90.0,
        )
    assert 90.0 <= _together_mbit(flows) <= 101.0, flows
    # Over seconds, TCP over a drop-tail queue splits unevenly (70/30 seen in 3 runs), so
    # "neither starves" is all that can be asked; max-min fairness is the simulator's idealisation.
    assert min(flow.rate_mbit for flow in flows) >= 15.0, flows
    _assert_gone(str(cluster.prefix))


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_gbit_link_reaches_85_percent(root_untouched: None) -> None:
    """A Gbit/s link carries 850-1005 Mbit/s. At this rate the shaping and the TCP stacks need
    a good share of a core, so on a busy machine (CI beside other jobs: 783 Mbit/s seen) the
    lower bound is judged only when realrun's load verdict says the machine kept up."""
    links = [HostLink("a", 1_000.0, 100.0), HostLink("b", 1_000.0, 100.0)]
    with EmulatedCluster(links) as cluster:
        measured = judged_under_load(
            cluster,
            lambda: measure_throughput(cluster, "a", "b", duration_s=3.0),
            lambda m: m.rate_mbit >= 850.0,
        )
    assert 850.0 <= measured.rate_mbit <= 1_005.0, measured
    _assert_gone(str(cluster.prefix))


LOADED_TRIES = 3
T = TypeVar("T")


def _cluster_pids(cluster: EmulatedCluster) -> list[int]:
    pids: list[int] = []
    for host in cluster.hosts:
        try:
            pids += netns.namespace_pids(host.namespace)
        except Exception:  # a namespace going away between samples: nothing to count
            continue
    return pids


def judged_under_load(
    cluster: EmulatedCluster, measure: Callable[[], T], ok: Callable[[T], bool]
) -> T:
    """``measure()`` until ``ok``, at most LOADED_TRIES times, retrying only a miss that
    realrun's load verdict blames on this machine (CPU saturated, memory short); a miss on a
    quiet machine is returned to fail the test, and misses that stay loaded skip it, saying so.
    For the rate and delay tests, whose figures a saturated CPU lowers (issue 13: 783 Mbit/s
    on a Gbit link while CI shared the machine)."""
    reasons = []
    for _ in range(LOADED_TRIES):
        # The verdict judges the threads of the processes inside the cluster's namespaces (the
        # probe's sender and receiver): a run delay share over its limit means this machine's
        # CPUs, not the link, set the figure.
        sampler = LoadSampler(wire_pids=tuple, node_pids=lambda: _cluster_pids(cluster)).start()
        try:
            measured = measure()
        finally:
            sampler.stop()
        if ok(measured):
            return measured
        # Judged up to the last sample in which the probe's processes still ran (the verdict
        # counts the threads present at the end of its window).
        running = [i for i, x in enumerate(sampler.samples) if x.sched_ns]
        figures, reason = load_verdict(sampler.samples[: running[-1] + 1] if running else [], None)
        # Shaping and TCP run in softirq, charged to no probe thread: a saturated machine
        # shows in the all-cores figure the verdict reports beside its reasons.
        busy = figures.get("mean_cpu_busy", 0.0)
        if reason is None and busy > MAX_CPU_BUSY:
            reason = f"all cores were {busy:.0%} busy (limit {MAX_CPU_BUSY:.0%})"
        if reason is None:
            return measured  # the machine kept up: the miss is the link's
        reasons.append(f"{measured} while {reason}")
    pytest.skip(f"this machine stayed too busy to judge the link: {'; '.join(reasons)}")


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_close_kills_tracked_process_groups_and_deletes_everything(root_untouched: None) -> None:
    with EmulatedCluster([HostLink("a", 100.0, 100.0)]) as cluster:
        # A shell that ignores SIGTERM and has a child: close() must still get both.
        stubborn = cluster.popen("a", ["sh", "-c", "trap '' TERM; sleep 60 & wait"])
        time.sleep(0.2)
        assert stubborn.pid in netns.namespace_pids(cluster.hosts[0].namespace)
        prefix = str(cluster.prefix)
    assert stubborn.returncode is not None
    assert _processes_mentioning(prefix) == []
    assert [n for n in netns.list_namespaces() if n.startswith(prefix)] == []


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_an_exception_inside_the_context_still_tears_down(root_untouched: None) -> None:
    handlers_before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    cluster = EmulatedCluster([HostLink("a", 100.0, 100.0), HostLink("b", 100.0, 100.0)])
    with pytest.raises(ZeroDivisionError), cluster:
        assert set(cluster.namespaces) <= set(netns.list_namespaces())
        assert signal.getsignal(signal.SIGTERM) is ec._on_signal
        _ = 1 / 0
    _assert_gone(str(cluster.prefix))
    # The last cluster gone, the launcher's own signal handlers are back.
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers_before


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_cleanup_leftovers_removes_dead_runs_but_not_live_ones(root_untouched: None) -> None:
    # A pid that certainly belonged to a finished run: a child we started and reaped.
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    leaked = f"ssx-{dead.pid}-abc123-h0"
    netns.run_command(["ip", "netns", "add", leaked])
    squatter = subprocess.Popen(["ip", "netns", "exec", leaked, "sleep", "60"])
    try:
        with EmulatedCluster([HostLink("a", 100.0, 100.0)]) as live:
            deleted = netns.cleanup_leftovers()
            assert leaked in deleted
            assert not set(live.namespaces) & set(deleted)
            assert set(live.namespaces) <= set(netns.list_namespaces())
        assert squatter.wait(timeout=10) == -signal.SIGKILL
        assert leaked not in netns.list_namespaces()
    finally:
        if squatter.poll() is None:
            squatter.kill()
            squatter.wait(timeout=10)
        netns.delete_namespace(leaked)


LAUNCHER_CODE = textwrap.dedent(
    """
    import time
    from realrun.emulated.emulated_cluster import EmulatedCluster, HostLink
    cluster = EmulatedCluster([HostLink("a", 100.0, 100.0), HostLink("b", 100.0, 100.0)])
    cluster.start()
    print(cluster.prefix, flush=True)
    time.sleep(60)
    """
)


def _start_launcher() -> tuple[subprocess.Popen[str], str]:
    """A separate launcher process holding a two-host cluster; returns it and its prefix."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER_CODE], stdout=subprocess.PIPE, text=True, env=python_env()
    )
    assert launcher.stdout is not None
    prefix = launcher.stdout.readline().strip()
    assert prefix.startswith("ssx-")
    assert len([n for n in netns.list_namespaces() if n.startswith(prefix)]) == 3
    return launcher, prefix


def _reap(launcher: subprocess.Popen[str]) -> None:
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait(timeout=10)
    assert launcher.stdout is not None
    launcher.stdout.close()


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_sigterm_to_the_launcher_tears_the_cluster_down(root_untouched: None) -> None:
    launcher, prefix = _start_launcher()
    try:
        launcher.send_signal(signal.SIGTERM)
        # The handler tears down, then re-raises SIGTERM so the exit status still says so.
        assert launcher.wait(timeout=20) == -signal.SIGTERM
    finally:
        _reap(launcher)
    _assert_gone(prefix)


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_a_sigkilled_launchers_namespaces_are_leftovers_to_clean(
    root_untouched: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL runs no handler: the wires see their lifeline close and exit by themselves; the
    namespaces stay until ``python -m realrun.emulated.netns`` cleans them, knowing their owner
    dead."""
    launcher, prefix = _start_launcher()
    try:
        launcher.kill()
        launcher.wait(timeout=10)
    finally:
        _reap(launcher)
    deadline = time.monotonic() + 10.0
    while _processes_mentioning(prefix) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_mentioning(prefix) == []
    left = sorted(n for n in netns.list_namespaces() if n.startswith(prefix))
    assert len(left) == 3
    assert netns.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sorted(line for line in printed if prefix in line) == [f"deleted {n}" for n in left]
    _assert_gone(prefix)
