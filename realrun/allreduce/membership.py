"""Who may take part in an all-reduce job: every rank proves it holds the job's secret.

``torch.distributed``'s TCP store and gloo's rendezvous admit whoever reaches ``MASTER_PORT``
first: a stranger could take a rank, or queue forged reports ("failed", iterations) for the
coordinator. Two checks close that, with the PS's secret (``REALRUN_JOB_SECRET``, realrun.auth):

- **Membership.** Once the process group exists, and before the first gradient, every rank
  proves the secret in a challenge-response over the group itself: each rank contributes a
  fresh random nonce (all-gather), then an HMAC of (rank, world size, every nonce) (all-gather),
  and checks every other rank's. A tag cannot be replayed from another job (the nonces differ)
  nor computed without the secret, so a job with a stranger in any slot ends at once, naming it.
- **Reports.** Every line a rank queues in the store carries an HMAC and a per-rank sequence
  number; the coordinator drops (and logs once) lines that are unsigned, forged or replayed.

What stays unauthenticated: the gloo (or NCCL) data connections themselves are not MACed per
message. They are point-to-point TCP connections between proven members; injecting into them
needs an on-path attacker (TCP sequence numbers), which a job on its own network does not face,
and a MAC over every gradient would cost as much as the PS's HMAC (realrun.auth).
"""

from __future__ import annotations

import datetime
import hmac
import json
import secrets
from typing import Any

import torch
import torch.distributed as dist

NONCE_BYTES = 32
TAG_BYTES = 32
# The group is formed when the proof starts: every member answers at once. A stranger that took
# a rank and stays silent is named after this, not after gloo's collective timeout (300 s).
PROOF_TIMEOUT_S = 8.0
_DOMAIN_MEMBER = b"realrun-allreduce-member-v1"
_DOMAIN_REPORT = b"realrun-allreduce-report-v1"


class MembershipError(RuntimeError):
    """A rank of the group could not prove it holds the job's secret."""


def member_tag(key: bytes, rank: int, world_size: int, nonces: bytes) -> bytes:
    """Rank ``rank``'s proof for a job whose ranks drew ``nonces`` (concatenated, rank order)."""
    h = hmac.new(key, _DOMAIN_MEMBER, "sha256")
    h.update(f"{rank}/{world_size}/".encode())
    h.update(nonces)
    return h.digest()


def _all_gather_bytes(
    group: dist.ProcessGroup, mine: bytes, world_size: int, timeout_s: float
) -> list[bytes]:
    """Every rank's ``mine`` (all the same length), in rank order, over ``group``;
    MembershipError when some rank does not take part within ``timeout_s``."""
    send = torch.frombuffer(bytearray(mine), dtype=torch.uint8)
    out = [torch.empty_like(send) for _ in range(world_size)]
    try:
        group.allgather([out], [send]).wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as e:
        raise MembershipError(
            f"the membership proof did not complete within {timeout_s:g} s ({e}): a rank of the "
            "process group is not one of the job's"
        ) from None
    return [bytes(t.tolist()) for t in out]


def prove_membership(
    group: dist.ProcessGroup,
    rank: int,
    world_size: int,
    key: bytes,
    timeout_s: float = PROOF_TIMEOUT_S,
) -> None:
    """Exchange proofs with every rank of ``group``; MembershipError naming the ranks whose
    proof is wrong (all honest ranks see the same ones), or when one stays silent."""
    mine = secrets.token_bytes(NONCE_BYTES)
    nonces = b"".join(_all_gather_bytes(group, mine, world_size, timeout_s))
    tag = member_tag(key, rank, world_size, nonces)
    tags = _all_gather_bytes(group, tag, world_size, timeout_s)
    bad = [
        r
        for r, tag in enumerate(tags)
        if not hmac.compare_digest(tag, member_tag(key, r, world_size, nonces))
    ]
    if bad:
        who = ", ".join(map(str, bad))
        raise MembershipError(
            f"rank {who} of the process group did not prove the job's secret "
            "(REALRUN_JOB_SECRET): a process outside the job took its place"
        )


class ReportSigner:
    """Signs one rank's report lines: ``{"mac": ..., "body": LINE}`` with a sequence number
    inside LINE, so a line can be neither forged nor replayed."""

    def __init__(self, key: bytes, rank: int) -> None:
        self.key = key
        self.rank = rank
        self.sequence = 0

    def sign(self, event: dict[str, Any]) -> str:
        self.sequence += 1
        body = json.dumps({**event, "rank": self.rank, "seq": self.sequence})
        return json.dumps({"mac": report_mac(self.key, body), "body": body})


def report_mac(key: bytes, body: str) -> str:
    return hmac.new(key, _DOMAIN_REPORT + body.encode(), "sha256").hexdigest()


class ReportVerifier:
    """The coordinator's side: the event of a line signed by a member, or None."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.last_sequence: dict[int, int] = {}

    def open(self, line: str, decode: Any = json.loads) -> tuple[dict[str, Any] | None, str]:
        """(event, "") for a genuine line; (None, why) otherwise. ``decode`` parses JSON (the
        coordinator passes a bounded decoder)."""
        try:
            outer = decode(line)
            mac, body = outer["mac"], outer["body"]
            if not isinstance(mac, str) or not isinstance(body, str):
                return None, "malformed report"
        except (ValueError, TypeError, KeyError):
            return None, "malformed report"
        if not hmac.compare_digest(mac, report_mac(self.key, body)):
            return None, "report not signed with the job's secret"
        event = decode(body)
        if not isinstance(event, dict):
            return None, "malformed report"
        rank, seq = event.get("rank"), event.get("seq")
        if not isinstance(rank, int) or not isinstance(seq, int):
            return None, "malformed report"
        if seq <= self.last_sequence.get(rank, 0):
            return None, f"replayed report of rank {rank} (sequence {seq})"
        self.last_sequence[rank] = seq
        del event["seq"]  # the signature's, not the report's
        return event, ""
