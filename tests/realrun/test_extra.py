"""``realrun`` without its extra installed says in one line how to install it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from realrun import extra
from realrun.cli import main
from tests.support.paths import ROOT


def test_nothing_is_missing_where_the_extra_is_installed() -> None:
    assert extra.missing() == []
    assert extra.problem() is None


@pytest.mark.parametrize("command", ["run", "campaign"])
def test_run_without_torch_names_the_install_command(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As in an environment built for the simulator only: torch cannot be imported."""
    monkeypatch.setitem(sys.modules, "torch", None)
    target = ROOT / "scenarios" / "cpu-2x2-sync.yaml"
    rc = main([command, str(target)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "torch" in err and "pyzmq" not in err
    assert 'pip install -e ".[realrun]"' in err


def test_both_missing_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "zmq", None)
    assert extra.missing() == ["torch", "pyzmq"]
    assert "torch and pyzmq" in (extra.problem() or "")


@pytest.mark.parametrize("command", ["run", "campaign", "probe"])
def test_a_simulator_only_install_gets_one_line_not_a_traceback(command: str) -> None:
    """The environment the README's first command builds has neither torch nor pyzmq: even
    building the command line must not import them (the probe's step list once did)."""
    target = ROOT / "scenarios" / "cpu-2x2-sync.yaml"
    argv = ["probe", "-o", "/tmp/never-written.json"] if command == "probe" else [command, target]
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['zmq'] = None; "
        "from realrun.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "torch and pyzmq" in done.stderr and 'pip install -e ".[realrun]"' in done.stderr
