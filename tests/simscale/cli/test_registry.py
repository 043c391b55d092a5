"""How ``simscale`` finds its commands: its own modules, and plugins through an entry point.

simscale/cli/registry.py: every module of the simscale.cli package with ``add_parsers`` and
``COMMANDS`` is a command module; other packages (calibration) register theirs under the
entry-point group ``simscale.commands``. A plugin that cannot load costs only its own commands,
said in one line; its ``ERRORS`` print as one line with exit code 2.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

from calibration.errors import CalibrationError
from simscale.cli import main, registry
from simscale.whatif.errors import WhatIfError
from tests.support.paths import ROOT

SIMSCALE_COMMANDS = [
    "predict",
    "combine-traces",
    "check",
    "models",
    "presets",
    "sweep",
    "compare",
    "advise",
    "schema",
]
CALIBRATION_COMMANDS = ["calibrate", "validate", "plot"]
MAX_FUNCTION_LINES = 80  # issue 34: no function in simscale/ over 80 lines


def plugins(*extra: EntryPoint) -> list[EntryPoint]:
    return [*entry_points(group=registry.GROUP), *extra]


def plugin(name: str, module: str) -> EntryPoint:
    return EntryPoint(name=name, value=module, group=registry.GROUP)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for plugin modules written by a test (removed from sys.modules)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("plugin_"):
            del sys.modules[name]


def test_every_command_is_found_in_help_order() -> None:
    # simscale's own (predict first, in HELP_ORDER), then calibration's through its entry point.
    found = registry.load()
    assert list(found.commands) == SIMSCALE_COMMANDS + CALIBRATION_COMMANDS
    assert found.problems == ()
    assert "calibration.cli" in [m.__name__ for m in found.modules]
    assert set(found.errors) == {WhatIfError, CalibrationError}


def test_calibration_registers_through_installed_metadata_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    # The entry point as the console script sees it: a new interpreter, the installed
    # metadata. A CalibrationError is one line with exit code 2, not a traceback.
    proc = subprocess.run(
        [sys.executable, "-m", "simscale.cli", "calibrate", "-o", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == "simscale: error: give run records to fit, or --published\n"


def test_a_plugin_that_cannot_import_costs_only_its_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = plugin("broken", "plugin_nowhere.cli")
    monkeypatch.setattr(registry, "entry_points", lambda group: plugins(broken))
    assert main(["models", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [row["name"] for row in json.loads(out)][:2] == ["alexnet", "alexnet_mxnet"]
    assert err == (
        "simscale: warning: the broken commands (entry point simscale.commands:broken) are "
        "unavailable: cannot import plugin_nowhere.cli (ModuleNotFoundError: No module named "
        "'plugin_nowhere')\n"
    )


def test_a_plugin_that_fails_while_importing_is_one_line_too(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (plugin_dir / "plugin_raises.py").write_text(
        'raise RuntimeError("needs a licence\\nserver")\n', encoding="utf-8"
    )
    monkeypatch.setattr(
        registry, "entry_points", lambda group: plugins(plugin("raises", "plugin_raises"))
    )
    assert main(["check", str(ROOT / "scenarios" / "64gpu.yaml")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith("cannot import plugin_raises (RuntimeError: needs a licence server)\n")


def test_a_plugin_command_runs_and_its_errors_are_one_line(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The whole of a new command: one module with add_parsers, COMMANDS and ERRORS.
    (plugin_dir / "plugin_hello.py").write_text(
        textwrap.dedent(
            """
            class HelloError(Exception):
                pass

            ERRORS = (HelloError,)

            def add_parsers(sub):
                sub.add_parser("hello").add_argument("who")

            def hello(args):
                if args.who == "nobody":
                    raise HelloError("hello: nobody to greet")
                print(f"hello, {args.who}")
                return 0

            COMMANDS = {"hello": hello}
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setattr(
        registry, "entry_points", lambda group: plugins(plugin("hello", "plugin_hello"))
    )
    assert main(["hello", "world"]) == 0
    assert capsys.readouterr() == ("hello, world\n", "")
    assert main(["hello", "nobody"]) == 2
    assert capsys.readouterr() == ("", "simscale: error: hello: nobody to greet\n")


def test_a_plugin_may_not_take_a_command_name(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (plugin_dir / "plugin_clash.py").write_text(
        "def add_parsers(sub):\n    sub.add_parser('models')\n\n"
        "COMMANDS = {'models': lambda args: 99}\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(
        registry, "entry_points", lambda group: plugins(plugin("clash", "plugin_clash"))
    )
    assert main(["models", "--json"]) == 0  # simscale's own, not the plugin's
    err = capsys.readouterr().err
    assert err == (
        "simscale: warning: the clash commands (entry point simscale.commands:clash) are "
        "unavailable: command 'models' is already simscale.cli.models's; its commands are "
        "left out\n"
    )


def test_a_module_without_commands_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(registry, "entry_points", lambda group: plugins(plugin("json", "json")))
    assert main(["models", "--json"]) == 0
    assert "json has no add_parsers() and COMMANDS dict" in capsys.readouterr().err


def test_metadata_that_predates_the_group_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A checkout pulled but not installed again: its entry points lack the group altogether.
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    assert main(["models", "--json"]) == 0
    assert capsys.readouterr().err == f"simscale: warning: {registry.STALE_METADATA}\n"
    with pytest.raises(SystemExit) as stop:  # argparse: invalid choice
        main(["calibrate", "-o", "p.yaml"])
    assert stop.value.code == 2


def test_the_same_plugin_exposed_twice_registers_once() -> None:
    # A checkout's own simscale.egg-info and the installed metadata can both list it.
    twice = plugins(plugin("calibration", "calibration.cli"))
    found = registry.load(twice)
    assert found.problems == ()
    assert list(found.commands) == SIMSCALE_COMMANDS + CALIBRATION_COMMANDS


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_command_function_is_over_80_lines() -> None:
    files = [*sorted((ROOT / "simscale" / "cli").glob("*.py")), ROOT / "calibration" / "cli.py"]
    long = [line for f in files for line in _long_functions(f)]
    assert not long, "split these:\n" + "\n".join(long)
