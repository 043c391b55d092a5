"""A stand-in for a node's sockets in the postoffice's unit tests: it remembers what was sent,
in order, so a test reads the send queue's decisions without a socket."""

from __future__ import annotations

from realrun.ps.message import Message


class RecordingVan:
    """Stands in for the sockets: remembers what was sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []
        self.request_ids: list[int] = []

    def send(self, peer: str, msg: Message) -> None:
        self.sent.append((peer, msg.key))
        self.request_ids.append(msg.request_id)

    def wake(self) -> None:
        pass
