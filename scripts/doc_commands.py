"""Find and run the shell commands written in README.md and docs/, so that no example can rot.

A command is a ``$ `` line of a fenced ``console`` block (a line ending in ``\\`` goes on in the
next one); the other lines of the block are its output, shown to the reader and not checked.
A command expected to fail ends in a comment ``# exit N``. A here-document (``cat > f <<'EOF'``)
is part of its command, up to its closing word. The line just above a block may say
how to run it:

    <!-- commands: slow -->                       seconds to minutes (pytest's slow lane)
    <!-- commands: root -->                       needs root (network namespaces); CI runs it
    <!-- commands: long; REASON -->               an hour or more: run with SIMSCALE_DOCS_LONG=1
    <!-- commands: manual; REASON -->             never run here (installs, the test suite itself)

and with no marker a block runs in the fast lane. Each block runs in a fresh scratch directory
holding a copy of the repository's data (scenarios, runs, profiles, ...), with every ``/tmp/``
path mapped to a scratch folder of its own, so a command never writes a committed file nor a
file of another block. Its commands
run one after another in that directory (later ones may read what earlier ones wrote), with
this checkout first on PYTHONPATH.

A hand-written runner rather than sybil or pytest-examples: those check Python examples (sybil's
shell support compares output text), while what is needed here is exit status, per-block
timeouts, scratch isolation and lanes, in about a hundred lines.

    python -m scripts.doc_commands [--kind fast,slow] [FILE...]   # run them by hand
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("fast", "slow", "root", "long", "manual")
TIMEOUT_S = {"fast": 180, "slow": 1200, "root": 1800, "long": 6 * 3600, "manual": 0}
# What a block's scratch directory gets a copy of: the data commands read, never the code
# (that comes from PYTHONPATH, so the commands run this checkout).
COPIED = ("scenarios", "profiles", "campaigns", "runs", "benchmarks", "docs", "mkdocs.yml")
SCRATCH_TMP = "/tmp/"
MARKER_RE = re.compile(r"<!--\s*commands:\s*(?P<kind>\w+)\s*(?:;\s*(?P<reason>.*?))?\s*-->")
EXIT_RE = re.compile(r"\s+#\s*exit\s+(?P<code>\d+)\s*$")
HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")


class DocError(ValueError):
    """A console block that cannot be read: an unknown marker, a reason missing."""


@dataclass(frozen=True)
class Command:
    """One ``$ `` line (continuations joined) and the exit status it should end with."""

    line: int
    text: str
    expect_exit: int


@dataclass(frozen=True)
class Block:
    """One console block of a documentation file."""

    file: str  # relative to the repository root
    line: int
    kind: str
    reason: str
    commands: tuple[Command, ...]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _commands(lines: list[str], first_line: int) -> tuple[Command, ...]:
    found: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        start, text = i, lines[i][2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1].rstrip() + " " + lines[i].strip()
        expect = 0
        m = EXIT_RE.search(text)
        if m:
            expect, text = int(m.group("code")), text[: m.start()]
        text = text.strip()
        here = HEREDOC_RE.search(text)
        if here:
            body = []
            while i + 1 < len(lines) and lines[i + 1].strip() != here.group("word"):
                i += 1
                body.append(lines[i])
            i += 1
            text = "\n".join([text, *body, here.group("word")])
        found.append(Command(first_line + start, text, expect))
        i += 1
    return tuple(found)


def blocks(path: Path) -> list[Block]:
    """The console blocks of one markdown file, in order."""
    return blocks_of_text(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


def blocks_of_text(text: str, rel: str) -> list[Block]:
    """The console blocks of a markdown text read from ``rel``, in order."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        kind, reason = "fast", ""
        m = MARKER_RE.fullmatch(lines[i - 1].strip()) if i else None
        if m:
            kind, reason = m.group("kind"), m.group("reason") or ""
            if kind not in KINDS:
                raise DocError(f"{rel}:{i}: commands: {kind!r}, expected one of {KINDS}")
            if kind in ("long", "manual") and not reason:
                raise DocError(f"{rel}:{i}: commands: {kind} needs a reason after ';'")
        found.append(Block(rel, i + 1, kind, reason, _commands(lines[i + 1 : end], i + 2)))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path)]


def prepare_scratch(scratch: Path) -> Path:
    """Copy the repository's data into ``scratch``; return the folder /tmp/ maps to."""
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, scratch / name)
    tmp = scratch / "tmp"
    tmp.mkdir(exist_ok=True)
    return tmp


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["MPLBACKEND"] = "Agg"
    return env


@dataclass(frozen=True)
class Outcome:
    command: Command
    returncode: int
    output: str
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == self.command.expect_exit


def run_block(block: Block, scratch: Path) -> list[Outcome]:
    """Run a block's commands in order in ``scratch``; stop at the first unexpected status."""
    tmp = prepare_scratch(scratch)
    outcomes = []
    for cmd in block.commands:
        text = cmd.text.replace(SCRATCH_TMP, f"{tmp}/")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                ["bash", "-c", text],
                cwd=scratch,
                env=environment(),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S[block.kind],
            )
            code, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            code, out = -1, f"timed out after {e.timeout} s"
        outcomes.append(Outcome(cmd, code, out, time.perf_counter() - t0))
        if code != cmd.expect_exit:
            break
    return outcomes


def machine_too_busy(outcome: Outcome) -> bool:
    """A realrun job that ran but whose record its load verdict marked invalid (exit 3): every
    such reason says this machine, not the emulated cluster, limited it."""
    return (
        outcome.command.expect_exit == 0
        and outcome.returncode == 3
        and "realrun: record marked invalid:" in outcome.output
    )


def describe_failure(block: Block, outcome: Outcome) -> str:
    tail = "\n".join(outcome.output.strip().splitlines()[-15:])
    return (
        f"{block.file}:{outcome.command.line}: `{outcome.command.text}` exited "
        f"{outcome.returncode}, expected {outcome.command.expect_exit}\n{tail}"
    )


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m scripts.doc_commands", description=__doc__)
    ap.add_argument("files", nargs="*", type=Path, help="markdown files (default: all)")
    ap.add_argument("--kind", default="fast", help="comma-separated kinds to run")
    args = ap.parse_args(argv)
    kinds = set(args.kind.split(","))
    paths = [p.resolve() for p in args.files] or doc_files()
    failed = 0
    for block in (b for p in paths for b in blocks(p) if b.kind in kinds):
        with tempfile.TemporaryDirectory(prefix="doc-commands-") as scratch:
            for outcome in run_block(block, Path(scratch)):
                status = "ok" if outcome.ok else "FAILED"
                print(f"{status:6} {outcome.wall_s:6.1f} s  {block.file}:{outcome.command.line}")
                if not outcome.ok:
                    failed += 1
                    print(describe_failure(block, outcome), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
