"""Temporary bridge to ``simscale.scenario`` (landing on main): the real loader when present,
else a minimal YAML reader exposing the same attribute names. Delete after merging main."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

try:
    from simscale.scenario import ScenarioError, load_scenario
except ImportError:  # pragma: no cover - only until simscale.scenario lands

    class ScenarioError(ValueError):  # type: ignore[no-redef]
        """A bad scenario file."""

    _DEFAULTS = {
        "training": {
            "precision": "fp32",
            "optimizer": {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
        },
        "kvstore": {
            "mode": "dist_sync",
            "servers": None,
            "placement": "colocated",
            "bigarray_bound": 1_000_000,
            "gradient_compression": {"type": "none", "threshold": 0.5},
        },
        "simulation": {"warmup_iterations": 2, "measured_iterations": 10, "seed": 0},
        "realrun": {"compute": "real", "dilation": 1.0, "threads_per_worker": 1, "device": "auto"},
    }

    def _merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {
                k: _merge(base.get(k), over.get(k)) if k in over else base[k]
                for k in base.keys() | over.keys()
            }
        return base if over is None else over

    def _ns(x: Any) -> Any:
        if isinstance(x, dict):
            return SimpleNamespace(**{k: _ns(v) for k, v in x.items()})
        if isinstance(x, list):
            return tuple(_ns(v) for v in x)
        return x

    class _Scenario(SimpleNamespace):
        @property
        def num_workers(self) -> int:
            return sum(g.count for g in self.cluster.hosts)

        @property
        def num_servers(self) -> int:
            return self.kvstore.servers or self.num_workers

        def gpus_per_worker(self, rank: int) -> int:
            groups = [g for g in self.cluster.hosts for _ in range(g.count)]
            return groups[rank].gpus_per_host or 1

        def to_dict(self) -> dict[str, Any]:
            return self._data

    def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Any:  # type: ignore[misc]
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ScenarioError(f"{path}: {e}") from None
        for item in overrides:
            dotted, _, raw = item.partition("=")
            node = data
            *parents, leaf = dotted.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = yaml.safe_load(raw)
        data = _merge(_DEFAULTS, data)
        data.setdefault("name", Path(path).stem)
        s = _Scenario(**{k: _ns(v) for k, v in data.items()})
        s._data = data
        return s


def scenario_dict(scenario: Any) -> dict[str, Any]:
    """The scenario as plain data, for the run record."""
    return scenario.to_dict()


__all__ = ["ScenarioError", "load_scenario", "scenario_dict"]
