"""The SimPy events the network models hand out and schedule for themselves."""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import NORMAL, Event

# SimPy processes events of one instant by (priority, insertion order); URGENT is 0 and NORMAL 1.
# A re-solve scheduled with this priority runs after every ordinary event of its instant, even
# ones scheduled later at that instant, so all flows starting or ending then share ONE re-solve.
AFTER_NORMAL = NORMAL + 1


class Arrival(Event):
    """What ``transfer`` returns: fires (value None) when the transfer's last byte has arrived."""

    def arrive_in(self, delay_s: float) -> None:
        """Trigger the event ``delay_s`` from now; done once, when the model knows the time."""
        # Timeout does the same in simpy.events: mark the event ok, then schedule it with a delay.
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, delay_s)


class Call(Event):
    """An internal wake-up that runs ``fn(event)`` at a given time and priority."""

    def __init__(
        self,
        env: simpy.Environment,
        fn: Callable[[Event], None],
        delay_s: float = 0.0,
        priority: int = NORMAL,
    ) -> None:
        super().__init__(env)
        self.callbacks.append(fn)
        self._ok = True
        self._value = None
        env.schedule(self, priority, delay_s)


def call_in(env: simpy.Environment, fn: Callable[[], None] | None, delay_s: float) -> None:
    """Call ``fn()`` after ``delay_s`` (never synchronously inside ``transfer``); None: nothing."""
    if fn is not None:
        Call(env, lambda _e: fn(), delay_s)
