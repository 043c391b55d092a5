"""The model zoo: real architectures reduced to their parameter arrays and per-layer FLOPs."""

from __future__ import annotations

from simscale.zoo.registry import BUILDERS, register
from simscale.zoo.spec import BYTES_PER_ELEMENT, Layer, ModelSpec, ParamArray


def names() -> list[str]:
    _load_all()
    return sorted(BUILDERS)


_CACHE: dict[str, ModelSpec] = {}


def get(name: str) -> ModelSpec:
    """The model ``name``; KeyError with the known names when there is none."""
    _load_all()
    if name not in BUILDERS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(BUILDERS))}")
    if name not in _CACHE:
        _CACHE[name] = BUILDERS[name]()
    return _CACHE[name]


def _load_all() -> None:
    # Importing the architecture modules registers their builders.
    from simscale.zoo import architectures  # noqa: F401


__all__ = ["BYTES_PER_ELEMENT", "Layer", "ModelSpec", "ParamArray", "get", "names", "register"]
