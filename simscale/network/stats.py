"""What a network model reports about each link over the measured window."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkStat:
    """Traffic one link (a NIC direction or the core) carried since the last ``reset_stats()``.

    ``capacity_Bps`` is the usable capacity the model shares (nominal x bandwidth_factor), so
    ``utilization`` is 1.0 on a link that was saturated the whole window.
    """

    name: str
    capacity_Bps: float
    bytes_carried: float
    busy_s: float
    window_s: float

    @property
    def utilization(self) -> float:
        """Bytes carried over what the link could have carried in the window."""
        if self.window_s <= 0:
            return 0.0
        return self.bytes_carried / (self.capacity_Bps * self.window_s)

    @property
    def busy_fraction(self) -> float:
        """Share of the window during which the link carried at least one transfer."""
        if self.window_s <= 0:
            return 0.0
        return self.busy_s / self.window_s
