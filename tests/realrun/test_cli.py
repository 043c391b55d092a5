"""``realrun run`` end to end: the CPU scenario trains for real and leaves a valid record;
an interrupted run still leaves what it measured."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time

import pytest

from realrun.launching.launch import child_environ
from realrun.records.record import load_record
from tests.support.paths import ROOT

SCENARIO = ROOT / "scenarios" / "cpu-2x2-sync.yaml"


def _realrun(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "realrun.cli", "run", str(SCENARIO), "--launcher", "local", *args],
        cwd=ROOT,
        env=child_environ({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_the_cpu_scenario_completes_within_a_minute_and_writes_a_valid_record(tmp_path):
    out = tmp_path / "run.json"
    started = time.monotonic()
    proc = _realrun("-o", str(out))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert time.monotonic() - started < 60
    record = load_record(out)
    assert record.complete and record.error is None
    assert record.scenario["kvstore"]["mode"] == "dist_sync"
    assert record.environment["launcher"] == "local"
    assert record.environment["pull_request"] == "after_ack"  # MXNet's ordering, the default
    assert record.environment["pull_after_ack_of"] == "key"  # every slice's ack, as MXNet
    assert record.environment["workers"]["0"]["torch_threads"] == 1
    # kvstore.scheduling's default, honoured by every worker: ps-lite's order, no window.
    assert record.environment["scheduling"] == "fifo"
    assert record.environment["workers"]["1"]["scheduling"] == "fifo"
    # 2 workers x (2 warm-up + 10 measured) iterations, each reported once.
    assert sorted((t.worker, t.iteration) for t in record.iterations) == [
        (w, i) for w in range(2) for i in range(12)
    ]
    for t in record.iterations:
        assert t.total_s == pytest.approx(t.compute_s + t.wait_s)
    # The summary is the measured iterations' arithmetic: 32 samples / mean iteration time.
    s = record.summary
    per_worker = [
        32
        / statistics.fmean(
            t.total_s for t in record.iterations if t.worker == w and t.iteration >= 2
        )
        for w in (0, 1)
    ]
    assert s.samples_per_s_per_worker == pytest.approx(per_worker)
    assert s.samples_per_s == pytest.approx(sum(per_worker))
    assert s.measured_iterations == 10
    assert "samples/s over 2 workers" in stdout
    assert len(record.environment["nodes"]) == 4  # 2 servers + 2 workers, all gone now
    for node in record.environment["nodes"]:
        with pytest.raises(ProcessLookupError):
            os.killpg(node["pid"], 0)


TRAINING_BEGINS_WITHIN_S = 180.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "why"),
    [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_ctrl_c_keeps_what_was_measured_in_an_incomplete_record(tmp_path, sig, code, why):
    """Ctrl-C or SIGTERM: the job is torn down, the record kept, and the exit code is the
    shell's for the signal."""
    out = tmp_path / "run.json"
    proc = _realrun("-o", str(out), "--set", "simulation.measured_iterations=5000")
    try:
        # Interrupt once the progress display shows training has begun.
        seen: queue.SimpleQueue[str] = queue.SimpleQueue()
        reader = threading.Thread(target=lambda: [seen.put(line) for line in proc.stderr])
        reader.start()
        # Generous: the test waits for an event, not a time. On a loaded machine (seen at 8x
        # oversubscription) starting four nodes and the first iteration took over 30 s, and a
        # signal sent before training began leaves nothing measured to keep.
        deadline = time.monotonic() + TRAINING_BEGINS_WITHIN_S
        lines: list[str] = []
        while not any("worker-iterations" in x for x in lines) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                lines.append(seen.get(timeout=0.1))
        assert any("worker-iterations" in x for x in lines), (
            f"training had not begun {TRAINING_BEGINS_WITHIN_S:.0f} s after the start: "
            + "".join(lines)[-2000:]
        )
        proc.send_signal(sig)
        proc.wait(60)
        reader.join(5)
        while not seen.empty():
            lines.append(seen.get())
        stderr = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == code
    record = load_record(out)
    assert not record.complete
    assert record.error == f"interrupted ({why})"
    assert record.iterations  # measured before the interrupt
    assert f"interrupted ({why})" in stderr
    for node in record.environment["nodes"]:
        with pytest.raises(ProcessLookupError):
            os.killpg(node["pid"], 0)


@pytest.mark.slow
def test_emulated_compute_replays_a_profile_measured_by_the_launcher(tmp_path):
    out = tmp_path / "run.json"
    proc = _realrun(
        "-o",
        str(out),
        "--no-progress",
        "--set",
        "realrun.compute=emulated",
        "--set",
        "realrun.dilation=2",
    )
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    record = load_record(out)
    env = record.environment
    assert (env["compute"], env["time_dilation"]) == ("emulated", 2.0)
    assert env["compute_profile"]["model"] == "mlp" and env["compute_profile"]["batch"] == 32
    assert env["workers"]["1"]["compute"] == "emulated"
    assert all(t.loss is None for t in record.iterations)
    # The summary is in emulated-cluster time: wall-clock iteration times halved.
    measured = [t.total_s for t in record.iterations if t.worker == 0 and t.iteration >= 2]
    assert record.summary.time_dilation == 2.0
    assert record.summary.samples_per_s_per_worker[0] == pytest.approx(
        32 / (statistics.fmean(measured) / 2)
    )


def test_real_compute_on_gpus_this_machine_lacks_is_refused_before_starting(tmp_path) -> None:
    """A newcomer's `realrun run scenarios/64gpu.yaml` on a laptop: not 64 ResNet-50 replicas
    on the CPU until the kernel kills one, but one line saying what to run instead."""
    import torch

    from realrun.cli import main as realrun_main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the scenario's GPUs may be here")
    out = tmp_path / "run.json"
    gpu_scenario = str(ROOT / "scenarios" / "64gpu.yaml")
    assert realrun_main(["run", gpu_scenario, "-o", str(out)]) == 2
    assert not out.exists()
    with pytest.raises(SystemExit) as stop:
        realrun_main(["run", str(SCENARIO), "--timeout", "-1"])
    assert stop.value.code == 2


def test_the_refusal_says_what_to_run_instead(capsys) -> None:
    from realrun.run import check_accelerators_here
    from simscale.spec.scenario import load_scenario

    gpu_scenario = ROOT / "scenarios" / "64gpu.yaml"
    for fine in (["realrun.compute=emulated"], ["realrun.device=cpu"]):
        check_accelerators_here(load_scenario(gpu_scenario, fine))
    check_accelerators_here(load_scenario(SCENARIO))  # the CPU scenario's workers are the CPU
    import torch

    if torch.cuda.is_available():
        return
    with pytest.raises(ValueError, match=r"V100 GPUs with real compute.*realrun\.compute=emulated"):
        check_accelerators_here(load_scenario(gpu_scenario))


def test_a_missing_hostfile_is_named_before_starting(tmp_path) -> None:
    from realrun.run import LaunchOptions, check_runnable
    from simscale.spec.scenario import load_scenario

    missing = tmp_path / "hosts"
    with pytest.raises(ValueError, match=r"^-H .*hosts: no such file, expected one host per line"):
        check_runnable(load_scenario(SCENARIO), LaunchOptions("ssh", str(missing)))
