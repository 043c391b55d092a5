"""Runs one scenario as a PS job through a launcher and turns what it hears into a run record.

The launcher starts the scheduler on port 0; the scheduler reports the port it got on its
event stream, then servers and workers are started pointing at it (no port is ever guessed,
so two jobs on one machine cannot collide). The job ends when the scheduler says done, or at
the first failure: a node that exits badly, a scheduler error, Ctrl-C, or the time limit.
Every process group is then terminated, and whatever was measured is kept.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import secrets
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from realrun.auth import MAC_VARIABLE, parse_mode
from realrun.launching.launch import Launcher, NodeProcess, node_command
from realrun.ps.roles import DEFAULT_HEARTBEAT_TIMEOUT_S, DEFAULT_START_TIMEOUT_S, NodeEnv
from realrun.records.progress import Progress
from realrun.records.record import SCHEMA_VERSION, IterationTiming, RunRecord, summarize
from realrun.records.timeline import RANK_TRACE_VARIABLE
from realrun.training.emulated_compute import emulated_times_source
from simscale.spec.scenario import Scenario, load_scenario
from simscale.spec.sharding import assign_key

log = logging.getLogger(__name__)

# The scheduler must report its port by then. It includes Python's and torch's start-up, which
# took over 30 s on a 2-core machine at load 10; a scheduler that dies fails at once instead.
LISTEN_TIMEOUT_S = 120.0
FAILURE_DETAIL_WAIT_S = 1.5  # after a node exits badly, how long the scheduler may explain why
TERMINATE_GRACE_S = 2.0  # SIGTERM, then SIGKILL after this
DONE_EXIT_WAIT_S = 5.0  # after "done", how long nodes get to exit by themselves


class JobFailed(RuntimeError):
    """The job stopped early; the message names the role, rank and host when known."""


@dataclass
class JobState:
    """What the job has heard so far."""

    iterations: list[IterationTiming] = field(default_factory=list)
    environments: dict[int, dict[str, Any]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    error: str | None = None
    traces: dict[int, dict[str, Any]] = field(default_factory=dict)  # realrun.records.timeline


# Room beside the largest array slice for the header, a JSON body (message.MAX_BODY_BYTES) and
# the authentication tag.
MESSAGE_HEADROOM_BYTES = 2 << 20


def max_message_bytes(scenario: Scenario) -> int:
    """The largest message a server of this job has a reason to receive: its largest key slice
    in fp32 (simscale.spec.sharding splits the keys as realrun's workers do) plus headroom."""
    servers = scenario.num_servers
    bound = scenario.kvstore.bigarray_bound
    arrays = scenario.model.spec().arrays
    if servers < 1:  # all-reduce: no servers, and no array travels through realrun's van
        return max(a.elements for a in arrays) * 4 + MESSAGE_HEADROOM_BYTES
    largest = max(
        sl.elements
        for key, a in enumerate(arrays)
        for sl in assign_key(key, a.elements, servers, bound)
    )
    return largest * 4 + MESSAGE_HEADROOM_BYTES


class Job:
    """One run of ``scenario_path`` (with ``--set`` overrides) through ``launcher``."""

    def __init__(
        self,
        scenario_path: str,
        launcher: Launcher,
        overrides: Sequence[str] = (),
        progress: bool = True,
        timeout_s: float | None = None,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        progress_stream: TextIO | None = None,
    ) -> None:
        self.scenario_path = scenario_path
        self.overrides = tuple(overrides)
        self.scenario = load_scenario(scenario_path, self.overrides)
        self.launcher = launcher
        self.timeout_s = timeout_s
        self.num_workers = self.scenario.num_workers
        self.num_servers = self.scenario.num_servers
        self._check_mode()
        sim = self.scenario.simulation
        self.iterations = sim.warmup_iterations + sim.measured_iterations
        self.progress = (
            Progress(self.num_workers * self.iterations, self.scenario.name, progress_stream)
            if progress
            else None
        )
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.start_timeout_s = start_timeout_s
        self.emulated = self.scenario.realrun.compute == "emulated"
        self.dilation = self.scenario.realrun.dilation if self.emulated else 1.0
        self.profile: dict[str, Any] | None = None
        # Drawn per job and given only to its nodes (realrun.auth): a stranger cannot join.
        self.secret = secrets.token_hex(32)
        # What each message's tag covers (realrun.auth): the launching shell may ask for "full".
        self.message_mac = parse_mode(os.environ.get(MAC_VARIABLE, ""))
        self.max_message_bytes = max_message_bytes(self.scenario)
        self._workdir: tempfile.TemporaryDirectory | None = None
        self._worker_args: tuple[str, ...] = ()
        self.processes: list[NodeProcess] = []
        self.state = JobState()
        self.tracing = False  # set before run(): workers report their timelines
        self._events: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._reader: threading.Thread | None = None

    def _check_mode(self) -> None:
        """ValueError for a kvstore mode this job cannot run (realrun.allreduce runs allreduce)."""
        if self.num_servers < 1:
            raise ValueError(
                f"kvstore.mode {self.scenario.kvstore.mode!r} runs no servers; "
                "realrun runs the dist_* modes and allreduce"
            )

    def _samples_per_worker(self) -> list[int]:
        """Samples one worker process trains per iteration, in rank order."""
        s = self.scenario
        return [s.training.batch_per_gpu * s.gpus_per_worker(w) for w in range(self.num_workers)]

    def run(self) -> RunRecord:
        """Run to the end or the first failure; never raises for a failed job (see record)."""
        started = time.time()
        t0 = time.monotonic()
        try:
            self._run()
        except KeyboardInterrupt as e:
            self.state.error = f"interrupted ({e.args[0] if e.args else 'Ctrl-C'})"
        except JobFailed as e:
            self.state.error = str(e)
        except Exception as e:  # a launcher or profiling failure still leaves a record
            log.exception("the job failed")
            self.state.error = f"launcher: {type(e).__name__}: {e}"
        finally:
            self._teardown()
            if self.progress:
                self.progress.close()
            if self._workdir is not None:
                self._workdir.cleanup()
        return self._record(started, time.monotonic() - t0)

    # ---- running ----

    def _run(self) -> None:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        if self.emulated and emulated_times_source(self.scenario) == "measured":
            self._measure_profile()
        scheduler = self._start("scheduler", 0, root_port=0)
        assert scheduler.stdout is not None
        self._reader = threading.Thread(
            target=self._read_events, args=(scheduler.stdout,), name="scheduler-events", daemon=True
        )
        self._reader.start()
        port = self._await_port(scheduler)
        for rank in range(self.num_servers):
            self._start("server", rank, port)
        for rank in range(self.num_workers):
            self._start("worker", rank, port)
        while not self.state.done:
            self._drain(0.1)
            if self.state.error is not None:
                raise JobFailed(self.state.error)
            if self.state.done:
                break
            for p in self.processes:
                rc = p.poll()
                if rc is not None and (rc != 0 or p.role == "scheduler"):
                    reason = self._explain_exit(p, rc)
                    if not self.state.done:  # the scheduler may have said "done" and left
                        raise JobFailed(reason)
            if deadline is not None and time.monotonic() > deadline:
                raise JobFailed(f"time limit of {self.timeout_s:.0f} s reached")
        # Done: give the nodes a moment to leave by themselves.
        end = time.monotonic() + DONE_EXIT_WAIT_S
        for p in self.processes:
            p.wait(max(0.0, end - time.monotonic()))

    def _measure_profile(self) -> None:
        """Emulated compute replays per-layer times measured here, once, on the real model."""
        import torch

        from realrun.training import torch_models
        from realrun.training.compute_profile import measure
        from realrun.training.overlap import resolve_devices

        s = self.scenario
        torch.set_num_threads(s.realrun.threads_per_worker)
        device = resolve_devices(s.realrun.device, 1)[0]
        profile = measure(
            torch_models,
            s.model.name,
            s.training.batch_per_gpu,
            str(device),
            seed=s.simulation.seed,
        )
        self.profile = profile.to_dict()
        self._workdir = tempfile.TemporaryDirectory(prefix="realrun-")
        path = Path(self._workdir.name) / "compute_profile.json"
        path.write_text(json.dumps(self.profile))
        self._worker_args = ("--compute-profile", str(path))

    def _start(self, role: str, rank: int, root_port: int) -> NodeProcess:
        node = NodeEnv(
            role,
            self.launcher.scheduler_host,
            root_port,
            self.num_servers,
            self.num_workers,
            self.launcher.host_of(role, rank),
            None if role == "scheduler" else rank,
            self.heartbeat_timeout_s,
            self.start_timeout_s,
            self.secret,
            self.max_message_bytes,
            self.message_mac,
        )
        cmd = node_command(node, rank, self.scenario_path, self.overrides, self._worker_args)
        env = {**cmd.env, RANK_TRACE_VARIABLE: "1"} if self.tracing else cmd.env
        p = self.launcher.start(role, rank, cmd.argv, env)
        self.processes.append(p)
        return p

    def _await_port(self, scheduler: NodeProcess) -> int:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                event = self._events.get(timeout=0.1)
            except queue.Empty:
                rc = scheduler.poll()
                if rc is not None:
                    raise JobFailed(self._explain_exit(scheduler, rc)) from None
                continue
            if event is None:
                continue
            if event.get("event") == "listening":
                return int(event["port"])
            self._handle(event)
            if self.state.error:
                raise JobFailed(self.state.error)
        raise JobFailed(f"the scheduler did not report a port within {LISTEN_TIMEOUT_S:.0f} s")

    def _read_events(self, stream) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                log.warning("scheduler printed a non-event line: %r", line[:200])
                continue
            if isinstance(event, dict):
                self._events.put(event)
        self._events.put(None)

    def _drain(self, timeout_s: float) -> None:
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return
        while event is not None:
            self._handle(event)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "report":
            body = dict(event)
            rank = int(body.pop("rank"))
            what = body.pop("type", None)
            body.pop("event", None)
            if what == "iteration":
                self.state.iterations.append(IterationTiming(**body))
                if self.progress:
                    self.progress.update(len(self.state.iterations))
            elif what == "environment":
                self.state.environments[rank] = body
            elif what == "trace":
                self.state.traces[rank] = body
        elif kind == "assigned":
            self.state.nodes = list(event["nodes"])
        elif kind == "done":
            self.state.done = True
        elif kind == "error":
            self.state.error = str(event.get("message", "the scheduler reported an error"))

    def _explain_exit(self, p: NodeProcess, rc: int) -> str:
        """The clearest one-line reason: the scheduler's if it has one, else the exit status."""
        if p.role == "scheduler" and self._reader is not None:
            self._reader.join(TERMINATE_GRACE_S)  # its last events may still be in the pipe
            self._drain(0.0)
            if self.state.error is not None:
                return self.state.error
        if rc > 0:
            end = time.monotonic() + FAILURE_DETAIL_WAIT_S
            while time.monotonic() < end and self.state.error is None:
                self._drain(0.1)
            if self.state.error is not None:
                return self.state.error
        how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
        rank = "" if p.role == "scheduler" else f" rank {p.rank}"
        return f"{p.role}{rank} on {p.host} (pid {p.pid}) {how}"

    def _teardown(self) -> None:
        alive = [p for p in self.processes if p.poll() is None]
        for p in alive:
            p.signal_group(signal.SIGTERM)
        end = time.monotonic() + TERMINATE_GRACE_S
        for p in alive:
            p.wait(max(0.0, end - time.monotonic()))
        for p in self.processes:
            # SIGKILL the whole group even if the leader exited: its children may not have.
            p.signal_group(signal.SIGKILL)
            p.wait(TERMINATE_GRACE_S)
            if p.stdout is not None:
                p.stdout.close()
        if self._reader is not None:
            self._reader.join(TERMINATE_GRACE_S)
        self._drain(0.0)

    # ---- the record ----

    def _record(self, started: float, wall_s: float) -> RunRecord:
        s = self.scenario
        iterations = sorted(self.state.iterations, key=lambda t: (t.iteration, t.worker))
        samples = self._samples_per_worker()
        complete = (
            self.state.done
            and self.state.error is None
            and len(iterations) == (self.num_workers * self.iterations)
        )
        error = self.state.error
        if not complete and error is None:
            error = (
                f"only {len(iterations)} of {self.num_workers * self.iterations} "
                "worker-iterations were reported"
            )
        env = {
            "launcher": self.launcher.name,
            "launcher_details": self.launcher.describe(),
            "launcher_hostname": socket.gethostname(),
            "num_workers": self.num_workers,
            "num_servers": self.num_servers,
            # How the workers ordered each key's pull (realrun.ps.kv_worker); records without
            # it pipelined the pull behind the push (realrun.records.record.PULL_REQUEST_BEFORE).
            "pull_request": s.kvstore.pull_request,
            # Under after_ack, what a key's pulls waited for: "key", every slice's ack, as
            # MXNet; records without it pulled each slice of a split key as its own ack came.
            "pull_after_ack_of": "key",
            # How the workers' messages left (realrun.ps.postoffice); records without it sent by
            # priority with a 256 KiB window (realrun.records.record.SCHEDULING_BEFORE).
            "scheduling": s.kvstore.scheduling,
            "workers": {str(k): v for k, v in sorted(self.state.environments.items())},
            "nodes": self.state.nodes,
            "compute": "emulated" if self.emulated else "real",
            "time_dilation": self.dilation,
            "compute_profile": self.profile,
        }
        return RunRecord(
            schema_version=SCHEMA_VERSION,
            scenario=s.to_dict(),
            environment=env,
            iterations=tuple(iterations),
            summary=summarize(iterations, s.simulation.warmup_iterations, samples, self.dilation),
            complete=complete,
            error=error,
            started_unix_s=started,
            wall_s=wall_s,
        )
