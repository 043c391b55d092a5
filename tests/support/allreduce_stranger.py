"""A stranger racing an all-reduce job's rendezvous for a rank (tests/test_realrun_allreduce_
hostile.py): it reaches the job's store with the rank's MASTER_* variables but not the job's
secret, queues a forged hello, takes the rank's place in gloo's rendezvous, answers the
membership proof with a guessed key and holds the place until it is killed."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import sys
import time

import torch.distributed as dist

from realrun.allreduce.membership import MembershipError, prove_membership
from realrun.allreduce.rendezvous import STORE_EVENTS_KEY, DistEnv, process_group


def main() -> int:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=30))
    forged = {"type": "hello", "rank": rank, "host": "stranger", "pid": os.getpid()}
    store.queue_push(STORE_EVENTS_KEY, json.dumps(forged))  # unsigned
    group = process_group(DistEnv(host, port, rank, world, 0, "127.0.0.1"), store, "gloo")
    print("stranger: in the process group", flush=True)
    # It cannot prove anything, and stays in the rank's place to the end.
    with contextlib.suppress(MembershipError):
        prove_membership(group, rank, world, secrets.token_bytes(32))
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
