"""What a worker takes from the scenario, and how a node reads its DMLC environment."""

from __future__ import annotations

import pytest

from realrun.node import plan_from_scenario
from realrun.ps.roles import RoleError, node_env
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

SCENARIO = ROOT / "scenarios" / "cpu-2x2-sync.yaml"


@pytest.mark.parametrize(
    ("mode", "sync", "on_device"),
    [
        ("dist_sync", True, False),
        ("dist_async", False, False),
        ("dist_sync_device", True, True),
        ("dist_async_device", False, True),
    ],
)
def test_the_kvstore_mode_sets_sync_and_where_gradients_are_summed(mode, sync, on_device):
    plan, _, _ = plan_from_scenario(load_scenario(SCENARIO, [f"kvstore.mode={mode}"]), 0)
    assert (plan.sync, plan.device_aggregation) == (sync, on_device)


def test_the_cpu_scenario_becomes_this_plan():
    scenario = load_scenario(
        SCENARIO,
        [
            "kvstore.gradient_compression.type=2bit",
            "kvstore.gradient_compression.threshold=0.25",
            "kvstore.bigarray_bound=5000",
        ],
    )
    plan, bound, threshold = plan_from_scenario(scenario, 1)
    assert (plan.model, plan.batch_per_gpu, plan.gpus, plan.iterations, plan.seed) == (
        "mlp",
        32,
        1,
        12,
        0,
    )
    # Two GPUs in the job: the servers average the two mean-loss gradients.
    assert plan.optimizer.rescale_grad == 0.5
    o = scenario.training.optimizer
    assert (plan.optimizer.learning_rate, plan.optimizer.momentum, plan.optimizer.weight_decay) == (
        o.learning_rate,
        o.momentum,
        o.weight_decay,
    )
    assert (bound, threshold) == (5000, 0.25)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("realrun.dilation=4", "real compute cannot be slowed down"),
        ("training.precision=fp16", "fp32 only"),
    ],
)
def test_what_realrun_cannot_run_is_refused_with_the_field(override, reason):
    with pytest.raises(ValueError, match=reason):
        plan_from_scenario(load_scenario(SCENARIO, [override]), 0)


BASE = {
    "DMLC_ROLE": "server",
    "DMLC_PS_ROOT_URI": "127.0.0.1",
    "DMLC_PS_ROOT_PORT": "9000",
    "DMLC_NUM_SERVER": "2",
    "DMLC_NUM_WORKER": "3",
    "REALRUN_JOB_SECRET": "ab" * 32,
}


def test_a_node_reads_the_dmlc_variables():
    env = node_env({**BASE, "REALRUN_SLOT": "1"})
    assert (env.role, env.root_address, env.num_servers, env.num_workers, env.slot) == (
        "server",
        "tcp://127.0.0.1:9000",
        2,
        3,
        1,
    )
    assert env.node_host == "127.0.0.1"  # towards a loopback scheduler, loopback
    assert node_env(env.to_env()) == env
    assert node_env({**BASE, "DMLC_INTERFACE": "lo"}).node_host == "127.0.0.1"
    full = node_env({**BASE, "REALRUN_MESSAGE_MAC": "full"})
    assert full.message_mac == "full" and node_env(full.to_env()) == full
    assert env.message_mac == "header"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"DMLC_ROLE": "boss"}, "DMLC_ROLE='boss', expected one of scheduler, server, worker"),
        ({"DMLC_ROLE": ""}, "DMLC_ROLE is not set"),
        ({"DMLC_PS_ROOT_PORT": "0"}, "DMLC_PS_ROOT_PORT=0, expected 1..65535"),
        ({"DMLC_NUM_WORKER": "two"}, "DMLC_NUM_WORKER='two', expected an integer"),
        ({"DMLC_INTERFACE": "nosuch0"}, "DMLC_INTERFACE='nosuch0' has no IPv4 address"),
        ({"REALRUN_JOB_SECRET": ""}, "REALRUN_JOB_SECRET is not set"),
        (
            {"REALRUN_JOB_SECRET": "abc"},
            "REALRUN_JOB_SECRET has 3 hex digits, expected at least 32",
        ),
        ({"REALRUN_JOB_SECRET": "zz" * 20}, "REALRUN_JOB_SECRET is not hexadecimal"),
        ({"REALRUN_MESSAGE_MAC": "sha1"}, "REALRUN_MESSAGE_MAC='sha1', expected one of"),
    ],
)
def test_a_bad_environment_is_named(change, message):
    with pytest.raises(RoleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        node_env({**BASE, **change})
