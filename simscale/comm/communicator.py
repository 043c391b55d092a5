"""The one hook a worker has for its gradients: ``communicate(iteration, key, done)``.

Whatever turns a key's gradient into new weights on the GPUs — the parameter servers
(simscale.comm.ps.client), a ring all-reduce (simscale.comm.allreduce) or a single machine's
kvstore (simscale.comm.local) — a worker only hands over the key and is told, through
``done(waited_for_others_s)``, when the new weights are back and how long of that it spent
waiting for other workers. The simulator picks one per worker, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# Called when a key's new weights are back in the GPUs, with the seconds of that round trip
# spent waiting for other workers (0 where nothing waits for them).
Done = Callable[[float], None]


class Communicator(Protocol):
    """How one worker's gradients become new weights."""

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        """Key ``key``'s gradient of ``iteration`` is ready on the worker's GPUs."""
        ...
