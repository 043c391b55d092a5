"""The model zoo: real architectures reduced to their parameter arrays and per-layer FLOPs."""

from __future__ import annotations

from simscale.zoo.registry import (
    BUILDERS,
    DEFAULT_SEQ_LEN,
    SEQUENCE_BUILDERS,
    register,
    register_sequence,
)
from simscale.zoo.spec import BYTES_PER_ELEMENT, Layer, ModelSpec, ParamArray


def names() -> list[str]:
    _load_all()
    return sorted(BUILDERS)


_CACHE: dict[tuple[str, int | None], ModelSpec] = {}


def is_sequence_model(name: str) -> bool:
    """Whether ``name`` is a sequence model, whose FLOPs depend on the tokens per sample."""
    _load_all()
    return name in SEQUENCE_BUILDERS


def default_seq_len(name: str) -> int | None:
    """The tokens per sample a sequence model is built at by default (None for an image model)."""
    _load_all()
    return DEFAULT_SEQ_LEN.get(name)


def get(name: str, seq_len: int | None = None) -> ModelSpec:
    """The model ``name`` (a sequence model at ``seq_len`` tokens per sample, else its default);
    KeyError with the known names when there is none, ValueError for a length an image model
    or the model's positions cannot take."""
    _load_all()
    if name not in BUILDERS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(BUILDERS))}")
    if seq_len is not None and name not in SEQUENCE_BUILDERS:
        raise ValueError(f"model {name!r} takes no seq_len: its samples are images")
    key = (name, seq_len)
    if key not in _CACHE:
        _CACHE[key] = BUILDERS[name]() if seq_len is None else SEQUENCE_BUILDERS[name](seq_len)
    return _CACHE[key]


def _load_all() -> None:
    # Importing the architecture modules registers their builders.
    from simscale.zoo import architectures  # noqa: F401


__all__ = [
    "BYTES_PER_ELEMENT",
    "Layer",
    "ModelSpec",
    "ParamArray",
    "default_seq_len",
    "get",
    "is_sequence_model",
    "names",
    "register",
    "register_sequence",
]
