"""Published points too costly to simulate on every run of the suite, and the switch that
includes them.

ETH's 32-128 single-GPU p2.xlarge hosts, a parameter server on each with greedy placement, take
the exact path: under real-v1 the 32-host point took 24 CPU s on a loaded 2-core machine, and
64 and 128 hosts grow faster than linearly (an interval simulates each several times: 1,024
CPU s for the three). The suite checks every other point; SIMSCALE_TEST_COSTLY=1 checks these
too (the golden predictions and the interval of every published point's scenario).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from simscale.spec.scenario import DIST_MODES

if TYPE_CHECKING:
    from calibration.published import PublishedPoint

COSTLY_PUBLISHED = (
    "ethz-tf-k80-ec2/p2x-32gpu",
    "ethz-tf-k80-ec2/p2x-64gpu",
    "ethz-tf-k80-ec2/p2x-128gpu",
)


# An interval simulates a point 14 times or so (nominal, a repeat, draws, and each input at both
# ends of its range). Parameter-server points of this many worker-keys or more
# (calibration.published_fit.fit_cost, the proxy validate uses) cost 15-50 CPU s each that way
# even at three iterations (TensorFlow's 64-GPU K80 rows: 39-50 CPU s, measured 2026-11-28), and
# made the check 860 of CI's 2,980 CPU s at 3,000. At 1,000 the suite leaves out 25 of the 316
# points' scenarios (the 84 other parameter-server points still run).
COSTLY_WORKER_KEYS = 1_000


def skipped_points() -> tuple[str, ...]:
    """The points ("source/name") this run leaves out: none with SIMSCALE_TEST_COSTLY=1."""
    return () if os.environ.get("SIMSCALE_TEST_COSTLY") else COSTLY_PUBLISHED


def interval_too_costly(point: PublishedPoint) -> bool:
    """Whether the suite leaves ``point``'s interval out (never with SIMSCALE_TEST_COSTLY=1)."""
    skip = skipped_points()
    if not skip:
        return False
    from calibration.published_fit import fit_cost

    return f"{point.source}/{point.name}" in skip or (
        point.scenario.kvstore.mode in DIST_MODES and fit_cost(point) >= COSTLY_WORKER_KEYS
    )
