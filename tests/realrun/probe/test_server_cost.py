"""The server-cost probe end: realrun's own van and server, every push timed in CPU time."""

from __future__ import annotations

from realrun.probe import server_cost


def test_every_push_of_every_size_is_timed_through_the_authenticated_van() -> None:
    # The vans hold the first pushes until their handshake completes: the probe must drive it.
    sizes = (4, 1 << 16)
    result = server_cost.measure(pushers=2, sizes_bytes=sizes, rounds=2, momentum=0.9)
    for size in sizes:
        pushes = result["push_cpu_s"][str(size)]
        assert len(pushes) == 2 * 2  # pushers x rounds, the warm-up round left out
        assert sum(done for _, done in pushes) == 2  # the second pusher completes each round
        assert all(cost > 0 for cost, _ in pushes)
    assert len(result["send_cpu_s"]) == 2 * 2


def test_samples_split_into_message_and_per_byte_costs() -> None:
    result = server_cost.measure(pushers=1, sizes_bytes=(4, 1 << 20), rounds=3, momentum=0.9)
    samples = server_cost.costs_from([result])
    assert len(samples["push_us"]) == 3 and len(samples["send_us"]) == 3
    assert len(samples["final_ns"]) == 3  # one pusher completes every round
    assert samples["merge_ns"] == []
