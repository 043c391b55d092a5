"""One run from scenario file to record file, on any launcher: what ``realrun run`` and
``realrun campaign`` share.

Checks what can be checked before anything starts (compute mode against dilation, root for the
emulated cluster), builds the launcher, runs the ``Job``, then adds what only the launcher side
knows: raw figures (the summary is in the scenario's time; an emulated cluster at dilation D
runs D times slower, so raw samples/s = undilated / D) and, on the emulated cluster, this
machine's load over the measured iterations with the verdict ``valid``/``invalid_reason``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from realrun.launching.launch import Launcher
from realrun.launching.output_log import StderrLog, log_path
from realrun.records.record import RunRecord, write_record
from realrun.records.timeline import merge, trace_path, write_measured
from simscale.report.outputs import timestamped
from simscale.spec.scenario import Scenario, load_scenario

LAUNCHERS = ("local", "netns", "ssh")
# Records of one-off runs: kept apart from the datasets under runs/ (calibration skips a
# folder of this name unless it is given explicitly) and ignored by git.
AD_HOC_RECORDS = Path("runs") / "local"


def record_name(scenario: Scenario, overrides: Sequence[str] = ()) -> str:
    """The scenario's own name when it runs as written; with ``--set`` overrides, a name made
    from the effective scenario (model, workers, servers, mode, placement), so that a sync
    scenario run with ``kvstore.mode=dist_async`` is not filed as "...-sync"."""
    if not overrides:
        return scenario.name
    kv = scenario.kvstore
    mode = kv.mode.removeprefix("dist_")
    return (
        f"{scenario.model.spec().name}-{scenario.num_workers}w{scenario.num_servers}s-"
        f"{mode}-{kv.placement}"
    )


def default_record_path(scenario: Scenario, overrides: Sequence[str] = ()) -> Path:
    """A new file under AD_HOC_RECORDS, named for the effective scenario and the time."""
    return timestamped(AD_HOC_RECORDS, record_name(scenario, overrides), ".json")


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """How to start the nodes: the launcher name and, for ssh, the hosts and ssh options."""

    launcher: str = "local"
    hostfile: str | None = None
    ssh_options: tuple[str, ...] = ()


def check_runnable(scenario: Scenario, options: LaunchOptions) -> None:
    """ValueError (or NetnsUnavailable) for a run that cannot be right, before starting it."""
    from realrun.node import check_compute

    check_compute(scenario)
    if scenario.kvstore.rpc != "ps-lite":
        raise ValueError(
            f"kvstore.rpc {scenario.kvstore.rpc!r}: realrun's servers speak ps-lite over zmq "
            "only; the simulator models gRPC's copies (simscale predict)"
        )
    if scenario.kvstore.key_placement != "hash":
        raise ValueError(
            f"kvstore.key_placement {scenario.kvstore.key_placement!r}: realrun places keys by "
            "MXNet's hash only; the simulator models TensorFlow's placements (simscale predict)"
        )
    if scenario.kvstore.sync != "key":
        raise ValueError(
            f"kvstore.sync {scenario.kvstore.sync!r}: realrun's servers merge each key and "
            "answer its pulls (MXNet's dist_sync); the simulator models TensorFlow's step "
            "barrier (simscale predict)"
        )
    if options.launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {options.launcher!r}; known: {', '.join(LAUNCHERS)}")
    if options.launcher == "netns":
        from realrun.emulated.netns import require_netns_support

        require_netns_support()
    if options.launcher == "ssh" and not options.hostfile:
        raise ValueError("--launcher ssh needs a hostfile (-H FILE)")
    if options.launcher == "ssh" and not Path(options.hostfile).is_file():
        raise ValueError(f"-H {options.hostfile}: no such file, expected one host per line")
    if options.launcher in ("local", "netns"):
        check_accelerators_here(scenario)


def check_accelerators_here(scenario: Scenario) -> None:
    """ValueError for real compute on GPUs this machine does not have: the workers would
    quietly train every GPU's replica on the CPU (64 ResNet-50 replicas for scenarios/64gpu.yaml,
    until the kernel kills one for memory), and time nothing the scenario describes."""
    rr = scenario.realrun
    if rr.compute != "real" or rr.device == "cpu":
        return
    gpus = sorted({h.resolved()[1] for h in scenario.cluster.hosts} - {"cpu"})
    if not gpus:
        return
    import torch

    if torch.cuda.is_available():
        return
    raise ValueError(
        f"the scenario trains on {', '.join(gpus)} GPUs with real compute, and this machine has "
        "no CUDA device: --set realrun.compute=emulated replays each GPU's modelled layer times "
        "(the traffic stays real), or --set realrun.device=cpu trains on the CPU anyway"
    )


@contextlib.contextmanager
def open_launcher(scenario: Scenario, options: LaunchOptions) -> Iterator[Launcher]:
    """The launcher, set up (a cluster built) and torn down around the job."""
    if options.launcher == "netns":
        from realrun.launching.netns_launcher import NetnsLauncher

        with NetnsLauncher(scenario) as launcher:
            yield launcher
    elif options.launcher == "ssh":
        from realrun.launching.ssh_launcher import SshLauncher, read_hostfile

        assert options.hostfile is not None
        yield SshLauncher(read_hostfile(options.hostfile), options.ssh_options)
    else:
        from realrun.launching.local_launcher import LocalLauncher

        yield LocalLauncher()


def run_scenario(
    scenario_path: str | Path,
    overrides: Sequence[str] = (),
    options: LaunchOptions | None = None,
    output: str | Path | None = None,
    progress: bool = True,
    timeout_s: float | None = None,
    trace: str | Path | None = None,
) -> tuple[RunRecord, Path]:
    """Run once and write the record (default: a new ``runs/local/NAME-TIME.json``, see
    ``default_record_path``) and, beside it, the log of everything the launcher and its nodes
    wrote to stderr (``NAME-TIME.log``); never raises for a failed job (the record says), only
    for one that could not start. With ``trace`` (or ``$REALRUN_TRACE_DIR``) a run with real
    compute also writes its measured timeline."""
    from realrun.allreduce.job import AllreduceJob
    from realrun.launching.job import Job

    options = options or LaunchOptions()
    path = str(scenario_path)
    scenario = load_scenario(path, list(overrides))
    check_runnable(scenario, options)
    out = Path(output) if output else default_record_path(scenario, overrides)
    timeline = trace_path(trace, out)
    log = log_path(out)
    # Every line the launcher and its nodes write goes to the log file too, and a reader of
    # stderr that goes away can no longer end the job (realrun.launching.output_log).
    with StderrLog(log) as output, open_launcher(scenario, options) as launcher:
        collective = scenario.kvstore.mode in ("allreduce", "ddp", "zero")
        job_class = AllreduceJob if collective else Job
        job = job_class(
            path,
            launcher,
            list(overrides),
            progress=progress,
            timeout_s=timeout_s,
            progress_stream=output.console,
        )
        job.tracing = timeline is not None
        record = job.run()
        record = with_launcher_findings(record, launcher, scenario)
    env = {**record.environment, "log": str(log)}
    record = dataclasses.replace(record, environment=env)
    write_record(record, out)
    spans = merge(job.state.traces)
    if timeline is not None and spans:
        write_measured(timeline, spans, scenario.simulation.warmup_iterations, scenario.name)
    return record, out


def measured_window(record: RunRecord) -> tuple[float, float] | None:
    """Unix seconds from the first measured iteration's start to the last one's end."""
    warmup = int(record.scenario["simulation"]["warmup_iterations"])
    measured = [t for t in record.iterations if t.iteration >= warmup]
    if not measured:
        return None
    return (
        min(t.start_unix_s for t in measured),
        max(t.start_unix_s + t.total_s for t in measured),
    )


def with_launcher_findings(record: RunRecord, launcher: Any, scenario: Scenario) -> RunRecord:
    """The record plus raw (dilated) figures and, when the launcher sampled it, this machine's
    load."""
    env = dict(record.environment)
    d = float(scenario.realrun.dilation)
    s = record.summary
    # The summary is in the scenario's (undilated) time; the iterations and these raw figures
    # are this machine's wall clock: raw samples/s x D = undilated samples/s.
    env["dilation"] = {
        "factor": d,
        "compute": scenario.realrun.compute,
        "raw_samples_per_s": s.samples_per_s / d if s else None,
        "raw_mean_iteration_s": s.mean_iteration_s * d if s else None,
        "raw_median_iteration_s": s.median_iteration_s * d if s else None,
    }
    valid, reason = record.valid, record.invalid_reason
    sampler = getattr(launcher, "sampler", None)
    if sampler is not None:
        from realrun.emulated.machine_load import verdict

        sampler.sample()  # the job has ended: bracket the window from above
        figures, problem = verdict(list(sampler.samples), measured_window(record))
        env["machine_load"] = figures
        if problem is not None and record.complete:
            valid, reason = False, problem
    return dataclasses.replace(record, environment=env, valid=valid, invalid_reason=reason)
