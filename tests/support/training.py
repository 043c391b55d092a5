"""Small real trainings in this process, shared by the training, all-reduce and trace tests:
the mlp with one set of hyper-parameters, a PS worker's plan, and all-reduce ranks as threads
(each with its own gloo process group over TCP on 127.0.0.1: no subprocess, no GPU)."""

from __future__ import annotations

import datetime
import threading

import torch.distributed as dist

from realrun.allreduce.data_parallel import wrap_group
from realrun.allreduce.layout import RankSlot, process_layout
from realrun.allreduce.trainer import AllreducePlan, AllreduceTrainer
from realrun.ps.optimizer import SGD
from realrun.training import torch_models
from realrun.training.worker_loop import TrainPlan
from simscale.spec.scenario import Scenario, scenario_from_dict

LR, MOMENTUM, WD = 0.05, 0.9, 1e-3
BATCH, ITERATIONS, SEED = 8, 4, 3
PS_WORKERS = 2  # the PS trainings run this many workers
JOIN_LIMIT_S = 60.0


def ps_plan(gpus: int) -> TrainPlan:
    """A dist_sync plan for one of PS_WORKERS workers with ``gpus`` replicas each."""
    optimizer = SGD(LR, MOMENTUM, WD, rescale_grad=1.0 / (PS_WORKERS * gpus))
    return TrainPlan("mlp", BATCH, gpus, ITERATIONS, SEED, True, optimizer)


def allreduce_scenario(hosts: int, gpus: int, algorithm: str) -> Scenario:
    """The mlp on ``hosts`` CPU hosts of ``gpus`` "GPUs", all-reduced by ``algorithm``."""
    return scenario_from_dict(
        {
            "cluster": {
                "hosts": [{"count": hosts, "gpus_per_host": gpus, "gpu": "cpu", "nic_gbps": 10}]
            },
            "model": {"name": "mlp"},
            "training": {"batch_per_gpu": BATCH},
            "kvstore": {"mode": "allreduce", "allreduce": {"algorithm": algorithm}},
        }
    )


def train_in_threads(
    hosts: int, gpus: int, algorithm: str, fusion_bytes: float, cycle_s: float
) -> list[tuple[AllreduceTrainer, list]]:
    """Every rank of the scenario's layout trains in its own thread; results in rank order."""
    slots = process_layout(allreduce_scenario(hosts, gpus, algorithm))
    timeout = datetime.timedelta(seconds=30)
    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timeout, wait_for_workers=False)
    results: dict[int, tuple[AllreduceTrainer, list]] = {}
    errors: list[BaseException] = []

    def run(slot: RankSlot) -> None:
        try:
            client = dist.TCPStore("127.0.0.1", store.port, None, False, timeout=timeout)
            group = dist.ProcessGroupGloo(
                dist.PrefixStore("pg", client), slot.rank, len(slots), timeout
            )
            plan = AllreducePlan(
                "mlp",
                BATCH,
                slot.host,
                slot.first_replica,
                slot.replicas,
                ITERATIONS,
                SEED,
                SGD(LR, MOMENTUM, WD, rescale_grad=1.0 / (hosts * gpus)),
                fusion_bytes,
                cycle_s,
                algorithm,
                device="cpu",
            )
            trainer = AllreduceTrainer(group, slot.rank, plan, torch_models)
            results[slot.rank] = (trainer, trainer.run())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_LIMIT_S)
    assert not errors, errors
    assert len(results) == len(slots), "a rank did not finish"
    return [results[r] for r in range(len(slots))]


def loopback_data_parallel_group(
    rank: int, ranks: int, port: int, timeout_s: float
) -> dist.ProcessGroup:
    """Rank ``rank`` of a gloo group of ``ranks`` processes on 127.0.0.1, rendezvous at
    ``port`` (rank 0 hosts the store), wrapped as the DDP/FSDP trainer uses it."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, ranks, rank == 0, timeout=timeout)
    prefixed = dist.PrefixStore("pg", store)
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    backend = dist.ProcessGroupGloo(prefixed, rank, ranks, options)
    return wrap_group(backend, prefixed, rank, ranks)
