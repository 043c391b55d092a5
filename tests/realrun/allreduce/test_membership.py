"""Only the job's members take part in an all-reduce job: a rank without the job's secret is
named before the first gradient, and reports nobody signed are dropped by the coordinator."""

from __future__ import annotations

import datetime
import json
import threading
import time

import pytest
import torch.distributed as dist

from realrun.allreduce.job import AllreduceJob
from realrun.allreduce.membership import (
    MembershipError,
    ReportSigner,
    ReportVerifier,
    prove_membership,
)
from realrun.allreduce.rendezvous import STORE_EVENTS_KEY, dist_env
from realrun.launching.local_launcher import LocalLauncher
from realrun.ps.roles import RoleError
from tests.support.paths import ROOT

SCENARIO = str(ROOT / "scenarios" / "cpu-2x2-allreduce.yaml")
KEY = bytes.fromhex("11" * 32)
STRANGER_KEY = bytes.fromhex("22" * 32)


def _prove_in_threads(
    keys: list[bytes | None], timeout_s: float = 8.0
) -> list[BaseException | None]:
    """Build a real gloo group of len(keys) ranks (one thread each, over 127.0.0.1) and run the
    membership proof with each rank's key (None: the rank joins the group, then stays silent);
    what each rank raised."""
    world = len(keys)
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False
    )
    outcome: list[BaseException | None] = [None] * world

    def rank_main(rank: int) -> None:
        options = dist.ProcessGroupGloo._Options()
        options._timeout = datetime.timedelta(seconds=30)
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        client = dist.TCPStore("127.0.0.1", store.port, None, False)
        group = dist.ProcessGroupGloo(dist.PrefixStore("pg", client), rank, world, options)
        key = keys[rank]
        if key is None:
            return
        try:
            prove_membership(group, rank, world, key, timeout_s)
        except BaseException as e:  # the test reports what each rank raised
            outcome[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcome


def test_ranks_that_share_the_secret_prove_membership_to_each_other():
    assert _prove_in_threads([KEY, KEY, KEY]) == [None, None, None]


def test_a_rank_without_the_secret_is_named_by_every_member_and_learns_it_is_refused():
    outcome = _prove_in_threads([KEY, KEY, STRANGER_KEY])
    for rank in (0, 1):
        assert isinstance(outcome[rank], MembershipError)
        assert str(outcome[rank]).startswith("rank 2 of the process group did not prove")
    # The stranger sees every honest rank fail its own check.
    assert isinstance(outcome[2], MembershipError)
    assert str(outcome[2]).startswith("rank 0, 1 of the process group")


def test_a_silent_stranger_in_the_group_is_named_after_the_proofs_timeout_not_gloos():
    started = time.monotonic()
    outcome = _prove_in_threads([KEY, None], timeout_s=1.0)
    assert isinstance(outcome[0], MembershipError)
    assert str(outcome[0]).startswith("the membership proof did not complete within 1 s")
    assert time.monotonic() - started < 25  # gloo's own collective timeout is 300 s


def test_reports_are_accepted_once_and_only_when_a_member_signed_them():
    signer, verifier = ReportSigner(KEY, 1), ReportVerifier(KEY)
    line = signer.sign({"type": "iteration", "iteration": 3})
    event, why = verifier.open(line)
    assert why == "" and event is not None
    assert (event["type"], event["rank"], event["iteration"]) == ("iteration", 1, 3)
    assert verifier.open(line) == (None, "replayed report of rank 1 (sequence 1)")
    forged = ReportSigner(STRANGER_KEY, 0).sign({"type": "failed", "message": "x"})
    assert verifier.open(forged) == (None, "report not signed with the job's secret")
    unsigned = json.dumps({"type": "failed", "rank": 0, "message": "x"})
    assert verifier.open(unsigned) == (None, "malformed report")
    body = json.loads(line)["body"].replace('"iteration": 3', '"iteration": 4')
    tampered = json.dumps({"mac": json.loads(line)["mac"], "body": body})
    assert verifier.open(tampered) == (None, "report not signed with the job's secret")


def test_a_rank_started_by_realruns_launchers_needs_the_secret():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "0", "WORLD_SIZE": "2"}
    assert dist_env(env).secret == ""  # torchrun without a secret: allowed, with a warning
    with pytest.raises(RoleError, match="REALRUN_JOB_SECRET is missing"):
        dist_env({**env, "REALRUN_STORE_HOSTED": "1"})
    with pytest.raises(RoleError, match="hex digits"):
        dist_env({**env, "REALRUN_JOB_SECRET": "abc"})


class _StrangerJob(AllreduceJob):
    """A live job whose store a stranger floods with forged reports as soon as it listens."""

    forged = 0

    def _start(self, role, rank, root_port):
        if role == "worker" and rank == 0:
            self._forge(root_port)
        return super()._start(role, rank, root_port)

    def _forge(self, port: int) -> None:
        store = dist.TCPStore(
            "127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=10)
        )
        lines = [
            json.dumps({"type": "failed", "rank": 0, "message": "stranger"}),  # unsigned
            ReportSigner(STRANGER_KEY, 1).sign({"type": "failed", "message": "forged"}),
            json.dumps({"type": "hello", "rank": 7, "host": "evil", "pid": 1}),
            "[" * 100_000,  # deep nesting
            '{"mac": "00", "body": "' + "x" * 1000 + '"}',
            json.dumps({"mac": 1, "body": [2]}),
        ]
        for line in lines:
            store.queue_push(STORE_EVENTS_KEY, line)
        self.forged = len(lines)


@pytest.mark.slow
def test_a_live_job_ignores_a_strangers_reports_and_completes(tmp_path, capfd):
    job = _StrangerJob(
        SCENARIO,
        LocalLauncher(),
        ["simulation.warmup_iterations=1", "simulation.measured_iterations=2"],
        progress=False,
        timeout_s=90,
    )
    record = job.run()
    assert job.forged == 6
    assert record.complete, record.error
    assert len(record.iterations) == 2 * 3
    assert "dropped a report from the store" in capfd.readouterr().err
