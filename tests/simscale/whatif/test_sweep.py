"""Sweeps: grid parsing (lists, ranges, linked fields, links), invalid points reported per row,
resuming an interrupted sweep, output files pandas reads, and the CLI's one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simscale.cli import main
from simscale.whatif import WhatIfError
from simscale.whatif.grid import parse_grid
from simscale.whatif.sweep import checkpoint_path, run_sweep
from simscale.whatif.tables import write_rows
from tests.support.paths import ROOT

TINY = {
    "name": "tiny",
    "cluster": {"hosts": [{"count": 2, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 10}]},
    "model": {"name": "mlp"},
    "training": {"batch_per_gpu": 32},
    "kvstore": {"mode": "dist_sync", "servers": 2, "placement": "colocated"},
    "simulation": {"warmup_iterations": 1, "measured_iterations": 2, "seed": 0},
}


@pytest.fixture
def tiny(scenario_file) -> Path:
    return scenario_file(TINY, "tiny.yaml")


def test_lists_ranges_and_doubling() -> None:
    g = parse_grid(["kvstore.servers=1,2", "cluster.hosts[0].count=1..16x2"])
    pts = g.points()
    assert len(g) == len(pts) == 10
    assert [p["cluster.hosts[0].count"] for p in pts[:5]] == [1, 2, 4, 8, 16]
    assert [p["kvstore.servers"] for p in pts[::5]] == [1, 2]
    assert [p["x"] for p in parse_grid([], ["x=1..7:3"]).points()] == [1, 4, 7]
    assert [p["x"] for p in parse_grid([], ["x=0.5..1.5"]).points()] == [0.5, 1.5]


def test_linked_fields_move_together() -> None:
    same = parse_grid(["cluster.server_hosts.count+kvstore.servers=1..4x2"]).points()
    assert [(p["cluster.server_hosts.count"], p["kvstore.servers"]) for p in same] == [
        (1, 1),
        (2, 2),
        (4, 4),
    ]
    pairs = parse_grid(["cluster.hosts[0].count+kvstore.servers=1/2,4/8"]).points()
    assert [(p["cluster.hosts[0].count"], p["kvstore.servers"]) for p in pairs] == [
        (1, 2),
        (4, 8),
    ]
    linked = parse_grid(
        ["cluster.hosts[0].count=1,4"],
        ["ratio=0,2"],
        [
            "kvstore.servers=max(1, ratio*{cluster.hosts[0].count})",
            "cluster.server_hosts.count={kvstore.servers}",
        ],
    )
    got = [(p["cluster.hosts[0].count"], p["ratio"], p["kvstore.servers"]) for p in linked.points()]
    assert got == [(1, 0, 1), (1, 2, 2), (4, 0, 1), (4, 2, 8)]
    assert all(p["cluster.server_hosts.count"] == p["kvstore.servers"] for p in linked.points())
    # --let variables are columns but not scenario fields
    assert "ratio" in linked.columns and "ratio" not in linked.field_columns


@pytest.mark.parametrize(
    ("vary", "let", "link", "message"),
    [
        (["cluster.hosts[0].nic_gpbs=10,25"], [], [], "did you mean 'nic_gbps'"),
        (["kvstore.sever=1"], [], [], "did you mean 'servers'"),
        (["kvstore.servers=8..1"], [], [], "empty range"),
        (["kvstore.servers="], [], [], "no values"),
        (["kvstore.servers=1,,2"], [], [], "empty value"),
        (["kvstore.servers"], [], [], "expected NAME=VALUES"),
        (["a+kvstore.servers=1/2/3"], [], [], "unknown field"),
        (["cluster.hosts[0].count+kvstore.servers=1/2/3"], [], [], "3 values for 2"),
        ([], [], ["kvstore.servers=2*{cluster.hosts[0].count}"], "not varied"),
        (["kvstore.servers=1"], [], ["kvstore.servers=2"], "already varied"),
        ([], ["r=1"], ["kvstore.servers=__import__('os')"], "unknown name"),
        ([], ["r=1"], ["kvstore.servers=r.real"], "not allowed"),
    ],
)
def test_bad_specifications_are_one_line(
    vary: list[str], let: list[str], link: list[str], message: str
) -> None:
    with pytest.raises(WhatIfError, match=message) as e:
        parse_grid(vary, let, link)
    assert "\n" not in str(e.value)


def test_invalid_points_are_rows_with_the_validation_message(tiny: Path) -> None:
    grid = parse_grid(["kvstore.servers=1,2,3", "cluster.hosts[0].nic_gbps=10,-1"])
    out = run_sweep(tiny, grid, executor="serial")
    status = {(r["kvstore.servers"], r["cluster.hosts[0].nic_gbps"]): r for r in out.rows}
    assert status[(1, 10)]["status"] == "ok" and status[(2, 10)]["status"] == "ok"
    assert status[(3, 10)]["status"] == "invalid"
    assert "kvstore.servers: got 3, expected at most 2" in status[(3, 10)]["message"]
    assert status[(1, -1)]["status"] == "invalid"
    assert "cluster.hosts[0].nic_gbps: got -1" in status[(1, -1)]["message"]
    assert out.failed == 4 and len(out.rows) == 6
    assert [r["point"] for r in out.rows] == list(range(6))
    assert status[(3, 10)]["throughput_samples_per_s"] is None


def test_an_index_beyond_the_base_lists_is_one_error(tiny: Path) -> None:
    with pytest.raises(WhatIfError, match="index 3 out of range"):
        run_sweep(tiny, parse_grid(["cluster.hosts[3].count=1"]), executor="serial")


def test_resume_keeps_finished_rows_and_runs_only_the_rest(tiny: Path, tmp_path: Path) -> None:
    grid = parse_grid(["kvstore.servers=1,2", "training.batch_per_gpu=16,32"])
    cp = checkpoint_path(tmp_path / "rows.csv")
    calls = []

    def interrupt(done: int, total: int) -> None:
        calls.append(done)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny, grid, executor="serial", checkpoint=cp, progress=interrupt)
    kept = cp.read_text().splitlines()
    assert len(kept) == 1 + 3  # header + three rows
    again = run_sweep(tiny, grid, executor="serial", checkpoint=cp)
    assert again.resumed == 3 and again.evaluated == 1
    fresh = run_sweep(tiny, grid, executor="serial")
    assert again.rows == fresh.rows
    # A checkpoint of another sweep is refused, not mixed in.
    with pytest.raises(WhatIfError, match="different sweep"):
        run_sweep(tiny, parse_grid(["kvstore.servers=1"]), executor="serial", checkpoint=cp)


def test_local_processes_give_the_serial_rows(tiny: Path) -> None:
    grid = parse_grid(["kvstore.servers=1,2", "training.batch_per_gpu=16,32"])
    serial = run_sweep(tiny, grid, executor="serial").rows
    local = run_sweep(tiny, grid, executor="local", jobs=2).rows
    assert local == serial


def test_outputs_read_back_with_pandas(tiny: Path, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    out = run_sweep(tiny, parse_grid(["kvstore.servers=1,2,3"]), executor="serial")
    for suffix in (".csv", ".json", ".parquet"):
        if suffix == ".parquet":
            pytest.importorskip("pyarrow")
        path = tmp_path / f"rows{suffix}"
        write_rows(path, out.rows, out.columns)
        frame = {
            ".csv": pd.read_csv,
            ".json": pd.read_json,
            ".parquet": pd.read_parquet,
        }[suffix](path)
        assert list(frame.columns) == out.columns
        assert list(frame["status"]) == ["ok", "ok", "invalid"]
        assert frame["throughput_samples_per_s"][0] == pytest.approx(
            out.rows[0]["throughput_samples_per_s"]
        )


def test_cli_sweep_writes_rows_and_refuses_to_overwrite(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    args = ["sweep", str(tiny), "--vary", "kvstore.servers=1,2", "-o", str(out)]
    assert main([*args, "--no-progress", "--executor", "serial"]) == 0
    rows = json.loads(out.read_text())
    assert [r["kvstore.servers"] for r in rows] == [1, 2]
    assert not checkpoint_path(out).exists()
    capsys.readouterr()
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("exists; pass --force to overwrite it") and "\n" not in err


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("cluster.hosts[0].nic_gpbs=10", "did you mean 'nic_gbps'"),
        ("kvstore.servers=4..2", "empty range"),
    ],
)
def test_cli_bad_sweep_is_one_line(
    tiny: Path, vary: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(tiny), "--vary", vary, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


@pytest.mark.slow  # measured over 2 CPU s (tests/support/cpu_report.py)
def test_dask_local_cluster_gives_identical_rows(tiny: Path) -> None:
    """The same sweep through a real dask.distributed scheduler (a LocalCluster with worker
    processes, reached by its tcp address as a user's lab cluster would be) gives the rows
    the local executor gives."""
    distributed = pytest.importorskip("distributed")
    grid = parse_grid(["kvstore.servers=1,2", "training.batch_per_gpu=16,32,64"])
    local = run_sweep(tiny, grid, executor="serial").rows
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://")
        rows = run_sweep(tiny, grid, executor="dask://" + address[len("tcp://") :]).rows
    assert rows == local


def test_unreachable_dask_scheduler_is_one_line(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr("simscale.whatif.executors.DASK_CONNECT_TIMEOUT_S", 1.0)
    with pytest.raises(WhatIfError, match="cannot reach the Dask scheduler"):
        run_sweep(tiny, parse_grid(["kvstore.servers=1,2"]), executor="dask://127.0.0.1:9")


def test_the_eta_weighs_the_points_left_by_their_estimated_cost() -> None:
    """A fast first point does not promise a fast sweep: after it, the time left is its
    time per unit of estimated cost times the cost left (plain rate: 3 s, here 21 s)."""
    from simscale.whatif.sweep import Eta

    now = [0.0]
    eta = Eta({0: 1.0, 1: 1.0, 2: 10.0, 3: 10.0}, clock=lambda: now[0])
    assert eta.seconds_left() is None
    now[0] = 1.0
    eta.finished(0)
    assert eta.seconds_left() == pytest.approx(21.0)
    now[0] = 12.0  # the next point was slower than its estimate: the ratio follows
    eta.finished(2)
    assert eta.seconds_left() == pytest.approx(12.0 / 11.0 * 11.0)
    eta.finished(1)
    eta.finished(3)
    assert eta.seconds_left() == 0.0


def test_point_weights_grow_with_the_simulation_and_invalid_points_weigh_nothing(
    tiny: Path,
) -> None:
    from simscale.whatif.sweep import Task, load_base, point_weights

    base, source = load_base(ROOT / "scenarios" / "64gpu.yaml")
    tasks = [
        Task(i, base, source, (("cluster.hosts[0].count", n), ("kvstore.servers", n)), {})
        for i, n in enumerate([1, 16, 128, 0])
    ]
    w = point_weights(tasks)
    assert w[0] < w[1] < w[2]
    assert w[3] < w[0]  # 0 hosts: invalid, answered at once


def test_run_sweep_reports_the_time_left_as_rows_arrive(tiny: Path) -> None:
    seen: list[float | None] = []
    grid = parse_grid(["cluster.hosts[0].count=1,2,3"])
    run_sweep(tiny, grid, executor="serial", eta=seen.append)
    assert len(seen) == 3
    assert all(s is not None and s >= 0 for s in seen)
    assert seen[-1] == 0.0
