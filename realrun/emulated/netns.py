"""Network namespaces owned by this project: naming, listing, killing what runs inside, deleting.

Every namespace this project creates is named ``<tag>-<owner pid>-<random>-<role>`` with the
fixed tag ``ssx``. The owner pid lets ``cleanup_leftovers`` tell a dead run's namespaces (safe
to delete) from those of a run still going in another process (left alone unless forced).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT_TAG = "ssx"
IP_TIMEOUT_S = 10.0  # one `ip`/`tc` call; they return in milliseconds unless the kernel is stuck
ROOT_MESSAGE = (
    "realrun --launcher netns needs root to create network namespaces; "
    "run as root or use --launcher local"
)
_NAME_RE = re.compile(r"^(?P<tag>[a-z0-9]+)-(?P<pid>\d+)-(?P<nonce>[0-9a-f]+)(?:-.*)?$")


class NetnsUnavailable(PermissionError):
    """This machine or user cannot build an emulated cluster (not root, or no iproute2)."""


class NetnsCommandError(RuntimeError):
    """An ``ip`` or ``tc`` command failed; the message carries the command and its stderr."""


def require_netns_support() -> None:
    """Raise NetnsUnavailable, saying what to do, unless we are root with ``ip`` and ``tc``."""
    if os.geteuid() != 0:
        raise NetnsUnavailable(ROOT_MESSAGE)
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise NetnsUnavailable(
            f"realrun --launcher netns needs iproute2 ({', '.join(missing)} not found on PATH); "
            "install iproute2 or use --launcher local"
        )


def run_command(argv: list[str], timeout_s: float = IP_TIMEOUT_S) -> str:
    """Run one ip/tc command, bounded in time; return stdout or raise NetnsCommandError."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NetnsCommandError(f"{' '.join(argv)} did not return within {timeout_s} s") from exc
    if done.returncode != 0:
        raise NetnsCommandError(
            f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout


@dataclass(frozen=True)
class RunPrefix:
    """The unique name stem of one run's namespaces: ``<tag>-<owner pid>-<nonce>``."""

    tag: str
    owner_pid: int
    nonce: str

    def __str__(self) -> str:
        return f"{self.tag}-{self.owner_pid}-{self.nonce}"

    @classmethod
    def new(cls, tag: str = PROJECT_TAG) -> RunPrefix:
        if not re.fullmatch(r"[a-z0-9]+", tag):
            raise ValueError(f"tag must be lowercase letters and digits, got {tag!r}")
        return cls(tag=tag, owner_pid=os.getpid(), nonce=secrets.token_hex(3))

    @classmethod
    def parse(cls, namespace: str) -> RunPrefix | None:
        """The prefix a namespace name was made from, or None if it is not one of ours."""
        match = _NAME_RE.match(namespace)
        if match is None:
            return None
        return cls(tag=match["tag"], owner_pid=int(match["pid"]), nonce=match["nonce"])


def list_namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list`` appends ``(id: N)``)."""
    return [line.split()[0] for line in run_command(["ip", "netns", "list"]).splitlines() if line]


def namespace_pids(namespace: str) -> list[int]:
    """Pids of the processes whose network namespace is ``namespace``."""
    return [int(pid) for pid in run_command(["ip", "netns", "pids", namespace]).split()]


# Prefixes of the clusters this process has built and not yet torn down, so that
# cleanup_leftovers can tell this process's own leaked namespaces from live ones.
_LIVE_PREFIXES: set[str] = set()


def claim_prefix(prefix: RunPrefix) -> None:
    """Mark ``prefix`` as in use by a live cluster of this process."""
    _LIVE_PREFIXES.add(str(prefix))


def release_prefix(prefix: RunPrefix) -> None:
    """Mark ``prefix`` as torn down: its namespaces, if any remain, are leftovers."""
    _LIVE_PREFIXES.discard(str(prefix))


def _owner_running(prefix: RunPrefix) -> bool:
    if prefix.owner_pid == os.getpid():
        return str(prefix) in _LIVE_PREFIXES
    return _pid_alive(prefix.owner_pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete_namespace(namespace: str) -> None:
    """SIGKILL whatever still runs inside ``namespace``, then delete it (and its devices)."""
    if not Path("/run/netns", namespace).exists():
        return
    for pid in namespace_pids(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A killed process leaves the namespace only once reaped; deleting the name is still
    # safe, the kernel frees the namespace when the last reference goes.
    run_command(["ip", "netns", "delete", namespace])


def cleanup_leftovers(tag: str = PROJECT_TAG, *, force: bool = False) -> list[str]:
    """Delete the namespaces of earlier runs tagged ``tag`` whose owner process is gone.

    With ``force`` also those whose owner still lives (a reused pid, or a run to be stopped).
    Returns the deleted names.
    """
    require_netns_support()
    deleted = []
    for namespace in list_namespaces():
        prefix = RunPrefix.parse(namespace)
        if prefix is None or prefix.tag != tag:
            continue
        if not force and _owner_running(prefix):
            continue
        delete_namespace(namespace)
        deleted.append(namespace)
    return deleted


def main(argv: list[str] | None = None) -> int:
    """``python -m realrun.emulated.netns``: delete leftovers of dead (or, with --force, all)
    runs."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--tag", default=PROJECT_TAG)
    parser.add_argument("--force", action="store_true", help="also runs whose owner lives")
    args = parser.parse_args(argv)
    try:
        deleted = cleanup_leftovers(args.tag, force=args.force)
    except NetnsUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    for namespace in deleted:
        print(f"deleted {namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
