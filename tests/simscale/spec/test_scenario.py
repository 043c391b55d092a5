"""Scenario files: what a valid one means, and how every kind of bad one is reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simscale.cli import main
from simscale.model.cluster import layout
from simscale.spec.config import ConfigError
from simscale.spec.scenario import load_scenario, scenario_from_dict
from tests.support.paths import DATA, ROOT

BAD = DATA / "bad"

# Each malformed file and the words its one-line error must contain: the field path, and the
# bad value or what was expected.
BAD_CASES = {
    "wrong-type-count": ["cluster.hosts[0].count", "'two'", "an integer"],
    "negative-bandwidth": ["cluster.hosts[0].nic_gbps", "-10", "[0.001, 100,000]", "Gbit/s"],
    "second-group-bad-nic": ["cluster.hosts[1].nic_gbps", "'fast'", "a number"],
    "unknown-top-key": ["kvstor", "unknown field", "did you mean 'kvstore'"],
    "unknown-nested-key": ["kvstore.sever", "did you mean 'servers'"],
    "zero-hosts": ["cluster.hosts[0].count", "got 0", "an integer in [1, 100,000]"],
    "empty-host-list": ["cluster.hosts", "at least one host group"],
    "servers-exceed-hosts-colocated": ["kvstore.servers", "got 3", "at most 2", "colocated"],
    "empty": ["empty.yaml", "file is empty"],
    "not-yaml": ["not-yaml.yaml", "not valid YAML", "line"],
    "not-a-mapping": ["not-a-mapping.yaml", "expected a YAML mapping"],
    "unknown-model": ["model.name", "'resnet51'", "did you mean 'resnet50'"],
    "unknown-instance": ["cluster.hosts[0].instance", "'p3.17xlarge'", "did you mean"],
    "unknown-gpu": ["cluster.hosts[0].gpu", "'V1000'", "did you mean 'V100'"],
    "bad-mode": ["kvstore.mode", "'dist_synch'", "did you mean 'dist_sync'"],
    "bad-placement": ["kvstore.placement", "'shared'", "'colocated'", "'dedicated'"],
    "missing-training": ["training", "missing"],
    "zero-batch": ["training.batch_per_gpu", "got 0", "in [1, 1,000,000]"],
    "missing-nic-without-instance": ["cluster.hosts[0].nic_gbps", "missing"],
    "dedicated-without-server-hosts": ["cluster.server_hosts", "missing", "dedicated"],
    "negative-latency": ["cluster.hosts[0].latency_us", "-5", "in [0, 1,000,000]"],
    "bad-precision": ["training.precision", "'fp4'", "'fp32'"],
    "model-name-and-arrays": ["model", "exactly one of 'name'"],
    "array-zero-elements": ["model.arrays[1].elements", "got 0"],
    "oversubscription-below-one": ["cluster.core_oversubscription", "0.5", "in [1, 1,000]"],
    "bool-for-number": ["kvstore.bigarray_bound", "True", "an integer"],
    "local-mode-many-hosts": ["kvstore.mode", "'local'", "2 worker hosts"],
    "cpu-instance-as-worker": ["cluster.hosts[0].instance", "no GPUs"],
    "hosts-not-a-list": ["cluster.hosts", "a list of"],
    "bad-compression": ["kvstore.gradient_compression.type", "'1bit'", "'2bit'"],
    "bad-network-model": ["simulation.network_model", "'packet'", "'fairshare'"],
    # Values that once passed `check` and then crashed or hung `predict` (issue 13), and files
    # built to exhaust the loader.
    "negative-seed": ["simulation.seed", "got -1", "[0, 9,223,372,036,854,775,807]"],
    "trillion-hosts": ["cluster.hosts[0].count", "1000000000000", "[1, 100,000] (hosts)"],
    "huge-batch": ["training.batch_per_gpu", "1e+308", "below 2**63"],
    "subnormal-nic": ["cluster.hosts[0].nic_gbps", "5e-324", "[0.001, 100,000] (Gbit/s)"],
    "huge-nic": ["cluster.hosts[0].nic_gbps", "1e+308", "[0.001, 100,000] (Gbit/s)"],
    "nan-nic": ["cluster.hosts[0].nic_gbps", "nan", "a finite number"],
    "huge-gflops": ["model.arrays[0].fwd_gflops", "1e+308", "GFLOP per sample"],
    "five-thousand-digit-seed": ["line 10", "5000 digits", "at most 30"],
    "nested-lists": ["line 5", "nested deeper than 32 levels"],
    "duplicate-key": ["line 7", "duplicate key 'hosts'"],
    "alias-bomb": ["expands to more than 200,000 values through aliases"],
    "invalid-utf8": ["cannot read", "utf-8", "position 9"],
}


def test_every_bad_file_has_an_expectation() -> None:
    """The table above covers every file in tests/data/bad (and there are at least 20)."""
    files = {p.stem for p in BAD.glob("*.yaml")}
    assert files == set(BAD_CASES)
    assert len(files) >= 20


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_scenario_gives_exit_2_and_one_line_naming_the_field(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simscale check BAD.yaml` exits 2 with one line on stderr naming file and field."""
    path = BAD / f"{name}.yaml"
    assert main(["check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"simscale: error: {path}")
    for words in BAD_CASES[name]:
        assert words in lines[0], f"{words!r} missing from: {lines[0]}"
    assert "Traceback" not in err


def test_bad_input_shows_no_traceback_from_the_installed_command() -> None:
    """Run as a real process, bad input still gives exit 2 and no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "simscale.cli", "predict", str(BAD / "negative-bandwidth.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cluster.hosts[0].nic_gbps" in proc.stderr


def test_missing_file_is_reported_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "no/such/file.yaml"]) == 2
    assert "no/such/file.yaml: no such file" in capsys.readouterr().err


def test_shipped_scenarios_are_all_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """Every file under scenarios/ validates."""
    files = sorted(str(p) for p in (ROOT / "scenarios").rglob("*.yaml"))
    assert files
    assert main(["check", *files]) == 0


def test_check_takes_a_folder_for_every_scenario_under_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = sorted(str(p) for p in (ROOT / "scenarios").rglob("*.yaml"))
    assert main(["check", str(ROOT / "scenarios")]) == 0
    checked = [line.split(": ok")[0] for line in capsys.readouterr().out.splitlines()]
    assert checked == shipped
    assert main(["check", str(tmp_path)]) == 2
    assert "no .yaml or .yml file under this folder" in capsys.readouterr().err


def test_64gpu_scenario_means_what_it_says() -> None:
    """8 x p3.16xlarge = 64 V100s at 25 Gbit/s, 8 co-located servers, ResNet-50."""
    s = load_scenario(ROOT / "scenarios" / "64gpu.yaml")
    assert s.num_workers == 8
    assert s.num_gpus == 64
    assert s.num_servers == 8
    assert s.global_batch == 64 * 128
    assert s.cluster.hosts[0].resolved()[:3] == (8, "V100", 25.0)
    assert s.model.spec().params == 25_557_032


def test_overrides_change_fields_and_bad_overrides_name_the_field() -> None:
    """--set kvstore.servers=4 takes effect; a bad override is reported like a bad file."""
    path = ROOT / "scenarios" / "64gpu.yaml"
    s = load_scenario(path, ["kvstore.servers=4", "cluster.hosts[0].nic_gbps=100"])
    assert s.num_servers == 4
    assert s.cluster.hosts[0].resolved()[2] == 100.0
    with pytest.raises(ConfigError, match=r"cluster\.hosts\[0\]\.nic_gbps: got -1"):
        load_scenario(path, ["cluster.hosts[0].nic_gbps=-1"])
    with pytest.raises(ConfigError, match=r"kvstore\.severs: unknown field"):
        load_scenario(path, ["kvstore.severs=4"])
    with pytest.raises(ConfigError, match="expected path=value"):
        load_scenario(path, ["kvstore.servers"])


def test_scenario_round_trips_through_plain_data() -> None:
    """A run record stores the scenario as plain data; reading it back gives the same one."""
    s = load_scenario(ROOT / "scenarios" / "mxnet" / "3s-3w-async.yaml")
    assert scenario_from_dict(s.to_dict()) == s


def test_defaults_follow_mxnet() -> None:
    """Servers default to one per worker host (launch.py without -s); bound is 1,000,000."""
    s = scenario_from_dict(
        {
            "cluster": {"hosts": [{"count": 3, "instance": "p3.8xlarge"}]},
            "model": "resnet18",
            "training": {"batch_per_gpu": 8},
        }
    )
    assert s.num_servers == 3
    assert s.kvstore.bigarray_bound == 1_000_000
    assert s.kvstore.mode == "dist_sync"


def test_workers_per_host_must_divide_the_gpus_and_applies_to_parameter_servers_only() -> None:
    base = {
        "cluster": {"hosts": [{"count": 2, "instance": "p3.16xlarge", "workers_per_host": 8}]},
        "model": "resnet50",
        "training": {"batch_per_gpu": 32},
    }
    s = scenario_from_dict(base)
    assert (s.num_worker_hosts, s.num_workers, s.num_servers, s.gpus_per_worker(9)) == (2, 16, 2, 1)
    lay = layout(s)
    assert lay.worker_hosts == (0,) * 8 + (1,) * 8 and lay.server_hosts == (0, 1)
    three = {**base, "cluster": {"hosts": [{**base["cluster"]["hosts"][0], "workers_per_host": 3}]}}
    with pytest.raises(
        ConfigError, match=r"workers_per_host: got 3, expected a divisor of the host's 8 GPUs"
    ):
        scenario_from_dict(three)
    with pytest.raises(
        ConfigError,
        match=r"cluster.hosts\[0\].workers_per_host: got 8 with kvstore.mode 'allreduce'",
    ):
        scenario_from_dict({**base, "kvstore": {"mode": "allreduce"}})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "{s}", "--vary", "kvstore.servers=1,2", "--jobs", "0"], "--jobs: got '0'"),
        (["validate", "runs/emulated-v2", "--jobs", "-3"], "--jobs: got '-3'"),
        (["predict", "{s}", "--max-seconds", "0"], "--max-seconds: got '0'"),
    ],
    ids=["sweep --jobs 0", "validate --jobs -3", "predict --max-seconds 0"],
)
def test_counts_and_time_limits_out_of_range_are_refused(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s = str(ROOT / "scenarios" / "cpu-2x2-sync.yaml")
    with pytest.raises(SystemExit) as stop:
        main([a.replace("{s}", s) for a in args])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def _transformer(**training: object) -> dict:
    return {
        "cluster": {"hosts": [{"count": 2, "instance": "p4d.24xlarge"}]},
        "model": "gpt2_xl",
        "training": {"batch_per_gpu": 8, "precision": "bf16", "seq_len": 1024, **training},
        "kvstore": {"mode": "ddp"},
    }


def test_a_job_that_does_not_fit_its_gpu_is_refused_naming_each_term() -> None:
    """GPT-2 XL under DDP with Adam on a 40 GB A100: 1.56 B parameters x 16 bytes of model
    state alone is 23 GiB, plus DDP's bucket copies and 8 sequences of activations."""
    data = _transformer(optimizer={"type": "adam"})
    with pytest.raises(ConfigError) as e:
        scenario_from_dict(data)
    text = str(e.value)
    assert text.startswith("training.batch_per_gpu: does not fit: needs ")
    for term in ("of 40 (weights", "gradients", "optimizer state", "activations", "DDP buckets"):
        assert term in text
    assert "\n" not in text


def test_zero_stage_3_fits_what_ddp_does_not() -> None:
    data = _transformer(optimizer={"type": "adam"}, batch_per_gpu=1)
    data["kvstore"] = {"mode": "zero", "zero": {"stage": 3}}
    s = scenario_from_dict(data)
    assert s.memory_use().fits


def test_fp8_needs_an_h100() -> None:
    expected = "A100 has no fp8 units; expected fp32, fp16, amp, tf32, bf16"
    with pytest.raises(ConfigError, match=expected):
        scenario_from_dict(_transformer(precision="fp8", batch_per_gpu=1))


def test_seq_len_is_for_sequence_models_only() -> None:
    data = _transformer(batch_per_gpu=1)
    data["model"] = "resnet50"
    with pytest.raises(ConfigError, match=r"training\.seq_len: got 1024 with model resnet50"):
        scenario_from_dict(data)


def test_micro_batches_multiply_the_samples_of_a_step() -> None:
    s = scenario_from_dict(_transformer(batch_per_gpu=1, micro_batches=4))
    assert s.global_batch == 16 * 4


def test_nics_per_host_multiplies_one_nics_rate_and_presets_say_theirs() -> None:
    data = _transformer(batch_per_gpu=1)
    assert scenario_from_dict(data).cluster.hosts[0].resolved()[2] == 400.0  # 4 x 100 EFA
    data["cluster"]["hosts"][0]["nics_per_host"] = 2
    assert scenario_from_dict(data).cluster.hosts[0].resolved()[2] == 200.0
    data["cluster"]["hosts"][0]["nic_gbps"] = 50
    assert scenario_from_dict(data).cluster.hosts[0].resolved()[2] == 100.0


def test_zero_servers_is_accepted_for_the_modes_without_servers() -> None:
    """The tables print all-reduce with 0 servers, so a sweep or --set may say so too; a
    parameter-server mode still needs one."""
    ring = load_scenario(ROOT / "scenarios" / "64gpu-allreduce.yaml", ["kvstore.servers=0"])
    assert ring.num_servers == 0
    with pytest.raises(
        ConfigError, match=r"kvstore\.servers: got 0 with kvstore\.mode 'dist_sync'"
    ):
        load_scenario(ROOT / "scenarios" / "64gpu.yaml", ["kvstore.servers=0"])


def _hsdp(**zero: object) -> dict:
    data = _transformer(optimizer={"type": "adam"}, batch_per_gpu=1)
    data["kvstore"] = {"mode": "zero", "zero": {"stage": 3, "shard_group": "host", **zero}}
    return data


def test_hsdp_shards_over_one_hosts_gpus_not_the_world() -> None:
    """GPT-2 XL, Adam in bf16 (12 bytes of state per parameter) on 2 hosts of 8 A100: HSDP's
    shard is 1/8 of the state where FULL_SHARD over the world keeps 1/16."""
    hsdp = scenario_from_dict(_hsdp())
    world = scenario_from_dict(_hsdp(shard_group="world"))
    assert (hsdp.shard_ranks, world.shard_ranks) == (8, 16)
    params = hsdp.model_spec().params
    assert hsdp.memory_use().optimizer_state == pytest.approx(12 * params / 8)
    assert world.memory_use().optimizer_state == pytest.approx(12 * params / 16)


def test_hsdp_is_a_zero_option_on_hosts_of_equal_gpus() -> None:
    with pytest.raises(ConfigError, match=r"kvstore\.zero\.shard_group: got 'rack'.*'host'"):
        scenario_from_dict(_hsdp(shard_group="rack"))
    ddp = _hsdp()
    ddp["kvstore"]["mode"] = "ddp"
    with pytest.raises(ConfigError, match=r"shard_group: got 'host' with kvstore\.mode 'ddp'"):
        scenario_from_dict(ddp)
    uneven = _hsdp()
    uneven["cluster"]["hosts"].append({"count": 1, "instance": "p4d.24xlarge", "gpus_per_host": 4})
    with pytest.raises(ConfigError, match=r"got 'host' with hosts of 4, 8 GPUs") as e:
        scenario_from_dict(uneven)
    assert "\n" not in str(e.value)
