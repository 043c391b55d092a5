"""The realrun extra: the modules a real run needs beyond the simulator's, and how to get them.

torch and pyzmq stay out of simscale's install (pyproject.toml's ``realrun`` extra), so a user who
followed the simulator's quick start has neither; ``realrun run`` says so in one line instead of
ending in a ``ModuleNotFoundError`` from a node process.
"""

from __future__ import annotations

import importlib.util

# The import names of the realrun extra's distributions (pyproject.toml: pyzmq, torch).
MODULES = {"torch": "torch", "zmq": "pyzmq"}
INSTALL = 'pip install -e ".[realrun]"'


def missing() -> list[str]:
    """The distributions of the realrun extra that this interpreter cannot import."""
    absent = []
    for module, distribution in MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module without a spec
            found = False
        if not found:
            absent.append(distribution)
    return absent


def problem() -> str | None:
    """One line saying what is missing and how to install it, or None when nothing is."""
    absent = missing()
    if not absent:
        return None
    return (
        f"real runs need {' and '.join(absent)}, which are not installed here; install the "
        f"realrun extra from the repository's root: {INSTALL}"
    )
