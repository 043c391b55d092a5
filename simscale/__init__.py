"""SimScale: predict the throughput of data-parallel training before renting the cluster.

The Python API (imported on first use, so ``import simscale`` stays cheap)::

    import simscale
    r = simscale.predict("scenarios/64gpu.yaml", set={"kvstore.servers": 16})
    rows = simscale.sweep("scenarios/64gpu.yaml", vary={"kvstore.servers": [1, 2, 4, 8]})
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {
    "predict": "simscale.whatif.api",
    "sweep": "simscale.whatif.api",
    "compare": "simscale.whatif.compare",
    "advise": "simscale.whatif.api",
    "interval": "simscale.whatif.uncertainty",
    "schema": "simscale.spec.schema",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'simscale' has no attribute {name!r}")
