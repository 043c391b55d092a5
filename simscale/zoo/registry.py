"""The builders of the zoo's models by name, filled in by the architecture modules as they load.

A leaf module: the architectures register here, and the package's ``get``/``names`` load them
and read it, so neither imports the other in a circle.
"""

from __future__ import annotations

from collections.abc import Callable

from simscale.zoo.spec import ModelSpec

BUILDERS: dict[str, Callable[[], ModelSpec]] = {}


def register(name: str) -> Callable[[Callable[[], ModelSpec]], Callable[[], ModelSpec]]:
    """Decorator: make a zero-argument builder available as ``simscale.zoo.get(name)``."""

    def wrap(builder: Callable[[], ModelSpec]) -> Callable[[], ModelSpec]:
        BUILDERS[name] = builder
        return builder

    return wrap
