"""The worker side of the parameter-server protocol (simscale.comm.ps.client), timed by hand.

Every expected time is derived in the test's docstring from the protocol's rules and the rig's
round costs (tests/support/ps_rig.py): a message costs its sender MSG_S = 10 us, a request costs
the server's handler REQUEST_S = 5 us, merging 1 MB costs it 100 us and updating it 400 us, a
path's latency PATH_S is 100 us, and a 1 MB slice plus its 64-byte header takes WIRE_S =
1000.064 us on a worker's NIC. A change to the protocol (the ack sent before the update, the
pull sent before the ack, the pull request not riding with its push) moves these times.
"""

from __future__ import annotations

import pytest

from simscale.model.symmetry import TWO_BIT_RATIO
from tests.support.ps_rig import (
    MERGE_S_PER_BYTE,
    MSG_S,
    PATH_S,
    REQUEST_S,
    UPDATE_S_PER_BYTE,
    WIRE_S,
    B,
    N,
    ps_rig,
)

MERGE_S = N * MERGE_S_PER_BYTE  # 100 us
UPDATE_S = N * UPDATE_S_PER_BYTE  # 400 us


def test_mxnet_pull_follows_the_ack_which_follows_the_update() -> None:
    """One worker, one server, one 1 MB key, pull after ack (MXNet's dist_sync):
    push leaves the van at 10 us, arrives at 10 + 1000.064 + 100 = 1110.064; merged 105 us
    later (request + merge), updated 400 us later (1615.064); the ack costs the handler 10 us and
    arrives 100 us later (1725.064); the worker's pull request costs its van 10 us and arrives
    100 us later (1835.064); the handler answers in 15 us (request + send) and the weights take
    1000.064 + 100 us: back at 2950.128 us, nothing waited for other workers."""
    rig = ps_rig()
    rig.communicate(0, 0)
    rig.env.run()
    expected = (
        MSG_S + WIRE_S + PATH_S  # push
        + REQUEST_S + MERGE_S + UPDATE_S  # merge, update
        + MSG_S + PATH_S  # ack
        + MSG_S + PATH_S  # pull request
        + REQUEST_S + MSG_S + WIRE_S + PATH_S  # reply
    )  # fmt: skip
    assert expected == pytest.approx(2950.128e-6, rel=1e-12)
    assert rig.done[(0, 0)] == pytest.approx((expected, 0.0), rel=1e-9, abs=1e-12)


def test_pushpull_takes_the_ack_and_the_request_off_the_critical_path() -> None:
    """realrun's pushpull: the pull request rides right behind its push and reaches the server
    with it (1110.064 us), where it is parked until the update. The handler merges (105 us),
    acknowledges the push on receipt (10 us, nobody waits for it), updates (400 us, done at
    1625.064) and answers the parked request (15 us): weights back at 1640.064 + 1100.064 =
    2740.128 us, 210 us before MXNet's order (the ack's 10 + 100 and the request's 10 + 100 us
    on the path, less the 10 us ack on receipt)."""
    rig = ps_rig(pull_with_push=True)
    rig.communicate(0, 0)
    rig.env.run()
    expected = (
        MSG_S + WIRE_S + PATH_S  # push, request right behind it
        + REQUEST_S + MERGE_S + MSG_S + UPDATE_S  # merge, ack on receipt, update
        + REQUEST_S + MSG_S + WIRE_S + PATH_S  # reply to the parked request
    )  # fmt: skip
    assert expected == pytest.approx(2740.128e-6, rel=1e-12)
    assert rig.done[(0, 0)][0] == pytest.approx(expected, rel=1e-9)


def test_each_worker_waits_for_the_last_push_of_the_round() -> None:
    """Two workers, one 1 MB key, worker 1 starts 5 ms late. The server acks nobody before
    worker 1's push is in (6110.064 us), merged (6215.064) and applied (6615.064); the acks
    leave in arrival order, 10 us each (6625.064, 6635.064), arrive 100 us later; each pull
    request costs 10 + 100 us; worker 0's is handled at 6835.064 + 15, worker 1's (6845.064)
    waits for the handler until 6850.064, + 15: weights at 7950.128 and 7965.128 us. Worker 0's
    round waited 5 ms for worker 1 (the gap between the two pushes' arrivals), worker 1's none."""
    rig = ps_rig(workers=2)
    rig.communicate(0, 0)
    rig.communicate(1, 0, at_s=5e-3)
    rig.env.run()
    assert rig.done[(0, 0)] == pytest.approx((7950.128e-6, 5e-3), rel=1e-9)
    assert rig.done[(1, 0)] == pytest.approx((7965.128e-6, 0.0), rel=1e-9, abs=1e-12)


def test_a_split_key_is_back_when_its_last_slice_is() -> None:
    """One 1 MB key in two 0.5 MB slices on two servers. The van sends the pushes 10 us apart;
    they share the worker's egress: slice 0 leaves alone for 10 us (10,000 bytes), then both at
    half rate, slice 0's last byte at 20 + 490,064 / 0.5e9 = 1000.128 us, slice 1's 10,000 bytes
    later at 1010.128; they arrive at 1100.128 and 1110.128. Each server merges (5 + 50 us),
    updates (200 us) and acks (10 us): acks at 1465.128 and 1475.128. As in MXNet, the key's
    pull requests wait for its last ack, then leave 10 us apart on the van: they reach the
    servers at 1585.128 and 1595.128 (10 us later than if each slice were pulled on its own
    ack); replies leave at 1600.128 and 1610.128 and share the worker's ingress the same way:
    last bytes at 2590.256 and 2600.256, the key is back at 2700.256 us."""
    half = N / 2
    rig = ps_rig((((0, half), (1, half)),), servers=2)
    rig.communicate(0, 0)
    rig.env.run()
    assert rig.done[(0, 0)][0] == pytest.approx(2700.256e-6, rel=1e-9)


def test_the_host_sums_before_pushing_and_copies_back_after_pulling() -> None:
    """With a copy engine of 4 GB/s, the key's 1 MB takes 250 us to sum into host memory before
    the push and 250 us to copy back to the GPU after the pull: MXNet's order plus 500 us."""
    rig = ps_rig(copy_Bps=4e9)
    rig.communicate(0, 0)
    rig.env.run()
    assert rig.done[(0, 0)][0] == pytest.approx(2950.128e-6 + 2 * N / 4e9, rel=1e-9)


def test_two_bit_compression_shrinks_pushes_only() -> None:
    """2-bit gradients: the push carries N/16 + 64 bytes (62.564 us on the NIC instead of
    1000.064); the server's costs and the reply are those of the full key."""
    rig = ps_rig(compress_2bit=True)
    rig.communicate(0, 0)
    rig.env.run()
    push_s = (N * TWO_BIT_RATIO + 64) / B
    assert push_s == pytest.approx(62.564e-6, rel=1e-12)
    assert rig.done[(0, 0)][0] == pytest.approx(2950.128e-6 - WIRE_S + push_s, rel=1e-9)


def test_the_send_thread_reports_nothing_and_resets() -> None:
    """The van's busy time is counted (pushes and requests, 10 us each) and reset with the
    window, but not shown as a resource of its own."""
    rig = ps_rig()
    rig.communicate(0, 0)
    rig.env.run()
    client = rig.clients[0]
    assert client.van.busy_s == pytest.approx(2 * MSG_S)
    assert client.utilization(0.0, rig.env.now) == []
    client.reset_counters()
    assert client.van.busy_s == 0.0


def test_a_push_waiting_for_other_workers_leaves_the_send_window_on_receipt() -> None:
    """MXNet's order behind a 1 MiB byte window (realrun's priority scheduling): worker 0 hands
    over two 1 MB keys at once, key 1 first; worker 1 comes 5 ms later. Key 1's push leaves the
    van at 10 us and arrives at 1110.064 us; key 0's (van free at 20 us) does not fit beside it
    in the window and waits for the window's credit, which comes on receipt, a path's latency
    later (1210.064 us), not with the ack, which waits for worker 1's push: key 0's push takes
    the NIC then and arrives at 1210.064 + 1000.064 + 100 = 2310.128 us (realrun's server sends
    RECEIVED for this, realrun/ps/kv_server.py)."""
    two_keys = (((0, N),), ((0, N),))
    rig = ps_rig(two_keys, workers=2, window_bytes=1 << 20)
    rig.communicate(0, 1)
    rig.communicate(0, 0)
    rig.communicate(1, 1, at_s=5e-3)
    rig.communicate(1, 0, at_s=5e-3)
    rig.env.run()
    arrived = {key: t for w, _, key, phase, t in rig.phases if w == 0 and phase == "update"}
    assert arrived[1] == pytest.approx(MSG_S + WIRE_S + PATH_S, rel=1e-9)
    assert arrived[0] == pytest.approx(1210.064e-6 + WIRE_S + PATH_S, rel=1e-9)
    assert arrived[0] == pytest.approx(2310.128e-6, rel=1e-9)
    assert min(rig.done[(0, k)][0] for k in (0, 1)) > 5e-3  # both rounds waited for worker 1


def test_with_push_the_window_is_credited_by_the_ack_the_handler_sends_after_the_update() -> None:
    """realrun's pushpull behind a 1 MiB window: its server's handler answers a push with the
    ack first and then the pull replies the update releases (realrun/ps/kv_server.py ``_push``),
    so the credit leaves only once the push is merged and applied. Key 1's push arrives at
    1110.064 us; merge 105 us, update 400 us, ack 10 us: it leaves at 1625.064 us and credits
    the window a path's latency later, 1725.064 us; key 0's push, waiting for that credit,
    arrives 1725.064 + 1000.064 + 100 = 2825.128 us (on receipt it would have been
    2310.128 us)."""
    two_keys = (((0, N),), ((0, N),))
    rig = ps_rig(two_keys, window_bytes=1 << 20, pull_with_push=True)
    rig.communicate(0, 1)
    rig.communicate(0, 0)
    rig.env.run()
    arrived = {key: t for _, _, key, phase, t in rig.phases if phase == "update"}
    assert arrived[1] == pytest.approx(MSG_S + WIRE_S + PATH_S, rel=1e-9)
    acked = arrived[1] + REQUEST_S + N * MERGE_S_PER_BYTE + N * UPDATE_S_PER_BYTE + MSG_S
    assert arrived[0] == pytest.approx(acked + PATH_S + WIRE_S + PATH_S, rel=1e-9)
    assert arrived[0] == pytest.approx(2825.128e-6, rel=1e-9)
    assert set(rig.done) == {(0, 0), (0, 1)}
