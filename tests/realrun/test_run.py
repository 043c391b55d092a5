"""realrun run refuses, before any process starts, what its servers cannot run as the scenario
says (the simulator models these; realrun does not)."""

from __future__ import annotations

import pytest

from realrun.run import LaunchOptions, check_runnable
from simscale.spec.scenario import load_scenario
from tests.support.paths import SCENARIOS

MLP_COLOCATED = SCENARIOS / "emulated" / "mlp-colocated.yaml"


def test_realrun_refuses_a_grpc_parameter_server() -> None:
    """kvstore.rpc grpc is TensorFlow's PS, which the simulator models and realrun does not run."""
    with pytest.raises(ValueError, match="realrun's servers speak ps-lite"):
        check_runnable(load_scenario(MLP_COLOCATED, ["kvstore.rpc=grpc"]), LaunchOptions())


@pytest.mark.parametrize("precision", ["fp16", "amp"])
def test_realrun_refuses_half_precision_before_starting_anything(precision: str) -> None:
    """realrun trains fp32; a half-precision scenario is refused before any process starts, so
    no partial run record is left behind."""
    scenario = load_scenario(MLP_COLOCATED, [f"training.precision={precision}"])
    with pytest.raises(ValueError, match="realrun trains fp32 only"):
        check_runnable(scenario, LaunchOptions())


def test_realrun_refuses_tensorflows_key_placement() -> None:
    """realrun's workers find a key's server by MXNet's hash; TensorFlow's greedy placement is
    the simulator's alone."""
    with pytest.raises(ValueError, match="MXNet's hash only"):
        scenario = load_scenario(MLP_COLOCATED, ["kvstore.key_placement=greedy"])
        check_runnable(scenario, LaunchOptions())


def test_realrun_refuses_tensorflows_step_barrier() -> None:
    """realrun's servers merge each key and answer its pulls as MXNet does; a step barrier
    (kvstore.sync step) is the simulator's alone."""
    scenario = load_scenario(MLP_COLOCATED, ["kvstore.sync=step"])
    with pytest.raises(ValueError, match="TensorFlow's step barrier"):
        check_runnable(scenario, LaunchOptions())
