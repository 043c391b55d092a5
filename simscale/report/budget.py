"""How long a simulation would take, estimated before it starts, so ``predict`` can refuse one
that would run for hours instead of hanging.

The simulator's work is its events. Each message of the push/pull protocol (a key slice a
worker pushes, its acknowledgement, the pull request and the reply) costs a handful of events
(copies, NIC transfers, server threads); a scenario's events are then about

    workers x key slices x iterations x EVENTS_PER_SLICE

where a key slice is a whole small array or one server's part of a big one (simscale.spec.sharding),
and the workers are those simulated: all of them on the exact path, one on the symmetric path
(simscale.model.symmetry), whose representative stands for the rest. The estimate takes the path
the simulation will take (``symmetry.choose_path``), so a shape the symmetric path answers in
seconds is not refused for what the exact model would cost.
With the fair-share network model every event re-solves the rates of the flows in progress, so
an event costs more the more hosts there are. Both constants were measured on this project's
build machine (2 shared cores, 2026-11-22) with the shipped scenarios and a 16..1024-host sweep:

- events per (worker, slice, iteration): 5.3 to 13.0 over the shipped scenarios (all-reduce
  0.6), so 14 bounds them from above;
- events per second: 100k-300k for up to 64 hosts; with fair sharing 75k at 64 hosts, 26k at
  256, 5.4k at 1024, i.e. about 150k / (1 + hosts / 40); FIFO links stay near 60k-230k.

The estimate is deliberately coarse and the refusal threshold generous (two hours at those
rates): it exists to stop a mistyped scenario from spinning for a day, not to predict run time.
A faster simulator only makes it more generous.
"""

from __future__ import annotations

from dataclasses import dataclass

from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario

EVENTS_PER_SLICE = 14.0  # upper end of the measured 5.3-13.0 events per slice message round
EVENTS_PER_S = 150_000.0  # simulator events per second at a few hosts (measured, see above)
FAIRSHARE_HOSTS_SCALE = 40.0  # fair sharing: per-event cost grows as 1 + hosts / this
# The symmetric path simulates one worker and solves the network grouped (O(servers) per round;
# compiled with numba from simscale.network.fairshare_compiled.MIN_LINKS links when the fast
# extra is installed), so its per-event cost grows more slowly. Measured in CPU time on the build
# machine (2 loaded cores), scenarios/64gpu.yaml with a server per host: 55k events/s at 8 hosts,
# 50k at 64, 28k at 128, 17k at 256 to 2,048 (numba); 6.2-7.6 events per slice round. The
# rate below, 60k / (1 + hosts / 100), follows the numpy solver's slope (28k -> 17k from 128 to
# 256 hosts) and so bounds the numba one from below (3.8k against 16k at 2,048 hosts).
SYMMETRIC_EVENTS_PER_S = 60_000.0
SYMMETRIC_HOSTS_SCALE = 100.0
REFUSE_ABOVE_S = 2 * 3600.0


@dataclass(frozen=True)
class Estimate:
    """The estimated work of one simulation and what it is made of."""

    workers: int  # simulated: all on the exact path, one representative on the symmetric one
    slices: int  # key slices one worker pushes per iteration
    iterations: int  # at most: warm-up + measured + the one that closes the last
    events: float
    seconds: float
    path: str = "exact"

    @property
    def too_long(self) -> bool:
        return self.seconds > REFUSE_ABOVE_S

    def explain(self) -> str:
        """Why the scenario is refused and how to make it smaller, in one line."""
        workers = (
            f"{self.workers:,} workers"
            if self.path == "exact"
            else "1 representative worker (symmetric path)"
        )
        return (
            f"the simulation would take about {self.seconds / 3600:.1f} hours "
            f"(~{self.events:.2g} events: {workers} x {self.slices:,} key "
            f"slices x {self.iterations:,} iterations), more than the "
            f"{REFUSE_ABOVE_S / 3600:.0f} hours predict allows; reduce "
            "simulation.measured_iterations and warmup_iterations, the number of hosts, "
            "or the key slices (fewer kvstore.servers, a larger kvstore.bigarray_bound), "
            "or use simulation.network_model: fifo"
        )


def key_slices(scenario: Scenario) -> int:
    """Messages one worker pushes per iteration: one per small array, one per server for each
    array at or above the big-array bound (as simscale.spec.sharding splits them)."""
    arrays = scenario.model.spec().arrays
    servers = scenario.num_servers
    bound = scenario.kvstore.bigarray_bound
    if servers <= 1:
        return len(arrays)
    return sum(servers if a.elements >= bound else 1 for a in arrays)


def estimate(
    scenario: Scenario, costs: CostModel | None = None, path: str = "auto", *, trace: bool = False
) -> Estimate:
    """The estimated events and seconds of simulating ``scenario`` (without building it) on
    the path ``Simulation(scenario, costs, path=path, trace=trace)`` would take; ``costs``
    default to what ``simscale predict`` uses without a profile. ValueError where that path
    cannot be taken (as Simulation)."""
    from simscale.model import cluster, symmetry
    from simscale.spec.profile import default_costs

    costs = costs if costs is not None else default_costs(scenario)[0]
    full = cluster.layout(scenario)
    choice = symmetry.choose_path(scenario, full, costs, path, trace=trace)
    sim = scenario.simulation
    slices = key_slices(scenario)
    iterations = sim.warmup_iterations + sim.measured_iterations + 1
    if choice.reduced:
        # The representative plus every distinct server host (symmetry.reduce).
        hosts = 1 + len(set(full.server_hosts))
        events = float(slices) * iterations * EVENTS_PER_SLICE
        rate = SYMMETRIC_EVENTS_PER_S / (1.0 + hosts / SYMMETRIC_HOSTS_SCALE)
        return Estimate(1, slices, iterations, events, events / rate, choice.name)
    workers = scenario.num_workers
    events = float(workers) * slices * iterations * EVENTS_PER_SLICE
    rate = EVENTS_PER_S
    if sim.network_model == "fairshare":
        dedicated = scenario.cluster.server_hosts
        hosts = workers + (dedicated.count if dedicated is not None else 0)
        rate /= 1.0 + hosts / FAIRSHARE_HOSTS_SCALE
    return Estimate(workers, slices, iterations, events, events / rate, choice.name)
