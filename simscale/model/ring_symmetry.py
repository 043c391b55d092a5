"""Symmetric collectives: identical workers of a ring all-reduce, DDP or ZeRO job simulated once.

In a collective job (``allreduce``, ``ddp``, ``zero``) every worker host runs the same program
on the same hardware and every collective is a ring over the worker hosts
(simscale.comm.allreduce): each step, host i sends the same chunk to host i + 1. On a
non-blocking fabric with one worker per host, each host's egress carries exactly one ring flow
(its own send) and its ingress exactly one (its predecessor's), all started at the same instant
with the same bytes: the link contention of the symmetric ring is analytic, every flow gets
the rate a lone flow on one egress and one ingress gets. So the fast path simulates ONE
representative worker (host 0) and one collective coordinator that waits for it alone; the
ring's arithmetic (chunk = bytes / W, 2(W - 1) steps, alphas) still uses the real W, and its
W sends are one flow that loads host 0's egress and host 0's ingress (``RingReduction.route``:
the successor host 1 exists only to name the far end of that flow; its own NIC carries nothing).
Measurement then stands the representative for all W ranks (simscale.report.measurement).

What it assumes, hence when it does not run (``reason_for_exact`` says why): one worker per
host on hosts that are all alike, no compute jitter (stragglers would take turns), the
fair-share network with equal TCP shares and no oversubscribed core (W ring flows would share
it), no CPU cores shared between processes, and no trace (it shows every worker). Nothing else
crosses the network in these modes, so no load bound is needed, unlike the parameter-server
reduction (simscale.model.symmetry), whose servers make workers drift apart.

Measured against the exact model (tests/simscale/model/test_ring_symmetry.py, ``path`` forced
both ways, default costs): the same throughput to the bit (relative difference 0.0) on ResNet-50
ring and hierarchical all-reduce over 2 and 4 hosts of 8 V100, ResNet-18 over 8, GPT-2 small
DDP over 2 and 8 p5.48xlarge, ZeRO-2 over 4 and ZeRO-3 over 16, and GPT-2 XL DDP and ZeRO-3
over 32 (55,944 events and 1.2 CPU s exact, 6,406 and 0.09 s reduced); the test holds them
within 1e-6 so that a change of float order would not fail it. The exact model of these shapes
is itself symmetric (every worker's events happen at the same instants), which is why the
reduction loses nothing there; its error budget is therefore 0, not a tolerance.

``auto`` takes it only where the exact model is expensive (``EXACT_HANDOVERS_IN_REACH``): the
two answer the same throughput, but the exact path also lists every host's NIC, which small
jobs' reports (and the golden predictions of the shipped scenarios) keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simscale.model.cluster import Host, Layout
from simscale.spec.costs import CostModel
from simscale.spec.scenario import COLLECTIVE_MODES, Scenario

# Beyond this many gradient hand-overs per iteration (workers x parameter arrays: each one an
# event chain of the worker and the collective coordinator) ``auto`` simulates one
# representative. 128 p5.48xlarge hosts x 580 GPT-2 XL arrays (74,240) took the exact model
# 261,756 events (benchmarks/bench_transformer_1024.py); 32 hosts (18,560) 55,944 events and
# 1.2 CPU s. Below it the exact model answers in seconds and its report lists every host; every
# shipped scenario stays below it.
EXACT_HANDOVERS_IN_REACH = 20_000


def is_collective(scenario: Scenario) -> bool:
    """Whether the job's gradients move by collectives (all-reduce, DDP, ZeRO)."""
    return scenario.kvstore.mode in COLLECTIVE_MODES


def workers_unlike(
    scenario: Scenario, layout: Layout, costs: CostModel, trace: bool, core_why: str
) -> str | None:
    """Why the workers of this run are not copies of one another (the condition both symmetric
    paths share); ``core_why``: the words for an oversubscribed core on that path."""
    s = scenario
    if layout.num_workers < 2:
        return "a single worker"
    if s.simulation.network_model != "fairshare":
        return f"network model {s.simulation.network_model}"
    if s.simulation.compute_jitter > 0:
        return "compute jitter (stragglers differ per worker)"
    if costs.tcp_share_sigma > 0:
        return "unequal TCP shares (tcp_share_sigma > 0 differ per host pair)"
    if s.cluster.shared_cpu_cores is not None:
        return "CPU cores shared between processes"
    if s.cluster.core_oversubscription > 1.0:
        return core_why
    if trace:
        return "a trace was asked for (it shows every worker)"
    if layout.shares_hosts:
        return "several workers per host (they share its NIC)"
    first = layout.hosts[layout.worker_hosts[0]]
    if any(hardware(layout.hosts[h]) != hardware(first) for h in layout.worker_hosts):
        return "worker hosts differ"
    return None


def reason_for_exact(
    scenario: Scenario, layout: Layout, costs: CostModel, *, trace: bool = False
) -> str | None:
    """Why this collective job needs the exact model; None when one representative worker
    stands for all (module doc)."""
    s = scenario
    if not is_collective(s):
        return f"mode {s.kvstore.mode} is not a collective one"
    return workers_unlike(
        s, layout, costs, trace, "an oversubscribed core (every ring flow crosses it)"
    )


def exact_is_cheap(scenario: Scenario, layout: Layout) -> str | None:
    """Why ``auto`` keeps this job on the exact model although the reduction applies (it is
    cheap there and lists every NIC), or None where the exact model is expensive."""
    handovers = layout.num_workers * len(scenario.model_spec().arrays)
    if handovers > EXACT_HANDOVERS_IN_REACH:
        return None
    return (
        f"{handovers:,} gradient hand-overs per iteration: the exact model is cheap "
        f"(one representative above {EXACT_HANDOVERS_IN_REACH:,})"
    )


def hardware(h: Host) -> tuple[object, ...]:
    """What makes two hosts interchangeable to the model: GPUs, NIC, latency, CPU cores."""
    return (h.gpus, h.gpu, h.nic_gbps, h.latency_us, h.cpu_cores)


REPRESENTATIVE, SUCCESSOR = 0, 1


@dataclass(frozen=True)
class RingReduction:
    """A layout with the representative worker (host 0) and its ring successor (host 1, only
    the far end of the representative's ring flow), and the network route that makes that
    flow load host 0's egress and ingress, as every one of the W ring flows loads one egress
    and one ingress (the network's ``Routes``)."""

    layout: Layout
    full: Layout
    copies: int  # W, the workers the representative stands for

    @property
    def width(self) -> int:
        return 2

    @cached_property
    def group_links(self) -> np.ndarray:
        """One group that loads nothing (the grouped solver needs a group; no flow is in it):
        each ring flow loads its own two links once."""
        return np.zeros((1, 2 * len(self.layout.hosts) + 1), dtype=bool)

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], tuple[float, ...], int]:
        """The representative's send to its successor: host 0's egress (link 0) and, standing
        for its predecessor's send into it, host 0's ingress (link 1), each once."""
        if (src, dst) != (REPRESENTATIVE, SUCCESSOR):
            raise ValueError(f"the reduced ring has no traffic from host {src} to host {dst}")
        return (2 * REPRESENTATIVE, 2 * REPRESENTATIVE + 1), (1.0, 1.0), -1


def reduce(layout: Layout) -> RingReduction:
    """The reduced layout of ``layout``: its first worker host stands for all of them."""
    first = layout.hosts[layout.worker_hosts[0]]

    def like_first(index: int, name: str) -> Host:
        return Host(
            index, name, first.gpus, first.gpu, first.nic_gbps, first.latency_us, first.cpu_cores
        )

    hosts = (like_first(REPRESENTATIVE, "worker*"), like_first(SUCCESSOR, "ring-successor"))
    reduced = Layout(hosts, (REPRESENTATIVE,), ())
    return RingReduction(reduced, layout, layout.num_workers)
