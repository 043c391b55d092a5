"""A real PS's stack delay drawn per message (simscale.comm.ps.stack_delay): the draws follow the
measured quantiles evenly, the simulator pays them, and the symmetric path refuses them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from simscale.comm.ps.stack_delay import StackDelay
from simscale.model import symmetry
from simscale.model.cluster import layout
from simscale.simulator import Simulation, simulate
from simscale.spec.costs import CostModel
from simscale.spec.scenario import load_scenario

QUANTILES = tuple(float(i) for i in range(10))


def test_a_tags_draws_visit_every_quantile_evenly():
    """40 messages of one tag on one connection take each of 10 quantiles 4 times, give or take
    one (a low-discrepancy sequence; independent draws would be off by 2 or more)."""
    draw = StackDelay(QUANTILES, seed=3).for_connection()
    counts = Counter(draw(7) for _ in range(40))
    assert set(counts) <= set(QUANTILES)
    assert all(3 <= counts[q] <= 5 for q in QUANTILES)


def test_draws_are_fixed_by_the_seed_and_move_with_it():
    def first(seed: int) -> list[float]:
        delay = StackDelay(QUANTILES, seed)
        a, b = delay.for_connection(), delay.for_connection()
        return [a(1) for _ in range(5)] + [b(1) for _ in range(5)] + [a(None) for _ in range(5)]

    assert first(0) == first(0)
    assert first(0) != first(1)


def test_two_connections_draws_do_not_move_in_lockstep():
    """A push's delay and its ack's are drawn on two connections; over 50 round trips their
    pairs fall in at least 30 of the 100 cells of the 10 x 10 square (lockstep: 10)."""
    delay = StackDelay(QUANTILES, seed=0)
    push, ack = delay.for_connection(), delay.for_connection()
    cells = {(push(5), ack(5)) for _ in range(50)}
    assert len(cells) >= 30


def _scenario():
    s = load_scenario("scenarios/emulated/resnet18-dedicated.yaml")
    return replace(s, simulation=replace(s.simulation, measured_iterations=6))


def test_the_simulator_pays_the_delay_and_measures_every_iteration():
    """1 ms on every message's handling slows the job, and the run measures all its
    iterations rather than stopping at three alike."""
    s = _scenario()
    plain = simulate(s).throughput_samples_per_s
    delayed = Simulation(s, CostModel(message_stack_quantiles_us=(1000.0,)))
    result = delayed.run()
    assert result.throughput_samples_per_s < plain
    n = s.simulation.warmup_iterations + s.simulation.measured_iterations + 1
    assert len(delayed.boundaries) == n


def test_the_symmetric_path_refuses_a_stack_delay():
    s = load_scenario("scenarios/64gpu.yaml")
    costs = CostModel(message_stack_quantiles_us=(10.0, 20.0))
    with pytest.raises(ValueError, match="stack delay"):
        symmetry.choose_path(s, layout(s), costs, "symmetric")
    assert not symmetry.choose_path(s, layout(s), costs, "auto").reduced


def test_quantiles_must_be_sorted_and_in_range():
    from simscale.spec.config import ConfigError
    from simscale.spec.costs import cost_model_from_mapping

    with pytest.raises(ConfigError, match="non-decreasing"):
        cost_model_from_mapping({"message_stack_quantiles_us": [20.0, 10.0]})
    with pytest.raises(ConfigError, match="non-decreasing"):
        cost_model_from_mapping({"message_stack_quantiles_us": [-1.0]})
    ok = cost_model_from_mapping({"message_stack_quantiles_us": [0, 10.5]})
    assert ok.message_stack_quantiles_us == (0.0, 10.5)


def test_a_run_with_a_stack_delay_is_stable_when_its_average_has_settled():
    """Iterations differ by design; the run says stable when the mean over all measured
    iterations is within the tolerance of the mean without the last three."""
    s = _scenario()
    s = replace(s, simulation=replace(s.simulation, measured_iterations=12))
    costs = CostModel(message_stack_quantiles_us=(0.0, 500.0, 3000.0))
    sim = Simulation(s, costs)
    result = sim.run()
    b = sim.boundaries
    warm, end = s.simulation.warmup_iterations, len(b) - 1
    whole = (b[end] - b[warm]) / (end - warm)
    shorter = (b[end - 3] - b[warm]) / (end - 3 - warm)
    assert result.stable == (abs(whole - shorter) <= s.simulation.stable_tolerance * whole)
    assert type(result.stable) is bool  # predict --json writes it (a numpy bool is refused)
