"""Facts a user does not know, declared as ranges with the public figure each comes from.

A rented cluster's NIC rarely reaches its line rate, one TCP connection is capped below it, NCCL
opens one socket or sixteen depending on its version, and a published benchmark seldom names
its server hosts. A single guessed number hides all of that. Here a preset or a scenario
declares a ``FactRange`` for such a fact; ``predict --interval`` samples it (uniformly over the
range: a public figure gives bounds, not a distribution) together with the profile's fitted
parameters, and says which fact dominates the width and which field to set to narrow it.

A range applies to a scenario unless the scenario states the fact itself (an explicit
``nic_gbps`` is a known NIC); a scenario's own range for a fact replaces its preset's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from simscale.spec.config import ConfigError, between

if TYPE_CHECKING:
    from simscale.spec.costs import CostModel
    from simscale.spec.scenario import Scenario


@dataclass(frozen=True)
class Fact:
    """An unknown fact: what it is in words, its unit, whether it counts, where it is set."""

    words: str
    unit: str
    integer: bool
    # The scenario field (``{group}`` filled in) or the step that pins the fact down.
    narrow_by: str
    apply: Callable[[Scenario, CostModel, int | None, float | str], tuple[Scenario, CostModel]]
    # Whether the fact acts on the scenario at all (a ring's sockets do not on a PS).
    acts_on: Callable[[Scenario], bool]
    choices: tuple[str, ...] = ()


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


FACTS: dict[str, Fact] = {
    "nic_gbps": Fact(
        "the NIC's achieved rate",
        "Gbit/s",
        False,
        "set `cluster.hosts[{group}].nic_gbps` or probe it (`realrun probe`)",
        _nic,
        _multi_host,
    ),
    "connection_gbps": Fact(
        "one TCP connection's achieved rate",
        "Gbit/s",
        False,
        "probe it (`realrun probe`, then `simscale calibrate --probe`)",
        _connection,
        _multi_host,
    ),
    "nccl_sockets": Fact(
        "the TCP sockets NCCL opens to each ring neighbour",
        "sockets",
        True,
        "set `kvstore.allreduce.sockets` (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD)",
        _sockets,
        _is_ring,
    ),
    "transport": Fact(
        "the transport NCCL takes between hosts",
        "",
        False,
        "set `cluster.hosts[{group}].transport`",
        _transport,
        _is_ring,
        ("tcp", "rdma", "efa"),
    ),
    "decode_us_per_sample": Fact(
        "the input pipeline's CPU time per image",
        "us per image per core",
        False,
        "measure one core's decode rate (or use training.data: synthetic)",
        _decode,
        lambda s: s.training.data == "images",
    ),
    "servers": Fact(
        "the parameter-server processes",
        "servers",
        True,
        "set `kvstore.servers`",
        _servers,
        lambda s: s.num_servers > 0,
    ),
}


@dataclass(frozen=True)
class FactRange:
    """A declared range for one unknown fact, and the public figure it comes from."""

    fact: str
    source: str
    low: float | None = field(default=None, metadata=between(0.0, 1e9))
    high: float | None = field(default=None, metadata=between(0.0, 1e9))
    # For a fact with named values (transport): the ones it may take.
    choices: tuple[str, ...] = ()
    # The worker host group it applies to (index into cluster.hosts); unset: all of them.
    group: int | None = field(default=None, metadata=between(0, 1e6))

    def validate(self) -> None:
        if self.fact not in FACTS:
            raise ConfigError(
                "fact", f"got {self.fact!r}, expected one of {', '.join(sorted(FACTS))}"
            )
        if not self.source.strip():
            raise ConfigError("source", "empty, expected the public figure the range comes from")
        spec = FACTS[self.fact]
        if spec.choices:
            bad = [c for c in self.choices if c not in spec.choices]
            if not self.choices or bad:
                raise ConfigError(
                    "choices",
                    f"got {list(self.choices)}, expected a non-empty list of "
                    f"{', '.join(spec.choices)}",
                )
            return
        if self.low is None or self.high is None:
            raise ConfigError(
                "low" if self.low is None else "high", f"missing, expected {spec.unit}"
            )
        if self.choices:
            raise ConfigError("choices", f"given for {self.fact}, which takes low and high")
        if self.spec.integer and self.low < 1:
            raise ConfigError("low", f"got {self.low:g}, expected at least 1 ({self.spec.unit})")
        if not 0 < self.low <= self.high:
            raise ConfigError(
                "high", f"got low {self.low:g} and high {self.high:g}, expected 0 < low <= high"
            )

    @property
    def spec(self) -> Fact:
        return FACTS[self.fact]

    def key(self) -> str:
        """The fact and the host group it is about, e.g. ``nic_gbps@0``."""
        return self.fact if self.group is None else f"{self.fact}@{self.group}"

    def value_at(self, u: float) -> float | str:
        """The value at quantile ``u`` in [0, 1) of the range (uniform; counts rounded)."""
        u = min(max(u, 0.0), 1.0 - 1e-12)
        if self.choices:
            return self.choices[int(u * len(self.choices))]
        assert self.low is not None and self.high is not None
        if self.spec.integer:
            lo, hi = round(self.low), round(self.high)
            return float(lo + int(u * (hi - lo + 1)))
        return self.low + u * (self.high - self.low)

    def narrow_by(self) -> str:
        return self.spec.narrow_by.format(group=0 if self.group is None else self.group)

    def describe(self) -> str:
        if self.choices:
            span = " or ".join(self.choices)
        else:
            span = f"{self.low:g} to {self.high:g} {self.spec.unit}".rstrip()
        return f"{self.spec.words}: {span} ({self.source})"


def ranges_for(scenario: Scenario) -> list[FactRange]:
    """The declared ranges that apply to ``scenario``: its presets' (for facts the scenario does
    not state), replaced by the scenario's own for the same fact and group; only facts that act
    on it."""
    from simscale.spec import hardware

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
    return [r for r in out.values() if r.spec.acts_on(scenario)]


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
        scenario, costs = r.spec.apply(scenario, costs, r.group, v)
    return scenario, costs
