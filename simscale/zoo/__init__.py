"""The model zoo: real architectures reduced to their parameter arrays and per-layer FLOPs."""

from __future__ import annotations

from collections.abc import Callable

from simscale.zoo.spec import BYTES_PER_ELEMENT, Layer, ModelSpec, ParamArray

_REGISTRY: dict[str, Callable[[], ModelSpec]] = {}


def register(name: str) -> Callable[[Callable[[], ModelSpec]], Callable[[], ModelSpec]]:
    """Decorator: make a zero-argument builder available as ``get(name)``."""

    def wrap(builder: Callable[[], ModelSpec]) -> Callable[[], ModelSpec]:
        _REGISTRY[name] = builder
        return builder

    return wrap


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


_CACHE: dict[str, ModelSpec] = {}


def get(name: str) -> ModelSpec:
    """The model ``name``; KeyError with the known names when there is none."""
    _load_all()
    if name not in _REGISTRY:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    if name not in _CACHE:
        _CACHE[name] = _REGISTRY[name]()
    return _CACHE[name]


def _load_all() -> None:
    # Importing the architecture modules registers their builders.
    from simscale.zoo import architectures  # noqa: F401


__all__ = ["BYTES_PER_ELEMENT", "Layer", "ModelSpec", "ParamArray", "get", "names", "register"]
