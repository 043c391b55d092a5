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

from dataclasses import dataclass, field

from simscale.spec.config import ConfigError, between


@dataclass(frozen=True)
class Fact:
    """An unknown fact: what it is in words, its unit, whether it counts, where it is set."""

    words: str
    unit: str
    integer: bool
    # The scenario field (``{group}`` filled in) or the step that pins the fact down.
    narrow_by: str
    choices: tuple[str, ...] = ()


FACTS: dict[str, Fact] = {
    "nic_gbps": Fact(
        "the NIC's achieved rate",
        "Gbit/s",
        False,
        "set `cluster.hosts[{group}].nic_gbps` or probe it (`realrun probe`)",
    ),
    "connection_gbps": Fact(
        "one TCP connection's achieved rate",
        "Gbit/s",
        False,
        "probe it (`realrun probe`, then `simscale calibrate --probe`)",
    ),
    "nccl_sockets": Fact(
        "the TCP sockets NCCL opens to each ring neighbour",
        "sockets",
        True,
        "set `kvstore.allreduce.sockets` (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD)",
    ),
    "transport": Fact(
        "the transport NCCL takes between hosts",
        "",
        False,
        "set `cluster.hosts[{group}].transport`",
        ("tcp", "rdma", "efa"),
    ),
    "decode_us_per_sample": Fact(
        "the input pipeline's CPU time per image",
        "us per image per core",
        False,
        "measure one core's decode rate (or use training.data: synthetic)",
    ),
    "servers": Fact(
        "the parameter-server processes",
        "servers",
        True,
        "set `kvstore.servers`",
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
