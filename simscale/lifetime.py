"""Process lifetime: how a command stops on a signal, and children that do not outlive it.

Every command of simscale and realrun treats SIGTERM (a batch system, ``timeout``, a service
manager) exactly like Ctrl-C: the handler raises ``KeyboardInterrupt``, so ``finally`` blocks
tear down what the command started, and the command exits with the shell's code for the signal
(130 for SIGINT, 143 for SIGTERM). A child process (a validation fold, a realrun node) also
watches its parent: if the parent is killed outright (SIGKILL, a crash) nothing tears the child
down, so the child notices it was re-parented and exits by itself (issue 13: an interrupted
``simscale validate`` left a fold running for 57 minutes at 3.9 GB).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

EXIT_SIGINT = 128 + signal.SIGINT  # 130, as a shell reports a process ended by Ctrl-C
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
EXIT_ORPHANED = 3  # a child whose parent died: nobody reads this, but a log may
PARENT_POLL_S = 0.25  # how often a child checks its parent (well inside the 2 s it must notice)

_received: list[int] = []


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    # Ctrl-C keeps Python's bare KeyboardInterrupt (messages say "Ctrl-C"); others name it.
    raise KeyboardInterrupt(*(() if signum == signal.SIGINT else (signal.Signals(signum).name,)))


def stop_on_signals() -> None:
    """Make SIGTERM raise KeyboardInterrupt as SIGINT does (main thread only)."""
    _received.clear()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def interrupted_exit_code() -> int:
    """The exit code for the signal that interrupted this process (SIGINT if none recorded)."""
    return EXIT_SIGTERM if signal.SIGTERM in _received else EXIT_SIGINT


def exit_with_parent(
    what: str = "process", log: logging.Logger | None = None, parent: int | None = None
) -> None:
    """Start a daemon thread that ends this process within PARENT_POLL_S of its parent's death.

    The parent's death shows as a change of ``os.getppid()`` (the orphan is re-parented to
    init or a subreaper), which works whoever started us and needs no cooperation from the
    parent; ``PR_SET_PDEATHSIG`` would be Linux-only and fires when the forking *thread* ends.
    ``parent``, when the starter passed its pid, also catches a parent that died before this
    process got here (a loaded machine can take seconds to import numpy in a fresh process).
    """

    def gone(expected: int) -> None:
        message = f"{what}: parent process {expected} is gone; exiting"
        try:
            if log is not None:
                log.error(message)
            else:
                print(message, file=sys.stderr, flush=True)
        except Exception:
            pass  # stderr was the dead parent's pipe (its reader closed it): exit all the same
        finally:
            os._exit(EXIT_ORPHANED)

    if parent is None:
        parent = os.getppid()
        if parent == 1:
            return  # started by init (a daemon): there is no parent to watch
    elif os.getppid() != parent:
        gone(parent)

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(PARENT_POLL_S):
            if os.getppid() != parent:
                gone(parent)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def parent_from_environ(name: str) -> int | None:
    """The parent pid a launcher put in environment variable ``name`` (None if absent or bad)."""
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() and 1 < int(text) < 2**31 else None
