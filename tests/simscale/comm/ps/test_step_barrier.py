"""TensorFlow's end-of-step barrier (simscale.comm.ps.step_barrier), timed by hand.

The rig of tests/support/ps_rig.py with the servers applying every push as it comes (async, as
behind a step barrier): a push costs the handler 5 + 400 us and its ack 10 us; a worker whose
pushes are all acked spends W x 10 us on its van sending W tokens (a control message: latency
only, 100 us), the server handles them as W requests (W x 5 us); once every worker's are in it
answers each worker's dequeue (10 us each, in rank order), and each worker then pulls every key
in key order (10 us on its van, 100 us to the server, 15 us of the handler, the weights 1000.064
+ 100 us back).
"""

from __future__ import annotations

import pytest

from simscale.comm.ps.step_barrier import barrier_server
from tests.support.ps_rig import N, ps_rig


def test_the_barrier_lives_on_the_second_ps_task() -> None:
    """tf_cnn_benchmarks puts the n-th barrier's queues on task n % servers; the step-end
    barrier is the first (n = 1): task 1, or task 0 when there is only one."""
    assert [barrier_server(s) for s in (1, 2, 8)] == [0, 1, 1]


def test_no_worker_reads_its_weights_before_every_worker_has_arrived() -> None:
    """Two workers, one key; worker 1 starts 5 ms late. Worker 0's push is applied and acked
    by 1625.064 us, its tokens handled by 1755.064, and it waits. Worker 1's ack arrives at
    6625.064, its tokens at 6745.064, handled by 6755.064: the barrier opens and the dequeues
    are answered at 6765.064 and 6775.064, arriving at 6865.064 and 6875.064. Worker 0's pull
    reaches the server at 6975.064 and is answered at 6990.064, its weights back at 8090.128 us
    (it waited 6865.064 - 1625.064 = 5240 us at the barrier); worker 1's at 6985.064, handled
    once the thread is free (7005.064), back at 8105.128 us (it waited 250 us)."""
    rig = ps_rig(workers=2, sync=False, step_barrier=True)
    rig.communicate(0, 0)
    rig.communicate(1, 0, at_s=5e-3)
    rig.env.run()
    assert rig.done[(0, 0)] == pytest.approx((8090.128e-6, 5240e-6), rel=1e-9)
    assert rig.done[(1, 0)] == pytest.approx((8105.128e-6, 250e-6), rel=1e-9)


def test_after_the_barrier_keys_are_read_in_key_order() -> None:
    """One worker, two 1 MB keys handed over last layer first (key 1, then key 0): the pushes
    leave the van at 10 and 20 us and follow each other on the connection (arriving at
    1110.064 and 2110.128 us); applied and acked, the second ack arrives at 2625.128, the one
    token at 2735.128, handled by 2740.128, the dequeue answered at 2750.128 and back at
    2850.128. Then key 0 is pulled first (request at the server at 2960.128, answered at
    2975.128, weights at 4075.192 us) and key 1 right behind it (answered at 2990.128, its
    weights after key 0's on the same connection: 5075.256 us)."""
    rig = ps_rig((((0, N),), ((0, N),)), sync=False, step_barrier=True)
    rig.communicate(0, 1)
    rig.communicate(0, 0)
    rig.env.run()
    waited = 2850.128e-6 - 2625.128e-6
    assert rig.done[(0, 0)] == pytest.approx((4075.192e-6, waited), rel=1e-9)
    assert rig.done[(0, 1)] == pytest.approx((5075.256e-6, waited), rel=1e-9)
