"""Where an all-reduce job meets: the ``torch.distributed`` environment and the process group.

The variables are the ones ``torchrun``, Slurm scripts and every PyTorch launcher set:
``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``. realrun's own
launchers add ``REALRUN_STORE_HOSTED=1``: the job's coordinator (``realrun.allreduce.
coordinator``) then hosts the TCP store and every rank is its client, reporting through it;
without it rank 0 hosts the store as ``init_process_group("env://")`` would (or torchrun's
agent does, with ``TORCHELASTIC_USE_AGENT_STORE``) and each rank prints its reports.
``REALRUN_JOB_SECRET`` (realrun.auth) is the job's secret: every rank proves it before training
(``realrun.allreduce.membership``); realrun's launchers always set it, a torchrun user should.
``REALRUN_NODE_HOST`` is the address this rank's gloo transport binds (our launchers know it;
otherwise the local address routed towards ``MASTER_ADDR``, as ``DMLC_NODE_HOST`` in the PS).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from realrun.auth import SECRET_VARIABLE, parse_secret
from realrun.ps.roles import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    RoleError,
    _float,
    _int,
    _required,
    route_address,
)

# A collective that takes this long means the job is wedged; the coordinator's heartbeats
# normally end a stalled job much sooner, this bounds a torchrun run that has none.
COLLECTIVE_TIMEOUT_S = 300.0
STORE_EVENTS_KEY = "realrun/events"


def heartbeat_key(rank: int) -> str:
    return f"realrun/heartbeat/{rank}"


@dataclass(frozen=True)
class DistEnv:
    """One rank's rendezvous settings."""

    master_addr: str
    master_port: int
    rank: int
    world_size: int
    local_rank: int
    node_host: str
    store_hosted: bool = False  # a coordinator hosts the store and collects the reports
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    secret: str = ""  # hex; "" only outside realrun's launchers (then nothing is proven)

    @property
    def key(self) -> bytes:
        return parse_secret(self.secret) if self.secret else b""

    def to_env(self) -> dict[str, str]:
        """The variables that recreate this DistEnv in a child process."""
        env = {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "REALRUN_NODE_HOST": self.node_host,
            "REALRUN_HEARTBEAT_TIMEOUT_S": str(self.heartbeat_timeout_s),
            "REALRUN_START_TIMEOUT_S": str(self.start_timeout_s),
        }
        if self.store_hosted:
            env["REALRUN_STORE_HOSTED"] = "1"
        if self.secret:
            env[SECRET_VARIABLE] = self.secret
        return env


def dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read and check a rank's environment (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    master = _required(env, "MASTER_ADDR")
    world = _int(env, "WORLD_SIZE", 1, 1 << 16)
    rank = _int(env, "RANK", 0, world - 1)
    hosted = env.get("REALRUN_STORE_HOSTED", "") == "1"
    secret = env.get(SECRET_VARIABLE, "")
    if hosted and not secret:
        raise RoleError(f"{SECRET_VARIABLE} is missing: realrun's launchers always set it")
    if secret:
        try:
            parse_secret(secret)
        except ValueError as e:
            raise RoleError(str(e)) from None
    return DistEnv(
        master,
        _int(env, "MASTER_PORT", 1, 65535),
        rank,
        world,
        _int(env, "LOCAL_RANK", 0, 1 << 16) if env.get("LOCAL_RANK") else 0,
        env.get("REALRUN_NODE_HOST") or route_address(master),
        hosted,
        _float(env, "REALRUN_HEARTBEAT_TIMEOUT_S", DEFAULT_HEARTBEAT_TIMEOUT_S),
        _float(env, "REALRUN_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S),
        secret,
    )


def connect_store(env: DistEnv) -> dist.TCPStore:
    """This rank's connection to the job's TCP store (rank 0 hosts it unless someone else
    does)."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    host_it = env.rank == 0 and not env.store_hosted and not agent
    try:
        return dist.TCPStore(
            env.master_addr,
            env.master_port,
            env.world_size if host_it else None,
            host_it,
            timeout=datetime.timedelta(seconds=env.start_timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, dist.DistError) as e:
        raise RoleError(
            f"cannot reach the job's store at MASTER_ADDR={env.master_addr} "
            f"MASTER_PORT={env.master_port}: {e}"
        ) from None


def backend_for(device: torch.device) -> str:
    """NCCL for CUDA tensors, gloo for the CPU (and so on the emulated cluster)."""
    return "nccl" if device.type == "cuda" else "gloo"


def process_group(env: DistEnv, store: dist.Store, backend: str) -> dist.ProcessGroup:
    """The job's process group. gloo is built directly on this rank's address (a machine with
    several interfaces, or a network namespace, must not bind the one its hostname names);
    NCCL through ``init_process_group``, which picks its transports itself."""
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    prefixed = dist.PrefixStore("realrun/pg", store)
    if backend == "gloo":
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=env.node_host)]
        return dist.ProcessGroupGloo(prefixed, env.rank, env.world_size, options)
    device = torch.device("cuda", env.local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        store=prefixed,
        rank=env.rank,
        world_size=env.world_size,
        timeout=timeout,
        device_id=device,
    )
    group = dist.group.WORLD
    assert group is not None
    return group


def close_group(group: dist.ProcessGroup) -> None:
    """Leave the job cleanly: wait for every rank at a barrier (so no peer closes a connection
    another still reads), then shut the group down before interpreter exit, where tearing down
    gloo's threads aborted a rank now and then ("terminate called without an active
    exception", seen under torchrun here)."""
    group.barrier().wait()
    if dist.is_initialized():  # NCCL went through init_process_group
        dist.destroy_process_group()
    else:
        group.shutdown()
