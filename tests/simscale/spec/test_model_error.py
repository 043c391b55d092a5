"""The model-error block of a profile: read from the YAML, absent in older profiles, and the
group a scenario's error is read from."""

from __future__ import annotations

from pathlib import Path

from simscale.spec.costs import CostModel
from simscale.spec.model_error import ModelError, model_error_group
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, Profile, load_profile, save_profile
from simscale.spec.scenario import Scenario, scenario_from_dict


def _scenario(mode: str, gpu: str = "cpu", compute: str = "real", hosts: int = 2) -> Scenario:
    return scenario_from_dict(
        {
            "name": "s",
            "cluster": {"hosts": [{"count": hosts, "gpus_per_host": 1, "gpu": gpu, "nic_gbps": 1}]},
            "model": {"name": "mlp"},
            "training": {"batch_per_gpu": 32},
            "kvstore": {"mode": mode},
            "realrun": {"compute": compute},
        }
    )


def test_the_group_names_the_system_and_whether_the_hardware_is_real() -> None:
    assert model_error_group(_scenario("dist_sync")) == "ps/emulated"
    assert model_error_group(_scenario("allreduce", "V100")) == "allreduce/real"
    assert model_error_group(_scenario("allreduce", "V100", "emulated")) == "allreduce/emulated"
    assert model_error_group(_scenario("ddp", "V100")) == "ddp-zero/real"
    # one GPU: no communication, unless a parameter server still takes its pushes
    assert model_error_group(_scenario("local", "V100", hosts=1)) == "single/real"
    assert model_error_group(_scenario("dist_sync", hosts=1)) == "ps/emulated"


def test_the_block_round_trips_through_the_profile_yaml(tmp_path: Path) -> None:
    me = ModelError({"ps/emulated": 0.05}, {"ps/emulated": 14}, "leave-one-shape-out", "cmd")
    save_profile(Profile(PROFILE_SCHEMA_VERSION, CostModel(), model_error=me), tmp_path / "p.yaml")
    back = load_profile(tmp_path / "p.yaml")
    assert back.model_error == me
    assert back.model_error.sigma_for(_scenario("dist_sync")) == ("ps/emulated", 0.05)
    assert back.model_error.sigma_for(_scenario("allreduce", "V100")) == ("allreduce/real", None)


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
