"""Where commands write: never over an existing file unless asked, ad-hoc results kept apart.

A newcomer following the README overwrote committed figures, and ``realrun run`` replaced an
earlier record of the same scenario without a word (issue 13). Every command that writes a file
checks its paths with ``refuse_overwrite`` *before* it does the work (a run or a fit can take
many minutes), and defaults choose a fresh timestamped name.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from simscale.config import ConfigError


def refuse_overwrite(paths: Iterable[Path], force: bool, option: str = "-o") -> None:
    """ConfigError naming the first of ``paths`` that exists, unless ``force``."""
    if force:
        return
    for path in paths:
        if path.exists():
            raise ConfigError(
                option,
                f"{path} exists; refusing to overwrite it (choose another path, or --force)",
            )


def timestamped(folder: Path, name: str, suffix: str) -> Path:
    """``folder/NAME-YYYYmmdd-HHMMSS.SUFFIX`` (UTC), with -2, -3, ... if that is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{name}-{stamp}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{name}-{stamp}-{n}{suffix}"
        n += 1
    return path
