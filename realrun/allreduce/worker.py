"""One rank of an all-reduce job: ``python -m realrun.allreduce.worker --scenario PATH``.

Started by ``realrun run`` (any launcher) or by any PyTorch launcher that sets ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` (and ``LOCAL_RANK``), e.g.::

    torchrun --nproc-per-node 2 -m realrun.allreduce.worker \
        --scenario scenarios/cpu-2x2-allreduce.yaml

Under realrun's launchers (``REALRUN_STORE_HOSTED=1``) the rank reports its environment, every
iteration and its end through the job's store to the coordinator, and beats a heartbeat there;
otherwise it prints the same reports as JSON lines on stdout. With ``REALRUN_TRACE=1`` it also
reports its measured timeline (``realrun.records.timeline``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from dataclasses import asdict
from typing import Any

from realrun.allreduce.membership import MembershipError, ReportSigner, prove_membership
from realrun.allreduce.rendezvous import (
    STORE_EVENTS_KEY,
    DistEnv,
    close_group,
    connect_store,
    dist_env,
    heartbeat_key,
)
from realrun.ps.roles import HEARTBEAT_INTERVAL_S, RoleError
from realrun.records.timeline import rank_tracing

log = logging.getLogger("realrun.allreduce.worker")


class Reporter:
    """Where this rank's reports go: the coordinator's queue in the store, or stdout."""

    def __init__(self, env: DistEnv, store: Any | None) -> None:
        self.rank = env.rank
        # Its own connection: the heartbeat thread and the process group use theirs.
        self.store = store.clone() if (store is not None and env.store_hosted) else None
        # Lines in the store are signed: anyone can reach the store, only members sign.
        self.signer = ReportSigner(env.key, env.rank) if self.store is not None else None
        self._lock = threading.Lock()

    def report(self, kind: str, **body: Any) -> None:
        event = {"type": kind, "rank": self.rank, **body}
        with self._lock:
            if self.store is not None and self.signer is not None:
                self.store.queue_push(STORE_EVENTS_KEY, self.signer.sign(event))
            else:
                sys.stdout.write(json.dumps(event) + "\n")
                sys.stdout.flush()


class Heartbeat:
    """Counts up a per-rank key in the store every HEARTBEAT_INTERVAL_S, so the coordinator
    notices a rank that stopped (SIGSTOP, a hung host) as the PS scheduler does."""

    def __init__(self, env: DistEnv, store: Any) -> None:
        self.key = heartbeat_key(env.rank)
        self.store = store.clone()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2 * HEARTBEAT_INTERVAL_S)

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self.store.add(self.key, 1)
            except Exception:  # the coordinator is gone: the job is ending anyway
                return
            self._stop.wait(HEARTBEAT_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realrun.allreduce.worker", description=__doc__)
    parser.add_argument("--scenario", required=True, help="scenario YAML")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument(
        "--compute-profile",
        metavar="JSON",
        help="per-layer times an emulated DDP/FSDP rank replays (realrun.compute_times measured)",
    )
    args = parser.parse_args(argv)
    try:
        env = dist_env()
    except RoleError as e:
        print(f"realrun.allreduce.worker: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level={"1": logging.INFO, "2": logging.DEBUG}.get(
            os.environ.get("PS_VERBOSE", ""), logging.WARNING
        ),
        stream=sys.stderr,
        format=f"%(asctime)s rank{env.rank}[{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    return run_rank(env, args.scenario, args.set, args.compute_profile)


def run_rank(
    env: DistEnv, scenario_path: str, overrides: list[str], profile_path: str | None = None
) -> int:
    """Train this rank to the end; 0 on success, 1 after reporting a failure."""
    where = f"worker rank {env.rank} on {env.node_host}"
    try:
        store = connect_store(env)
    except RoleError as e:
        log.error("%s: %s", where, e)
        return 1
    reporter = Reporter(env, store)
    heartbeat = Heartbeat(env, store).start() if env.store_hosted else None
    try:
        reporter.report("hello", host=env.node_host, pid=os.getpid())
        trainer = build_trainer(env, store, scenario_path, overrides, profile_path)
        from realrun.node import environment

        reporter.report("environment", **environment(), **trainer.describe())
        trainer.run(lambda t: reporter.report("iteration", **asdict(t)))
        # Again at the end, with what the run measured (a DDP/FSDP rank's bytes sent).
        reporter.report("environment", **environment(), **trainer.describe())
        if rank_tracing():
            reporter.report("trace", **trainer.recorder.report())
        close_group(trainer.group)
        reporter.report("finished")
        return 0
    except Exception as e:  # tell the coordinator, which ends the job naming this rank
        if isinstance(e, MembershipError):  # an expected refusal: one line, no traceback
            log.error("%s: %s", where, e)
        else:
            log.exception("%s failed", where)
        # If the store is gone too, the exit status still says it.
        with contextlib.suppress(Exception):
            # A refused membership is the job's cause of failure, not a peer's echo of one.
            reporter.report(
                "failed",
                message=f"{type(e).__name__}: {e}",
                cause=isinstance(e, MembershipError),
            )
        return 1
    finally:
        if heartbeat is not None:
            heartbeat.stop()


def build_trainer(
    env: DistEnv,
    store: Any,
    scenario_path: str,
    overrides: list[str],
    profile_path: str | None = None,
):
    """The scenario's plan for this rank, its process group and its trainer."""
    import torch

    from realrun.allreduce.rendezvous import backend_for, process_group
    from realrun.allreduce.trainer import AllreduceTrainer, rank_devices
    from realrun.training import torch_models
    from simscale.spec.scenario import load_scenario

    scenario = load_scenario(scenario_path, overrides)
    if scenario.kvstore.mode in ("ddp", "zero"):
        return build_data_parallel(env, store, scenario, profile_path)
    plan = plan_from_scenario(scenario, env.rank, env.world_size, env.local_rank)
    torch.set_num_threads(scenario.realrun.threads_per_worker)
    group = process_group(env, store, backend_for(rank_devices(plan)[0]))
    _prove(env, group)
    return AllreduceTrainer(group, env.rank, plan, torch_models)


def _prove(env: DistEnv, group: Any) -> None:
    if env.secret:  # before the first gradient: every rank of the group is the job's
        prove_membership(group, env.rank, env.world_size, env.key)
    else:
        log.warning("REALRUN_JOB_SECRET is not set: the ranks of this job are not authenticated")


def build_data_parallel(env: DistEnv, store: Any, scenario: Any, profile_path: str | None = None):
    """A DDP or FSDP rank (``realrun.allreduce.data_parallel``) on the job's gloo group, on
    the CPU or on an emulated device (``realrun.allreduce.emulated_model``)."""
    import torch
    import torch.distributed as dist

    from realrun.allreduce.data_parallel import DataParallelTrainer, wrap_group
    from realrun.allreduce.rendezvous import process_group
    from realrun.training import torch_models

    plan = data_parallel_plan(scenario, env.rank, env.world_size, env.master_port)
    torch.set_num_threads(scenario.realrun.threads_per_worker)
    backend = process_group(env, store, "gloo")
    group = wrap_group(backend, dist.PrefixStore("realrun/pg", store), env.rank, env.world_size)
    _prove(env, backend)
    if scenario.realrun.compute == "emulated":
        from realrun.allreduce.emulated_model import EmulatedModels, rank_seconds

        seconds = rank_seconds(scenario, plan.host, profile_path)
        models = EmulatedModels(scenario.model_spec(), seconds, plan.seed, env.rank)
        return DataParallelTrainer(group, env.rank, plan, models)
    return DataParallelTrainer(group, env.rank, plan, torch_models)


def data_parallel_plan(scenario: Any, rank: int, world_size: int, store_port: int | None = None):
    """This rank's DataParallelPlan; ValueError for what the DDP/FSDP ranks do not run."""
    from realrun.allreduce.data_parallel import DataParallelPlan
    from realrun.allreduce.layout import process_layout
    from realrun.node import check_compute
    from realrun.training.torch_models import GPT2_TWINS, names

    kv, tr, sim = scenario.kvstore, scenario.training, scenario.simulation
    check_all_reduce_compute(scenario)
    check_compute(scenario)
    if scenario.realrun.device == "cuda":
        raise ValueError("realrun.device cuda: the DDP/FSDP ranks run on CPU over gloo only")
    real = scenario.realrun.compute == "real"
    if real and scenario.model.name not in names():
        raise ValueError(f"model {scenario.model.name!r} has no torch twin in realrun")
    if real and kv.mode == "zero" and scenario.model.name not in GPT2_TWINS:
        raise ValueError(
            f"kvstore.mode zero wraps GPT-2 blocks as FSDP units; {scenario.model.name!r} is not "
            "a GPT-2 (use a gpt2* model)"
        )
    slots = process_layout(scenario)
    if world_size != len(slots):
        raise ValueError(f"WORLD_SIZE={world_size}, but the scenario has {len(slots)} GPUs")
    slot = slots[rank]
    opt = tr.optimizer
    if opt.type != "sgd":
        raise ValueError(f"training.optimizer.type {opt.type!r}: realrun trains with sgd only")
    if kv.ddp.comm_hook_passes:
        raise ValueError(
            f"kvstore.ddp.comm_hook_passes {kv.ddp.comm_hook_passes}: realrun's DDP registers no "
            "comm hook"
        )
    return DataParallelPlan(
        mode=kv.mode,
        model=scenario.model.name,
        batch_per_gpu=tr.batch_per_gpu,
        seq_len=tr.seq_len,
        micro_batches=tr.micro_batches,
        host=slot.host,
        replica=slot.first_replica,
        iterations=sim.warmup_iterations + sim.measured_iterations,
        warmup=sim.warmup_iterations,
        seed=sim.seed,
        learning_rate=opt.learning_rate,
        momentum=opt.momentum,
        weight_decay=opt.weight_decay,
        bucket_mb=kv.ddp.bucket_mb,
        first_bucket_mb=kv.ddp.first_bucket_mb,
        stage=kv.zero.stage,
        prefetch=kv.zero.prefetch,
        store_port=store_port,
    )


def plan_from_scenario(scenario: Any, rank: int, world_size: int, local_rank: int = 0):
    """This rank's AllreducePlan; ValueError when the scenario is not one realrun runs this way
    or the launcher started a different number of ranks than its layout has."""
    from realrun.allreduce.fusion import BYTES_PER_MB
    from realrun.allreduce.layout import process_layout
    from realrun.allreduce.trainer import AllreducePlan
    from realrun.node import check_compute
    from realrun.ps.optimizer import SGD

    kv, tr, rr, sim = scenario.kvstore, scenario.training, scenario.realrun, scenario.simulation
    if kv.mode != "allreduce":
        raise ValueError(f"kvstore.mode is {kv.mode!r}; this worker runs 'allreduce' only")
    check_all_reduce_compute(scenario)
    check_compute(scenario)
    slots = process_layout(scenario)
    if world_size != len(slots):
        raise ValueError(
            f"WORLD_SIZE={world_size}, but the scenario's {kv.allreduce.algorithm} all-reduce "
            f"runs {len(slots)} ranks ({scenario.num_workers} hosts, "
            f"{'one rank per GPU' if kv.allreduce.algorithm == 'ring' else 'one per host'})"
        )
    slot = slots[rank]
    opt = tr.optimizer
    return AllreducePlan(
        model=scenario.model.name,
        batch_per_gpu=tr.batch_per_gpu,
        host=slot.host,
        first_replica=slot.first_replica,
        replicas=slot.replicas,
        iterations=sim.warmup_iterations + sim.measured_iterations,
        seed=sim.seed,
        # The all-reduce sums every GPU's mean-loss gradient; 1/GPUs averages them (the rule
        # the PS servers apply to the same sum).
        optimizer=SGD(opt.learning_rate, opt.momentum, opt.weight_decay, 1.0 / scenario.num_gpus),
        fusion_bytes=kv.allreduce.fusion_mb * BYTES_PER_MB,
        cycle_s=kv.allreduce.cycle_ms * 1e-3,
        algorithm=kv.allreduce.algorithm,
        device=rr.device,
        local_rank=local_rank if slot.replicas == 1 else 0,
    )


def check_all_reduce_compute(scenario: Any) -> None:
    """ValueError for what the all-reduce backend does not run (emulated compute outside
    DDP/FSDP, HSDP)."""
    if scenario.realrun.compute != "real" and scenario.kvstore.mode not in ("ddp", "zero"):
        raise ValueError(
            "realrun.compute is 'emulated', but the Horovod-style all-reduce trains for real "
            "only (DDP and FSDP emulate it: kvstore.mode ddp or zero); use realrun.compute=real"
        )
    zero = scenario.kvstore.zero
    if scenario.kvstore.mode == "zero" and zero.shard_group != "world":
        raise ValueError(
            f"kvstore.zero.shard_group is {zero.shard_group!r}, but realrun's FSDP shards over "
            "every rank only (HSDP is simulated, not run); use shard_group world"
        )


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown: destroying torch.distributed's C++ objects
    there aborted a finished rank about once in ten runs under torchrun on this machine
    (torch 2.13: "terminate called without an active exception", exit -6, after the rank had
    reported everything), which launchers read as a failed job."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
