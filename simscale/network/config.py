"""What every network model is built with besides its topology: the calibrated factors and the
per-connection ceiling, in one typed, checked place (simscale.network.make_network)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class NetworkConfig:
    """How a network model treats its topology.

    ``bandwidth_factor`` scales every NIC and core capacity to what is usable (SimGrid's LV08
    model uses 0.97), ``latency_factor`` scales every path latency; calibration fits both.
    ``stream_max_Bps`` caps a single transfer's rate (one TCP stream often cannot fill a fast
    NIC, BytePS OSDI'20 §4); None means no cap. ``share_sigma`` spreads the shares of
    concurrent TCP flows (log-normal weights per host pair and busy period, drawn from
    ``seed``; 0: equal max-min shares; the FIFO model, which shares nothing, ignores both).
    Same-host copies use none of these.
    """

    bandwidth_factor: float = 1.0
    latency_factor: float = 1.0
    stream_max_Bps: float | None = None
    share_sigma: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject factors that would make the model meaningless."""
        bw, lat, cap = self.bandwidth_factor, self.latency_factor, self.stream_max_Bps
        if not (bw > 0 and math.isfinite(bw)):
            raise ValueError(f"bandwidth_factor must be positive and finite, got {bw}")
        if not (lat >= 0 and math.isfinite(lat)):
            raise ValueError(f"latency_factor must be non-negative and finite, got {lat}")
        if cap is not None and not cap > 0:
            raise ValueError(f"stream_max_Bps must be positive, got {cap}")
        sigma = self.share_sigma
        if not (sigma >= 0 and math.isfinite(sigma)):
            raise ValueError(f"share_sigma must be non-negative and finite, got {sigma}")
