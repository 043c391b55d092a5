"""Cost models the simulator tests share."""

from __future__ import annotations

from simscale.spec.costs import CostModel

# Only the network costs anything: no software overheads, the whole line rate usable. This is the
# world the analytic bounds of domain.md describe.
NETWORK_ONLY = CostModel(
    bandwidth_factor=1.0,
    message_overhead_us=0.0,
    server_merge_ns_per_byte=0.0,
    server_update_ns_per_byte=0.0,
    server_request_us=0.0,
)
