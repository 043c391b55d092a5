"""What declared ranges do to a scenario: which apply (its presets' ranges for the facts it does
not state, replaced by its own ``unknowns:``) and the scenario and costs at chosen values. Apart
from ``unknowns``, the ranges as data, which the presets (``hardware``) are written in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from simscale.spec import hardware
from simscale.spec.unknowns import FactRange

if TYPE_CHECKING:
    from simscale.spec.costs import CostModel
    from simscale.spec.scenario import Scenario

Apply = Callable[["Scenario", "CostModel", int | None, float | str], tuple["Scenario", "CostModel"]]


def _groups(s: Scenario, group: int | None) -> list[int]:
    return list(range(len(s.cluster.hosts))) if group is None else [group]


def _set_hosts(s: Scenario, group: int | None, **values: object) -> Scenario:
    hosts = list(s.cluster.hosts)
    for i in _groups(s, group):
        hosts[i] = replace(hosts[i], **values)
    return replace(s, cluster=replace(s.cluster, hosts=tuple(hosts)))


def _nic(s: Scenario, c: CostModel, g: int | None, v: float | str) -> tuple[Scenario, CostModel]:
    return _set_hosts(s, g, nic_gbps=float(v)), c


def _connection(
    s: Scenario, c: CostModel, g: int | None, v: float | str
) -> tuple[Scenario, CostModel]:
    return s, replace(c, connection_gbps=float(v))


def _sockets(
    s: Scenario, c: CostModel, g: int | None, v: float | str
) -> tuple[Scenario, CostModel]:
    kv = s.kvstore
    return replace(s, kvstore=replace(kv, allreduce=replace(kv.allreduce, sockets=int(v)))), c


def _transport(
    s: Scenario, c: CostModel, g: int | None, v: float | str
) -> tuple[Scenario, CostModel]:
    return _set_hosts(s, g, transport=str(v)), c


def _decode(s: Scenario, c: CostModel, g: int | None, v: float | str) -> tuple[Scenario, CostModel]:
    return s, replace(c, decode_us_per_sample=float(v))


def _servers(
    s: Scenario, c: CostModel, g: int | None, v: float | str
) -> tuple[Scenario, CostModel]:
    n = int(v)
    if s.kvstore.placement == "colocated":
        n = min(n, s.num_worker_hosts)
    return replace(s, kvstore=replace(s.kvstore, servers=n)), c


def _is_ring(s: Scenario) -> bool:
    """NCCL's own ring between hosts (Horovod's hierarchical variant crosses hosts over MPI)."""
    kv = s.kvstore
    return kv.mode == "allreduce" and kv.allreduce.algorithm == "ring" and s.num_worker_hosts > 1


def _multi_host(s: Scenario) -> bool:
    return s.num_worker_hosts > 1 or s.cluster.server_hosts is not None


# What each fact does to a scenario when set to a value, and whether it acts on the scenario at
# all (a ring's sockets do not on a parameter server).
EFFECTS: dict[str, tuple[Apply, Callable[[Scenario], bool]]] = {
    "nic_gbps": (_nic, _multi_host),
    "connection_gbps": (_connection, _multi_host),
    "nccl_sockets": (_sockets, _is_ring),
    "transport": (_transport, _is_ring),
    "decode_us_per_sample": (_decode, lambda s: s.training.data == "images"),
    "servers": (_servers, lambda s: s.num_servers > 0),
}


def ranges_for(scenario: Scenario) -> list[FactRange]:
    """The declared ranges that apply to ``scenario``: its presets' (for facts the scenario does
    not state), replaced by the scenario's own for the same fact and group; only facts that act
    on it."""
    out: dict[str, FactRange] = {}
    for i, g in enumerate(scenario.cluster.hosts):
        preset = hardware.INSTANCES.get(g.instance) if g.instance else None
        for r in preset.ranges if preset is not None else ():
            if _stated(scenario, i, r.fact):
                continue
            r = replace(r, group=i) if len(scenario.cluster.hosts) > 1 else r
            out[r.key()] = r
    for r in scenario.unknowns:
        if r.group is None:
            out = {k: v for k, v in out.items() if v.fact != r.fact}
        out[r.key()] = r
    return [r for r in out.values() if EFFECTS[r.fact][1](scenario)]


def _stated(s: Scenario, group: int, fact: str) -> bool:
    """Whether the scenario itself states ``fact`` for host group ``group``."""
    g = s.cluster.hosts[group]
    if fact == "nic_gbps":
        return g.nic_gbps is not None
    if fact == "transport":
        return g.transport is not None
    if fact == "nccl_sockets":
        return s.kvstore.allreduce.sockets is not None
    if fact == "servers":
        return s.kvstore.servers is not None
    return False


def apply_values(
    scenario: Scenario, costs: CostModel, ranges: list[FactRange], values: list[float | str]
) -> tuple[Scenario, CostModel]:
    """``scenario`` and ``costs`` with each declared fact set to its value."""
    for r, v in zip(ranges, values, strict=True):
        scenario, costs = EFFECTS[r.fact][0](scenario, costs, r.group, v)
    return scenario, costs
