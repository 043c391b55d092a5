"""The probe record: every measurement's raw samples and their spread, versioned JSON.

One record per probe run. ``measurements`` maps a measurement's name to its samples (one number
per repetition, in the SI unit its ``unit`` names) and the figures ``calibrate --probe`` reads
(median, mean, standard deviation, and the standard deviation of the log, a relative spread).
A measurement that could not run here (no GPU) is kept with ``skipped`` and the reason, so a
reader sees what was not measured, never a silent gap.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROBE_SCHEMA_VERSION = 1
PROBE_KIND = "realrun-probe"


class ProbeRecordError(ValueError):
    """A probe record that does not follow this format: file, field, value, expectation."""


@dataclass(frozen=True)
class Spread:
    """Summary of a measurement's samples: centre and spread (log spread: a relative sigma)."""

    n: int
    median: float
    mean: float
    std: float
    log_std: float  # of log(sample): 0.05 is a 5% spread; nan for non-positive samples
    min: float
    max: float

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        if not samples:
            raise ValueError("a spread needs at least one sample")
        positive = all(s > 0 for s in samples)
        logs = [math.log(s) for s in samples] if positive else []
        return cls(
            n=len(samples),
            median=statistics.median(samples),
            mean=statistics.fmean(samples),
            std=statistics.stdev(samples) if len(samples) > 1 else 0.0,
            log_std=(statistics.stdev(logs) if len(logs) > 1 else 0.0) if positive else math.nan,
            min=min(samples),
            max=max(samples),
        )


@dataclass(frozen=True)
class Measurement:
    """One measured quantity: samples in ``unit``, where and how it was measured."""

    unit: str
    samples: tuple[float, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)  # hosts, sizes, connections...
    skipped: str = ""  # why it was not measured (then samples is empty)

    @property
    def spread(self) -> Spread:
        return Spread.of(list(self.samples))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "samples": list(self.samples)}
        out["context"] = self.context
        if self.skipped:
            out["skipped"] = self.skipped
        else:
            out["spread"] = asdict(self.spread)
        return out


@dataclass(frozen=True)
class ProbeRecord:
    """Everything one probe measured, and on what."""

    launcher: str
    hosts: tuple[dict[str, Any], ...]  # name, address, nominal rate_mbit / latency_us if known
    measurements: dict[str, Measurement]
    environment: dict[str, Any] = field(default_factory=dict)  # versions, machine load, wall
    created: str = ""
    schema_version: int = PROBE_SCHEMA_VERSION

    def measured(self, name: str) -> Measurement | None:
        """The measurement ``name`` when it ran and has samples, else None."""
        m = self.measurements.get(name)
        return m if m is not None and m.samples and not m.skipped else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": PROBE_KIND,
            "schema_version": self.schema_version,
            "created": self.created,
            "launcher": self.launcher,
            "hosts": list(self.hosts),
            "environment": self.environment,
            "measurements": {k: m.to_dict() for k, m in self.measurements.items()},
        }


def write_probe(record: ProbeRecord, path: str | Path) -> Path:
    """Write atomically (a temporary file renamed), so a crash never leaves half a record."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(record.to_dict(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


def _need(data: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise ProbeRecordError(f"{where}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ProbeRecordError(f"{where}.{key}: got {value!r}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def probe_from_dict(data: Any, where: str = "probe") -> ProbeRecord:
    """A ProbeRecord from parsed JSON; ProbeRecordError names the first bad field."""
    if not isinstance(data, dict) or data.get("kind") != PROBE_KIND:
        raise ProbeRecordError(f"{where}: not a probe record (expected kind: {PROBE_KIND})")
    version = _need(data, "schema_version", int, where)
    if version != PROBE_SCHEMA_VERSION:
        raise ProbeRecordError(
            f"{where}.schema_version: got {version}, expected {PROBE_SCHEMA_VERSION}"
        )
    measurements = {}
    for name, m in _need(data, "measurements", dict, where).items():
        at = f"{where}.measurements.{name}"
        samples = _need(m, "samples", list, at)
        for i, s in enumerate(samples):
            if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s):
                raise ProbeRecordError(f"{at}.samples[{i}]: got {s!r}, expected a finite number")
        skipped = m.get("skipped", "")
        if not samples and not skipped:
            raise ProbeRecordError(f"{at}: no samples and no 'skipped' reason")
        measurements[name] = Measurement(
            unit=_need(m, "unit", str, at),
            samples=tuple(float(s) for s in samples),
            context=m.get("context", {}) or {},
            skipped=str(skipped),
        )
    return ProbeRecord(
        launcher=_need(data, "launcher", str, where),
        hosts=tuple(_need(data, "hosts", list, where)),
        measurements=measurements,
        environment=data.get("environment", {}) or {},
        created=str(data.get("created", "")),
        schema_version=version,
    )


def load_probe(path: str | Path) -> ProbeRecord:
    """Read a probe record; ProbeRecordError (one line, naming the file) when it is not one."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProbeRecordError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProbeRecordError(f"{p}: not readable JSON ({e})") from None
    return probe_from_dict(data, str(p))
