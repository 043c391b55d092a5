"""Which processes an all-reduce scenario runs, and which GPUs (and data) each one owns.

``hierarchical`` (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE) runs one process per host: the
process sums its host's GPUs' gradients first (the intra-host reduce), then the hosts run the
ring between them. ``ring`` is Horovod's default, one rank per GPU in one flat ring. Either way
GPU ``g`` of host ``h`` trains on the same synthetic batches as PS worker ``h``'s replica ``g``
(``realrun.training.overlap.batch_seed``), so a PS run and an all-reduce run of a scenario see
the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankSlot:
    """One process of the job: its rank, its host, and the host's GPUs it drives."""

    rank: int
    host: int  # worker host index, the scenario's worker rank
    first_replica: int  # index on its host of the first GPU this process drives
    replicas: int  # GPUs (model replicas) this process drives


def process_layout(scenario: Any) -> tuple[RankSlot, ...]:
    """The processes of ``scenario`` in rank order (ranks of one host are contiguous)."""
    slots: list[RankSlot] = []
    # DDP and FSDP run one rank per GPU, as torchrun starts them.
    per_gpu = (
        scenario.kvstore.mode in ("ddp", "zero") or scenario.kvstore.allreduce.algorithm == "ring"
    )
    for host in range(scenario.num_workers):
        gpus = scenario.gpus_per_worker(host)
        if per_gpu:
            slots += [RankSlot(len(slots) + i, host, i, 1) for i in range(gpus)]
        else:
            slots.append(RankSlot(len(slots), host, 0, gpus))
    return tuple(slots)
