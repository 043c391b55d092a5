"""``realrun run`` for ``kvstore.mode: allreduce``: the PS job's life cycle
(``realrun.launching.job``)
with the coordinator in the scheduler's place and one rank per process of the layout.

Everything else is the PS job's: the launcher (local, netns, ssh) places the coordinator on the
first host and rank r on its host (``realrun.allreduce.layout``), the coordinator's port comes
from its event stream, the job ends at "done" or the first failure, every process group is
killed at the end, and the record has the same format. A rank that dies is named by its exit
(the process the launcher watches), one that stalls by the coordinator's heartbeat watch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from realrun.allreduce.layout import process_layout
from realrun.allreduce.rendezvous import DistEnv
from realrun.launching.job import Job
from realrun.launching.launch import NodeProcess
from realrun.records.timeline import RANK_TRACE_VARIABLE


class AllreduceJob(Job):
    """One all-reduce run of ``scenario_path`` through ``launcher``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The arguments of ``realrun.launching.job.Job``."""
        super().__init__(*args, **kwargs)
        self.slots = process_layout(self.scenario)
        self.num_workers = len(self.slots)  # ranks: one per host, or one per GPU (ring)
        if self.progress:
            self.progress.total = self.num_workers * self.iterations

    def _check_mode(self) -> None:
        from realrun.allreduce.worker import check_all_reduce_compute

        if self.scenario.kvstore.mode not in ("allreduce", "ddp", "zero"):
            raise ValueError(
                f"kvstore.mode is {self.scenario.kvstore.mode!r}, not 'allreduce', 'ddp' or 'zero'"
            )
        check_all_reduce_compute(self.scenario)

    def _samples_per_worker(self) -> list[int]:
        batch = self.scenario.training.batch_per_gpu
        return [batch * slot.replicas for slot in self.slots]

    def _start(self, role: str, rank: int, root_port: int) -> NodeProcess:
        """The coordinator (in the scheduler's place), or rank ``rank`` on its layout host."""
        host_rank = 0 if role == "scheduler" else self.slots[rank].host
        env = DistEnv(
            self.launcher.scheduler_host,
            root_port,
            rank,
            self.num_workers,
            0 if role == "scheduler" else self._local_rank(rank),
            self.launcher.host_of(role, host_rank),
            store_hosted=True,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            start_timeout_s=self.start_timeout_s,
            secret=self.secret,
        ).to_env()
        if self.tracing:
            env[RANK_TRACE_VARIABLE] = "1"
        if role == "scheduler":
            # The store's server looks up every client's hostname and warns when it cannot,
            # once per connection, as on the emulated cluster's hosts (no names there).
            env["TORCH_CPP_LOG_LEVEL"] = "ERROR"
        module = "coordinator" if role == "scheduler" else "worker"
        argv = [sys.executable, "-m", f"realrun.allreduce.{module}"]
        if role == "worker":
            argv += worker_arguments(self.scenario_path, self.overrides)
            argv += list(self._worker_args)  # an emulated device's measured profile
        p = self.launcher.start(role, host_rank, argv, env)
        p.rank = rank  # placed by its host, named by its rank
        self.processes.append(p)
        return p

    def _local_rank(self, rank: int) -> int:
        """Index of rank ``rank`` among its host's ranks (torchrun's LOCAL_RANK)."""
        host = self.slots[rank].host
        return sum(1 for s in self.slots[:rank] if s.host == host)

    def _explain_exit(self, p: NodeProcess, rc: int) -> str:
        """When a rank dies, its peers' collectives fail and they exit too: name a rank killed
        by a signal before one that exited with an error of its own."""
        if rc > 0:
            for other in self.processes:
                code = other.poll()
                if code is not None and code < 0 and other.role == "worker":
                    return super()._explain_exit(other, code)
        return super()._explain_exit(p, rc)


def worker_arguments(scenario_path: str, overrides: Sequence[str]) -> list[str]:
    """A rank's ``--scenario PATH [--set ...]`` arguments."""
    argv = ["--scenario", str(Path(scenario_path).resolve())]
    for item in overrides:
        argv += ["--set", item]
    return argv
