"""Every command written in README.md and docs/ runs, and ends with the exit status it shows.

The blocks are found by scripts/doc_commands.py (``$ `` lines of ``console`` blocks). A block
marked slow runs in the slow lane, root blocks where the tests run as root (CI), long ones
with SIMSCALE_DOCS_LONG=1, and manual ones (installs, the test suite itself) never: each such
skip says why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scripts import doc_commands
from tests.support.paths import ROOT

BLOCKS = doc_commands.all_blocks()


def _marks(block: doc_commands.Block) -> list[pytest.MarkDecorator]:
    if block.kind == "slow":
        return [pytest.mark.slow]
    if block.kind == "root":
        return [pytest.mark.slow, pytest.mark.netns]
    if block.kind == "long":
        return [pytest.mark.slow]
    return []


def _git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=_marks(b)) for b in BLOCKS])
def test_documented_commands_run(block: doc_commands.Block, tmp_path: Path) -> None:
    if block.kind == "manual":
        pytest.skip(f"not run by tests: {block.reason}")
    if block.kind == "root" and os.geteuid() != 0:
        pytest.skip("needs root to build network namespaces (CI runs it as root)")
    if block.kind == "long" and not os.environ.get("SIMSCALE_DOCS_LONG"):
        pytest.skip(f"long ({block.reason}): set SIMSCALE_DOCS_LONG=1 to run it")
    before = _git_status()
    outcomes = doc_commands.run_block(block, tmp_path)
    for outcome in outcomes:
        if doc_commands.machine_too_busy(outcome):
            pytest.skip(f"{block.id}: this machine was too busy to judge the run it measured")
        assert outcome.ok, doc_commands.describe_failure(block, outcome)
    assert len(outcomes) == len(block.commands)
    assert _git_status() == before, f"{block.id}: a command changed files of the repository"


def test_every_shell_example_is_a_console_block_the_runner_sees() -> None:
    """A ```sh or ```bash block would hide its commands from the runner."""
    for path in doc_commands.doc_files():
        text = path.read_text(encoding="utf-8")
        for fence in ("```sh\n", "```bash\n", "```shell\n"):
            assert fence not in text, f"{path.relative_to(ROOT)}: use ```console with $ prompts"


def test_every_console_block_has_a_command() -> None:
    empty = [b.id for b in BLOCKS if not b.commands]
    assert not empty, f"console blocks without a $ line: {empty}"


def test_continuation_lines_and_expected_failures_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- commands: slow -->\n```console\n$ echo a \\\n    b\na b\n$ false  # exit 1\n```\n",
        encoding="utf-8",
    )
    (block,) = doc_commands.blocks_of_text(page.read_text(encoding="utf-8"), "page.md")
    assert block.kind == "slow"
    assert [(c.line, c.text, c.expect_exit) for c in block.commands] == [
        (3, "echo a b", 0),
        (6, "false", 1),
    ]


def test_a_marker_without_a_reason_or_of_unknown_kind_is_refused() -> None:
    with pytest.raises(doc_commands.DocError, match="needs a reason"):
        doc_commands.blocks_of_text("<!-- commands: manual -->\n```console\n$ x\n```\n", "p.md")
    with pytest.raises(doc_commands.DocError, match="expected one of"):
        doc_commands.blocks_of_text("<!-- commands: often -->\n```console\n$ x\n```\n", "p.md")


def test_a_failing_command_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    (block,) = doc_commands.blocks_of_text("```console\n$ exit 3\n$ true\n```\n", "p.md")
    (outcome,) = doc_commands.run_block(block, tmp_path)  # stops at the first failure
    assert not outcome.ok
    assert doc_commands.describe_failure(block, outcome).startswith("p.md:2: `exit 3` exited 3")


def test_tmp_is_mapped_into_the_scratch_directory(tmp_path: Path) -> None:
    (block,) = doc_commands.blocks_of_text(
        "```console\n$ mkdir -p /tmp/simscale && touch /tmp/simscale/marker /tmp/top\n```\n",
        "p.md",
    )
    assert all(o.ok for o in doc_commands.run_block(block, tmp_path))
    assert (tmp_path / "tmp" / "simscale" / "marker").exists()
    assert (tmp_path / "tmp" / "top").exists()


def test_a_here_document_is_part_of_its_command(tmp_path: Path) -> None:
    text = (
        "```console\n$ cat > /tmp/s.yaml <<'EOF'\na: 1\n  b: 2\nEOF\n"
        "$ grep -c . /tmp/s.yaml\n2\n```\n"
    )
    (block,) = doc_commands.blocks_of_text(text, "p.md")
    assert [c.line for c in block.commands] == [2, 6]
    assert block.commands[0].text == "cat > /tmp/s.yaml <<'EOF'\na: 1\n  b: 2\nEOF"
    assert all(o.ok for o in doc_commands.run_block(block, tmp_path))
    assert (tmp_path / "tmp" / "s.yaml").read_text() == "a: 1\n  b: 2\n"
