"""The worker's send queue: with "priority" scheduling, highest priority first and a bounded
number of bytes in flight per server, so that a late high-priority key overtakes low-priority
bytes still waiting; with "fifo", everything at once in the order posted, as ps-lite."""

from __future__ import annotations

import numpy as np
import pytest

from realrun.ps.message import Kind, Message
from realrun.ps.postoffice import DEFAULT_WINDOW_BYTES, Postoffice, window_bytes_for
from realrun.ps.roles import NodeEnv
from realrun.ps.tracker import Handle
from tests.support.recording_van import RecordingVan

MB = 1 << 20


def test_a_late_high_priority_key_overtakes_queued_low_priority_ones():
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"), window_bytes=MB)
    po.van.close()
    po.van = RecordingVan()
    handle = Handle(4, "pushes")
    megabyte = np.zeros(MB // 4, dtype=np.float32)

    def push(key: int, priority: int) -> None:
        po.request("server-0", Message(Kind.PUSH, key=key, arrays=(megabyte,)), handle, priority)

    push(9, -9)  # the last layer's gradient is ready first and leaves at once
    po._flush()
    push(8, -8)
    push(7, -7)
    push(0, 0)  # the first layer, needed first by the next forward
    po._flush()
    assert po.van.sent == [("server-0", 9)]  # 1 MB in flight fills the window
    for i in range(3):  # each acknowledgement frees the window for the next push
        po._from_server("server-0", Message(Kind.RESPONSE, po.van.request_ids[i]))
        po._flush()
        assert len(po.van.sent) == i + 2
    # Then by priority, not arrival: key 7 (priority -7) before key 8 (priority -8).
    assert [key for _, key in po.van.sent] == [9, 0, 7, 8]


def test_small_messages_share_the_window_and_go_together():
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"), window_bytes=MB)
    po.van.close()
    po.van = RecordingVan()
    handle = Handle(5, "pushes")
    for key in range(5):
        po.request(
            "server-0",
            Message(Kind.PUSH, key=key, arrays=(np.zeros(MB // 20, np.float32),)),
            handle,
            key,
        )
    po._flush()
    assert [key for _, key in po.van.sent] == [4, 3, 2, 1, 0]  # 5 x 0.2 MB fit in 1 MB


def test_a_pull_request_leaves_right_behind_its_push_even_with_the_window_full():
    """pushpull queues push and pull together: the pull request carries no payload, so a push
    bigger than the window must not hold it back until that push is acknowledged."""
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"), window_bytes=MB)
    po.van.close()
    po.van = RecordingVan()
    handle = Handle(4, "pushpull")
    big = np.zeros(2 * MB // 4, dtype=np.float32)  # 2 MB, twice the window
    po.request("server-0", Message(Kind.PUSH, key=5, arrays=(big,)), handle, 0)
    po.request("server-0", Message(Kind.PULL, key=5), handle, 0)
    po.request("server-0", Message(Kind.PUSH, key=6, arrays=(big,)), handle, -1)
    po.request("server-0", Message(Kind.PUSH, key=7, arrays=(big,)), handle, -2)
    po._flush()
    # Push 5, its pull, and push 6: two slices bigger than the window are in flight at once.
    assert po.van.sent == [("server-0", 5), ("server-0", 5), ("server-0", 6)]


def test_slices_bigger_than_the_window_are_double_buffered():
    """A slice bigger than the window used to go alone: the link then idled while the server
    merged it and acknowledged. Now the next big slice is already queued behind it, and a third
    leaves when the first is acknowledged."""
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"), window_bytes=MB)
    po.van.close()
    po.van = RecordingVan()
    handle = Handle(4, "pushes")
    big = np.zeros(3 * MB // 4, dtype=np.float32)  # 3 MB: the window becomes 6 MB
    small = np.zeros(MB // 8, dtype=np.float32)
    for key in (1, 2, 3):
        po.request("server-0", Message(Kind.PUSH, key=key, arrays=(big,)), handle, -key)
    po.request("server-1", Message(Kind.PUSH, key=9, arrays=(small,)), handle, 0)
    po._flush()
    assert [key for _, key in po.van.sent] == [1, 2, 9]
    po._from_server("server-0", Message(Kind.RESPONSE, po.van.request_ids[0]))
    po._flush()
    assert [key for _, key in po.van.sent] == [1, 2, 9, 3]


def test_fifo_sends_every_message_at_once_in_the_order_posted():
    """kvstore.scheduling "fifo" is ps-lite's: no window, no reordering by priority."""
    po = Postoffice(
        NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"), window_bytes=MB, scheduling="fifo"
    )
    po.van.close()
    po.van = RecordingVan()
    handle = Handle(4, "pushes")
    megabyte = np.zeros(MB // 4, dtype=np.float32)
    for key, priority in ((9, -9), (8, -8), (0, 0), (7, -7)):
        po.request("server-0", Message(Kind.PUSH, key=key, arrays=(megabyte,)), handle, priority)
    po._flush()
    assert [key for _, key in po.van.sent] == [9, 8, 0, 7]  # 4 MB out, four times the window


def test_scheduling_is_chosen_once_the_scenario_is_known():
    """A worker learns the scenario after registering: ``schedule`` switches it, and a
    scenario's send_window_mb of 0 is realrun's own window."""
    po = Postoffice(NodeEnv("worker", "127.0.0.1", 1, 1, 1, "127.0.0.1"))
    po.van.close()
    assert (po.scheduling, po.window_bytes) == ("priority", DEFAULT_WINDOW_BYTES)
    po.schedule("fifo")
    assert po.scheduling == "fifo"
    po.schedule("priority", window_bytes_for(2.0))
    assert (po.scheduling, po.window_bytes) == ("priority", 2 * MB)
    assert window_bytes_for(0.0) == DEFAULT_WINDOW_BYTES
    with pytest.raises(ValueError, match="scheduling 'lifo', expected fifo or priority"):
        po.schedule("lifo")  # type: ignore[arg-type]
