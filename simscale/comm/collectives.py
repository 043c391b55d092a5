"""The communicators of a collective job, built from its scenario: the ring all-reduce every mode
shares, and for DDP or ZeRO each worker's bucket or shard schedule on top of it.

Kept out of the simulator so that it only asks "which communicator does rank r use?"; the
symmetric path's representative ring (``simscale.model.ring_symmetry``) is a ``successor``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from simscale.comm.allreduce import AllReduce
from simscale.comm.communicator import Communicator
from simscale.comm.sharded import collective_library, members
from simscale.model.cluster import Layout
from simscale.network import Network, Topology
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS
from simscale.spec.scenario import Scenario
from simscale.zoo import ModelSpec


@dataclass
class Collectives:
    """The job's all-reduce, and each worker's DDP/ZeRO member (empty for plain all-reduce)."""

    allreduce: AllReduce
    members: list[Communicator]


def build_collectives(
    env: simpy.Environment,
    net: Network,
    topology: Topology,
    layout: Layout,
    scenario: Scenario,
    costs: CostModel,
    model: ModelSpec,
    key_bytes: list[float],
    bytes_per_element: int,
    *,
    on_buffer: Callable[[list[tuple[int, int]], float, float, float], None] | None,
    ring_size: int,
    successor: int | None,
) -> Collectives:
    """``scenario``'s collectives on ``layout``; ``ring_size`` is the real cluster's worker count
    (a representative ring on the symmetric path sends to ``successor``)."""
    allreduce = AllReduce.for_scenario(
        env,
        net,
        topology,
        layout,
        scenario,
        costs,
        key_bytes,
        on_buffer,
        ring_size=ring_size,
        successor=successor,
    )
    kv = scenario.kvstore
    if kv.mode not in ("ddp", "zero"):
        return Collectives(allreduce, [])
    sharded = members(
        env,
        allreduce,
        layout.num_workers,
        kv.mode,
        model,
        key_bytes,
        bytes_per_element,
        bucket_mb=kv.ddp.bucket_mb,
        first_bucket_mb=kv.ddp.first_bucket_mb,
        zero_stage=kv.zero.stage,
        zero_bucket_mb=kv.zero.bucket_mb,
        prefetch=kv.zero.prefetch,
        library=collective_library(scenario),
        hybrid=kv.zero.shard_group == "host",
        ranks=scenario.num_gpus,
        hook_s_per_byte=hook_s_per_byte(scenario, layout),
    )
    return Collectives(allreduce, list(sharded))


def hook_s_per_byte(scenario: Scenario, layout: Layout) -> float:
    """Seconds per bucket byte of DDP's comm-hook passes (``ddp.comm_hook_passes``, each
    reading and writing the bucket) at the first worker's GPU memory bandwidth; 0 without a
    hook, outside DDP, or on a device that states no bandwidth (a CPU rank)."""
    passes = scenario.kvstore.ddp.comm_hook_passes
    gpu = GPUS[str(layout.hosts[layout.worker_hosts[0]].gpu)]
    if scenario.kvstore.mode != "ddp":
        return 0.0
    return gpu.memory_stream_s(2 * passes)
