"""The model-error block of a profile: read from the YAML, absent in older profiles, and the
group a scenario's error is read from."""

from __future__ import annotations

from pathlib import Path

from simscale.spec.costs import CostModel
from simscale.spec.model_error import ModelError, model_error_group
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, Profile, load_profile, save_profile
from simscale.spec.scenario import Scenario, scenario_from_dict


def _scenario(
    mode: str,
    gpu: str = "cpu",
    compute: str = "real",
    hosts: int = 2,
    gpus_per_host: int = 1,
    server_hosts: int = 0,
) -> Scenario:
    cluster: dict = {
        "hosts": [{"count": hosts, "gpus_per_host": gpus_per_host, "gpu": gpu, "nic_gbps": 1}]
    }
    kvstore: dict = {"mode": mode}
    if server_hosts:
        cluster["server_hosts"] = {"count": server_hosts, "nic_gbps": 1}
        kvstore["placement"] = "dedicated"
    return scenario_from_dict(
        {
            "name": "s",
            "cluster": cluster,
            "model": {"name": "mlp"},
            "training": {"batch_per_gpu": 32},
            "kvstore": kvstore,
            "realrun": {"compute": compute},
        }
    )


def test_the_group_names_the_system_and_whether_the_hardware_is_real() -> None:
    assert model_error_group(_scenario("dist_sync")) == "ps/emulated"
    assert model_error_group(_scenario("allreduce", "V100")) == "allreduce/real/network"
    assert model_error_group(_scenario("allreduce", "V100", "emulated")) == "allreduce/emulated"
    assert model_error_group(_scenario("ddp", "V100")) == "ddp-zero/real"
    # one GPU: no communication, unless a parameter server still takes its pushes
    assert model_error_group(_scenario("local", "V100", hosts=1)) == "single/real"
    assert model_error_group(_scenario("dist_sync", hosts=1)) == "ps/emulated"


def test_real_hardware_groups_split_by_whether_the_gradients_cross_a_network() -> None:
    """A one-host setup has none of the unstated network facts (one connection's rate, the
    NIC's achieved rate, the transport), so its error is read from its own group; a worker
    host with dedicated server hosts sends its gradients over the network all the same."""
    one_host = _scenario("allreduce", "V100", hosts=1, gpus_per_host=8)
    assert model_error_group(one_host) == "allreduce/real/one-host"
    assert model_error_group(_scenario("allreduce", "V100", hosts=4, gpus_per_host=8)) == (
        "allreduce/real/network"
    )
    assert model_error_group(_scenario("dist_sync", "V100", hosts=1, gpus_per_host=4)) == (
        "ps/real/one-host"
    )
    dedicated = _scenario("dist_sync", "V100", hosts=1, gpus_per_host=4, server_hosts=2)
    assert model_error_group(dedicated) == "ps/real/network"
    # the emulated cluster's network is typed in, and DDP/ZeRO's group is not split (yet)
    assert model_error_group(_scenario("dist_sync", hosts=1, gpus_per_host=2)) == "ps/emulated"
    assert model_error_group(_scenario("ddp", "V100", hosts=1, gpus_per_host=8)) == "ddp-zero/real"


def test_a_profile_made_before_the_split_is_read_from_the_whole_group() -> None:
    nine = {"90": tuple(0.01 * i for i in range(1, 10))}
    older = ModelError(residuals={"allreduce/real": 9}, scores={"allreduce/real": nine})
    assert older.kept_group("allreduce/real/network") == "allreduce/real"
    assert older.margin(older.kept_group("allreduce/real/one-host"), 0.9) == 0.09
    # a profile that keeps the part reads the part; another system's group is never borrowed
    low = {"90": (0.001,) * 8 + (0.009,)}
    newer = ModelError(
        residuals={"allreduce/real": 9, "allreduce/real/one-host": 9},
        scores={"allreduce/real": nine, "allreduce/real/one-host": low},
    )
    assert newer.margin(newer.kept_group("allreduce/real/one-host"), 0.9) == 0.009
    assert older.kept_group("ps/real/network") == "ps/real/network"
    assert older.sigma_for(_scenario("allreduce", "V100"))[0] == "allreduce/real"


def test_the_block_round_trips_through_the_profile_yaml(tmp_path: Path) -> None:
    me = ModelError({"ps/emulated": 0.05}, {"ps/emulated": 14}, "leave-one-shape-out", "cmd")
    save_profile(Profile(PROFILE_SCHEMA_VERSION, CostModel(), model_error=me), tmp_path / "p.yaml")
    back = load_profile(tmp_path / "p.yaml")
    assert back.model_error == me
    assert back.model_error.sigma_for(_scenario("dist_sync")) == ("ps/emulated", 0.05)
    assert back.model_error.sigma_for(_scenario("allreduce", "V100")) == (
        "allreduce/real/network",
        None,
    )


def test_a_profile_written_before_the_block_existed_still_loads() -> None:
    older = load_profile("profiles/emulated-v2.yaml")
    assert older.model_error == ModelError()


def test_the_conformal_scores_round_trip_and_give_the_order_statistic(tmp_path: Path) -> None:
    # 9 scores: at 90%, ceil(0.9 * 10) = 9th smallest (the largest); at 50%, the 5th
    scores = {"90": tuple(0.01 * i for i in range(1, 10)), "50": (-0.2, -0.1, 0.0, 0.1, 0.2)}
    me = ModelError(residuals={"ps/real": 9}, method="m", source="s", scores={"ps/real": scores})
    save_profile(Profile(PROFILE_SCHEMA_VERSION, CostModel(), model_error=me), tmp_path / "p.yaml")
    back = load_profile(tmp_path / "p.yaml").model_error
    assert back == me
    assert back.margin("ps/real", 0.9) == 0.09
    # 5 scores at 50%: ceil(0.5 * 6) = 3rd smallest; a level or a group not kept: none
    assert back.margin("ps/real", 0.5) == 0.0
    assert back.margin("ps/real", 0.8) is None and back.margin("allreduce/real", 0.9) is None
