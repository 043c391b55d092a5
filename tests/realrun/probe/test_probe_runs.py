"""realrun probe end to end: on local hosts (short), on the emulated cluster (netns, slow),
and a failed host stopping it with one line that names the host."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from realrun import cli
from realrun.emulated import netns
from realrun.probe.hosts import LocalHosts, NetnsHosts, ProbeHostError
from realrun.probe.runner import ProbeOptions, probe
from realrun.records.probe_record import load_probe
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT
from tests.support.system import needs_netns, root_links

SHORT = ProbeOptions(
    rounds=2,
    connections=2,
    incast_burst_bytes=1 << 16,
    incast_rounds=3,
    rtt_count=5,
    skip=frozenset({"server", "allreduce", "gpu", "psrtt"}),
)


def _agents_marked(mark: str) -> list[int]:
    """Probe agents still running whose environment carries ``mark`` (this test's, not those of
    another test worker probing at the same time)."""
    found = subprocess.run(["pgrep", "-f", "realrun.probe.agent"], capture_output=True, text=True)
    mine = []
    for pid in found.stdout.split():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        if f"SIMSCALE_TEST_MARK={mark}".encode() in environ.split(b"\0"):
            mine.append(int(pid))
    return mine


@pytest.mark.slow
def test_a_local_probe_writes_a_record_and_leaves_nothing_running(
    tmp_path, capsys, monkeypatch
) -> None:
    mark = f"{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv("SIMSCALE_TEST_MARK", mark)
    out = tmp_path / "probe.json"
    argv = ["probe", "--launcher", "local", "--hosts", "3", "-o", str(out)]
    assert cli.main([*argv, "--skip", "aggregate,server,allreduce,gpu,psrtt"]) == 0
    record = load_probe(out)
    assert record.launcher == "local" and len(record.hosts) == 3
    assert {"rtt_s", "tcp_connection_Bps", "incast_share_log_deviation"} <= set(record.measurements)
    assert record.measured("tcp_connection_Bps").spread.median > 0
    err = capsys.readouterr().err
    assert "[1/3] rtt" in err and "[3/3] incast done" in err
    assert _agents_marked(mark) == []


@pytest.mark.slow
def test_two_local_probes_at_once_take_their_own_ports() -> None:
    """A test suite's workers probe this machine at the same time: each local step listens on
    a port the kernel has free, where fixed ports made the second probe's sink fail to start."""
    results: list[object] = [None, None]

    def one(i: int) -> None:
        try:
            with LocalHosts(3) as hosts:
                results[i] = probe(hosts, SHORT)
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r in results:
        assert not isinstance(r, Exception), r
        assert r is not None and r.measured("incast_share_log_deviation") is not None


def test_a_failed_host_stops_the_probe_with_one_line_naming_it() -> None:
    class Broken(LocalHosts):
        def agent_argv(self, role, *args):  # host 1's end dies at once
            return ["python", "-c", "import sys; sys.exit('boom')"]

    with Broken(2) as hosts, pytest.raises(ProbeHostError) as e:
        probe(hosts, SHORT)
    message = str(e.value)
    assert message.startswith("host local") and "boom" not in message.split(":")[0]
    assert "\n" not in message


def test_the_command_reports_a_failed_host_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(
        LocalHosts, "agent_argv", lambda self, role, *a: ["python", "-c", "raise SystemExit(3)"]
    )
    rc = cli.main(["probe", "--hosts", "2", "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("realrun probe: host local")
    assert not (tmp_path / "p.json").exists()


def test_bad_options_are_one_line_errors(tmp_path, capsys) -> None:
    assert cli.main(["probe", "-o", str(tmp_path / "p.json"), "--skip", "nope"]) == 2
    assert "unknown step(s) ['nope']" in capsys.readouterr().err
    assert cli.main(["probe", "--launcher", "netns", "-o", str(tmp_path / "p.json")]) == 2
    assert "needs --scenario" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.netns
@needs_netns
def test_a_netns_probe_measures_the_shaped_links_and_cleans_up(tmp_path) -> None:
    before = root_links()
    scenario = load_scenario(
        ROOT / "scenarios" / "emulated" / "mlp-colocated.yaml", ["cluster.hosts[0].count=3"]
    )
    with NetnsHosts(scenario) as hosts:
        prefix = str(hosts.netns.cluster.prefix)
        record = probe(hosts, SHORT)
    nominal_Bps = 50e6 / 8
    rate = record.measured("tcp_connection_Bps").spread.median
    assert 0.7 * nominal_Bps < rate <= 1.05 * nominal_Bps  # HTB holds the 50 Mbit/s
    rtt = record.measured("rtt_s")
    assert rtt.spread.min >= 4e-4  # 2 x (100 + 100) us configured
    # Every round trip says how long each end waited for a core during it.
    assert len(rtt.context["ping_wait_s"]) == len(rtt.context["echo_wait_s"]) == len(rtt.samples)
    assert [n for n in netns.list_namespaces() if n.startswith(prefix)] == []
    assert root_links() == before
