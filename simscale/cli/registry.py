"""Where ``simscale``'s commands come from, so that adding a command is adding one file.

A *command module* has ``add_parsers(sub)``, which adds its subcommands to ``sub`` (what
argparse's ``add_subparsers()`` returns), and ``COMMANDS``, each subcommand's name mapped to the
function that runs it (``args -> exit code``). It may have ``ERRORS``: the exception types its
commands raise for bad input, which ``main`` prints as one line with exit code 2.

They are found in two places:

- the modules of this package (``simscale/cli/*.py``): simscale's own commands. A new module
  there with ``add_parsers`` and ``COMMANDS`` is a new command; nothing else needs to change.
- modules named under the entry-point group ``simscale.commands`` in an installed distribution's
  metadata (``[project.entry-points."simscale.commands"]`` in pyproject.toml): commands that
  live outside simscale, such as calibration's, which simscale must not import by name (imports
  run calibration -> simscale, never back). Metadata is written at install time, so a new entry
  needs ``pip install -e .`` again.

A registered module that cannot be imported costs only its own commands: ``main`` says why in
one line on stderr, and every other command still works.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

GROUP = "simscale.commands"
# The order `simscale --help` lists this package's command modules in; one not named here
# comes after them (alphabetically), and the registered ones after all of these.
HELP_ORDER = ("predict", "traces", "check", "models", "presets", "whatif", "schema")

Command = Callable[[argparse.Namespace], int]
# simscale's own distribution registers commands in this group, so finding none means metadata
# written before the group existed: a checkout pulled but not installed again.
STALE_METADATA = (
    f"no commands are registered under the entry-point group {GROUP}, so those of other "
    "packages are missing; if simscale is installed from a checkout, its metadata predates "
    "them: run pip install -e . again"
)


@dataclass(frozen=True)
class Registry:
    """The command modules found, in help order, and one line for each that could not load."""

    modules: tuple[ModuleType, ...]
    problems: tuple[str, ...] = ()

    @property
    def commands(self) -> dict[str, Command]:
        return {name: run for m in self.modules for name, run in m.COMMANDS.items()}

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The exception types that mean bad input, as the command modules declare them."""
        return tuple(e for m in self.modules for e in getattr(m, "ERRORS", ()))

    def add_parsers(self, sub: argparse._SubParsersAction) -> None:
        for module in self.modules:
            module.add_parsers(sub)


def load(plugins: Iterable[EntryPoint] | None = None) -> Registry:
    """This package's command modules, then those registered under ``GROUP`` (or ``plugins``)."""
    modules = [m for m in _builtin_modules() if _is_command_module(m)]
    problems = []
    registered = list(entry_points(group=GROUP) if plugins is None else plugins)
    if not registered and plugins is None:
        problems.append(STALE_METADATA)
    for entry in _unique(registered):
        try:
            module = entry.load()
        except Exception as e:  # any failure: its own commands go, the rest must still run
            problems.append(f"{_named(entry)}: cannot import {entry.value} ({_one_line(e)})")
            continue
        problem = _refusal(module, modules)
        if problem:
            problems.append(f"{_named(entry)}: {problem}")
        else:
            modules.append(module)
    return Registry(tuple(modules), tuple(problems))


def _builtin_modules() -> list[ModuleType]:
    here = [str(Path(__file__).parent)]
    names = [m.name for m in pkgutil.iter_modules(here) if not m.name.startswith("_")]
    rank = {name: i for i, name in enumerate(HELP_ORDER)}
    names.sort(key=lambda name: (rank.get(name, len(rank)), name))
    return [importlib.import_module(f"{__package__}.{name}") for name in names]


def _is_command_module(module: object) -> bool:
    return callable(getattr(module, "add_parsers", None)) and isinstance(
        getattr(module, "COMMANDS", None), dict
    )


def _refusal(module: ModuleType, taken: list[ModuleType]) -> str | None:
    """Why a registered module cannot join (not a command module, a name already taken)."""
    if not _is_command_module(module):
        return f"{module.__name__} has no add_parsers() and COMMANDS dict, so no commands"
    for other in taken:
        clash = sorted(set(module.COMMANDS) & set(other.COMMANDS))
        if clash:
            return f"command {clash[0]!r} is already {other.__name__}'s; its commands are left out"
    return None


def _unique(entries: Iterable[EntryPoint]) -> list[EntryPoint]:
    """Each registered module once (a checkout can expose its metadata twice), by entry name."""
    seen: dict[str, EntryPoint] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        seen.setdefault(entry.value, entry)
    return list(seen.values())


def _named(entry: EntryPoint) -> str:
    return f"the {entry.name} commands (entry point {GROUP}:{entry.name}) are unavailable"


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"
