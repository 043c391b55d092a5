"""All-reduce bus bandwidth by message size, with torch.distributed over the hosts (gloo; NCCL
where every host has CUDA), one process per host, as nccl-tests reports it: for a ring of n
ranks, bus bandwidth = size * 2 (n - 1) / n / time, the rate each host's NIC carries each way."""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import struct
import time
from datetime import timedelta
from typing import Any

from realrun.probe.hosts import HostSet
from realrun.records.probe_record import Measurement

DEFAULT_SIZES_BYTES = (4 << 10, 64 << 10, 1 << 20, 4 << 20)
PORT_TIMEOUT_S = 60.0
SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def interface_towards(address: str) -> str | None:
    """The name of this host's interface that reaches ``address`` (gloo binds to the host
    name's address otherwise, 127.0.0.1 on many machines, which no peer can reach)."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))  # UDP: no packet is sent, only the route chosen
        local = s.getsockname()[0]
        for _, name in socket.if_nameindex():
            packed = struct.pack("256s", name.encode()[:15])
            with contextlib.suppress(OSError):
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, packed)[20:24]
                if socket.inet_ntoa(got) == local:
                    return name
    return None


def measure(rank: int, world: int, master: str, port: int, sizes: list[int], reps: int) -> dict:
    """Agent end: every rank all-reduces each size ``reps`` times (after one warm-up); rank 0's
    wall times are the result (the collective ends on every rank together)."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    name = interface_towards(master)
    if name is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(
        backend,
        init_method=f"tcp://{master}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=PORT_TIMEOUT_S),
    )
    out: dict[str, list[float]] = {}
    try:
        for size in sizes:
            t = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            times = []
            for i in range(reps + 1):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if i:
                    times.append(time.perf_counter() - t0)
            out[str(size)] = times
    finally:
        dist.destroy_process_group()
    return {"backend": backend, "times_s": out}


def run(hosts: HostSet, sizes: tuple[int, ...], reps: int, port: int) -> dict[str, Measurement]:
    """One measurement per size: bus bandwidth samples in bytes/s."""
    world = len(hosts.hosts)
    master = hosts.hosts[0].address
    procs = [
        (
            r,
            hosts.start(
                r,
                "allreduce",
                *("--rank", r, "--world", world, "--master", master, "--port", port),
                *("--sizes", ",".join(str(s) for s in sizes), "--reps", reps),
            ),
        )
        for r in range(world)
    ]
    results: dict[int, dict[str, Any]] = {}
    try:
        for r, proc in procs:
            results[r] = hosts.result(r, proc, PORT_TIMEOUT_S * 3, "the all-reduce probe")
    finally:
        hosts.stop_all()
    factor = 2 * (world - 1) / world
    out = {}
    for size in sizes:
        times = results[0]["times_s"][str(size)]
        out[f"allreduce_busbw_{size}B"] = Measurement(
            unit="bytes/s",
            samples=tuple(size * factor / t for t in times),
            context={
                "size_bytes": size,
                "ranks": world,
                "backend": results[0]["backend"],
                "median_time_s": statistics.median(times),
            },
        )
    return out
