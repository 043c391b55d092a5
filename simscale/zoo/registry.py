"""The builders of the zoo's models by name, filled in by the architecture modules as they load.

A leaf module: the architectures register here, and the package's ``get``/``names`` load them
and read it, so neither imports the other in a circle.
"""

from __future__ import annotations

from collections.abc import Callable

from simscale.zoo.spec import ModelSpec

BUILDERS: dict[str, Callable[[], ModelSpec]] = {}
# Sequence models: builders that take the tokens per sample, ``builder(seq_len)``, with the
# length they are built at when the scenario gives none.
SEQUENCE_BUILDERS: dict[str, Callable[[int], ModelSpec]] = {}
DEFAULT_SEQ_LEN: dict[str, int] = {}


def register(name: str) -> Callable[[Callable[[], ModelSpec]], Callable[[], ModelSpec]]:
    """Decorator: make a zero-argument builder available as ``simscale.zoo.get(name)``."""

    def wrap(builder: Callable[[], ModelSpec]) -> Callable[[], ModelSpec]:
        BUILDERS[name] = builder
        return builder

    return wrap


def register_sequence(
    name: str, default_seq_len: int
) -> Callable[[Callable[[int], ModelSpec]], Callable[[int], ModelSpec]]:
    """Decorator: a builder of a sequence model at a given length, as ``zoo.get(name,
    seq_len)``; ``zoo.get(name)`` builds it at ``default_seq_len``."""

    def wrap(builder: Callable[[int], ModelSpec]) -> Callable[[int], ModelSpec]:
        SEQUENCE_BUILDERS[name] = builder
        DEFAULT_SEQ_LEN[name] = default_seq_len
        BUILDERS[name] = lambda: builder(default_seq_len)
        return builder

    return wrap
