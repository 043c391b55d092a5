"""Where commands write: never over an existing file unless asked, ad-hoc results kept apart.

A newcomer following the README overwrote committed figures, and ``realrun run`` replaced an
earlier record of the same scenario without a word (issue 13). Every command that writes a file
checks its paths with ``refuse_overwrite`` *before* it does the work (a run or a fit can take
many minutes), and defaults choose a fresh timestamped name. The same check makes sure each path
can be written at all (its folder may still be missing: writers create it), so a typo in a
folder name is one line up front, not a traceback after the work.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from simscale.spec.config import ConfigError


def refuse_overwrite(paths: Iterable[Path], force: bool, option: str = "-o") -> None:
    """ConfigError naming the first of ``paths`` that exists (unless ``force``) or that cannot be
    written."""
    for path in paths:
        if path.exists() and not force and not path.is_dir():
            raise ConfigError(
                option,
                f"{path} exists; refusing to overwrite it (choose another path, or --force)",
            )
        check_writable(path, option)


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure(path: Path, option: str = "-o") -> None:
    """ConfigError unless ``path`` names a figure format the plots write (none: .png)."""
    if path.suffix and path.suffix not in FIGURE_SUFFIXES:
        raise ConfigError(option, f"{path}: expected a .png, .svg or .pdf file")


def check_writable(path: Path, option: str = "-o") -> None:
    """ConfigError unless ``path`` can be written: not a folder, and its nearest existing
    ancestor a folder this process may create files in. Creates nothing."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(option, f"{path} is a folder, expected the path of a file to write")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(option, f"cannot write {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(option, f"cannot write {path}: {folder} is not writable")


def timestamped(folder: Path, name: str, suffix: str) -> Path:
    """``folder/NAME-YYYYmmdd-HHMMSS.SUFFIX`` (UTC), with -2, -3, ... if that is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{name}-{stamp}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{name}-{stamp}-{n}{suffix}"
        n += 1
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
