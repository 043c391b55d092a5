"""The time between a message's arrival and its handling in a real PS's stack, drawn per message.

realrun's small push and its ack take longer between two hosts than the simulator's wire, van
and handler costs add up to: the copy engine's post, each end's I/O thread waking up, zmq, the
tag check (docs/probe.md; ``realrun probe``'s ``psrtt`` step measures the round trip on
realrun's own nodes). The excess is not fixed: between emulated hosts at 200 Mbit/s its median
was 0.9 ms and its 90th percentile 5 ms. Where one small message decides a race, such as
whether the ResNet-18 fc bias's ack is back before the next layer's keys are posted, a fixed
cost puts every iteration on one side, where realrun runs either side as often as its delays
say. So each message's handling waits a delay drawn from the measured distribution
(``costs.message_stack_quantiles_us``: per message each way, the probe's round-trip excess
halved, calibration/probe_profile.py), after the message has fully arrived and behind the
messages before it on its connection (one I/O thread per end takes them in order).

Draws are low-discrepancy, not independent: the n-th message with a given tag (its key) on a
connection takes the quantile at u = frac(offset + n * step), with an offset per connection
from the scenario's seed and one per tag, and a step of its own per connection (the fractional
part of the square root of a prime: irrationals no rational combination of one another links,
so that two connections' draws, a push's and its ack's, do not move in lockstep but fill their
square). A race one message decides per iteration then goes each way, within the 5 or 6
iterations a run measures, about as often as the measured quantiles say, where independent
draws would leave the share off by a binomial's 20 points; a different seed still moves every
message's draw, as run-to-run jitter.

The quantiles are seconds of the job's time, as the simulator's other software costs (message
overheads, the server's handler) are: not scaled by ``realrun.dilation``, which is how a run was
made, not what it describes (calibration.runs ``as_realrun_ran``).

Iterations that differ by design are not settled when three in a row agree by chance: a run
with a stack delay measures all its iterations (simscale.simulator ``Simulation.run``), so that
its throughput is the average of both sides of every race it meets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario

# Weyl sequences: frac(n * step) for the n-th message of a tag spreads the draws evenly for
# any number of them when the step is a quadratic irrational (bounded continued-fraction terms).
# Connection c steps by frac(sqrt(STEP_PRIMES[c % 25])); tags are offset by multiples of the
# golden ratio so that the keys of one connection do not draw in lockstep.
STEP_PRIMES = tuple(p for p in range(2, 100) if all(p % d for d in range(2, p)))  # 25
TAG_STEP = (math.sqrt(5.0) - 1.0) / 2.0


class StackDelay:
    """The delay distribution of one job (``quantiles_s`` at probabilities (i + 0.5) / K,
    seconds) and the seed its connections' draws start from."""

    def __init__(self, quantiles_s: Sequence[float], seed: int) -> None:
        if not quantiles_s:
            raise ValueError("a stack delay needs at least one quantile")
        self.quantiles_s = tuple(float(q) for q in quantiles_s)
        self._rng = np.random.default_rng(seed)
        self._connections = 0

    def for_connection(self) -> Callable[[Hashable], float]:
        """The draw of one connection: ``draw(tag)`` is the delay of its next message with that
        tag (connections ask in the order they are opened, so a run is deterministic)."""
        base = float(self._rng.random())
        root = math.sqrt(STEP_PRIMES[self._connections % len(STEP_PRIMES)])
        step = root - math.floor(root)
        self._connections += 1
        q = self.quantiles_s
        k = len(q)
        counts: dict[Hashable, int] = {}

        def draw(tag: Hashable) -> float:
            n = counts.get(tag, 0)
            counts[tag] = n + 1
            offset = (tag + 1) * TAG_STEP if isinstance(tag, int) else 0.0
            u = (base + offset + n * step) % 1.0
            return q[min(k - 1, int(u * k))]

        return draw


def stack_delay(scenario: Scenario, costs: CostModel) -> StackDelay | None:
    """The job's stack delay from ``costs`` (None where the costs carry none), seeded by the
    scenario's seed."""
    q = costs.message_stack_quantiles_us
    if not q:
        return None
    return StackDelay([v * 1e-6 for v in q], scenario.simulation.seed)
