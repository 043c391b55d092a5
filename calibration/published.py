"""Published real-hardware measurements kept as data, so the simulator can be judged against them.

Each YAML file in ``calibration/published/`` is one source: where the figures come from (repository,
path and commit, or paper and table), the setup as the source states it, what the scenario format
cannot express, a base scenario, and points (a model, the published value of one metric, and the
``--set`` overrides that turn the base into that point's scenario). The README beside the files
lists the sources and how each figure was verified.

Loading is strict: an unknown key, a missing field, a non-finite value, a point whose scenario does
not validate, a baseline that does not exist, a duplicate name or id: each is one CalibrationError
line naming the file and the field. A figure is never typed from memory or estimated: it is read
from a table, from text, or off a chart (``read_from``), and a chart reading says how precisely.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from calibration.errors import CalibrationError
from simscale.simulator import simulate
from simscale.spec.config import ConfigError, apply_overrides, from_mapping, positive, read_yaml
from simscale.spec.costs import CostModel
from simscale.spec.scenario import DIST_MODES, Scenario, scenario_from_dict

PUBLISHED_DIR = Path(__file__).parent / "published"
# The transformer set (PyTorch DDP, ZeRO and FSDP on A100/H100 hosts), judged as a group of its
# own: a subfolder, so that the convolutional set's files, fits and golden values stay as they are.
TRANSFORMERS_DIR = PUBLISHED_DIR / "transformers"
# Tokens per second (the whole job's, or one GPU's) are kept as the source prints them and turned
# into samples (sequences) per second on loading: value / seq_len (x GPUs for the per-GPU figure).
TOKEN_METRICS = ("throughput_tokens_per_s", "throughput_tokens_per_s_per_gpu")
METRICS = ("scaling_efficiency", "throughput_samples_per_s", *TOKEN_METRICS)
Metric = Literal[
    "scaling_efficiency",
    "throughput_samples_per_s",
    "throughput_tokens_per_s",
    "throughput_tokens_per_s_per_gpu",
]
# ddp: PyTorch DistributedDataParallel; zero: ZeRO stages 1-3 and FSDP (kvstore.mode zero).
System = Literal["ps", "allreduce", "single", "ddp", "zero"]
ReadFrom = Literal["table", "text", "chart"]
# A published scaling efficiency above this is a typo, not super-linear scaling.
MAX_EFFICIENCY = 1.5


@dataclass(frozen=True)
class SourceRef:
    """Where the figures are: a repository path at a commit, or a paper and its table/figure."""

    ref: str
    commit: str | None = None
    table: str | None = None
    url: str | None = None

    def validate(self) -> None:
        if not self.ref.strip():
            raise ConfigError("ref", "empty, expected the repository path or the paper")
        if self.commit is not None:
            c = self.commit
            if not (7 <= len(c) <= 40 and all(ch in "0123456789abcdef" for ch in c)):
                raise ConfigError("commit", f"got {c!r}, expected 7 to 40 lowercase hex digits")


@dataclass(frozen=True)
class PointEntry:
    """One published figure as written in the file."""

    name: str
    model: str
    value: float = field(metadata=positive())
    set: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    system: System | None = None
    metric: Metric | None = None
    read_from: ReadFrom | None = None
    notes: str = ""
    # The mechanism that dominates this figure and the scenario format cannot express (e.g.
    # "MPI all-reduce in host memory"): such a point is judged like every other, but never
    # fitted to, so that no parameter learns to stand in for what the model lacks.
    unmodelled: str = ""


@dataclass(frozen=True)
class SourceFile:
    """One source: its reference, the setup as stated, and its points."""

    id: str
    campaign: str
    source: SourceRef
    setup: str
    framework: str
    system: System  # the file's main system; "single" for compute-only sources
    metric: Metric
    read_from: ReadFrom
    base: dict[str, Any]
    points: tuple[PointEntry, ...]
    read_precision: str = ""
    unexpressed: tuple[str, ...] = ()

    def validate(self) -> None:
        for name in ("id", "campaign", "setup", "framework"):
            if not str(getattr(self, name)).strip():
                raise ConfigError(name, "empty, expected text")
        if not self.points:
            raise ConfigError("points", "empty, expected at least one point")
        charted = [p for p in self.points if (p.read_from or self.read_from) == "chart"]
        if charted and not self.read_precision.strip():
            raise ConfigError(
                "read_precision", "missing, expected how precisely the chart was read"
            )


@dataclass(frozen=True)
class PublishedPoint:
    """One published figure with the scenario that mirrors its setup.

    ``source`` is the file's id; ``campaign`` names the independent publication or benchmark
    campaign (several files may share one): leave-one-source-out holds out a whole campaign.
    ``baseline`` is the single-GPU point of the same setup, so that the scaling efficiency
    ``value / (gpus * baseline.value)`` separates the compute error from the scaling error.
    """

    source: str
    campaign: str
    name: str
    metric: str
    value: float
    scenario: Scenario
    system: str
    framework: str
    gpu: str
    link_gbps: float
    gpus: int
    sync: bool
    read_from: str
    baseline: PublishedPoint | None = None
    path: str = ""
    unmodelled: str = ""  # judged, never fitted (PointEntry.unmodelled)
    # The figure and metric as the source prints them, where the loader converted tokens/s.
    stated: float | None = None
    stated_metric: str = ""

    @property
    def efficiency(self) -> float | None:
        """Published scaling efficiency: stated, or derived from the single-GPU baseline."""
        if self.metric == "scaling_efficiency":
            return self.value
        if self.baseline is None:
            return None
        return self.value / (self.gpus * self.baseline.value)


def load_published(paths: Sequence[Path] | None = None) -> list[PublishedPoint]:
    """Every point of the given files (default: all shipped ones), strictly checked."""
    files = list(paths) if paths is not None else sorted(PUBLISHED_DIR.glob("*.yaml"))
    if not files:
        raise CalibrationError(f"{PUBLISHED_DIR}: no published measurement files (*.yaml)")
    points: list[PublishedPoint] = []
    ids: dict[str, Path] = {}
    for f in files:
        entry = _read_file(Path(f))
        if entry.id in ids:
            raise CalibrationError(f"{f}: id: {entry.id!r} already used by {ids[entry.id]}")
        ids[entry.id] = Path(f)
        points.extend(_points_of(Path(f), entry))
    return points


def load_transformers() -> list[PublishedPoint]:
    """Every point of the transformer set (``calibration/published/transformers``)."""
    return load_published(sorted(TRANSFORMERS_DIR.glob("*.yaml")))


def _read_file(path: Path) -> SourceFile:
    try:
        return from_mapping(SourceFile, read_yaml(path))
    except ConfigError as e:
        raise CalibrationError(str(e if e.source else e.in_file(str(path)))) from None


def point_scenario_data(base: dict[str, Any], p: PointEntry) -> dict[str, Any]:
    """The point's scenario as plain data: the base, its model and name, then its ``set``."""
    data = copy.deepcopy(base)
    data["model"] = p.model
    data["name"] = p.name
    # The same path syntax and parser as ``simscale predict --set``; JSON is valid YAML.
    return apply_overrides(data, [f"{k}={json.dumps(v)}" for k, v in p.set.items()])


def _points_of(path: Path, entry: SourceFile) -> list[PublishedPoint]:
    by_name: dict[str, PublishedPoint] = {}
    for i, p in enumerate(entry.points):
        where = f"{path}: points[{i}]"
        if p.name in by_name:
            raise CalibrationError(f"{where}.name: {p.name!r} used twice in this file")
        try:
            scenario = scenario_from_dict(point_scenario_data(entry.base, p))
        except ConfigError as e:
            raise CalibrationError(f"{where}: {e}") from None
        metric = p.metric or entry.metric
        system = p.system or entry.system
        _check_system(where, system, scenario)
        value, stated = p.value, None
        if metric in TOKEN_METRICS:
            value, stated = _samples_per_s(where, metric, p.value, scenario), p.value
        if metric == "scaling_efficiency" and p.value > MAX_EFFICIENCY:
            raise CalibrationError(
                f"{where}.value: got {p.value}, expected a scaling efficiency <= {MAX_EFFICIENCY}"
            )
        baseline = _baseline(where, p, metric, by_name)
        _, gpu, link, _, _ = scenario.cluster.hosts[0].resolved()
        by_name[p.name] = PublishedPoint(
            source=entry.id,
            campaign=entry.campaign,
            name=p.name,
            metric="throughput_samples_per_s" if stated is not None else metric,
            value=value,
            scenario=scenario,
            system=system,
            framework=entry.framework,
            gpu=gpu,
            link_gbps=link,
            gpus=scenario.num_gpus,
            sync=not scenario.kvstore.mode.startswith("dist_async"),
            read_from=p.read_from or entry.read_from,
            baseline=baseline,
            path=str(path),
            unmodelled=p.unmodelled,
            stated=stated,
            stated_metric=metric if stated is not None else "",
        )
    return list(by_name.values())


def _samples_per_s(where: str, metric: str, tokens_per_s: float, s: Scenario) -> float:
    """A published tokens/s figure as sequences/s: tokens / seq_len (x GPUs if per GPU)."""
    seq_len = s.model_spec().seq_len
    if not seq_len:
        raise CalibrationError(
            f"{where}.value: {metric} for {s.model_spec().name!r}, which has no seq_len; "
            "expected a sequence model"
        )
    gpus = s.num_gpus if metric == "throughput_tokens_per_s_per_gpu" else 1
    return tokens_per_s * gpus / seq_len


def _check_system(where: str, system: str, s: Scenario) -> None:
    """The stated system must be the one the scenario simulates."""
    mode = s.kvstore.mode
    if system == "single" and s.num_gpus != 1:
        raise CalibrationError(f"{where}.system: 'single' but the scenario has {s.num_gpus} GPUs")
    if system == "ps" and mode not in DIST_MODES:
        raise CalibrationError(
            f"{where}.system: 'ps' but kvstore.mode is {mode!r}, expected one of {DIST_MODES}"
        )
    if system in ("ddp", "zero") and mode != system:
        raise CalibrationError(f"{where}.system: {system!r} but kvstore.mode is {mode!r}")
    if system == "allreduce" and mode not in ("allreduce", "device"):
        raise CalibrationError(
            f"{where}.system: 'allreduce' but kvstore.mode is {mode!r}, "
            "expected 'allreduce' (or 'device' inside one host)"
        )


def _baseline(
    where: str, p: PointEntry, metric: str, earlier: dict[str, PublishedPoint]
) -> PublishedPoint | None:
    if p.baseline is None:
        return None
    b = earlier.get(p.baseline)
    if b is None:
        raise CalibrationError(
            f"{where}.baseline: {p.baseline!r} is not an earlier point of this file"
        )
    if metric not in ("throughput_samples_per_s", *TOKEN_METRICS) or b.metric != (
        "throughput_samples_per_s"
    ):
        raise CalibrationError(f"{where}.baseline: expected throughput points on both sides")
    if b.gpus != 1:
        raise CalibrationError(
            f"{where}.baseline: {p.baseline!r} has {b.gpus} GPUs, expected a single-GPU point"
        )
    return b


def compare(points: list[PublishedPoint], costs: CostModel | None = None) -> list[dict[str, Any]]:
    """The simulator's figure beside each published one."""
    rows = []
    for p in points:
        r = simulate(p.scenario, costs)
        predicted = getattr(r, p.metric)
        rows.append(
            {
                "source": p.source,
                "campaign": p.campaign,
                "name": p.name,
                "system": p.system,
                "metric": p.metric,
                "published": p.value,
                "predicted": predicted,
                "error": (predicted - p.value) / p.value,
            }
        )
    return rows
